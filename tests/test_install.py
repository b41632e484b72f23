"""``keymem install``: the host's own files gain keymem's entries with this installation's
absolute commands, keep everything else, and are refused whole when the host could not read
them either. HOME points at a temporary folder; the hook a config names is run for real."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from keymem.hooks.prompt_submit import FAILURE_LOG
from keymem.services.cli import doctor, main
from keymem.services.cli.hosts import (
    CLI_SCRIPT,
    HOOK_EVENTS,
    HOOK_SCRIPT,
    SERVER_NAME,
    HostFile,
    Installation,
    hosts,
)
from keymem.services.config import Settings, load
from keymem.services.entry import UNSUPPORTED_PLATFORM

USER_SETTINGS: dict[str, Any] = {
    "model": "opus",
    "hooks": {
        "UserPromptSubmit": [
            {"hooks": [{"type": "command", "command": "/usr/local/bin/lint-prompt", "timeout": 3}]}
        ],
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "audit"}]}],
    },
}
USER_CLAUDE_JSON: dict[str, Any] = {
    "numStartups": 7,
    "mcpServers": {"other": {"type": "stdio", "command": "/bin/other", "args": []}},
    "projects": {"/src/app": {"mcpServers": {}}},
}
USER_CODEX_TOML = """# my Codex settings
model = "o4"

