"""What keymem writes into each agent host's configuration, and where (``keymem install``,
``keymem doctor``).

- ``claude-code``: the hooks in ``~/.claude/settings.json``; the MCP server in ``~/.claude.json``'s
  user-scope ``mcpServers`` (what ``claude mcp add --scope user`` writes). CLAUDE_CONFIG_DIR
  moves both into one folder.
- ``codex``: ``[mcp_servers.keymem]`` in ``$CODEX_HOME/config.toml`` (``~/.codex``), with a
  ``startup_timeout_sec`` for a cold first start; the hooks in ``hooks.json`` beside it (Codex
  releases before inline ``[hooks]`` tables read only that file).
- ``claude-desktop``: ``mcpServers`` in ``claude_desktop_config.json`` in its platform folder;
  it has no hooks.

keymem's entries are recognised by name (the ``keymem`` MCP server) and by command (a hook
handler that runs ``keymem-hook``), so an install replaces its own earlier entries (a bare
``keymem-hook``, another environment's path) and an uninstall removes only those.
"""

from __future__ import annotations

import copy
import json
import os
import shlex
import sys
import sysconfig
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomlkit
import tomlkit.exceptions

from keymem.services.config import (
    CLAUDE_CONFIG_DIR,
    CODEX_HOME,
    HOME,
    HOOK_INSTALLED,
    SOURCE_DEFAULT,
    XDG_CONFIG_HOME,
    Config,
)

SERVER_NAME = "keymem"
CLI_SCRIPT, CLI_MODULE = "keymem", "keymem.services.cli"
HOOK_SCRIPT, HOOK_MODULE = "keymem-hook", "keymem.hooks.prompt_submit"
HOOK_EVENTS = ("UserPromptSubmit", "SessionStart")
HOOK_TIMEOUT_S = 5
# Codex waits 10 s for an MCP server by default; the first start also starts the services.
CODEX_STARTUP_TIMEOUT_S = 60
CLAUDE_CODE, CODEX, CLAUDE_DESKTOP = "claude-code", "codex", "claude-desktop"
HOST_NAMES = (CLAUDE_CODE, CODEX, CLAUDE_DESKTOP)
PLUGIN_PREFIX = "keymem@"  # a Claude Code plugin id, "keymem@<marketplace>"

Document = MutableMapping[str, Any]


class HostConfigError(Exception):
    """A host's config file keymem will not change: unreadable, or not the shape the host reads."""


@dataclass(frozen=True)
class Installation:
    """How a host starts this installation's keymem: absolute commands and their environment."""

    keymem: tuple[str, ...]
    hook: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def hook_command(self) -> str:
        """The hook as the shell command a host runs (``env`` carries a non-default home)."""
        assignments = [f"{name}={value}" for name, value in self.env.items()]
        return shlex.join([*(["env", *assignments] if assignments else []), *self.hook])


def this_installation(config: Config) -> Installation:
    """The console scripts beside this interpreter, else the interpreter running the modules."""
    scripts = Path(sysconfig.get_path("scripts"))
    cli, hook = scripts / CLI_SCRIPT, scripts / HOOK_SCRIPT
    env = {HOME.name: str(config[HOME])} if config.source(HOME) != SOURCE_DEFAULT else {}
    if is_executable(cli) and is_executable(hook):
        return Installation((str(cli),), (str(hook),), env)
    return Installation(
        (sys.executable, "-m", CLI_MODULE), (sys.executable, "-m", HOOK_MODULE), env
    )


def is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def runs_keymem_hook(command: object) -> bool:
    """Whether a hook handler's shell command runs keymem's hook (any path, any wrapper)."""
    if not isinstance(command, str):
        return False
    try:
        words = shlex.split(command)
    except ValueError:
        return False
    return any(Path(word).name == HOOK_SCRIPT or word == HOOK_MODULE for word in words)


def program_of(command: str) -> str:
    """The program a shell command starts, past ``env`` and its assignments."""
    words = shlex.split(command)
    while words and (words[0] == "env" or "=" in words[0]):
        words.pop(0)
    return words[0] if words else ""


# -- reading shapes: a host's file is refused, not repaired, when it is not what the host reads --
def _table(parent: Document, key: str, where: str, create: bool) -> Document | None:
    value = parent.get(key)
    if value is None:
        if not create:
            return None
        parent[key] = {}
        value = parent[key]
    if not isinstance(value, MutableMapping):
        raise HostConfigError(f"{where}: {key!r} is {type(value).__name__}, not a table/object")
    return value


