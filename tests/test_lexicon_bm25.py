"""The lexicon's BM25 index against the reference, rank_bm25.BM25Okapi, and its term cache.

Both sides score the same tokenized corpus, so these tests check the index's arithmetic and
bookkeeping (incremental adds, corrections, deletes, compaction, cache round trips), not the
tokenizer.
"""

from __future__ import annotations

import hashlib
import json
import random
import struct
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from rank_bm25 import BM25Okapi

from keymem.services.lexicon import cache, index
from keymem.services.lexicon.bulk import BulkBuilder
from keymem.services.lexicon.index import LexiconIndex, NamespaceIndex
from keymem.services.lexicon.sync import text_digest
from keymem.services.lexicon.tokenizer import Tokenizer, shared_tokenizer
from tests.lexicon_support import write_format2_cache

TOLERANCE = 1e-6
SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# A small corpus of our own: Korean with inflection, English, Japanese, versions, repeats.
FIXTURE_DOCS = [
    "어제 부산에서 회의를 했다",
    "부산 출장 일정은 다음 주 월요일이다",
    "회의록은 팀 위키에 올렸다",
    "사용자는 딸기를 좋아한다",
    "딸기 케이크를 주문했다. 딸기가 신선했다",
    "keymem은 Python 3.11.2에서 돌아간다",
    "Python 3.12.1 업그레이드는 다음 분기에 한다",
    "DuckDB 2.0.1 keeps the graph on disk",
    "The lexicon keeps a BM25 inverted index in memory",
    "BM25 scores depend on document length and term frequency",
    "東京都に住んでいます",
    "東京タワーに行きました",
    "京都の寺を見た",
    "서울에서 東京까지 비행기로 두 시간 걸렸다",
    "commit a1b2c3d4e5 fixed issue #123 in src/keymem/lexicon.py",
    "issue #124 is about the router",
    "",
    "회의 회의 회의 회의",
    "the the the the the",
    "긴 문서: " + "부산 서울 대구 광주 대전 울산 " * 20,
]
FIXTURE_QUERIES = [
    "부산",
    "회의",
    "부산에서 회의",
    "딸기",
    "python 3.11.2",
    "3.11.2",
    "東京",
    "東京都",
    "bm25 index",
    "#123",
    "the",
    "없는단어",
    "회의 회의",
]


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    return shared_tokenizer()


def assert_matches_reference(
    space: NamespaceIndex, ids: Sequence[str], corpus: Sequence[list[str]], query: list[str]
) -> None:
    """Every document's score equals rank-bm25's; documents we do not return score 0 there."""
    reference = dict(zip(ids, BM25Okapi(list(corpus)).get_scores(query).tolist(), strict=True))
    ours = dict(space.top(Counter(query), len(ids)))
    for doc_id in ids:
        if doc_id in ours:
            assert ours[doc_id] == pytest.approx(reference[doc_id], abs=TOLERANCE), doc_id
        else:
            assert reference[doc_id] == 0.0, doc_id
    ranked = [doc_id for doc_id, _ in space.top(Counter(query), 5)]
    best = sorted(ours, key=lambda d: (-ours[d], d))[:5]
    assert ranked == best


def build_space(corpus: Sequence[list[str]]) -> tuple[NamespaceIndex, list[str]]:
    space = NamespaceIndex()
    ids = [f"m{i:05d}" for i in range(len(corpus))]
    for doc_id, tokens in zip(ids, corpus, strict=True):
        space.upsert(doc_id, Counter(tokens))
    return space, ids


def test_fixture_scores_equal_rank_bm25(tokenizer: Tokenizer) -> None:
    corpus = [tokenizer.tokenize(text) for text in FIXTURE_DOCS]
    space, ids = build_space(corpus)
    for query in FIXTURE_QUERIES:
        assert_matches_reference(space, ids, corpus, tokenizer.tokenize(query))
    # the inflected memory is found by its stems
    for query in ("부산", "회의"):
        assert ids[0] in dict(space.top(Counter(tokenizer.tokenize(query)), 10))


