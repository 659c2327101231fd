"""A tuned encoder is what its files are: checked by their hashes at load, cached by their content, and
opened by every build that uses it (even when every vector is already cached).

The tuned directory here is the shipped MiniLM's files laid out as `graphs.tuning.export` lays out a tuned
model (no training: the checks are about files, and the test stays fast).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graphs.embedding.cache import CachedEmbedder
from graphs.embedding.tuned import ENCODER_SIDECAR, ONNX_FILE, SIDECAR_FORMAT, TunedEmbedder, vector_file_hashes
from graphs.errors import ConfigError
from tests.encoder_tuning_support import tool_shop_skb

pytestmark = pytest.mark.integration  # the ONNX model runs

CARRIED = ("config.json", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt")


def _write_sidecar(model_dir: Path, **changes: Any) -> None:
    record = {
        "format": SIDECAR_FORMAT,
        "base_model_name": "all-MiniLM-L6-v2",
        "onnx_sha256": hashlib.sha256((model_dir / ONNX_FILE).read_bytes()).hexdigest(),
        "files_sha256": vector_file_hashes(model_dir),
        "settings": {"max_seq_length": 32},
        **changes,
    }
    (model_dir / ENCODER_SIDECAR).write_text(json.dumps(record), encoding="utf-8")


@pytest.fixture(scope="module")
def shipped_as_tuned(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from graphs.embedding.embedder import _minilm_path
    from graphs.embedding.onnx_runtime import ensure_onnx_model

    base = _minilm_path()
    out = tmp_path_factory.mktemp("tuned") / "model"
    out.mkdir()
    for name in CARRIED:
        if (base / name).is_file():
            shutil.copyfile(base / name, out / name)
    import onnx

    # a tuned directory holds its graph as one file (the cache keeps the weights beside it)
    onnx.save_model(onnx.load(str(ensure_onnx_model(base, "int8").path)), str(out / ONNX_FILE))
    _write_sidecar(out)
    return out


@pytest.fixture()
def model_dir(shipped_as_tuned: Path, tmp_path: Path) -> Path:
    """A fresh copy to tamper with."""
    return Path(shutil.copytree(shipped_as_tuned, tmp_path / "model"))


def test_a_swapped_onnx_graph_is_refused(model_dir: Path) -> None:
    data = bytearray((model_dir / ONNX_FILE).read_bytes())
    data[len(data) // 2] ^= 0xFF  # another graph under the sidecar's claimed hash
    (model_dir / ONNX_FILE).write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=rf"{ONNX_FILE}.*sha256.*does not match.*{ENCODER_SIDECAR}"):
        TunedEmbedder(model_dir)


def test_an_edited_sidecar_hash_is_refused(model_dir: Path) -> None:
    _write_sidecar(model_dir, onnx_sha256="0" * 64)
    with pytest.raises(ConfigError, match=rf"{ONNX_FILE}.*does not match"):
        TunedEmbedder(model_dir)


def test_a_changed_tokenizer_is_refused(model_dir: Path) -> None:
    tok = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    tok["truncation"] = {"max_length": 3, "strategy": "LongestFirst", "stride": 0, "direction": "Right"}
    (model_dir / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"tokenizer\.json.*does not match"):
        TunedEmbedder(model_dir)


def test_a_bad_max_seq_length_is_a_clear_error(model_dir: Path) -> None:
    _write_sidecar(model_dir, settings={"max_seq_length": "abc"})
    with pytest.raises(ConfigError, match="max_seq_length"):
        TunedEmbedder(model_dir)


def test_the_cache_is_keyed_by_content_not_by_the_claimed_name(model_dir: Path, shipped_as_tuned: Path,
                                                                 tmp_path: Path) -> None:
    """Two encoders with one ONNX graph (one claimed name) but different tokenizers never share vectors."""
    tok = json.loads((model_dir / "tokenizer.json").read_text(encoding="utf-8"))
    tok["normalizer"] = None  # no lowercasing: other token ids for "Spudger"
    (model_dir / "tokenizer.json").write_text(json.dumps(tok), encoding="utf-8")
    _write_sidecar(model_dir)  # a consistent directory, recorded as such
    first, second = TunedEmbedder(shipped_as_tuned), TunedEmbedder(model_dir)
    assert first.model_name == second.model_name and first.content_sha256 != second.content_sha256
    cache = tmp_path / "cache"
    CachedEmbedder(first, cache).embed(["Spudger"])
    again = CachedEmbedder(second, cache)
    vector = again.embed(["Spudger"])
    assert again.misses == 1 and again.hits == 0
    assert vector[0] == pytest.approx(second.embed(["Spudger"])[0], abs=1e-6)


def test_a_build_opens_the_encoder_even_when_every_vector_is_cached(model_dir: Path, tmp_path: Path) -> None:
    from graphs.build import IndexConfig, build_index

    cache = tmp_path / "cache"

    def build(name: str) -> None:
        build_index(tool_shop_skb(), tmp_path / name, IndexConfig(dataset="tool-shop", store="none",
                                                                   embedder=f"tuned:{model_dir}:32", cache_dir=cache))

    build("first")  # every vector is cached from here on
    (model_dir / "tokenizer.json").write_text("{not a tokenizer", encoding="utf-8")
    _write_sidecar(model_dir)  # broken, yet consistent with its sidecar
    with pytest.raises(ConfigError, match="tokenizer"):
        build("second")
    assert not (tmp_path / "second").exists()


def test_a_tuned_encoder_answers_on_one_session(shipped_as_tuned: Path) -> None:
    """As the shipped encoder: a few texts at once run on the single-query session, so a process that answers
    questions holds one copy of the weights; a larger batch opens the batch session."""
    embedder = TunedEmbedder(shipped_as_tuned)
    few = embedder.embed(["Spudger", "pry bar"])
    encoder = embedder._get_encoder()
    assert encoder._session is None and encoder._query_session is not None
    embedder.embed(["Spudger", "pry bar", *(f"tool {i}" for i in range(embedder.batch_size))])
    assert encoder._session is not None
    # the same batch on the batch session gives the same vectors (int8 vectors depend on the batch they are in)
    np.testing.assert_allclose(few, encoder.encode(["Spudger", "pry bar"], embedder.batch_size), atol=1e-6)
