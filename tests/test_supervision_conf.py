"""The generated supervisord.conf as supervisord itself reads it back.

supervisord %-expands its values (most once, some twice), so a ``%`` in KEYMEM_HOME or in a
setting must arrive intact, not as a format error that keeps every service down.
"""

from __future__ import annotations

from pathlib import Path

from supervisor.options import ServerOptions

from keymem.services.config import Settings, load
from keymem.services.supervision import Supervision, written_environment

AWKWARD_HOME = "km%(here)s%d 100%"
AWKWARD_URL = "http://127.0.0.1:9/v1?q=%41%(ENV_HOME)s"


def test_percent_signs_in_the_home_and_settings_reach_supervisord_intact(tmp_path: Path) -> None:
    home = tmp_path / AWKWARD_HOME
    settings = Settings.from_config(load({"OPENAI_BASE_URL": AWKWARD_URL}, home=home))
    supervision = Supervision(settings)
    for directory in (home, settings.log_dir, settings.run_dir):
        directory.mkdir()
    options = ServerOptions()
    options.configfile = str(supervision.render_config())
    options.process_config(do_usage=False)

    assert options.directory == str(home)
    assert options.logfile == str(settings.log_dir / "supervisord.log")
    assert options.pidfile == str(supervision.pidfile)
    assert options.environ_expansions["ENV_KEYMEM_HOME"] == str(home)
    assert options.environ_expansions["ENV_OPENAI_BASE_URL"] == AWKWARD_URL
    programs = {p.name: p for g in options.process_group_configs for p in g.process_configs}
    assert list(programs) == list(supervision.programs)
    for name, program in programs.items():
        assert program.stdout_logfile == str(supervision.log_path(name))
    written = written_environment(supervision.config_path)
    assert written is not None
    assert (written["KEYMEM_HOME"], written["OPENAI_BASE_URL"]) == (str(home), AWKWARD_URL)