def _load_real(name: str, limit: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    path = SHARED_DATA / name
    if not path.exists():
        pytest.skip(f"{path} is not present")
    data = json.loads(path.read_text(encoding="utf-8"))
    return data["memories"][:limit], data["queries"][:25]


@pytest.mark.parametrize(
    ("name", "limit"),
    [("koblex_ko.dev.json", 400), ("hotpot_pooled.dev.json", 800), ("locomo.dev.json", 600)],
)
def test_real_text_scores_equal_rank_bm25(tokenizer: Tokenizer, name: str, limit: int) -> None:
    memories, queries = _load_real(name, limit)
    corpus = [
        tokenizer.tokenize(f"{m.get('title') or ''}\n{m['content']}".strip()) for m in memories
    ]
    space, ids = build_space(corpus)
    for query in queries:
        assert_matches_reference(space, ids, corpus, tokenizer.tokenize(query["query"]))


@pytest.mark.parametrize("seed", range(6))
def test_incremental_updates_equal_a_fresh_reference(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Random adds, corrections and deletes (with frequent compaction) never drift."""
    monkeypatch.setattr(index, "MIN_DEAD_SLOTS_TO_COMPACT", 8)
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(30)]
    space = NamespaceIndex()
    docs: dict[str, list[str]] = {}
    for step in range(400):
        if rng.random() < 0.65 or not docs:
            doc_id = f"d{rng.randrange(40)}"
            docs[doc_id] = [rng.choice(vocabulary[: rng.randint(1, 30)]) for _ in range(8)]
            space.upsert(doc_id, Counter(docs[doc_id]))
        else:
            doc_id = rng.choice(sorted(docs))
            del docs[doc_id]
            assert space.remove(doc_id)
        if step % 50 == 49:
            ids = sorted(docs)
            for _ in range(4):
                query = [rng.choice(vocabulary) for _ in range(rng.randint(1, 4))]
                assert_matches_reference(space, ids, [docs[d] for d in ids], query)
    assert len(space) == len(docs)
    assert space.slot_count < 3 * len(docs) + 2 * index.MIN_DEAD_SLOTS_TO_COMPACT


def assert_pruned_top_n_is_full_top_n(
    monkeypatch: pytest.MonkeyPatch,
    space: NamespaceIndex,
    queries: list[Counter[str]],
    top_ns: tuple[int, ...],
) -> None:
    """Each query's top n equals the full ranking's, and the pruned path really ran."""
    finishes: list[int] = []
    finish = NamespaceIndex._finish

    def counted(*args: Any) -> Any:
        finishes.append(1)
        return finish(*args)

    monkeypatch.setattr(NamespaceIndex, "_finish", staticmethod(counted))
    for query in queries:
        slots, scores = space.scores(query)
        full = sorted(
            ((space.id_at(s), sc) for s, sc in zip(slots.tolist(), scores.tolist(), strict=True)),
            key=lambda hit: (-hit[1], hit[0]),
        )
        exact = dict(full)
        for top_n in top_ns:
            got = space.top(query, top_n)
            assert len(got) == min(top_n, len(full))
            # the same score at every rank, and each returned document's true score; ids may
            # differ only between documents whose sums differ in the last bit (summation order)
            assert [s for _, s in got] == pytest.approx([s for _, s in full[:top_n]], abs=1e-9)
            assert all(exact[doc_id] == pytest.approx(score, abs=1e-9) for doc_id, score in got)
    assert finishes  # the pruned path ran


@pytest.mark.parametrize("seed", range(4))
def test_pruned_top_n_equals_full_scoring(monkeypatch: pytest.MonkeyPatch, seed: int) -> None:
    """Max-score pruning (forced on for every term) returns exactly the full ranking."""
    monkeypatch.setattr(index, "PRUNE_MIN_POSTINGS", 1)
    rng = random.Random(seed)
    vocabulary = [f"w{i}" for i in range(200)]
    weights = [1 / (i + 1) for i in range(len(vocabulary))]  # Zipf: long and short postings
    space = NamespaceIndex()
    for i in range(3000):
        space.upsert(f"d{i:05d}", Counter(rng.choices(vocabulary, weights, k=rng.randint(1, 20))))
    for i in range(0, 3000, 7):  # deletes and corrections leave dead entries behind
        space.remove(f"d{i:05d}")
        space.upsert(f"d{i + 1:05d}", Counter(rng.choices(vocabulary, weights, k=5)))
    queries = [Counter(rng.choices(vocabulary, weights, k=rng.randint(1, 6))) for _ in range(60)]
    assert_pruned_top_n_is_full_top_n(monkeypatch, space, queries, (1, 5, 10))


@pytest.mark.parametrize("seed", range(3))
def test_pruned_top_n_equals_full_scoring_with_common_terms(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    """Queries of a few rare words among words nearly every document holds (a question's "the",
    "of", "is"): the pruned top n, at the default thresholds, is the full ranking's top n."""
    rng = random.Random(seed)
    common = ["the", "of", "is", "a", "and"]  # in every document, or most of them
    rare = [f"r{i}" for i in range(400)]
    weights = [1 / (i + 1) for i in range(len(rare))]
    space = NamespaceIndex()
    for i in range(12_000):
        words = ["the"] * rng.randint(1, 3) + [w for w in common[1:] if rng.random() < 0.8]
        words += rng.choices(rare, weights, k=rng.randint(1, 8))
        space.upsert(f"d{i:05d}", Counter(words))
    for i in range(0, 12_000, 11):  # dead entries in the long lists
        space.remove(f"d{i:05d}")
    queries = [
        Counter(common[: rng.randint(1, 5)] + rng.choices(rare, k=rng.randint(0, 4)))
        for _ in range(40)
    ]
    assert_pruned_top_n_is_full_top_n(monkeypatch, space, queries, (1, 10, 50))


def test_tiny_namespaces_follow_the_reference_quirks() -> None:
    """With one or two documents rank-bm25's idf is <= 0; we match it and still return hits."""
    for corpus in ([["부산", "회의"]], [["부산", "회의"], ["부산"]], [["a"], ["b"], ["a", "b"]]):
        space, ids = build_space(corpus)
        assert_matches_reference(space, ids, corpus, ["부산"])
        assert_matches_reference(space, ids, corpus, ["a", "회의"])
        assert space.top(Counter(corpus[0]), 3)  # the containing documents are hits


def test_namespaces_do_not_share_statistics() -> None:
    lexicon = LexiconIndex()
    lexicon.upsert("a1", "alpha", text_digest("x"), Counter(["shared", "alpha"]))
    lexicon.upsert("a2", "alpha", text_digest("x"), Counter(["other"]))
    lexicon.upsert("a3", "alpha", text_digest("x"), Counter(["more"]))
    alone = dict(lexicon.top("alpha", Counter(["shared"]), 5))
    for i in range(50):
        lexicon.upsert(f"b{i}", "beta", text_digest("x"), Counter(["shared"]))
    assert dict(lexicon.top("alpha", Counter(["shared"]), 5)) == alone
    assert lexicon.top("gamma", Counter(["shared"]), 5) == []
    assert {d for d, _ in lexicon.top("beta", Counter(["shared"]), 100)} == {
        f"b{i}" for i in range(50)
    }


def test_moving_a_document_between_namespaces() -> None:
    lexicon = LexiconIndex()
    lexicon.upsert("m", "one", text_digest("1"), Counter(["term"]))
    lexicon.upsert("m", "two", text_digest("2"), Counter(["term"]))
    assert lexicon.top("one", Counter(["term"]), 5) == []
    assert [d for d, _ in lexicon.top("two", Counter(["term"]), 5)] == ["m"]
    assert "one" not in lexicon.namespaces


def _filled(tokenizer: Tokenizer) -> LexiconIndex:
    lexicon = LexiconIndex()
    for i, text in enumerate(FIXTURE_DOCS):
        namespace = "even" if i % 2 == 0 else "odd"
        lexicon.upsert(f"m{i}", namespace, text_digest(text), Counter(tokenizer.tokenize(text)))
    lexicon.remove("m3")
    lexicon.upsert("m4", "even", text_digest("new"), Counter(tokenizer.tokenize("딸기 대신 포도")))
    return lexicon


def test_cache_round_trip_preserves_every_score(tokenizer: Tokenizer, tmp_path: Path) -> None:
    original = _filled(tokenizer)
    path = tmp_path / "lexicon" / cache.CACHE_FILE
    cache.save(path, original, tokenizer="t1", epoch="e1", seq=42)
    restored = LexiconIndex()
    info = cache.load(path, restored, tokenizer="t1")
    assert (info.epoch, info.seq, info.documents) == ("e1", 42, len(original))
    assert sorted(restored.ids()) == sorted(original.ids())
    assert {d: restored.entry(d) for d in original.ids()} == {
        d: original.entry(d) for d in original.ids()
    }
    for namespace in ("even", "odd"):
        for query in FIXTURE_QUERIES:
            terms = Counter(tokenizer.tokenize(query))
            before, after = original.top(namespace, terms, 50), restored.top(namespace, terms, 50)
            assert [d for d, _ in after] == [d for d, _ in before]
            assert [s for _, s in after] == pytest.approx([s for _, s in before], abs=TOLERANCE)


@pytest.mark.parametrize(
    "damage", ["truncate", "flip", "garbage", "empty", "other_tokenizer", "missing"]
)
def test_unusable_cache_is_rejected_not_crashed(
    tokenizer: Tokenizer, tmp_path: Path, damage: str
) -> None:
    path = tmp_path / cache.CACHE_FILE
    cache.save(path, _filled(tokenizer), tokenizer="t1", epoch="e1", seq=1)
    raw = path.read_bytes()
    expected_tokenizer = "t1"
    if damage == "truncate":
        path.write_bytes(raw[: len(raw) // 2])
    elif damage == "flip":
        path.write_bytes(raw[:-10] + bytes([raw[-10] ^ 0xFF]) + raw[-9:])
    elif damage == "garbage":
        path.write_bytes(b"not a cache at all" * 100)
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "other_tokenizer":
        expected_tokenizer = "t2"
    else:
        path.unlink()
    restored = LexiconIndex()
    with pytest.raises(cache.CacheInvalid):
        cache.load(path, restored, tokenizer=expected_tokenizer)
    assert len(restored) == 0


def _rewrite(path: Path, change: Any) -> None:
    """Apply ``change(header, data)`` to the cache's header and section bytes and store it
    with a valid checksum: a file a buggy writer could have made, which the checksum alone
    cannot catch."""
    raw = path.read_bytes()
    start = cache.HEAD_BYTES + 8
    (length,) = struct.unpack_from("<Q", raw, cache.HEAD_BYTES)
    header = msgpack.unpackb(raw[start : start + length], raw=False)
    data = bytearray(raw[_aligned(start + length) :])
    change(header, data)
    packed = msgpack.packb(header, use_bin_type=True)
    lead = struct.pack("<Q", len(packed)) + packed
    body = lead + bytes(_aligned(cache.HEAD_BYTES + len(lead)) - cache.HEAD_BYTES - len(lead))
    body += bytes(data)
    path.write_bytes(cache.MAGIC + hashlib.sha256(body).digest() + body)


def _aligned(offset: int) -> int:
    return -(-offset // cache.ALIGN_BYTES) * cache.ALIGN_BYTES


def _reverse_term_rows(header: dict[str, Any], data: bytearray) -> None:
    offset, dtype, count = header["namespaces"][0]["term_rows"]
    size = np.dtype(dtype).itemsize * count
    data[offset : offset + size] = np.frombuffer(data, dtype, count, offset)[::-1].tobytes()


def _drop_a_posting(header: dict[str, Any], data: bytearray) -> None:
    for key in ("term_rows", "term_tfs"):
        header["namespaces"][0][key][2] -= 1


def _swap_two_ids(header: dict[str, Any], data: bytearray) -> None:
    offset, dtype, _ = header["documents"]["ids"]
    width = np.dtype(dtype).itemsize
    first, second = data[offset : offset + width], data[offset + width : offset + 2 * width]
    data[offset : offset + 2 * width] = second + first


def _unknown_namespace_number(header: dict[str, Any], data: bytearray) -> None:
    offset, _, _ = header["documents"]["spaces"]
    data[offset] = len(header["names"])


def _older_format(header: dict[str, Any], data: bytearray) -> None:
    header["format"] = cache.CACHE_FORMAT - 1


@pytest.mark.parametrize(
    "change",
    [_reverse_term_rows, _drop_a_posting, _swap_two_ids, _unknown_namespace_number, _older_format],
)
def test_cache_that_disagrees_with_itself_is_rejected(
    tokenizer: Tokenizer, tmp_path: Path, change: Any
) -> None:
    path = tmp_path / cache.CACHE_FILE
    cache.save(path, _filled(tokenizer), tokenizer="t1", epoch="e1", seq=1)
    _rewrite(path, change)
    restored = LexiconIndex()
    with pytest.raises(cache.CacheInvalid):
        cache.load(path, restored, tokenizer="t1")
    assert len(restored) == 0


def test_cache_of_the_previous_format_is_not_read(tmp_path: Path) -> None:
    """A file the format-2 release wrote (intact, same tokenizer) is refused, not misread:
    the service then rebuilds from the graph."""
    path = tmp_path / cache.CACHE_FILE
    write_format2_cache(path, {"m1": ["term"], "m2": ["term", "other"]}, tokenizer="t1")
    restored = LexiconIndex()
    with pytest.raises(cache.CacheInvalid, match="format"):
        cache.load(path, restored, tokenizer="t1")
    assert len(restored) == 0


def test_index_loaded_from_cache_takes_writes_like_the_original(
    tokenizer: Tokenizer, tmp_path: Path
) -> None:
    """Postings and bags read from the cache's arrays on first use; writes after a restart
    (new, replaced and removed documents, new terms) must score as in the index that never
    restarted."""
    original = _filled(tokenizer)
    path = tmp_path / cache.CACHE_FILE
    cache.save(path, original, tokenizer="t1", epoch="e1", seq=1)
    restored = LexiconIndex()
    cache.load(path, restored, tokenizer="t1")
    for lexicon in (original, restored):
        lexicon.upsert(
            "m0", "even", text_digest("r"), Counter(tokenizer.tokenize("서울 딸기 축제 keymem"))
        )
        lexicon.remove("m5")
        lexicon.upsert("n1", "odd", text_digest("n"), Counter(tokenizer.tokenize(FIXTURE_DOCS[2])))
    for namespace in ("even", "odd"):
        for query in [*FIXTURE_QUERIES, "서울 축제 keymem"]:
            terms = Counter(tokenizer.tokenize(query))
            before, after = original.top(namespace, terms, 50), restored.top(namespace, terms, 50)
            assert [d for d, _ in after] == [d for d, _ in before]
            assert [s for _, s in after] == pytest.approx([s for _, s in before], abs=TOLERANCE)
            ids = list(original.ids(namespace))
            assert restored.coverage(namespace, terms, ids) == original.coverage(
                namespace, terms, ids
            )
    assert {d: restored.namespaces["even"].terms_of(d) for d in restored.ids("even")} == {
        d: original.namespaces["even"].terms_of(d) for d in original.ids("even")
    }


def test_save_after_writes_keeps_counts_wider_than_the_cached_ones(tmp_path: Path) -> None:
    """A cache stores counts as u8 when they fit; a later write with a count past 255 and
    new terms, saved and loaded again, must still score as BM25 over the live documents."""
    rng = random.Random(7)
    words = [f"w{i}" for i in range(40)]
    corpus = {f"m{i:03d}": [rng.choice(words) for _ in range(rng.randint(1, 6))] for i in range(60)}
    lexicon = LexiconIndex()
    for doc_id, tokens in corpus.items():
        lexicon.upsert(doc_id, "ns", text_digest(" ".join(tokens)), Counter(tokens))
    first = tmp_path / "first.cache"
    cache.save(first, lexicon, tokenizer="t1", epoch="e1", seq=1)
    restored = LexiconIndex()
    cache.load(first, restored, tokenizer="t1")
    corpus["m001"] = ["w1"] * 300 + ["fresh"]
    corpus["n999"] = ["w2", "w2", "novel"]
    del corpus["m002"]
    restored.upsert("m001", "ns", text_digest("long"), Counter(corpus["m001"]))
    restored.upsert("n999", "ns", text_digest("new"), Counter(corpus["n999"]))
    restored.remove("m002")
    second = tmp_path / "second.cache"
    cache.save(second, restored, tokenizer="t1", epoch="e1", seq=2)
    again = LexiconIndex()
    cache.load(second, again, tokenizer="t1")
    ids = sorted(corpus)
    for query in (["w1"], ["w2", "novel"], ["fresh", "w1", "w3"]):
        assert_matches_reference(again.namespaces["ns"], ids, [corpus[d] for d in ids], query)


def test_bulk_snapshot_equals_indexing_per_document() -> None:
    """Documents gathered by the bulk builder (in any order) load into the same index as
    upserting them one by one; a repeated id is refused and leaves the index empty."""
    rng = random.Random(3)
    words = [f"w{i}" for i in range(300)]
    docs = {
        f"d{i:04d}": (f"ns{i % 2}", Counter(rng.choices(words, k=rng.randint(1, 12))))
        for i in range(800)
    }
    builder, one_by_one = BulkBuilder(), LexiconIndex()
    for doc_id in rng.sample(sorted(docs), len(docs)):
        namespace, counts = docs[doc_id]
        builder.add(doc_id, namespace, text_digest(doc_id), counts)
        one_by_one.upsert(doc_id, namespace, text_digest(doc_id), counts)
    bulk = LexiconIndex()
    builder.install(bulk)
    assert len(bulk) == len(docs) and not bulk.added
    for doc_id, (namespace, counts) in docs.items():
        assert bulk.entry(doc_id) == one_by_one.entry(doc_id)
        assert bulk.namespaces[namespace].terms_of(doc_id) == dict(counts)
    for _ in range(30):
        query = Counter(rng.choices(words, k=3))
        for namespace in ("ns0", "ns1"):
            got, expected = bulk.top(namespace, query, 20), one_by_one.top(namespace, query, 20)
            assert [d for d, _ in got] == [d for d, _ in expected]
            assert [s for _, s in got] == pytest.approx([s for _, s in expected], abs=1e-9)
    repeated = BulkBuilder()
    repeated.add("a", "ns", text_digest("a"), Counter(["x"]))
    repeated.add("a", "ns", text_digest("a"), Counter(["y"]))
    empty = LexiconIndex()
    with pytest.raises(ValueError, match="unique"):
        repeated.install(empty)
    assert len(empty) == 0 and not empty.namespaces


def test_ties_break_by_id_among_loaded_and_added_documents() -> None:
    """Thousands of documents with the same score (one common term, the same length): the top n
    are the smallest ids, whether they came with the bulk load or were written since."""
    builder = BulkBuilder()
    for i in range(0, 6000, 2):
        builder.add(f"d{i:05d}", "ns", text_digest(str(i)), Counter({"common": 1, f"u{i}": 1}))
    lexicon = LexiconIndex()
    builder.install(lexicon)
    for i in (1, 7, 4001):  # written after the load: slots past the loaded ones
        lexicon.upsert(f"d{i:05d}", "ns", text_digest(str(i)), Counter({"common": 1, f"u{i}": 1}))
    lexicon.upsert("d00000", "ns", text_digest("x"), Counter({"common": 2, "u0": 1}))  # best
    for top_n in (1, 3, 10):
        got = [doc_id for doc_id, _ in lexicon.top("ns", Counter(["common"]), top_n)]
        expected = ["d00000", "d00001", "d00002", "d00004", "d00006", "d00007", "d00008"]
        expected += [f"d{i:05d}" for i in range(10, 20, 2)]
        assert got == expected[:top_n]


def test_a_save_after_writes_keeps_each_document_in_its_namespace(tmp_path: Path) -> None:
    """The document table a save writes after writes to a loaded cache: a namespace the
    writes emptied is gone, new ones are numbered in name order with the loaded ones, and
    every document keeps its namespace and digest (the table is renumbered through the few
    names, not a sort of one name per document)."""
    lexicon = LexiconIndex()
    for i in range(30):
        lexicon.upsert(f"m{i:02d}", f"ns{i % 3}", text_digest(str(i)), Counter([f"w{i % 7}"]))
    first = tmp_path / "first.cache"
    cache.save(first, lexicon, tokenizer="t1", epoch="e1", seq=1)
    restored = LexiconIndex()
    cache.load(first, restored, tokenizer="t1")
    for i in range(1, 30, 3):  # ns1 emptied: half its documents removed, half moved to "a"
        if i % 2:
            restored.remove(f"m{i:02d}")
        else:
            restored.upsert(f"m{i:02d}", "a", text_digest("moved"), Counter(["w1"]))
    restored.upsert("n0", "zz", text_digest("n0"), Counter(["w2"]))
    restored.upsert("m00", "ns2", text_digest("m00 moved"), Counter(["w3"]))
    second = tmp_path / "second.cache"
    cache.save(second, restored, tokenizer="t1", epoch="e1", seq=2)
    again = LexiconIndex()
    cache.load(second, again, tokenizer="t1")
    table = cache.snapshot(again, tokenizer="t1", epoch="e1", seq=3).table.to_table()
    assert table.names == ["a", "ns0", "ns2", "zz"]
    placed = {
        doc_id.decode(): (table.names[space], bytes(digest))
        for doc_id, space, digest in zip(
            table.ids.tolist(), table.spaces.tolist(), table.digests.tolist(), strict=True
        )
    }
    assert placed == {doc_id: restored.entry(doc_id) for doc_id in restored.ids()}
    assert {doc_id: again.entry(doc_id) for doc_id in again.ids()} == placed