def _list(parent: Document, key: str, where: str, create: bool) -> list[Any] | None:
    value = parent.get(key)
    if value is None:
        if not create:
            return None
        parent[key] = []
        value = parent[key]
    if not isinstance(value, list):
        raise HostConfigError(f"{where}: {key!r} is {type(value).__name__}, not a list")
    return value


def _groups(hooks: Document, event: str, where: str, create: bool) -> Iterator[list[Any]]:
    """The handler lists of one event's matcher groups."""
    groups = _list(hooks, event, f"{where}: hooks", create) or []
    for number, group in enumerate(groups):
        place = f"{where}: hooks.{event}[{number}]"
        if not isinstance(group, MutableMapping):
            raise HostConfigError(f"{place} is {type(group).__name__}, not an object")
        handlers = _list(group, "hooks", place, create=False)
        if handlers is None:
            raise HostConfigError(f"{place} has no 'hooks' list")
        yield handlers


# -- the files ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class HostFile(ABC):
    """One config file of a host: how it reads and writes, and what keymem puts in it."""

    path: Path

    @property
    def is_toml(self) -> bool:
        return self.path.suffix == ".toml"

    def load(self) -> Document:
        """The file's document; an empty one when it does not exist or is blank."""
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            text = ""
        except (OSError, UnicodeDecodeError) as exc:
            raise HostConfigError(f"{self.path}: {exc}") from None
        return self.parse(text)

    def parse(self, text: str) -> Document:
        if self.is_toml:
            try:
                return tomlkit.parse(text)
            except tomlkit.exceptions.ParseError as exc:
                raise HostConfigError(f"{self.path} is not valid TOML: {exc}") from None
        if not text.strip():
            return {}
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise HostConfigError(f"{self.path} is not valid JSON: {exc}") from None
        if not isinstance(document, dict):
            raise HostConfigError(f"{self.path} holds {type(document).__name__}, not an object")
        return document

    def plain(self, document: Document) -> Any:
        """The document's content alone, to tell whether an edit changed anything."""
        if isinstance(document, tomlkit.TOMLDocument):
            return document.unwrap()
        return copy.deepcopy(document)

    def empty(self) -> Document:
        return tomlkit.document() if self.is_toml else {}

    def dump(self, document: Document) -> str:
        if isinstance(document, tomlkit.TOMLDocument):
            return tomlkit.dumps(document)
        return json.dumps(document, indent=2, ensure_ascii=False) + "\n"

    @abstractmethod
    def install(self, document: Document, installation: Installation) -> None:
        """keymem's entries in, replacing keymem's earlier ones."""

    @abstractmethod
    def uninstall(self, document: Document) -> None:
        """keymem's entries out, the rest as it was."""

    @abstractmethod
    def commands(self, document: Document) -> list[tuple[str, str]]:
        """(what, program) for each keymem command the file makes the host run."""


@dataclass(frozen=True)
class ServersFile(HostFile):
    """A file with the host's MCP servers by name under ``table``."""

    table: str = "mcpServers"
    hook_installed: bool = False  # the host also runs keymem-hook: the server stops asking
    extra: Mapping[str, Any] = field(default_factory=dict)  # the host's own fields

    def entry(self, installation: Installation) -> dict[str, Any]:
        env = dict(installation.env)
        if self.hook_installed:
            env[HOOK_INSTALLED.name] = "true"
        command, *args = installation.keymem
        return {
            "command": command,
            "args": [*args, "mcp"],
            **({"env": env} if env else {}),
            **self.extra,
        }

    def install(self, document: Document, installation: Installation) -> None:
        servers = _table(document, self.table, str(self.path), create=True)
        assert servers is not None
        servers[SERVER_NAME] = self.entry(installation)

    def uninstall(self, document: Document) -> None:
        servers = _table(document, self.table, str(self.path), create=False)
        if servers is None or SERVER_NAME not in servers:
            return
        del servers[SERVER_NAME]
        if not servers:
            del document[self.table]

    def commands(self, document: Document) -> list[tuple[str, str]]:
        servers = _table(document, self.table, str(self.path), create=False) or {}
        server = servers.get(SERVER_NAME)
        if not isinstance(server, Mapping) or not isinstance(server.get("command"), str):
            return []
        return [(f"MCP server {SERVER_NAME!r}", str(server["command"]))]


