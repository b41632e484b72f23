"""The structured outputs of keymem's MCP tools: one pydantic model per reply shape.

The SDK turns each return type into the tool's ``outputSchema`` and checks what we send
against it, so these models are the published contract an agent codes against (documented in
docs/TOOLS.md). They mirror the memory service's replies (docs/GRAPH.md) and drop what only
keymem's internals use (the change-feed ``seq``). Unknown fields in a reply are ignored, so the
graph can grow a field without breaking agents; a missing required one is a clear tool error.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

ValidityStatus = Literal["fresh", "aging", "stale"]
DecayProfile = Literal["transient", "standard", "stable", "permanent"]
Evidence = Literal["user", "authoritative_source", "observation"]
KeyType = Literal["concept", "name", "proper_noun"]


class Validity(BaseModel):
    """How far to trust a memory now; decays from its last confirmation."""

    freshness: float = Field(description="2^(-age_days / half_life) of its decay profile, 0..1")
    status: ValidityStatus = Field(
        description="fresh >= 0.5, aging >= 0.125, stale below: qualify aging, never assert stale"
    )
    age_days: float
    last_confirmed_at: float | None = Field(description="unix seconds")
    confirmation_count: int
    decay_profile: DecayProfile
    verification_recommended: bool
    verification_required: bool


class KeyRef(BaseModel):
    key_id: str
    concept: str


class KeyCluster(BaseModel):
    """A key that matched a recall query, with the keys that lead to the same memories."""

    key_id: str
    concept: str
    aliases: list[str]
    key_type: KeyType
    namespace: str = Field(description="pass it to read_key with this key_id")
    score: float = Field(description="1.0 for a literal name, else key cosine or content relevance")
    match_type: str = Field(description="concept | alias | semantic | content")
    memory_count: int
    is_hub: bool
    specificity: float = Field(description="1 / memory_count")
    merged_keys: list[KeyRef] = Field(
        default_factory=list,
        description="other matched keys that lead to exactly these memories (one cluster)",
    )


class ConnectedKey(KeyRef):
    relevance: float | None = Field(
        default=None, description="cosine between the query and this key (None without a vector)"
    )
    link_weight: float = Field(description="the link's weight, 0.1..3.0")


class Preview(BaseModel):
    """The one memory recall shows without being asked: the best under the strongest key."""

    id: str
    content: str
    truncated: bool = Field(description="content was cut to max_chars")
    content_chars: int = Field(description="the memory's full length in characters")
    evidence: Literal["passive_preview"]
    reinforced: bool = Field(description="always false: a preview changes nothing")
    namespace: str
    depth: float
    created_at: float
    validity: Validity
    content_relevance: float | None = Field(description="reranked relevance to query/context")
    matched_key: KeyRef
    connected_keys: list[ConnectedKey] = Field(description="where read_key can go next")


class NamespaceCounts(BaseModel):
    memories: int
    versions: int
    keys: int
    links: int


class RecallExplain(BaseModel):
    namespaces: dict[str, NamespaceCounts]
    empty_namespace: bool
    degraded: list[str] = Field(description="services that did not answer (recall went on)")


class RecallResult(BaseModel):
    status: Literal["found", "no_match"]
    query: str
    namespace: str
    namespaces: list[str] | None = Field(
        default=None, description="every namespace searched (the project's and default)"
    )
    keys: list[KeyCluster]
    memories: list[Preview] = Field(description="at most one passive preview")
    nearest_keys: list[KeyCluster] = Field(default_factory=list, description="on a miss only")
    note: str | None = None
    explain: RecallExplain | None = None


class KeyView(BaseModel):
    key_id: str
    concept: str
    aliases: list[str]
    learned_aliases: list[str]
    key_type: KeyType
    namespace: str
    memory_count: int
    is_hub: bool
    specificity: float
    idf: float


class BrowseResult(BaseModel):
    status: Literal["ok", "empty_namespace"]
    namespace: str
    memory_count: int
    key_count: int
    keys: list[KeyView] = Field(description="hubs first, then by memory count")
    next_offset: int | None


class MemoryHandle(BaseModel):
    """A memory under a key, not yet read: read_memory fetches its content."""

    memory_id: str
    evidence: Literal["unread"]
    depth: float
    created_at: float
    namespace: str
    validity: Validity
    link_weight: float
    content_relevance: float | None
    score_kind: Literal["within_key_rank", "link_rank"]
    score: float


class ReadKeyResult(BaseModel):
    key: KeyView
    memories: list[MemoryHandle]
    total: int
    next_offset: int | None


class LinkedKey(KeyView):
    link_weight: float
    auto: bool
    traversed_from: bool = False


class MemoryView(BaseModel):
    id: str
    content: str
    namespace: str
    depth: float
    access_count: int
    last_accessed: float | None
    created_at: float
    source: dict[str, Any] | None = Field(description="provenance: host_agent, host_session, ...")
    expires_at: float | None
    supersedes: str | None
    superseded_by: str | None
    active: bool
    related_to: list[str]
    contradicts: list[str]
    near_duplicates: list[str] = Field(
        default=[], description="active memories a sleep pass found nearly the same as this one"
    )
    last_confirmation_evidence: str | None
    validity: Validity
    keys: list[LinkedKey]


class ReadMemoryResult(BaseModel):
    evidence: Literal["read"]
    memory: MemoryView
    via_key_id: str | None
    learned_alias: str | None = None


class ConfirmResult(BaseModel):
    memory_id: str
    confirmed: bool
    duplicate: bool = Field(description="this (agent, session, turn) had already confirmed it")
    depth: float | None = None
    validity: Validity


class NearKey(BaseModel):
    your_key: str
    existing_concept: str
    key_id: str
    similarity: float


class PhraseKey(BaseModel):
    your_key: str
    split_into: list[str] = Field(description="its words: save these as separate keys")


class SingleLanguage(BaseModel):
    script: str = Field(description="the writing system every key of this memory is in")
    store_scripts: list[str] = Field(description="the writing systems of this namespace's keys")
    note: str


class Hints(BaseModel):
    near_keys: list[NearKey] = Field(
        default_factory=list, description="new keys close to existing ones: consider reuse"
    )
    phrase_keys: list[PhraseKey] = Field(
        default_factory=list, description="keys of 3+ words: split them into atomic keys"
    )
    single_language: SingleLanguage | None = Field(
        default=None, description="all keys in one language while the store has several"
    )


class RememberResult(BaseModel):
    saved: str = Field(description="the new memory's id")
    superseded: str | None = None
    deduplicated: bool = False
    conflict: bool = False
    hints: Hints | None = None


class BatchReply(BaseModel):
    """The memory service's ``remember_batch`` reply: one ``RememberResult`` per item."""

    batch_id: str
    results: list[RememberResult]


