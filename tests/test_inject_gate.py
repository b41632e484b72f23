"""Inject's admission rules, one at a time, on candidates shaped as hybrid search returns them.

The end-to-end behaviour (real services, a real store) is in tests/test_recall.py and
tests/test_hook.py; here each gate's threshold is pinned where a store could not isolate it:
a candidate no key reaches but whose words cover the prompt, a paraphrase sharing no words.
"""

from __future__ import annotations

from typing import Any

from keymem.services.memory.inject import Gate, admit

PROMPT = "when is the acme quarterly invoice due"


def candidate(
    memory_id: str,
    *,
    relevance: float = 0.5,
    connected: bool = True,
    content: str = "the acme quarterly invoice is due on the fifteenth",
) -> dict[str, Any]:
    return {
        "memory_id": memory_id,
        "content": content,
        "rerank_score": relevance,
        "rerank_kind": "embedding_cosine",
        "matched_keys": ["k-invoice"] if connected else [],
        "components": {"key_rank": 1 if connected else None, "literal": False, "hop": 0},
    }


def ids(admitted: list[dict[str, Any]]) -> list[str]:
    return [c["memory_id"] for c in admitted]


def test_coverage_floor_rejects_a_memory_that_shares_too_little_of_the_prompt() -> None:
    pool = [candidate("full"), candidate("thin")]
    kept, rejected = admit(PROMPT, pool, [], {"full": 0.9, "thin": 0.1}, Gate())
    assert ids(kept) == ["full"] and rejected["low_coverage"] == 1


def test_a_strong_paraphrase_needs_no_shared_words() -> None:
    pool = [candidate("paraphrase", relevance=0.7)]
    kept, _ = admit(PROMPT, pool, [], {"paraphrase": 0.0}, Gate())
    assert ids(kept) == ["paraphrase"]
    kept, _ = admit(PROMPT, pool, [], {"paraphrase": 0.0}, Gate(strong_relevance=0.8))
    assert kept == []


def test_words_alone_admit_what_no_key_reaches_and_the_reranker_scores_low() -> None:
    pool = [candidate("session", relevance=0.1, connected=False)]
    kept, _ = admit(PROMPT, pool, [], {"session": 0.8}, Gate())
    assert ids(kept) == ["session"]
    kept, rejected = admit(PROMPT, pool, [], {"session": 0.5}, Gate())
    assert kept == [] and rejected["bm25_only"] == 1


def test_without_the_lexicon_the_coverage_gates_stand_aside() -> None:
    pool = [candidate("connected"), candidate("loose", connected=False)]
    kept, rejected = admit(PROMPT, pool, [], None, Gate())
    assert ids(kept) == ["connected"] and rejected["bm25_only"] == 1


def test_a_named_entity_must_be_whom_the_memory_is_about() -> None:
    keys = [{"key_id": "k-dana", "concept": "Dana", "aliases": [], "key_type": "name"}]
    prompt = "what did Dana say about the acme invoice"
    pool = [
        candidate("dana", content="Dana said the acme invoice is late"),
        candidate("filed", content="the acme invoice is late"),
        candidate("lee", content="Lee said the acme invoice is late"),
    ]
    pool[1]["matched_keys"] = ["k-dana"]  # filed under Dana without naming her
    coverage = {"dana": 0.9, "filed": 0.6, "lee": 0.6}
    kept, rejected = admit(prompt, pool, keys, coverage, Gate())
    assert ids(kept) == ["dana", "filed"] and rejected["other_entity"] == 1
    # Lee's memory covers the prompt better than any about Dana: the premise is elsewhere
    coverage["lee"] = 0.95
    kept, rejected = admit(prompt, pool, keys, coverage, Gate())
    assert kept == [] and rejected["premise_elsewhere"] == 2
    kept, _ = admit(prompt, pool, keys, coverage, Gate(premise=False))
    assert ids(kept) == ["dana", "filed"]
