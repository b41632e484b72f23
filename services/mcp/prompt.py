"""What the agent is told: the ``memory_system_prompt`` protocol and the server instructions.

The protocol is the original's: recall silently before the first reply, save durable facts
with 3-6 diverse keys, correct instead of duplicating, never assert stale memories, confirm
only on explicit evidence, never mention the memory system. When a prompt-submit hook already
surfaces memories (KEYMEM_HOOK_INSTALLED=true, set by the plugin), the agent reacts to what was
surfaced instead of making blind recalls on top of it. The Claude Code skill
(hooks/claude-code/skills/keymem/SKILL.md) carries the same rules; a test keeps them in step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

BLIND_RECALLS = 3  # recall calls before the first reply when nothing surfaces memories

RECALL_WITHOUT_HOOK = (
    f"- Before your first reply, call `recall` silently {BLIND_RECALLS} times with short "
    "noun-keyword queries (the user, the project, the topic); again whenever the topic changes."
)
RECALL_WITH_HOOK = (
    "- Memories related to each prompt arrive passively in a <keymem-surfaced> block. Use them "
    "when relevant; call `recall` yourself only when the topic needs more than was surfaced or "
    "changes."
)
RULES = (
    "- Walk the graph deliberately: `recall` gives key clusters and one passive preview; follow "
    "a connected key with `read_key(key_id, query)` for a missing fact, and `read_memory"
    "(memory_id, via_key_id)` for the full text. Stop when the evidence is complete.",
    "- Before ending every reply, check whether this turn revealed a durable fact: a name, "
    "preference, decision, correction, project fact or goal. If it did, call `remember` (or "
    "`remember_batch`) silently in the same turn with 3-6 diverse keys: concepts, names, and "
    "the same concept in the user's other languages (e.g. strawberry and 딸기). A durable fact "
    "left unsaved is a bug; save nothing when the turn revealed nothing durable.",
    "- When a remembered fact changes, call `correct` on it instead of saving a second version.",
    "- Treat `read_memory` as retrieval, not confirmation. Check `validity.status`: qualify an "
    "`aging` memory, and never assert a `stale` one as current without checking an external "
    "source or asking the user.",
    "- Call `confirm_memory` only after an explicit current user assertion, an authoritative "
    "current source, or direct observation, never merely because a read succeeded.",
    "- Never mention memory lookup or saving to the user.",
)


def memory_system_prompt(*, hook: bool) -> str:
    """The protocol to put in an agent's persistent system instructions."""
    lines = [
        "You have keymem, an associative long-term memory: memories reached through keys "
        "(concepts), many keys per memory and many memories per key.",
        RECALL_WITH_HOOK if hook else RECALL_WITHOUT_HOOK,
        *RULES,
    ]
    return "\n".join(lines)


def instructions(counts: Mapping[str, Any] | None) -> str:
    """Server instructions: what keymem is, its live size (None: still starting), and the
    short protocol."""
    if counts is not None:
        size = (
            f"The store holds {counts['memories']} memories under {counts['keys']} keys "
            f"({counts['links']} links) in {len(counts.get('namespaces', {}))} namespace(s)."
        )
    else:
        size = (
            "keymem's services are starting in the background; the first tool call waits for them."
        )
    return (
        "keymem: associative memory for this agent. "
        f"{size} Recall before answering (recall -> read_key -> read_memory), save durable facts "
        "with remember and 3-6 diverse keys, correct changed facts, never assert stale memories, "
        "and never mention the memory system to the user. The memory_system_prompt prompt has "
        "the full protocol."
    )


def scope_instructions(project: str | None) -> str:
    """Where facts go when the host runs in a project (services/scope.py); empty outside one."""
    if not project:
        return ""
    return (
        f" This session's project is namespace {project!r}: save facts about the project with "
        f"namespace={project!r}, facts about the user (who they are, their preferences) without "
        "a namespace (default). recall without a namespace searches both; pass the namespace a "
        "key or memory shows to read_key and read_memory."
    )
