"""The host packaging under hooks/ and the README's agent set-up: parseable, and pointing at
commands this project really installs (``keymem mcp``, ``keymem-hook``)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

from keymem.services.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
HOOKS = ROOT / "hooks"
HOOK_TIMEOUT_MAX_S = 10  # the hook must never hold a prompt for long


def load(path: Path) -> Any:
    return json.loads(path.read_text())


def scripts() -> dict[str, str]:
    project: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "mcp>=2.3,<3" in project["dependencies"]
    found: dict[str, str] = project["scripts"]
    return found


def assert_prompt_hook(config: dict[str, Any]) -> None:
    for event in ("UserPromptSubmit", "SessionStart"):
        (entry,) = config["hooks"][event]
        (handler,) = entry["hooks"]
        assert handler["type"] == "command" and handler["command"].endswith("keymem-hook")
        assert 0 < handler["timeout"] <= HOOK_TIMEOUT_MAX_S


def test_the_commands_the_configs_run_exist() -> None:
    assert {"keymem", "keymem-hook"} <= set(scripts())
    args = build_parser().parse_args(["mcp"])
    assert args.command == "mcp" and args.timeout is None  # KEYMEM_UP_TIMEOUT_S applies
    assert build_parser().parse_args(["mcp", "--timeout", "5"]).timeout == 5


def test_claude_code_marketplace_and_plugin() -> None:
    """The marketplace sits at the repository root, so a Git host's copy is one; its plugin
    source is a folder inside the repository."""
    marketplace = load(ROOT / ".claude-plugin" / "marketplace.json")
    assert marketplace["name"] and marketplace["owner"]["name"]
    (entry,) = marketplace["plugins"]
    assert entry["source"].startswith("./")
    plugin_dir = (ROOT / entry["source"]).resolve()
    assert plugin_dir.is_relative_to(HOOKS)
    manifest = load(plugin_dir / ".claude-plugin" / "plugin.json")
    assert manifest["name"] == entry["name"] == "keymem"
    assert manifest["version"] == entry["version"]
    server = load(plugin_dir / ".mcp.json")["mcpServers"]["keymem"]
    assert (server["command"], server["args"]) == ("keymem", ["mcp"])
    assert server["env"]["KEYMEM_HOOK_INSTALLED"] == "true"
    assert_prompt_hook(load(plugin_dir / "hooks" / "hooks.json"))
    skill = (plugin_dir / "skills" / "keymem" / "SKILL.md").read_text()
    front = re.match(r"---\n(.*?)\n---\n", skill, re.S)
    assert front is not None and "name: keymem" in front.group(1)
    assert "description: " in front.group(1)


def test_codex_and_claude_desktop_configs() -> None:
    codex = tomllib.loads((HOOKS / "codex" / "config.toml").read_text())
    server = codex["mcp_servers"]["keymem"]
    assert (server["command"], server["args"]) == ("keymem", ["mcp"])
    assert server["env"]["KEYMEM_HOOK_INSTALLED"] == "true"
    assert server["startup_timeout_sec"] > 10  # Codex's default, shorter than a cold start
    assert_prompt_hook(load(HOOKS / "codex" / "hooks.json"))
    desktop = load(HOOKS / "claude-desktop" / "claude_desktop_config.json")
    assert desktop["mcpServers"]["keymem"]["args"] == ["mcp"]


def test_readme_agent_section_blocks_parse_and_use_the_installed_commands() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Use it from an agent", 1)[1]
    shell = re.findall(r"```sh\n(.*?)```", section, re.S)
    assert any('"$PWD/.venv/bin/keymem" mcp' in block for block in shell)
    blocks = [json.loads(block) for block in re.findall(r"```json\n(.*?)```", section, re.S)]
    assert_prompt_hook(blocks[0])
    assert blocks[1]["mcpServers"]["keymem"]["args"] == ["mcp"]
    assert "docs/TOOLS.md" in section


def test_readme_install_section_names_each_way_and_real_hosts() -> None:
    """pipx, uv tool, uvx and the plugin from a Git host; every ``keymem install`` line parses."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Install", 1)[1].split("\n## ", 1)[0]
    shell = "\n".join(re.findall(r"```sh\n(.*?)```", section, re.S))
    for way in ("pipx install git+", "uv tool install git+", "uvx --from git+", "keymem mcp"):
        assert way in shell, way
    assert "claude plugin marketplace add OWNER/keymem" in shell
    assert "claude plugin install keymem@keymem" in shell
    assert "POSIX" in section
    hosts = [
        line.split("#")[0].split()[2:] for line in shell.splitlines() if "keymem install" in line
    ]
    assert len(hosts) == 3
    for host in hosts:
        assert build_parser().parse_args(["install", *host]).host == host[0]
