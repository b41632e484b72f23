"""keymem's MCP server: the ten memory tools, ``history``, and the ``memory_system_prompt``.

Built on the official SDK's ``MCPServer``. Each tool is a thin typed signature — the
parameters, their ranges and descriptions become the input schema an agent sees; the return
model becomes the output schema — over one shared path (``MemoryBackend.ask``) that calls the
router's ``memory`` service and turns keymem's typed errors into tool errors. Writes carry the
host session as provenance (``provenance.py``). The server itself holds no memory state, so any
number of ``keymem mcp`` processes can share one set of services.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from importlib.metadata import version
from typing import Annotated, Any

from mcp.server import MCPServer
from mcp.server.mcpserver import Context
from mcp_types import ToolAnnotations
from pydantic import BaseModel, Field

from keymem.protocol.limits import (
    BATCH_MAX_ITEMS,
    CONTENT_MAX_CHARS,
    ID_MAX_CHARS,
    KEY_MAX_CHARS,
    KEYS_PER_MEMORY_MAX,
    NAMESPACE_MAX_CHARS,
    PROMPT_MAX_CHARS,
    RELATED_MAX,
)
from keymem.services.mcp import models
from keymem.services.mcp.backend import BATCH_TIMEOUT_MS, MemoryBackend
from keymem.services.mcp.presentation import KeymemServer, self_contained
from keymem.services.mcp.prompt import instructions, memory_system_prompt, scope_instructions
from keymem.services.mcp.provenance import Provenance, host_turn_of
from keymem.services.scope import DEFAULT_NAMESPACE

SERVER_NAME = "keymem"
# The schema states the limits every layer enforces (protocol/limits.py) and the tools' own.
RECALL_TOP_K_DEFAULT, RECALL_TOP_K_MAX = 8, 20
PREVIEW_MAX_CHARS = 20_000
READ_KEY_LIMIT_DEFAULT, READ_KEY_LIMIT_MAX = 10, 50
BROWSE_LIMIT_DEFAULT, BROWSE_LIMIT_MAX = 20, 100

READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
DESTRUCTIVE = ToolAnnotations(read_only_hint=False, destructive_hint=True, open_world_hint=False)

Id = Annotated[str, Field(min_length=1, max_length=ID_MAX_CHARS, description="a memory id")]
KeyId = Annotated[str, Field(min_length=1, max_length=ID_MAX_CHARS, description="a key id")]
Namespace = Annotated[
    str | None,
    Field(
        max_length=NAMESPACE_MAX_CHARS,
        description=(
            "memory namespace (trimmed, lower-cased); default 'default'. A boundary: an id "
            "of another namespace is not found unless you name it (the ns= a memory shows)"
        ),
    ),
]
Content = Annotated[
    str, Field(min_length=1, max_length=CONTENT_MAX_CHARS, description="the fact, self-contained")
]
Key = Annotated[str, Field(min_length=1, max_length=KEY_MAX_CHARS, description="one key")]
Keys = Annotated[
    list[Key],
    Field(
        min_length=1,
        max_length=KEYS_PER_MEMORY_MAX,
        description="3-6 diverse keys: concepts, names, and the same concept in other languages",
    ),
]
KeyTypes = Annotated[
    dict[str, models.KeyType] | None,
    Field(
        description="per key: concept (default, matches by meaning) | name | proper_noun (exact)"
    ),
]
Ttl = Annotated[
    int | None, Field(gt=0, description="seconds until the memory expires; omit to keep it")
]
Profile = Annotated[
    models.DecayProfile | None,
    Field(description="freshness half-life: transient 7 d, standard 90 d, stable 365 d, permanent"),
]
Related = Annotated[
    list[str] | None,
    Field(max_length=RELATED_MAX, description="ids of memories this one relates to"),
]
Source = Annotated[
    dict[str, Any] | None,
    Field(description="extra provenance (e.g. host_turn); the host session is added for you"),
]
Offset = Annotated[
    int, Field(ge=0, description="skip this many (pass the previous page's next_offset)")
]
BrowseLimit = Annotated[int, Field(ge=1, le=BROWSE_LIMIT_MAX, description="keys per page")]
ReadKeyLimit = Annotated[
    int, Field(ge=1, le=READ_KEY_LIMIT_MAX, description="memory handles per page")
]


class RememberItem(BaseModel):
    """One memory of a ``remember_batch``."""

    content: Content
    keys: Keys
    key_types: KeyTypes = None
    namespace: Namespace = None
    ttl_seconds: Ttl = None
    decay_profile: Profile = None
    related_to: Related = None
    source: Source = None


def _host_turn(ctx: Context[None, Any]) -> str | None:
    return host_turn_of(ctx.request_context.meta)


def _body(**fields: Any) -> dict[str, Any]:
    """A request body without the parameters the agent left out."""
    return {name: value for name, value in fields.items() if value is not None}


def build_server(
    backend: MemoryBackend,
    *,
    counts: Mapping[str, Any] | None,
    provenance: Provenance,
    hook: bool,
    project: str | None = None,
) -> MCPServer[None]:
    """The MCP server over ``backend``; ``counts`` (memory.counts, None while the services
    start) go into its instructions."""

    @asynccontextmanager
    async def lifespan(_: MCPServer[None]) -> AsyncIterator[None]:
        try:
            yield None
        finally:
            await backend.close()

    server = KeymemServer(
        SERVER_NAME,
        version=version("keymem"),
        log_level="WARNING",
        instructions=instructions(counts) + scope_instructions(project),
        lifespan=lifespan,
    )

    @server.tool(title="Recall memories by keywords", annotations=READ_ONLY)
    async def recall(
        query: Annotated[
            str,
            Field(
                min_length=1,
                max_length=PROMPT_MAX_CHARS,
                description="short noun keywords, e.g. 'Newton apple'",
            ),
        ],
        top_k: Annotated[
            int,
            Field(
                ge=1,
                le=RECALL_TOP_K_MAX,
                description="key clusters to return (keys leading to the same memories are one)",
            ),
        ] = RECALL_TOP_K_DEFAULT,
        namespace: Namespace = None,
        context: Annotated[
            str | None,
            Field(max_length=PROMPT_MAX_CHARS, description="raw context to rank the preview by"),
        ] = None,
        explain: Annotated[
            bool, Field(description="add per-namespace counts and degraded services")
        ] = False,
        max_chars: Annotated[
            int | None, Field(ge=1, le=PREVIEW_MAX_CHARS, description="cut the preview's content")
        ] = None,
    ) -> models.RecallResult:
        """Find the key clusters a query touches, plus one passive preview memory.

        The preview is the best memory under the strongest key, with its connected keys: answer
        from it, or follow a connected key with read_key. Changes nothing (no reinforcement, no
        confirmation). On a miss: status no_match, nearest_keys and a note.
        """
        # Without a namespace, the project's (if the host runs in one) and default.
        spaces = [project, DEFAULT_NAMESPACE] if project and namespace is None else None
        body = _body(
            query=query,
            top_k=top_k,
            namespace=namespace,
            namespaces=spaces,
            context=context,
            explain=explain or None,
            max_chars=max_chars,
        )
        return await backend.ask("recall", body, models.RecallResult)

    @server.tool(title="Browse a namespace's keys", annotations=READ_ONLY)
    async def browse_keys(
        namespace: Namespace = None,
        hubs_only: Annotated[bool, Field(description="only keys with >= 3 memories")] = False,
        limit: BrowseLimit = BROWSE_LIMIT_DEFAULT,
        offset: Offset = 0,
    ) -> models.BrowseResult:
        """List a namespace's keys, hubs first, with memory counts (pages with next_offset)."""
        body = _body(namespace=namespace, hubs_only=hubs_only, limit=limit, offset=offset)
        return await backend.ask("browse_keys", body, models.BrowseResult)

    @server.tool(title="List the memories under a key", annotations=READ_ONLY)
    async def read_key(
        key_id: KeyId,
        query: Annotated[
            str | None,
            Field(max_length=PROMPT_MAX_CHARS, description="the missing fact: ranks by relevance"),
        ] = None,
        namespace: Namespace = None,
        limit: ReadKeyLimit = READ_KEY_LIMIT_DEFAULT,
        offset: Offset = 0,
    ) -> models.ReadKeyResult:
        """Ranked handles of the memories under one key (ids and scores, no content).

        With a query they are ranked by relevance to it, so a hub pages in a useful order.
        Read-only; fetch a memory's text with read_memory(memory_id, via_key_id=key_id).
        """
        body = _body(key_id=key_id, query=query, namespace=namespace, limit=limit, offset=offset)
        return await backend.ask("read_key", body, models.ReadKeyResult)

    @server.tool(title="Read a memory in full", annotations=WRITES)
    async def read_memory(
        memory_id: Id,
        via_key_id: Annotated[
            str | None, Field(max_length=ID_MAX_CHARS, description="the key you came through")
        ] = None,
        namespace: Namespace = None,
    ) -> models.ReadMemoryResult:
        """A memory's full content, source, versions, related ids, validity and linked keys.

        Counts an access and strengthens the via_key_id link (+0.1); it never confirms the
        memory or changes its depth or freshness.
        """
        body = _body(memory_id=memory_id, via_key_id=via_key_id, namespace=namespace)
        return await backend.ask("read_memory", body, models.ReadMemoryResult)

    @server.tool(title="Confirm a memory is still true", annotations=WRITES)
    async def confirm_memory(
        memory_id: Id,
        evidence: Annotated[
            models.Evidence,
            Field(description="an explicit current user assertion, a source, or observation"),
        ],
        ctx: Context[None, Any],
        namespace: Namespace = None,
        source: Source = None,
    ) -> models.ConfirmResult:
        """Record that a memory is still true now: depth +0.05, freshness restarts.

        Only on explicit evidence, never because a read succeeded. Idempotent per
        (agent, session, turn).
        """
        body = _body(
            memory_id=memory_id,
            evidence=evidence,
            namespace=namespace,
            source=provenance.stamp("confirm_memory", source, _host_turn(ctx)),
        )
        return await backend.ask("confirm_memory", body, models.ConfirmResult)

    @server.tool(title="Save a durable fact", annotations=WRITES)
    async def remember(
        content: Content,
        keys: Keys,
        ctx: Context[None, Any],
        key_types: KeyTypes = None,
        namespace: Namespace = None,
        ttl_seconds: Ttl = None,
        decay_profile: Profile = None,
        related_to: Related = None,
        source: Source = None,
    ) -> models.RememberResult:
        """Save a durable fact under 3-6 diverse keys.

        An exact duplicate supersedes the old copy (deduplicated; conflict when they share a
        key) and keeps its keys too. hints: near_keys (new keys close to existing ones),
        phrase_keys (split them), single_language (add keys in the store's other languages).
        """
        body = _body(
            content=content,
            keys=keys,
            key_types=key_types,
            namespace=namespace,
            ttl_seconds=ttl_seconds,
            decay_profile=decay_profile,
            related_to=related_to,
            source=provenance.stamp("remember", source, _host_turn(ctx)),
        )
        return await backend.ask("remember", body, models.RememberResult)

    @server.tool(title="Correct a fact that changed", annotations=WRITES)
    async def correct(
        memory_id: Id,
        content: Content,
        ctx: Context[None, Any],
        keys: Annotated[
            list[Key] | None,
            Field(min_length=1, max_length=KEYS_PER_MEMORY_MAX, description="new keys"),
        ] = None,
        key_types: KeyTypes = None,
        ttl_seconds: Ttl = None,
        decay_profile: Profile = None,
        related_to: Related = None,
        namespace: Namespace = None,
    ) -> models.CorrectResult:
        """Replace a fact that changed: a new version supersedes the old one (kept in history).

        Omitted keys, TTL, decay profile and related_to are inherited from the old version;
        of the keys, those that still fit the new text (inherited_keys, dropped_keys).
        """
        body = _body(
            memory_id=memory_id,
            content=content,
            keys=keys,
            key_types=key_types,
            ttl_seconds=ttl_seconds,
            decay_profile=decay_profile,
            related_to=related_to,
            namespace=namespace,
            source=provenance.stamp("correct", None, _host_turn(ctx)),
        )
        return await backend.ask("correct", body, models.CorrectResult)

    @server.tool(title="Weaken a key that misled", annotations=WRITES)
    async def dismiss(
        memory_id: Id, key_id: KeyId, namespace: Namespace = None
    ) -> models.DismissResult:
        """This key led to an irrelevant memory: weaken that one link (-0.3, floored at 0.1)."""
        body = _body(memory_id=memory_id, key_id=key_id, namespace=namespace)
        return await backend.ask("dismiss", body, models.DismissResult)

    @server.tool(title="Delete a memory for good", annotations=DESTRUCTIVE)
    async def forget(memory_id: Id, namespace: Namespace = None) -> models.ForgetResult:
        """Delete a memory for good, with the older versions it superseded and orphan keys."""
        body = _body(memory_id=memory_id, namespace=namespace)
        return await backend.ask("forget", body, models.ForgetResult)

    @server.tool(title="Save several facts at once", annotations=WRITES)
    async def remember_batch(
        items: Annotated[
            list[RememberItem],
            Field(
                min_length=1,
                max_length=BATCH_MAX_ITEMS,
                description="the facts, each with remember's parameters; one bad item rejects all",
            ),
        ],
        ctx: Context[None, Any],
    ) -> models.BatchResult:
        """Save several facts at once (all or none); they share a batch_id.

        saved: the ids in order; duplicates: items that superseded an exact copy; hints as
        remember's, each once for the batch (single_language names its items).
        """
        turn = _host_turn(ctx)
        body = {
            "items": [
                _body(
                    **item.model_dump(exclude_none=True, exclude={"source"}),
                    source=provenance.stamp("remember_batch", item.source, turn),
                )
                for item in items
            ]
        }
        reply = await backend.ask(
            "remember_batch", body, models.BatchReply, timeout_ms=BATCH_TIMEOUT_MS
        )
        return models.BatchResult.folded(reply)

    @server.tool(title="A memory's versions", annotations=READ_ONLY)
    async def history(memory_id: Id, namespace: Namespace = None) -> models.HistoryResult:
        """Every version of a memory's correction chain, oldest first, and the current head."""
        body = _body(memory_id=memory_id, namespace=namespace)
        return await backend.ask("history", body, models.HistoryResult)

    @server.prompt(name="memory_system_prompt")
    def system_prompt() -> str:
        """The recall/remember protocol to add to the agent's persistent instructions."""
        return memory_system_prompt(hook=hook)

    for tool in server._tool_manager.list_tools():
        if tool.fn_metadata.output_schema is not None:  # read live by the listing
            tool.fn_metadata.output_schema = self_contained(tool.fn_metadata.output_schema)
    return server
