"""The model ONNX Runtime optimised once per machine, its packed weights in a file it maps: the same vectors,
no packed copy on each process's heap, checked and rewritten like the cached model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from graphs.embedding import onnx_runtime
from graphs.embedding.onnx_runtime import CachedModel, ensure_onnx_model, external_data_path, packed_model


@pytest.fixture(scope="module")
def model_dir() -> Path:
    from graphs.embedding.embedder import _minilm_path

    return _minilm_path()


def _feeds(session: object) -> list[dict[str, np.ndarray]]:
    names = [i.name for i in session.get_inputs()]  # type: ignore[attr-defined]
    rng = np.random.default_rng(0)
    feeds = []
    for rows, width in ((1, 7), (3, 19), (8, 64)):
        ids = rng.integers(1000, 20000, size=(rows, width), dtype=np.int64)
        mask = np.ones_like(ids)
        mask[:, width - width // 3 :] = 0  # padded rows, as a batch of unequal texts has
        feeds.append({n: {"input_ids": ids, "attention_mask": mask}[n] for n in names})
    return feeds


def _mapped(path: Path) -> bool:
    return str(path) in Path("/proc/self/maps").read_text()


@pytest.mark.parametrize("variant", ["fp32", "int8"])
def test_packed_model_gives_the_same_vectors_from_mapped_weights(tmp_path: Path, model_dir: Path, variant: str) -> None:
    import onnxruntime as ort

    model = ensure_onnx_model(model_dir, variant, cache_dir=tmp_path)
    packed = packed_model(model)
    assert packed is not None and packed.parent == tmp_path and "-packed-" in packed.name
    data = external_data_path(packed)
    assert data.stat().st_size > external_data_path(model.path).stat().st_size  # the packed copies are in it
    assert not list(tmp_path.glob(".pack-*"))  # the staging directory is gone

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    plain = ort.InferenceSession(str(model.path), sess_options=options, providers=["CPUExecutionProvider"])
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    loaded = ort.InferenceSession(str(packed), sess_options=options, providers=["CPUExecutionProvider"])
    assert _mapped(data)  # its weights are file pages, shared by every process that maps them
    for feed in _feeds(plain):
        (a,) = plain.run(["last_hidden_state"], feed)
        (b,) = loaded.run(["last_hidden_state"], feed)
        assert np.array_equal(a, b)


def test_packed_model_is_checked_and_rewritten_when_damaged(tmp_path: Path, model_dir: Path) -> None:
    model = ensure_onnx_model(model_dir, "int8", cache_dir=tmp_path)
    packed = packed_model(model)
    assert packed is not None
    data = external_data_path(packed)
    written = data.stat().st_mtime_ns
    assert packed_model(model) == packed and data.stat().st_mtime_ns == written  # verified by its stat: kept

    damaged = bytearray(data.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    data.write_bytes(bytes(damaged))
    sidecar = json.loads(packed.with_suffix(".json").read_text())
    assert packed_model(model) == packed
    from graphs.manifest import sha256_file

    assert sha256_file(data) == sidecar["files"]["data"]["sha256"]  # written again, as it was

    # another model (a rebuilt cache entry): its sidecar no longer matches, the packing is redone for it
    sidecar["model_sha256"] = "0" * 64
    packed.with_suffix(".json").write_text(json.dumps(sidecar))
    assert packed_model(model) == packed
    assert json.loads(packed.with_suffix(".json").read_text())["model_sha256"] == model.sha256


def test_packing_of_another_onnxruntime_version_is_removed(tmp_path: Path, model_dir: Path) -> None:
    model = ensure_onnx_model(model_dir, "int8", cache_dir=tmp_path)
    stem = model.path.name.removesuffix(".onnx")
    old = tmp_path / f"{stem}-packed-000000000000.onnx"
    old.write_bytes(b"graph")
    external_data_path(old).write_bytes(b"weights")
    old.with_suffix(".json").write_text(json.dumps({"machine": "000000000000", "onnxruntime": "0.0.1"}))
    other_machine = tmp_path / f"{stem}-packed-111111111111.json"  # the same version on another machine: kept
    import onnxruntime as ort

    other_machine.write_text(json.dumps({"machine": "111111111111", "onnxruntime": ort.__version__}))
    assert packed_model(model) is not None
    assert not old.exists() and not external_data_path(old).exists() and not old.with_suffix(".json").exists()
    assert other_machine.exists()


def test_no_packing_without_a_cache_file_or_a_writable_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, model_dir: Path
) -> None:
    model = ensure_onnx_model(model_dir, "int8", cache_dir=tmp_path)
    assert packed_model(CachedModel(model.path, model.sha256, b"held", rebuilt=False)) is None  # held in memory

    def refused(source: Path, path: Path) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(onnx_runtime, "_write_packed", refused)
    assert packed_model(model) is None  # logged; the session packs its own weights
    monkeypatch.setattr(onnx_runtime, "_SESSIONS", {})
    session = onnx_runtime._session(model, "int8", 1)
    assert session.get_session_options().graph_optimization_level.name == "ORT_ENABLE_ALL"
    assert not list(tmp_path.glob("*-packed-*"))


def test_sessions_load_the_packed_model(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, model_dir: Path) -> None:
    model = ensure_onnx_model(model_dir, "int8", cache_dir=tmp_path)
    monkeypatch.setattr(onnx_runtime, "_SESSIONS", {})
    session = onnx_runtime._session(model, "int8", 1)
    packed = packed_model(model)
    assert packed is not None and _mapped(external_data_path(packed))
    assert session.get_session_options().graph_optimization_level.name == "ORT_DISABLE_ALL"