[mcp_servers.docs]
command = "docs-mcp"  # keep this comment
args = ["--stdio"]
"""


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's home with keymem's home inside; the hosts' folder variables unset."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KEYMEM_HOME", str(tmp_path / "keymem-home"))
    for name in ("CLAUDE_CONFIG_DIR", "CODEX_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def install(*args: str) -> int:
    return main(["install", *args])


def write_json(path: Path, value: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value, indent=4))


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


def files_under(folder: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def keymem_handlers(settings: Any, event: str) -> list[dict[str, Any]]:
    return [
        handler
        for group in settings["hooks"][event]
        for handler in group["hooks"]
        if "keymem-hook" in handler["command"] or "prompt_submit" in handler["command"]
    ]


def program(command: str) -> Path:
    words = command.split()
    while words[0] == "env" or "=" in words[0]:
        words.pop(0)
    return Path(words[0])


def test_print_shows_absolute_runnable_commands_and_writes_nothing(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for host, programs in (("claude-code", 3), ("codex", 3), ("claude-desktop", 1)):
        assert install(host, "--print") == 0
        out = capsys.readouterr().out
        # every command the host would run: the MCP server's, then each hook's
        found = re.findall(r'command"? ?[:=] ?"([^"]+)"', out)
        assert len(found) == programs, out
        for command in found:
            executable = program(command)
            assert executable.is_absolute() and os.access(executable, os.X_OK), command
    assert files_under(home) == {}


def test_claude_code_install_keeps_the_users_entries_and_runs_twice_to_the_same_files(
    home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings_path, claude_json = home / ".claude" / "settings.json", home / ".claude.json"
    write_json(settings_path, USER_SETTINGS)
    write_json(claude_json, USER_CLAUDE_JSON)
    originals = {p: p.read_bytes() for p in (settings_path, claude_json)}

    assert install("claude-code") == 0
    settings, state = read_json(settings_path), read_json(claude_json)
    assert settings["model"] == "opus" and settings["hooks"]["PreToolUse"]
    assert settings["hooks"]["UserPromptSubmit"][0] == USER_SETTINGS["hooks"]["UserPromptSubmit"][0]
    for event in HOOK_EVENTS:
        (handler,) = keymem_handlers(settings, event)
        assert program(handler["command"]).is_absolute() and handler["timeout"] <= 10
    assert state["numStartups"] == 7 and state["projects"] == USER_CLAUDE_JSON["projects"]
    assert state["mcpServers"]["other"] == USER_CLAUDE_JSON["mcpServers"]["other"]
    server = state["mcpServers"][SERVER_NAME]
    assert Path(server["command"]).is_absolute() and server["args"][-1] == "mcp"
    assert server["env"]["KEYMEM_HOOK_INSTALLED"] == "true"
    backups = sorted(home.rglob("*.keymem-*.bak"))
    assert sorted(b.read_bytes() for b in backups) == sorted(originals.values())

    written = files_under(home)
    capsys.readouterr()
    assert install("claude-code") == 0
    assert files_under(home) == written  # no rewrite, no second backup
    assert capsys.readouterr().out.count("unchanged") == 2

    assert install("claude-code", "--uninstall") == 0
    assert read_json(settings_path) == USER_SETTINGS
    assert read_json(claude_json) == USER_CLAUDE_JSON


def test_an_earlier_bare_keymem_hook_is_replaced_in_place(home: Path) -> None:
    """The README's old by-hand hook (bare ``keymem-hook``) beside the user's own handler."""
    settings_path = home / ".claude" / "settings.json"
    bare = {"type": "command", "command": "keymem-hook", "timeout": 5}
    mine = {"type": "command", "command": "notify-send prompt"}
    write_json(settings_path, {"hooks": {"UserPromptSubmit": [{"hooks": [bare, mine]}]}})
    assert install("claude-code") == 0
    groups = read_json(settings_path)["hooks"]["UserPromptSubmit"]
    assert len(groups) == 1
    (ours, theirs) = groups[0]["hooks"]
    assert theirs == mine and program(ours["command"]).is_absolute()
    assert install("claude-code", "--uninstall") == 0
    assert read_json(settings_path) == {"hooks": {"UserPromptSubmit": [{"hooks": [mine]}]}}


@pytest.mark.parametrize(
    ("settings_text", "reason"),
    [
        ('{"hooks": {"UserPromptSubmit": [', "not valid JSON"),
        ('{"hooks": []}', "'hooks' is list"),
        ('{"hooks": {"SessionStart": [{"matcher": "startup"}]}}', "has no 'hooks' list"),
        ("[1, 2]", "not an object"),
    ],
)
def test_a_malformed_config_is_refused_and_nothing_changes(
    home: Path, capsys: pytest.CaptureFixture[str], settings_text: str, reason: str
) -> None:
    settings_path = home / ".claude" / "settings.json"
    settings_path.parent.mkdir()
    settings_path.write_text(settings_text)
    write_json(home / ".claude.json", USER_CLAUDE_JSON)
    before = files_under(home)
    assert install("claude-code") == 1
    error = capsys.readouterr().err
    assert str(settings_path) in error and reason in error and "nothing was changed" in error
    assert files_under(home) == before


def test_codex_gets_a_startup_timeout_and_keeps_the_users_toml(home: Path) -> None:
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text(USER_CODEX_TOML)
    assert install("codex") == 0
    text = config.read_text()
    assert "# keep this comment" in text and text.startswith("# my Codex settings")
    parsed = tomllib.loads(text)
    assert parsed["model"] == "o4" and parsed["mcp_servers"]["docs"]["args"] == ["--stdio"]
    server = parsed["mcp_servers"][SERVER_NAME]
    assert server["startup_timeout_sec"] > 10 and Path(server["command"]).is_absolute()
    hooks = read_json(home / ".codex" / "hooks.json")
    assert set(hooks) == {"hooks"}  # Codex refuses a hooks.json with other root fields
    for event in HOOK_EVENTS:
        assert len(keymem_handlers(hooks, event)) == 1
    assert install("codex", "--uninstall") == 0
    assert tomllib.loads(config.read_text()) == tomllib.loads(USER_CODEX_TOML)
    assert read_json(home / ".codex" / "hooks.json") == {}


def test_codex_malformed_toml_is_refused(home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = home / ".codex" / "config.toml"
    config.parent.mkdir()
    config.write_text('[mcp_servers.docs\ncommand = "x"\n')
    assert install("codex") == 1
    assert "not valid TOML" in capsys.readouterr().err
    assert files_under(home) == {".codex/config.toml": b'[mcp_servers.docs\ncommand = "x"\n'}


def test_claude_desktop_follows_xdg_and_a_symlinked_config_keeps_its_link(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "xdg"))
    dotfiles = home / "dotfiles" / "claude_desktop_config.json"
    write_json(dotfiles, {"mcpServers": {}, "globalShortcut": "Ctrl+Space"})
    link = home / "xdg" / "Claude" / "claude_desktop_config.json"
    link.parent.mkdir(parents=True)
    link.symlink_to(dotfiles)
    assert install("claude-desktop") == 0
    assert link.is_symlink()
    desktop = read_json(dotfiles)
    assert desktop["globalShortcut"] == "Ctrl+Space"
    assert Path(desktop["mcpServers"][SERVER_NAME]["command"]).is_absolute()
    assert "KEYMEM_HOOK_INSTALLED" not in desktop["mcpServers"][SERVER_NAME].get("env", {})


def test_the_installed_hook_command_runs_this_installations_hook(home: Path) -> None:
    """The host runs the written command through a shell, without keymem's variables: it
    reaches this KEYMEM_HOME (keymem is down there, so it records why and prints nothing)."""
    assert install("claude-code") == 0
    (handler,) = keymem_handlers(read_json(home / ".claude" / "settings.json"), "UserPromptSubmit")
    keymem_home = home / "keymem-home"
    (keymem_home / "logs").mkdir(parents=True)
    payload = {"hook_event_name": "UserPromptSubmit", "prompt": "what fruit do I like?"}
    env = {"PATH": "/usr/bin:/bin", "HOME": str(home)}
    done = subprocess.run(
        ["/bin/sh", "-c", handler["command"]],
        input=json.dumps(payload).encode(),
        env=env,
        capture_output=True,
        timeout=60,
    )
    assert (done.returncode, done.stdout) == (0, b"")
    assert "not running" in (keymem_home / "logs" / FAILURE_LOG).read_text()


def test_doctor_fails_a_bare_hook_off_path_and_passes_after_install(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    bare = {"hooks": [{"type": "command", "command": "keymem-hook", "timeout": 5}]}
    write_json(home / ".claude" / "settings.json", {"hooks": {"UserPromptSubmit": [bare]}})
    checks = doctor._hosts(Settings.from_env())
    assert [c.status for c in checks] == ["fail"] and "not on PATH" in checks[0].detail
    assert install("claude-code") == 0
    checks = doctor._hosts(Settings.from_env())
    assert len(checks) == 1 + len(HOOK_EVENTS)  # the MCP server and each hook
    assert {c.status for c in checks} == {"ok"}
    write_json(
        home / ".claude.json",
        {"mcpServers": {"keymem": {"command": str(home / "gone" / "keymem"), "args": ["mcp"]}}},
    )
    (server,) = [c for c in doctor._hosts(Settings.from_env()) if "MCP" in c.name]
    assert server.status == "fail" and "missing or not executable" in server.detail


@pytest.mark.parametrize(
    ("entry", "argv", "program_name"),
    [
        ("keymem", ["keymem", "status"], "keymem"),
        ("keymem", ["keymem", "mcp"], "keymem"),
        ("keymem_hook", ["keymem-hook"], "keymem-hook"),
        ("service", ["keymem.services", "graph"], "keymem service"),
    ],
)
def test_on_another_platform_every_entry_point_fails_in_one_sentence(
    entry: str, argv: list[str], program_name: str
) -> None:
    probe = (
        f"import os, sys; from keymem.services.entry import {entry}; "
        f"os.name = 'nt'; sys.argv = {argv!r}; sys.exit({entry}())"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], input=b"{}", capture_output=True, timeout=60
    )
    assert done.returncode == 1 and done.stdout == b""
    assert done.stderr.decode() == f"{program_name}: {UNSUPPORTED_PLATFORM}\n"


def test_the_shipped_host_files_are_what_install_writes_with_bare_commands(home: Path) -> None:
    """hooks/'s files (the plugin's, and the by-hand ones) name the commands bare; otherwise
    they hold exactly the entries ``keymem install`` writes."""
    bare = Installation((CLI_SCRIPT,), (HOOK_SCRIPT,))
    shipped = Path(__file__).resolve().parent.parent / "hooks"

    def written(host_file: HostFile) -> Any:
        document = host_file.empty()
        host_file.install(document, bare)
        return host_file.plain(document)

    known = hosts(load())
    claude_servers, claude_hooks = known["claude-code"].files
    codex_servers, codex_hooks = known["codex"].files
    (desktop,) = known["claude-desktop"].files
    plugin_server = read_json(shipped / "claude-code" / ".mcp.json")["mcpServers"][SERVER_NAME]
    assert {**plugin_server, "type": "stdio"} == written(claude_servers)["mcpServers"][SERVER_NAME]
    plugin_hooks = read_json(shipped / "claude-code" / "hooks" / "hooks.json")
    assert plugin_hooks["hooks"] == written(claude_hooks)["hooks"]
    codex_toml = tomllib.loads((shipped / "codex" / "config.toml").read_text())
    assert codex_toml == written(codex_servers)
    assert read_json(shipped / "codex" / "hooks.json") == written(codex_hooks)
    assert read_json(shipped / "claude-desktop" / "claude_desktop_config.json") == written(desktop)


def test_the_hosts_own_folder_variables_move_where_install_writes(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    claude, codex = home / "claude-elsewhere", home / "codex-elsewhere"
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(claude))
    monkeypatch.setenv("CODEX_HOME", str(codex))
    assert install("claude-code") == 0 and install("codex") == 0
    assert SERVER_NAME in read_json(claude / ".claude.json")["mcpServers"]
    for event in HOOK_EVENTS:
        assert len(keymem_handlers(read_json(claude / "settings.json"), event)) == 1
    assert SERVER_NAME in tomllib.loads((codex / "config.toml").read_text())["mcp_servers"]
    assert not (home / ".claude.json").exists() and not (home / ".codex").exists()
