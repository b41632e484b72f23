"""Which vector space the key vectors live in, and the staged migration to another one.

The fingerprint (backend + model id) and dimension are recorded with the first vectors. A
router whose embedder reports a different fingerprint must not mix spaces: it re-embeds every
key through ``reembed_begin`` / ``reembed_keys`` / ``reembed_put`` / ``reembed_commit``. Vectors
are staged in memory (bodies are capped at 16 MB, so they arrive in pages) and swapped in one
transaction after a backup; a restart in the middle simply discards the staging.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from keymem.protocol.errors import BadRequest, Conflict, NotFound
from keymem.protocol.fields import body_of, opt_int
from keymem.protocol.limits import PASSAGE_HEAD_CHARS
from keymem.services.graph.keyindex import KeyIndex
from keymem.services.graph.requests import (
    KEYS_PER_BATCH_MAX,
    KeyInput,
    id_list,
    namespace_of,
    opt_str,
    req_str,
)
from keymem.services.graph.state import GraphState
from keymem.store.records import KeyRecord

REEMBED_PAGE_MAX = 5_000
MAX_FINGERPRINT_CHARS = 200


@dataclass
class Staging:
    token: str
    fingerprint: str
    dim: int
    vectors: dict[str, np.ndarray] = field(default_factory=dict)


def recorded(state: GraphState) -> dict[str, Any] | None:
    if state.dim is None and state.fingerprint is None:
        return None
    return {"fingerprint": state.fingerprint, "dim": state.dim}


def _held(state: GraphState, namespace: str, clean: str) -> KeyRecord | None:
    """The key ``namespace`` holds as a concept under exactly the text ``clean`` (stripped,
    case and all): the embedding of this text in the store's space (``fingerprint``)."""
    index = state.indexes.get(namespace)
    key_id = index.exact.get(clean.lower()) if index is not None else None
    key = state.keys.get(key_id) if key_id is not None else None
    return key if key is not None and key.concept == clean else None


def held_keys(state: GraphState, body: dict[str, Any]) -> tuple[list[bool], list[KeyRecord]]:
    """Whether the namespace holds each of ``keys`` as a concept under exactly that text, and
    the keys it holds (``held_vectors``)."""
    keys = body.get("keys")
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise BadRequest("keys must be a list of strings")
    if len(keys) > KEYS_PER_BATCH_MAX:
        raise BadRequest(f"at most {KEYS_PER_BATCH_MAX} keys per lookup, got {len(keys)}")
    namespace = namespace_of(body)
    found = [_held(state, namespace, surface.strip()) for surface in keys]
    return [key is not None for key in found], [key for key in found if key is not None]


def unheld(state: GraphState, writes: list[tuple[str, list[KeyInput]]]) -> list[str]:
    """The texts of keys filed by their text (no vector: ``requests.keys_of``) that their
    namespace does not hold, each once, for ``(namespace, keys)`` of each write."""
    return list(
        dict.fromkeys(
            key.surface
            for namespace, keys in writes
            for key in keys
            if not key.vector.size and _held(state, namespace, key.surface) is None
        )
    )


def held_vectors(state: GraphState, raw: Any) -> dict[str, Any]:
    """The stored vectors of the namespace's keys whose concept is one of ``keys`` exactly.

    A correction's keys need a vector each, but a key the graph already holds resolves by its
    text and its vector is the one stored: the memory service asks here first and embeds only
    the rest, so a store whose vocabulary outgrows the embedder's cache does not pay a model
    call per correction (a remember sends held keys no vector at all: ``unheld``). Only a
    surface equal to a key's concept (case and all) counts: that vector is the embedding of
    exactly this text in the store's space (``fingerprint``).
    """
    body = body_of(raw)
    held, found = held_keys(state, body)
    index = state.indexes.get(namespace_of(body))
    vectors = np.zeros((len(found), state.dim or 0), dtype=np.float32)
    # as ``state.key_vector`` reads each, those only the index holds in one fetch
    unshared = [i for i, key in enumerate(found) if not key.vector.size]
    for i, key in enumerate(found):
        if key.vector.size:
            vectors[i] = key.vector
    if index is not None and unshared:
        vectors[unshared] = index.vectors([found[i].id for i in unshared])
    return {"fingerprint": state.fingerprint, "held": held, "vectors": vectors}


def _target(body: dict[str, Any]) -> tuple[str, int]:
    fingerprint = req_str(body, "fingerprint", MAX_FINGERPRINT_CHARS)
    dim = opt_int(body, "dim", 0, 1, 65_536)
    return fingerprint, dim


def check_write_fingerprint(state: GraphState, body: dict[str, Any]) -> str | None:
    """A write may state the fingerprint its vectors come from; a mismatch is refused."""
    claimed = opt_str(body, "fingerprint", MAX_FINGERPRINT_CHARS)
    if claimed is not None and state.fingerprint is not None and claimed != state.fingerprint:
        raise Conflict(
            f"vectors are from {claimed!r} but the graph stores {state.fingerprint!r}; "
            "re-embed the keys first",
            {"fingerprint_mismatch": True, "recorded": state.fingerprint, "dim": state.dim},
        )
    return claimed


def begin(raw: Any) -> Staging:
    fingerprint, dim = _target(body_of(raw))
    return Staging(token=secrets.token_hex(8), fingerprint=fingerprint, dim=dim)


