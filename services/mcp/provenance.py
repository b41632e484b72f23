"""Provenance: which host conversation a saved memory came from.

Claude Code and Codex inject their session id into every MCP server they spawn
(CLAUDE_CODE_SESSION_ID, CODEX_THREAD_ID), so the link is exact and needs no transcript: we
stamp ``host_agent`` and ``host_session`` from the environment and never open a transcript
file. The original's gate still applies to the link itself: transcripts (and the sessions they
name) are the owner's local history, so KEYMEM_TRANSCRIPT_ACCESS=false drops the host link even
under a host. Its heuristic for hosts without a session id (the most recently modified
transcript, enabled by KEYMEM_TRANSCRIPT_ACCESS=true) is deliberately not implemented: a guess
can tie a memory to the wrong conversation, and reading transcripts only to guess is not worth
the exposure. Codex also names the turn of each tool call (``turn_id`` in the request's
``_meta["x-codex-turn-metadata"]``): it becomes ``host_turn``, which makes ``confirm_memory``
idempotent per turn. Nothing here is reachable through a tool.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from keymem.services import config as cfg
from keymem.services.config import Config

# (the setting a host fills with its session id, host_agent) for hosts that inject one.
HOST_SESSIONS = (
    (cfg.CLAUDE_CODE_SESSION_ID, "claude-code"),
    (cfg.CODEX_THREAD_ID, "codex"),
)
# The request _meta entry in which Codex describes the turn a tool call belongs to.
CODEX_TURN_META = "x-codex-turn-metadata"
HOST_TURN_MAX_CHARS = 200


def host_turn_of(meta: Mapping[str, Any] | None) -> str | None:
    """The host's turn id in a tool call's ``_meta``, or None when the host sent none."""
    turn = (meta or {}).get(CODEX_TURN_META)
    turn_id = turn.get("turn_id") if isinstance(turn, Mapping) else None
    if isinstance(turn_id, str | int) and not isinstance(turn_id, bool):
        return str(turn_id)[:HOST_TURN_MAX_CHARS] or None
    return None


@dataclass(frozen=True)
class Provenance:
    session: str  # this server process: memories saved through one `keymem mcp` share it
    host_agent: str | None = None
    host_session: str | None = None

    @classmethod
    def from_config(cls, config: Config) -> Provenance:
        session = uuid.uuid4().hex[:12]
        if not config[cfg.TRANSCRIPT_ACCESS]:
            return cls(session)
        for host_session, agent in HOST_SESSIONS:
            value = config[host_session]
            if value:
                return cls(session, agent, value)
        return cls(session)

    def stamp(
        self, tool: str, given: Mapping[str, Any] | None = None, host_turn: str | None = None
    ) -> dict[str, Any]:
        """``given`` (the agent's own source fields) with this process's provenance on top;
        the turn the host named (``host_turn``) outranks one the agent wrote."""
        source: dict[str, Any] = dict(given or {})
        source.update(
            session=self.session,
            tool=tool,
            saved_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )
        if self.host_session is not None:
            source.update(host_agent=self.host_agent, host_session=self.host_session)
            if host_turn is not None:
                source["host_turn"] = host_turn
        else:  # an agent cannot claim a host conversation the host did not vouch for
            source.pop("host_agent", None)
            source.pop("host_session", None)
        return source