class Duplicate(BaseModel):
    item: int = Field(description="the item's position in items")
    superseded: str = Field(description="the id of the exact copy it replaced (deduplicated)")
    conflict: bool = Field(description="the two shared a key")


class SingleLanguageItems(SingleLanguage):
    items: list[int] = Field(description="the positions of the items keyed only in this script")


class BatchHints(BaseModel):
    near_keys: list[NearKey] = Field(
        default_factory=list, description="new keys close to existing ones: consider reuse"
    )
    phrase_keys: dict[str, list[str]] = Field(
        default_factory=dict,
        description="each key of 3+ words and its words: save these as separate keys",
    )
    single_language: list[SingleLanguageItems] = Field(
        default_factory=list, description="items keyed in one language while the store has several"
    )


# Each fact of a batch once: the per-item form (remember's output per item) repeated a key's
# hint for every memory filed under it, ~1 KB a memory, which an SDK client validates against
# the output schema (~0.44 ms of its CPU a memory, more than any keymem process spent on it).
class BatchResult(BaseModel):
    """The ids in order, the items that replaced a copy, and each distinct hint once."""

    batch_id: str
    saved: list[str] = Field(description="the new memories' ids, one per item, in order")
    duplicates: list[Duplicate] = Field(
        default_factory=list, description="the items that superseded an exact copy"
    )
    hints: BatchHints | None = Field(
        default=None, description="as remember's, each distinct hint once for the whole batch"
    )

    @classmethod
    def folded(cls, reply: BatchReply) -> BatchResult:
        """``reply``'s per-item results folded into one: ids in order, the duplicates, and
        every distinct hint once (a phrase or near key used by many items is one entry)."""
        near: dict[tuple[str, str], NearKey] = {}
        phrases: dict[str, list[str]] = {}
        scripts: dict[tuple[str, ...], SingleLanguageItems] = {}
        duplicates = []
        for position, result in enumerate(reply.results):
            if result.superseded is not None:
                duplicates.append(
                    Duplicate(item=position, superseded=result.superseded, conflict=result.conflict)
                )
            if result.hints is None:
                continue
            for hint in result.hints.near_keys:
                near.setdefault((hint.your_key, hint.key_id), hint)
            for phrase in result.hints.phrase_keys:
                phrases.setdefault(phrase.your_key, phrase.split_into)
            language = result.hints.single_language
            if language is not None:
                shape = (language.script, *language.store_scripts)
                scripts.setdefault(
                    shape, SingleLanguageItems(**language.model_dump(), items=[])
                ).items.append(position)
        hints = BatchHints(
            near_keys=list(near.values()),
            phrase_keys=phrases,
            single_language=list(scripts.values()),
        )
        return cls(
            batch_id=reply.batch_id,
            saved=[result.saved for result in reply.results],
            duplicates=duplicates,
            hints=hints if near or phrases or scripts else None,
        )


class CorrectResult(BaseModel):
    new_id: str
    superseded: str
    inherited_keys: list[str] | None = Field(
        default=None, description="without new keys: the old keys reused (they fit the new text)"
    )
    dropped_keys: list[str] | None = Field(
        default=None, description="without new keys: old keys left off (the new text moved away)"
    )
    note: str | None = None


class DismissResult(BaseModel):
    memory_id: str
    key_id: str
    concept: str
    previous_link_weight: float
    link_weight: float
    floored: bool
    alias_candidate_cleared: str | None = None


class ForgetResult(BaseModel):
    deleted: list[str] = Field(description="the memory and the older versions it superseded")


class Version(BaseModel):
    id: str
    content: str
    created_at: float
    supersedes: str | None
    superseded_by: str | None
    active: bool
    depth: float
    validity: Validity


class HistoryResult(BaseModel):
    memory_id: str
    current: str = Field(description="the id of the active head of the chain")
    versions: list[Version] = Field(description="oldest first")
