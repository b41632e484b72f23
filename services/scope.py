"""Project scope: the namespaces a working directory reads, and the one its project's facts go to.

A host runs an agent in a directory (the hook's ``cwd``, the MCP server's own working directory).
Its project namespace is, in order:

1. the longest directory prefix mapped in ``KEYMEM_HOME/namespaces.json``
   (``{"/home/me/projects/shop": "shop"}``);
2. otherwise the directory's git root (the nearest folder holding ``.git``, a directory or a
   worktree's file), named after the folder plus a short hash of its real path, so two
   checkouts called ``app`` never share memories and a name stays the same across runs;
3. otherwise none: the directory is no project.

The hook and ``recall`` search the project's namespace and ``default``; facts about the user
belong in ``default``. Only the standard library is imported: the hook loads this on every prompt.
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from pathlib import Path
from typing import NamedTuple

DEFAULT_NAMESPACE = "default"
NAMESPACE_MAP_FILE = "namespaces.json"
GIT_MARKER = ".git"
PROJECT_NAME_MAX_CHARS = 48
PROJECT_HASH_CHARS = 6
UNNAMED_PROJECT = "project"
# Anything but letters, digits, '.', '_' and '-' becomes one '-' in a derived name.
_NAME_NOISE = re.compile(r"[^\w.-]+")

SOURCE_MAPPING = "namespaces.json"
SOURCE_GIT = "git root"


class Scope(NamedTuple):
    """Where a working directory's project facts live (``project`` None: no project)."""

    cwd: str | None
    project: str | None = None
    source: str | None = None  # SOURCE_MAPPING | SOURCE_GIT
    root: str | None = None  # the mapped prefix or the git root

    @property
    def namespaces(self) -> list[str]:
        """What the hook and ``recall`` search: the project's namespace, then ``default``."""
        return list(dict.fromkeys([*([self.project] if self.project else []), DEFAULT_NAMESPACE]))


def read_mapping(home: Path) -> dict[str, str]:
    """``namespaces.json``'s prefix → namespace entries (a missing or broken file maps none)."""
    try:
        raw = json.loads((home / NAMESPACE_MAP_FILE).read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(raw, dict):
        return {}
    return {
        prefix: namespace.strip().lower()
        for prefix, namespace in raw.items()
        if isinstance(prefix, str) and isinstance(namespace, str) and namespace.strip()
    }


def mapped(cwd: str, mapping: dict[str, str]) -> tuple[str, str] | None:
    """The longest mapped prefix holding ``cwd`` and its namespace."""
    matches = [
        (prefix, namespace)
        for prefix, namespace in mapping.items()
        if cwd == prefix or cwd.startswith(prefix.rstrip("/") + "/")
    ]
    return max(matches, key=lambda match: len(match[0])) if matches else None


def git_root(cwd: str) -> Path | None:
    """The nearest directory at or above ``cwd`` that holds ``.git`` (no git process is run)."""
    here = Path(os.path.realpath(cwd))
    for folder in (here, *here.parents):
        if (folder / GIT_MARKER).exists():
            return folder
    return None


def project_namespace(root: Path) -> str:
    """The folder's name, normalised, and a hash of its real path: ``shop-3f9a1c``."""
    import hashlib  # loads OpenSSL: only a prompt in a git root (no mapping) pays for it

    name = unicodedata.normalize("NFKC", root.name).casefold()
    name = _NAME_NOISE.sub("-", name).strip("-.")[:PROJECT_NAME_MAX_CHARS] or UNNAMED_PROJECT
    digest = hashlib.sha256(os.path.realpath(root).encode()).hexdigest()[:PROJECT_HASH_CHARS]
    return f"{name}-{digest}"


def scope_of(cwd: str | None, home: Path) -> Scope:
    """The scope in force for a working directory (``None``: the host did not say)."""
    if not cwd:
        return Scope(cwd)
    found = mapped(cwd, read_mapping(home))
    if found is not None:
        prefix, namespace = found
        return Scope(cwd, namespace, SOURCE_MAPPING, prefix)
    root = git_root(cwd)
    if root is None:
        return Scope(cwd)
    return Scope(cwd, project_namespace(root), SOURCE_GIT, str(root))