def keys_page(state: GraphState, raw: Any) -> dict[str, Any]:
    body = body_of(raw)
    after = opt_str(body, "after") or ""
    limit = opt_int(body, "limit", 1_000, 1, REEMBED_PAGE_MAX)
    ids = sorted(k for k in state.keys if k > after)
    page = ids[:limit]
    return {
        "keys": [{"key_id": k, "concept": state.keys[k].concept} for k in page],
        "next": page[-1] if len(ids) > limit else None,
        "total": len(state.keys),
    }


def put(staging: Staging | None, state: GraphState, raw: Any) -> dict[str, Any]:
    body = body_of(raw)
    if staging is None or req_str(body, "token") != staging.token:
        raise NotFound("no re-embedding in progress with that token")
    key_ids = id_list(body, "key_ids", REEMBED_PAGE_MAX)
    vectors = body.get("vectors")
    if (
        not isinstance(vectors, np.ndarray)
        or vectors.shape != (len(key_ids), staging.dim)
        or not np.all(np.isfinite(vectors))
    ):
        raise BadRequest(f"vectors must be float32 of shape ({len(key_ids)}, {staging.dim})")
    norms = np.linalg.norm(vectors, axis=1)
    if np.any(norms == 0):
        raise BadRequest("a vector is all zeros")
    unknown = [k for k in key_ids if k not in state.keys]
    if unknown:
        raise NotFound(f"unknown key ids: {', '.join(unknown[:5])}")
    unit = (vectors / norms[:, None]).astype(np.float32)
    for i, key_id in enumerate(key_ids):
        staging.vectors[key_id] = unit[i]
    return {"staged": len(staging.vectors), "total": len(state.keys)}


def apply(state: GraphState, staging: Staging) -> None:
    """Swap the committed vectors into memory: key records and every namespace's matrix."""
    for key_id, vector in staging.vectors.items():
        state.keys[key_id].vector = vector
    if staging.fingerprint != state.fingerprint:
        state.reset_memory_vectors()
    state.fingerprint, state.dim = staging.fingerprint, staging.dim
    for namespace, index in list(state.indexes.items()):
        keys = [state.keys[key_id] for key_id in index.ids]
        state.indexes[namespace] = KeyIndex.bulk(staging.dim, keys)


def ready_to_commit(staging: Staging | None, state: GraphState, raw: Any) -> Staging:
    body = body_of(raw)
    if staging is None or req_str(body, "token") != staging.token:
        raise NotFound("no re-embedding in progress with that token")
    missing = [k for k in state.keys if k not in staging.vectors]
    if missing:
        raise Conflict(f"{len(missing)} keys have no new vector yet", {"missing": missing[:20]})
    return staging


# -- memory vectors (the dense leg's codes, made in the memory service's idle time) ---------
# Memories one ``vector_backlog`` answer names, and one ``put_memory_vectors`` stores.
VECTOR_BACKLOG_MAX = 64


def vector_backlog(state: GraphState, raw: Any) -> dict[str, Any]:
    """The newest ``limit`` active memories without a vector (their ids and heads, the text
    the vector is made of), and how many are waiting in all: the memory service's idle-time
    pass embeds them (services/memory/warmup.py), ``keymem eval`` waits for ``missing`` 0."""
    limit = opt_int(body_of(raw), "limit", 0, 0, VECTOR_BACKLOG_MAX)
    waiting: list[dict[str, str]] = []
    for memory_id in reversed(state.unvectorised):
        if len(waiting) >= limit:
            break
        waiting.append(
            {"memory_id": memory_id, "head": state.memories[memory_id].content[:PASSAGE_HEAD_CHARS]}
        )
    return {
        "missing": len(state.unvectorised),
        "fingerprint": state.fingerprint,
        "memories": waiting,
    }


def prepare_put_memory_vectors(state: GraphState, raw: Any) -> Callable[[float], dict[str, Any]]:
    """Validate memories' head vectors (``memory_ids``, float32 ``vectors`` [n, dim] from the
    embedder ``fingerprint`` the graph records); the action stores those still waiting."""
    body = body_of(raw)
    memory_ids = id_list(body, "memory_ids", VECTOR_BACKLOG_MAX)
    fingerprint = req_str(body, "fingerprint", MAX_FINGERPRINT_CHARS)
    if state.fingerprint is None or fingerprint != state.fingerprint:
        raise Conflict(
            f"memory vectors are from {fingerprint!r} but the graph stores "
            f"{state.fingerprint!r}; they are not comparable with its queries",
            {"fingerprint_mismatch": True, "recorded": state.fingerprint},
        )
    vectors = body.get("vectors")
    if (
        not isinstance(vectors, np.ndarray)
        or vectors.shape != (len(memory_ids), state.dim)
        or not np.all(np.isfinite(vectors))
    ):
        raise BadRequest(
            f"vectors must be a finite float32 array of shape ({len(memory_ids)}, {state.dim})"
        )

    def action(now: float) -> dict[str, Any]:
        stored = sum(
            state.put_memory_vector(memory_id, vector, fingerprint)
            for memory_id, vector in zip(memory_ids, vectors, strict=True)
        )
        return {"stored": stored, "missing": len(state.unvectorised)}

    return action