@dataclass(frozen=True)
class HooksFile(HostFile):
    """A file of hook handlers by event (``{"hooks": {event: [{"hooks": [handler]}]}}``)."""

    plugins: bool = False  # Claude Code's settings.json also says which plugins are enabled

    def install(self, document: Document, installation: Installation) -> None:
        """keymem's handler once per event, where an earlier one was, else in a group of its own."""
        handler = {
            "type": "command",
            "command": installation.hook_command,
            "timeout": HOOK_TIMEOUT_S,
        }
        hooks = _table(document, "hooks", str(self.path), create=True)
        assert hooks is not None
        for event in HOOK_EVENTS:
            placed = False
            for handlers in _groups(hooks, event, str(self.path), create=True):
                kept = []
                for old in handlers:
                    if not _is_keymem_handler(old):
                        kept.append(old)
                    elif not placed:
                        kept.append(handler)
                        placed = True
                handlers[:] = kept
            if not placed:
                event_groups = _list(hooks, event, str(self.path), create=True)
                assert event_groups is not None
                event_groups.append({"hooks": [handler]})

    def uninstall(self, document: Document) -> None:
        """keymem's handlers out; a group, event or ``hooks`` left empty by that goes too."""
        hooks = _table(document, "hooks", str(self.path), create=False)
        if hooks is None:
            return
        for event in HOOK_EVENTS:
            groups = _list(hooks, event, f"{self.path}: hooks", create=False)
            if groups is None:
                continue
            emptied: list[bool] = []
            for handlers in _groups(hooks, event, str(self.path), create=False):
                kept = [h for h in handlers if not _is_keymem_handler(h)]
                emptied.append(bool(handlers) and not kept)
                handlers[:] = kept
            groups[:] = [g for g, gone in zip(groups, emptied, strict=True) if not gone]
            if not groups and any(emptied):
                del hooks[event]
                if not hooks:
                    del document["hooks"]

    def commands(self, document: Document) -> list[tuple[str, str]]:
        found = []
        hooks = _table(document, "hooks", str(self.path), create=False) or {}
        for event in HOOK_EVENTS:
            for handlers in _groups(hooks, event, str(self.path), create=False):
                found += [
                    (f"{event} hook", program_of(h["command"]))
                    for h in handlers
                    if _is_keymem_handler(h)
                ]
        enabled = document.get("enabledPlugins") if self.plugins else None
        if isinstance(enabled, Mapping):
            for plugin, on in enabled.items():
                if on is True and str(plugin).startswith(PLUGIN_PREFIX):
                    found += [
                        (f"plugin {plugin} MCP server", CLI_SCRIPT),
                        (f"plugin {plugin} hooks", HOOK_SCRIPT),
                    ]
        return found


def _is_keymem_handler(handler: object) -> bool:
    return isinstance(handler, Mapping) and runs_keymem_hook(handler.get("command"))


# -- the hosts ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Host:
    name: str
    files: tuple[HostFile, ...]
    # Started from a terminal, so a bare command is looked up on that shell's PATH; a desktop
    # app gets the login session's PATH, which rarely holds a virtual environment's bin/.
    from_shell: bool
    next_step: str


def desktop_config(config: Config) -> Path:
    """Claude Desktop's config file: macOS's Application Support, else the XDG config folder."""
    if sys.platform == "darwin":
        folder = Path.home() / "Library" / "Application Support"
    else:
        folder = config[XDG_CONFIG_HOME] or Path.home() / ".config"
    return folder / "Claude" / "claude_desktop_config.json"


def hosts(config: Config) -> dict[str, Host]:
    claude = config[CLAUDE_CONFIG_DIR]
    codex = config[CODEX_HOME] or Path.home() / ".codex"
    found = (
        Host(
            CLAUDE_CODE,
            (
                ServersFile(
                    (claude or Path.home()) / ".claude.json",
                    hook_installed=True,
                    extra={"type": "stdio"},
                ),
                HooksFile((claude or Path.home() / ".claude") / "settings.json", plugins=True),
            ),
            from_shell=True,
            next_step="restart Claude Code; `claude mcp list` shows keymem connected",
        ),
        Host(
            CODEX,
            (
                ServersFile(
                    codex / "config.toml",
                    table="mcp_servers",
                    hook_installed=True,
                    extra={"startup_timeout_sec": CODEX_STARTUP_TIMEOUT_S},
                ),
                HooksFile(codex / "hooks.json"),
            ),
            from_shell=True,
            next_step="restart Codex and trust keymem's two hooks once in /hooks",
        ),
        Host(
            CLAUDE_DESKTOP,
            (ServersFile(desktop_config(config)),),
            from_shell=False,
            next_step="quit and reopen Claude Desktop",
        ),
    )
    return {host.name: host for host in found}
