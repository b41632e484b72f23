"""The inject calibration's trace: what kept each unanswerable prompt silent, next to where each
answerable question's gold went (hand-made observations; the observing itself runs the real
stack in ``python -m benchmarks.inject_calibration``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks.inject_calibration import CACHES, Placement, build_cache, fates, silence
from benchmarks.inject_signals import ENTITIES, ENTITIES_PREMISE, about_named, floored
from keymem.services.evaluation.dataset import Benchmark, Query
from keymem.services.memory.inject import Gate, Observation

MELANIE = {
    "key_id": "k-melanie",
    "concept": "Melanie",
    "aliases": [],
    "key_type": "name",
    "match_type": "concept",
}
CAROLINE = {**MELANIE, "key_id": "k-caroline", "concept": "Caroline"}


def candidate(memory_id: str, content: str, key: str) -> dict[str, Any]:
    return {
        "memory_id": memory_id,
        "content": content,
        "matched_keys": [key],
        "components": {"key_rank": 1, "literal": True, "hop": 0},
        "rerank_score": 0.5,
        "rerank_kind": "embedding_cosine",
        "score": 1.0,
    }


RACE = candidate("race", "Melanie ran a charity race and realised self-care matters.", "k-melanie")
PAINTS = candidate("paints", "Caroline paints sunsets.", "k-caroline")


def observation(*candidates: dict[str, Any], coverage: dict[str, float]) -> Observation:
    return Observation(
        "conv",
        list(candidates),
        [MELANIE, CAROLINE],
        coverage=coverage,
        subjects={"race": "k-melanie", "paints": "k-caroline"},
    )


def query(qid: str, text: str, gold: tuple[str, ...] = ()) -> Query:
    kind = "single-hop" if gold else "adversarial"
    return Query(qid, text, gold, False, kind, None, "conv")


SWAPPED = query("q1", "What did Caroline realise after her charity race?")
ASKED = query("q2", "What did Melanie realise after the charity race?", ("b-race",))


def test_an_unanswerable_prompt_is_traced_by_what_kept_it_silent() -> None:
    # another person's memory holds every asked word, Caroline's none: the premise check
    swapped = observation(RACE, PAINTS, coverage={"race": 1.0, "paints": 0.0})
    assert silence(SWAPPED, swapped, Gate()) == "prompt silenced: premise"
    assert silence(SWAPPED, swapped, Gate(premise=False)) == "rejected: other_entity"
    # Caroline's own memory holds what is asked: nothing keeps the prompt silent
    held = observation(PAINTS, coverage={"paints": 1.0})
    assert silence(SWAPPED, held, Gate()) == "shown"
    assert silence(SWAPPED, observation(coverage={}), Gate()) == "not a candidate"


def test_the_trace_table_has_a_row_for_the_unanswerable_beside_the_answerable() -> None:
    seen = observation(RACE, PAINTS, coverage={"race": 1.0, "paints": 0.0})
    benchmark = Benchmark("trace", "pooled", (), (SWAPPED, ASKED))
    recorded = {
        "benchmark_ids": {"race": ["b-race"], "paints": ["b-paints"]},
        "observations": [vars(seen), vars(seen)],
    }
    rows = fates(benchmark, recorded, Gate(), 2).splitlines()
    header = [cell.strip() for cell in rows[0].strip("|").split("|")]
    table = {
        cells[0]: dict(zip(header[1:], cells[1:], strict=True))
        for cells in ([c.strip() for c in line.strip("|").split("|")] for line in rows[2:4])
    }
    assert table["adversarial (gold: [])"]["prompt silenced: premise"] == "1.000"
    assert table["single-hop"]["shown"] == "1.000"
    assert rows[-1] == "precision (gold among shown memories): 1.000"


def test_a_signal_floor_judges_the_named_ones_memories_and_the_others_still_compete() -> None:
    seen = observation(RACE, PAINTS, coverage={"race": 1.0, "paints": 0.4})
    benchmark = Benchmark("trace", "pooled", (), (SWAPPED, ASKED))
    mine = about_named(benchmark, [seen, seen])
    assert mine == {"q1": frozenset({"paints"}), "q2": frozenset({"race"})}

    def shown(gate: Gate, floor: float, asked: Query) -> list[str]:
        choose = floored(gate, (("coverage", floor),), mine)
        return [c["memory_id"] for c in choose(asked, seen)]

    assert shown(ENTITIES, 0.3, SWAPPED) == ["paints"]
    assert shown(ENTITIES, 0.5, SWAPPED) == []
    # Melanie's memory is not the named one's, so no floor drops it: it out-covers Caroline's
    assert shown(ENTITIES_PREMISE, 0.3, SWAPPED) == []
    assert shown(ENTITIES_PREMISE, 0.3, ASKED) == ["race"]


def test_the_default_cache_is_this_builds_own(tmp_path: Path) -> None:
    code = tmp_path / "services"
    code.mkdir()
    (code / "search.py").write_text("CANDIDATES = 10\n")
    before = build_cache(Placement(), [code])
    assert build_cache(Placement(), [code]) == before
    assert build_cache(Placement(threads=True), [code]) != before
    # another build (an edit to what observes) reads none of the older build's observations
    (code / "search.py").write_text("CANDIDATES = 20\n")
    assert build_cache(Placement(), [code]) != before
    # the shipped default hashes the product's code and the in-process wiring
    assert build_cache(Placement()).parent == CACHES
