"""Which keymem a process runs: its version and the directory its code is installed in.

After an upgrade (or a cleaned uvx cache) a supervisord started by the old install keeps
running the old code from the old path. The router reports its identity (its ``version``
method); a launcher whose own identity differs restarts the services (services/launcher.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

DISTRIBUTION = "keymem"
UNKNOWN = "unknown"


@dataclass(frozen=True)
class Identity:
    version: str
    path: str  # the installed package's root directory (the checkout, for an editable install)

    def describe(self) -> str:
        return f"keymem {self.version} at {self.path}"

    def to_wire(self) -> dict[str, str]:
        return {"version": self.version, "path": self.path}

    @classmethod
    def from_wire(cls, body: Any) -> Identity:
        """A router's reply; one that predates the method or garbles it is ``unknown``."""
        fields = body if isinstance(body, dict) else {}
        return cls(str(fields.get("version", UNKNOWN)), str(fields.get("path", UNKNOWN)))


def this_install() -> Identity:
    try:
        found = version(DISTRIBUTION)
    except PackageNotFoundError:
        found = UNKNOWN
    return Identity(found, str(Path(__file__).resolve().parent.parent))
