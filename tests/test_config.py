"""The settings registry: where values come from, one failure policy, `keymem config`, the
docs table, the settings handed to supervisord, and that nothing else reads the environment."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from keymem.services import cli, serve
from keymem.services import config as cfg
from keymem.services.config import (
    DEFAULT_HOME,
    REGISTRY,
    SOURCE_DEFAULT,
    SOURCE_ENV,
    TEXT,
    ConfigError,
    Setting,
    Settings,
    load,
    render,
)
from keymem.services.supervision import Supervision, render_environment, written_environment

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("protocol", "services", "store", "hooks", "deploy")
ENVIRONMENT_READ = re.compile(r"os\.environ|getenv|environb")
# Text no kind but TEXT and PATH accepts.
UNUSABLE = "no-such-value"


def write_file(home: Path, text: str, name: str = "keymem.toml") -> Path:
    home.mkdir(parents=True, exist_ok=True)
    path = home / name
    path.write_text(text)
    return path


def test_the_environment_wins_over_the_file_which_wins_over_the_default(tmp_path: Path) -> None:
    path = write_file(tmp_path, 'rerank = false\nkey_recall = 0.8\nlog_level = "debug"\n')
    config = load({"KEYMEM_KEY_RECALL": "0.85"}, home=tmp_path)
    assert config.file == path
    assert config[cfg.KEY_RECALL] == 0.85 and config.source(cfg.KEY_RECALL) == SOURCE_ENV
    assert config[cfg.RERANK] is False and config.source(cfg.RERANK) == str(path)
    assert config[cfg.LOG_LEVEL] == "DEBUG"  # a choice is matched without case
    assert config[cfg.LEARN_TTL_S] == 1_800.0 and config.source(cfg.LEARN_TTL_S) == SOURCE_DEFAULT


def test_an_empty_variable_is_the_default_and_hides_the_file(tmp_path: Path) -> None:
    write_file(tmp_path, "key_recall = 0.8\nembed_threads = 4\n")
    config = load({"KEYMEM_KEY_RECALL": "", "KEYMEM_EMBED_THREADS": " "}, home=tmp_path)
    assert config[cfg.KEY_RECALL] is None and config[cfg.EMBED_THREADS] == 1
    assert config.source(cfg.KEY_RECALL) == SOURCE_ENV


def test_keymem_home_comes_from_the_environment_and_finds_its_file(tmp_path: Path) -> None:
    write_file(tmp_path, "transport = 'tcp'\n", name="config.toml")
    config = load({"KEYMEM_HOME": str(tmp_path)})
    assert config[cfg.HOME] == tmp_path and config[cfg.TRANSPORT] == "tcp"


def parsed_kinds() -> list[Setting[Any]]:
    return [s for s in REGISTRY.values() if s.kind not in (TEXT, cfg.PATH)]


@pytest.mark.parametrize("setting", parsed_kinds(), ids=lambda s: s.name)
def test_every_unusable_value_is_one_line_naming_the_setting(
    setting: Setting[Any], tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as from_env:
        load({setting.name: UNUSABLE}, home=tmp_path)
    assert str(from_env.value) == (f"{setting.name} must be {setting.kind.label}, got {UNUSABLE!r}")
    if setting.in_file:
        path = write_file(tmp_path, f"{setting.file_key} = {UNUSABLE!r}\n")
        with pytest.raises(ConfigError) as from_file:
            load({}, home=tmp_path)
        assert str(from_file.value).endswith(f"({setting.file_key} in {path})")
        assert "\n" not in str(from_file.value)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("rerank_pool = 30\n", "'rerank_pool': no such setting"),
        ("home = '/elsewhere'\n", "'home': only the environment sets it"),
        ("claude_code_session_id = 'x'\n", "only the environment sets it"),
        ("rerank = [\n", "Invalid value"),
        ("key_recall = [0.5]\n", "key_recall must be a number in [0.0, 1.0], got [0.5]"),
        ("tcp_port = 0\n", "KEYMEM_TCP_PORT must be an integer in [1, 65534], got '0'"),
    ],
)
def test_a_file_mistake_is_one_line(tmp_path: Path, text: str, says: str) -> None:
    write_file(tmp_path, text)
    with pytest.raises(ConfigError, match=re.escape(says)) as raised:
        load({}, home=tmp_path)
    assert "\n" not in str(raised.value)


def test_two_config_files_are_refused(tmp_path: Path) -> None:
    write_file(tmp_path, "")
    write_file(tmp_path, "", name="config.toml")
    with pytest.raises(ConfigError, match="keep one"):
        load({}, home=tmp_path)


def test_the_cli_exits_2_with_one_line_where_it_used_to_crash_at_import(tmp_path: Path) -> None:
    completed = subprocess.run(
        [sys.executable, "-m", "keymem.services.cli", "status"],
        env={"KEYMEM_HOME": str(tmp_path), "KEYMEM_UP_TIMEOUT_S": "abc", "PATH": "/usr/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == cfg.EXIT_CLI_CONFIG
    assert completed.stderr == (
        "keymem: configuration error: KEYMEM_UP_TIMEOUT_S must be a number > 0, got 'abc'\n"
    )


def test_a_service_exits_78_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("KEYMEM_HOME", str(tmp_path))
    monkeypatch.setenv("KEYMEM_KEY_RECALL", "1.5")
    assert serve.main(["graph"]) == cfg.EXIT_SERVICE_CONFIG == 78
    assert capsys.readouterr().err == (
        "keymem graph: configuration error: KEYMEM_KEY_RECALL must be a number in [0.0, 1.0], "
        "got '1.5'\n"
    )


def test_keymem_config_shows_each_value_and_where_it_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_file(tmp_path, "rerank = false\n")
    monkeypatch.setenv("KEYMEM_HOME", str(tmp_path))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret")
    monkeypatch.setenv("KEYMEM_LEARN_TTL_S", "60")
    assert cli.main(["config", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    rows = {row["name"]: row for row in shown["settings"]}
    assert shown["file"] == str(path) and set(rows) == set(REGISTRY)
    assert rows["KEYMEM_RERANK"] | {"read_by": None} == {
        "name": "KEYMEM_RERANK",
        "file_key": "rerank",
        "value": "false",
        "source": str(path),
        "read_by": None,
    }
    assert rows["KEYMEM_LEARN_TTL_S"]["value"] == "60.0"
    assert rows["KEYMEM_LEARN_TTL_S"]["source"] == SOURCE_ENV
    assert rows["OPENAI_API_KEY"]["value"] == "(set, hidden)"
    assert rows["KEYMEM_HOME"]["file_key"] is None
    assert cli.main(["config"]) == 0
    text = capsys.readouterr().out
    assert "sk-secret" not in text and "KEYMEM_RERANK" in text and f"[{path}]" in text


def test_supervisord_conf_hands_every_service_setting_to_the_programs(tmp_path: Path) -> None:
    awkward = {"OPENAI_BASE_URL": "http://127.0.0.1:9/v1?a=1,b=%41", "OPENAI_API_KEY": 'a"b'}
    settings = Settings.from_config(load(awkward, home=tmp_path))
    supervision = Supervision(settings)
    tmp_path.mkdir(exist_ok=True)
    written = written_environment(supervision.render_config())
    assert written is not None
    expected = {
        name: value.text
        for name, value in settings.config.values.items()
        if set(value.setting.read_by) & set(cfg.ALL_PROGRAMS)
    }
    assert {k: v for k, v in written.items() if k in REGISTRY} == expected
    assert written["OPENAI_BASE_URL"] == awkward["OPENAI_BASE_URL"]
    assert written["OPENAI_API_KEY"] == awkward["OPENAI_API_KEY"]
    assert "KEYMEM_HOOK_TIMEOUT_MS" not in written  # only the hook reads it
    assert supervision.differences() == []  # nothing runs: nothing to compare with


def test_a_value_supervisord_cannot_carry_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="OPENAI_API_KEY cannot be handed"):
        render_environment({"OPENAI_API_KEY": "key'"})
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        render_environment({"OPENAI_API_KEY": "a\"b'c"})


def doc_row(setting: Setting[Any]) -> str:
    default = DEFAULT_HOME if setting is cfg.HOME else render(setting.default) or "unset"
    file_key = f"`{setting.file_key}`" if setting.in_file else "environment only"
    return (
        f"| `{setting.name}` | {file_key} | {setting.kind.label} | `{default}` | "
        f"{', '.join(setting.read_by)} | {setting.help} |"
    )


def test_docs_configuration_table_is_the_registry() -> None:
    text = (ROOT / "docs" / "CONFIGURATION.md").read_text()
    documented = [line for line in text.splitlines() if line.startswith("| `")]
    expected = [doc_row(s) for s in REGISTRY.values()]
    assert documented == expected, "docs/CONFIGURATION.md's table should be:\n" + "\n".join(
        expected
    )


def test_no_module_but_the_registry_reads_the_environment() -> None:
    readers = [
        f"{path.relative_to(ROOT)}:{number}"
        for folder in PRODUCT
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != ROOT / "services" / "config.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if ENVIRONMENT_READ.search(line)
    ]
    assert readers == []
