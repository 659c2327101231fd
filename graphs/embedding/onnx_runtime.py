"""A BERT sentence encoder on ONNX Runtime, built once from the bundled safetensors weights.

Why not torch at query time: importing torch and sentence-transformers alone takes
seconds and hundreds of MB, for a model whose forward pass on one short query takes
milliseconds. ONNX Runtime runs the same weights with a small import and a small
footprint.

The graph is written from the weights by :mod:`graphs.embedding.onnx_graph`.

The built model is cached in a user cache directory (``SKB_MODEL_CACHE``, else
``$XDG_CACHE_HOME/skb-agent/models``, else ``~/.cache/skb-agent/models``) as two files: the
graph, and its weights as ONNX external data beside it. Why apart: ONNX Runtime maps an
external data file instead of copying the weights into each process's own memory, so the
processes that answer questions on one machine (serving replicas) share one copy of the
weights' pages (about 58 MB less private memory a process for the int8 model, at the same
speed). A sidecar JSON records both files' sha256, the model's identity (the sha256 of the
model as one file) and the identity of the weights it came from. Loading checks the
sidecar; the full sha256 is recomputed whenever a file's size, mtime or inode differ from
those seen at the last full check (or when asked with ``full_check=True``), so a normal
start does not hash 90 MB. A file that fails the check is rebuilt from the weights: it is
derived data, never a source of truth.

Beside it, once per machine, the model as ONNX Runtime optimised it, its weights packed into the layout of this
processor's kernels (``packed_model``): each session loads that and maps the packed weights, where it would
otherwise pack a copy of its own on the heap.

Only the builder imports ``onnx`` (and, for int8, ``onnxruntime.quantization``); the query
path needs ``onnxruntime``, ``tokenizers`` and numpy.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import platform
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graphs.cache_dir import model_cache_dir
from graphs.embedding.onnx_graph import GRAPH_VERSION, OPSET, VARIANTS, WEIGHTS_FILE, build_bytes
from graphs.errors import ConfigError, SKBError
from graphs.manifest import atomic_write_text, sha256_file

__all__ = ["CachedModel", "OnnxBertEncoder", "ensure_onnx_model", "external_data_path", "packed_model"]

log = logging.getLogger(__name__)

#: 2: the weights in an external data file beside the graph (1: one file, rebuilt into two when met).
SIDECAR_FORMAT = 2
#: Initializers of at least this many bytes go to the external data file (the graph keeps the small ones).
EXTERNAL_MIN_BYTES = 1024
_TOKENIZER_FILE = "tokenizer.json"


# -- cache ------------------------------------------------------------------------------------
def _stat_key(path: Path) -> dict[str, int]:
    st = path.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ino": st.st_ino}


@dataclass(frozen=True)
class CachedModel:
    """A verified model: its graph file (the weights in an external data file beside it, which ONNX Runtime
    maps), or, where the cache could not be written, its bytes held in memory (``held``).

    ``sha256`` names the model (the digest of the model as one file), whichever way it is stored.
    """

    path: Path
    sha256: str
    held: bytes | None
    rebuilt: bool


def external_data_path(model_path: Path) -> Path:
    """The file that holds the weights of the graph at ``model_path``."""
    return model_path.with_name(model_path.name + ".data")


def _model_files(model_path: Path) -> dict[str, Path]:
    return {"graph": model_path, "data": external_data_path(model_path)}


def _file_records(model_path: Path) -> dict[str, dict[str, Any]]:
    """Each of the model's two files' size and sha256, as its sidecar records them."""
    return {name: {"size": f.stat().st_size, "sha256": sha256_file(f)} for name, f in _model_files(model_path).items()}


def _stats(model_path: Path) -> dict[str, dict[str, int]]:
    """Each of the model's two files' stat, as its sidecar records the last one checked."""
    return {name: _stat_key(f) for name, f in _model_files(model_path).items()}


def _write_split(model_path: Path, data: bytes) -> dict[str, dict[str, Any]]:
    """Write the model as its graph and an external data file, each replaced whole: both are written in a
    directory beside them first (a crash leaves the old pair or a pair the sidecar's hashes reject).
    Returns each file's size and sha256."""
    import onnx

    model = onnx.load_from_string(data)
    target = external_data_path(model_path)
    model_path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=model_path.parent, prefix=".build-") as tmp:
        staged = Path(tmp) / model_path.name
        onnx.save_model(model, str(staged), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=target.name, size_threshold=EXTERNAL_MIN_BYTES)  # fmt: skip
        os.replace(Path(tmp) / target.name, target)
        os.replace(staged, model_path)
    return _file_records(model_path)


def _verified(sidecar: dict[str, Any], model_path: Path, full_check: bool) -> bool | None:
    """True when both files are the ones the sidecar recorded (by their stat, else by sha256; always by sha256
    with ``full_check``), updating the stat it records after a hash; False when one differs or cannot be read;
    None when one is missing."""
    files = _model_files(model_path)
    if not all(f.is_file() for f in files.values()):
        return None
    recorded, seen = sidecar.get("files"), sidecar.get("verified_stat")
    if not isinstance(recorded, dict) or not isinstance(seen, dict):
        return False
    stats = _stats(model_path)
    if not full_check and all(
        seen.get(name) == stats[name] and stats[name]["size"] == (recorded.get(name) or {}).get("size") for name in files
    ):
        return True
    for name, f in files.items():
        try:
            digest = sha256_file(f)
        except OSError:  # unreadable (another user's cache, a bad disk): rebuilt, or used from memory
            return False
        if digest != (recorded.get(name) or {}).get("sha256"):
            return False
    sidecar["verified_stat"] = stats
    return True


def _verified_and_recorded(
    sidecar: dict[str, Any], sidecar_path: Path, model_path: Path, full_check: bool
) -> bool | None:
    """``_verified``, and where it hashed the files, the stat it saw written to the sidecar so that the next start
    does not hash again (a read-only cache still serves: the stat is then checked by hash again next time)."""
    before = dict(sidecar.get("verified_stat") or {})
    verified = _verified(sidecar, model_path, full_check)
    if verified and sidecar["verified_stat"] != before:
        try:
            _write_sidecar(sidecar_path, sidecar)
        except OSError as exc:
            log.info("cannot record the checked model's stat in %s (%s)", sidecar_path, exc)
    return verified


def _cache_paths(source_dir: Path, variant: str, cache_dir: Path) -> tuple[Path, Path]:
    # One file per model directory (two installs of different wheel versions do not evict each other).
    where = hashlib.sha256(str(source_dir.resolve()).encode("utf-8")).hexdigest()[:12]
    # "-ext": the graph with its weights beside it; a release that caches one file keeps its own name
    stem = f"{source_dir.resolve().name}-{where}-{variant}-g{GRAPH_VERSION}-ext"
    return cache_dir / f"{stem}.onnx", cache_dir / f"{stem}.json"


def _read_sidecar(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _source_matches(sidecar: dict[str, Any], weights: Path) -> bool:
    """The weights are the ones the cached model was built from (stat first; sha256 only if the stat moved)."""
    recorded = sidecar.get("source")
    if not isinstance(recorded, dict):
        return False
    stat = _stat_key(weights)
    if recorded.get("stat") == stat:
        return True
    return bool(recorded.get("sha256") == sha256_file(weights))


def ensure_onnx_model(
    source_dir: Path, variant: str = "fp32", *, cache_dir: Path | None = None, full_check: bool = False
) -> CachedModel:
    """Return the verified ONNX model for the weights in ``source_dir``, building and caching it if needed.

    Verification: the sidecar must match this builder (graph version, variant) and the
    weights (stat, else sha256); the sha256 of the graph file and of its weights file is
    recomputed when a stat differs from the one recorded at the last full check, or always
    with ``full_check``.
    Anything that does not verify is rebuilt (logged at INFO; it is a cache).
    """
    if variant not in VARIANTS:
        raise ConfigError(f"unknown ONNX model variant {variant!r} -- use one of {', '.join(VARIANTS)}")
    source_dir = Path(source_dir)
    weights = source_dir / WEIGHTS_FILE
    if not weights.is_file():
        raise ConfigError(f"no {WEIGHTS_FILE} in {source_dir} -- reinstall the model package")
    cache = Path(cache_dir) if cache_dir is not None else model_cache_dir()
    model_path, sidecar_path = _cache_paths(source_dir, variant, cache)

    sidecar = _read_sidecar(sidecar_path)
    reason = "not built yet"
    if sidecar is not None and model_path.is_file():
        if sidecar.get("format") != SIDECAR_FORMAT or sidecar.get("graph_version") != GRAPH_VERSION:
            reason = "built by another version of the converter"
        elif sidecar.get("variant") != variant:
            reason = "sidecar names another variant"
        elif not _source_matches(sidecar, weights):
            reason = "the model weights changed"
        else:
            verified = _verified_and_recorded(sidecar, sidecar_path, model_path, full_check)
            if verified:
                return CachedModel(model_path, str(sidecar["sha256"]), None, rebuilt=False)
            reason = "its weights file is missing" if verified is None else "checksum mismatch"
    log.info("building the ONNX model %s (%s)", model_path, reason)

    data = build_bytes(source_dir, variant)
    digest = hashlib.sha256(data).hexdigest()
    try:
        files = _write_split(model_path, data)
        record = {
            "format": SIDECAR_FORMAT,
            "graph_version": GRAPH_VERSION,
            "opset": OPSET,
            "variant": variant,
            "sha256": digest,
            "size": len(data),
            "files": files,
            "verified_stat": _stats(model_path),
            "source": {"dir": str(source_dir.resolve()), "sha256": sha256_file(weights), "stat": _stat_key(weights)},
        }
        _write_sidecar(sidecar_path, record)
    except OSError as exc:
        # A read-only or full cache must not stop queries: the model is used from memory this time.
        log.warning("cannot cache the ONNX model in %s (%s); set SKB_MODEL_CACHE to a writable directory", cache, exc)
        return CachedModel(model_path, digest, data, rebuilt=True)
    return CachedModel(model_path, digest, None, rebuilt=True)


def _write_sidecar(path: Path, record: dict[str, Any]) -> None:
    atomic_write_text(path, json.dumps(record, indent=2, sort_keys=True) + "\n")


# -- packed weights ---------------------------------------------------------------------------
#: 1: the optimised graph, its packed weights in its external data file (``session.save_external_prepacked_...``).
PACKED_FORMAT = 1


def _machine_key() -> str:
    """What packed weights depend on: ONNX Runtime's version and the processor's instruction sets (its
    matrix kernels, and the layout they pack weights into, are chosen by them)."""
    import onnxruntime as ort

    flags = ""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            flags = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith(("flags", "Features"))), "")
    except OSError:  # not Linux: the processor's name stands for its instruction sets
        pass
    parts = (ort.__version__, platform.machine(), flags or platform.processor())
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:12]


def _packed_paths(model: CachedModel, machine: str) -> tuple[Path, Path]:
    stem = model.path.name.removesuffix(".onnx")
    return model.path.with_name(f"{stem}-packed-{machine}.onnx"), model.path.with_name(f"{stem}-packed-{machine}.json")


def packed_model(model: CachedModel) -> Path | None:
    """The model optimised for this machine with its packed weights in its external data file, written once
    beside the cached model and verified like it after (stat, else sha256); None where there is none to be had
    (a model held in memory, an unwritable cache, ONNX Runtime refusing): the caller loads ``model`` itself.

    Why: ONNX Runtime repacks the matrices of every session it opens into its kernels' layout, on the heap
    (about 40 MB a session of the fp32 model); loaded from a file that holds them packed, it maps them, so the
    processes that answer questions on one machine share those pages too. The vectors are the same: the same
    graph and kernels run, only where the packed weights live differs."""
    if model.held is not None:
        return None
    import onnxruntime as ort

    machine = _machine_key()
    path, sidecar_path = _packed_paths(model, machine)
    sidecar = _read_sidecar(sidecar_path)
    if (
        sidecar is not None and sidecar.get("format") == PACKED_FORMAT and sidecar.get("model_sha256") == model.sha256
        and _verified_and_recorded(sidecar, sidecar_path, path, full_check=False)
    ):
        return path
    try:
        files = _write_packed(model.path, path)
        _write_sidecar(sidecar_path, {
            "format": PACKED_FORMAT, "model_sha256": model.sha256, "machine": machine, "onnxruntime": ort.__version__,
            "files": files, "verified_stat": _stats(path),
        })  # fmt: skip
    except Exception as exc:  # noqa: BLE001 -- OSError, or onnxruntime's own error types: the model still loads unpacked
        log.warning("cannot write the packed ONNX model %s (%s); each process packs its own weights", path, exc)
        return None
    _drop_other_versions(model, machine, ort.__version__)
    return path


def _write_packed(source: Path, path: Path) -> dict[str, dict[str, Any]]:
    """Have ONNX Runtime optimise ``source`` and save it with its packed weights, both files replaced whole
    (written in a directory beside them first). Returns each file's size and sha256."""
    import onnxruntime as ort

    data = external_data_path(path)
    with tempfile.TemporaryDirectory(dir=path.parent, prefix=".pack-") as tmp:
        options = _options(ort)
        options.optimized_model_filepath = str(Path(tmp) / path.name)
        for key, value in (
            ("session.optimized_model_external_initializers_file_name", data.name),
            ("session.optimized_model_external_initializers_min_size_in_bytes", str(EXTERNAL_MIN_BYTES)),
            ("session.save_external_prepacked_constant_initializers", "1"),
        ):
            options.add_session_config_entry(key, value)
        ort.InferenceSession(str(source), sess_options=options, providers=["CPUExecutionProvider"])
        os.replace(Path(tmp) / data.name, data)
        os.replace(Path(tmp) / path.name, path)
    return _file_records(path)


def _drop_other_versions(model: CachedModel, machine: str, version: str) -> None:
    """Remove this model's packed files written by another ONNX Runtime version (an upgrade would otherwise
    leave 130 MB behind each time); another machine's packing under the same version is kept (a shared cache)."""
    for sidecar_path in model.path.parent.glob(f"{model.path.name.removesuffix('.onnx')}-packed-*.json"):
        other = _read_sidecar(sidecar_path)
        if other is None or other.get("machine") == machine or other.get("onnxruntime") == version:
            continue
        graph = sidecar_path.with_suffix(".onnx")
        for f in (sidecar_path, graph, external_data_path(graph)):
            f.unlink(missing_ok=True)


def _options(ort: Any) -> Any:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: no optimizer chatter on stderr
    return options


# -- runtime ----------------------------------------------------------------------------------
_SESSION_LOCK = threading.Lock()
_SESSIONS: dict[tuple[str, str, int | None], Any] = {}


#: Intra-op threads of the session that embeds single queries (``SKB_ONNX_THREADS`` overrides).
QUERY_THREADS = 1


_BATCH_THREADS: ContextVar[int | None] = ContextVar("onnx_batch_threads", default=None)


@contextmanager
def batch_threads(threads: int) -> Iterator[None]:
    """Batches embedded inside the block run on a session of ``threads`` intra-op threads, the single-query
    session where that is one (``SKB_ONNX_THREADS``, where set, still decides); outside it, on the batch
    session as before. Why: a build that writes its stored tables on one core while it embeds (an update)
    leaves the encoder the other cores; with one thread per core the encoder's threads and that work took
    turns on the same cores (an HPO update of 100 nodes on two cores: 13.6 CPU s against 11.3, 10.0 s wall
    against 9.2)."""
    token = _BATCH_THREADS.set(max(1, threads))
    try:
        yield
    finally:
        _BATCH_THREADS.reset(token)


def _env_threads() -> int | None:
    threads = os.environ.get("SKB_ONNX_THREADS")
    if not threads:
        return None
    if not threads.isdigit():
        raise ConfigError(f"SKB_ONNX_THREADS must be a number of threads, got {threads!r}")
    return int(threads)


def _session(model: CachedModel, variant: str, threads: int | None = None) -> Any:
    """One InferenceSession per model file, thread count and process (creating one costs a few hundred ms).

    ``threads``: intra-op threads (None: ONNX Runtime's default, one per core)."""
    key = (model.sha256, variant, threads)
    with _SESSION_LOCK:
        session = _SESSIONS.get(key)
        if session is None:
            import onnxruntime as ort

            options = _options(ort)
            if threads is not None:
                options.intra_op_num_threads = threads
            packed = packed_model(model)
            source: bytes | str = model.held if model.held is not None else str(model.path)
            if packed is not None:  # optimised already: loading it as it is keeps its weights mapped
                options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
                source = str(packed)
            try:
                session = ort.InferenceSession(source, sess_options=options, providers=["CPUExecutionProvider"])
            except Exception as exc:  # onnxruntime raises its own Fail/InvalidGraph types
                named = packed if packed is not None else model.path
                raise SKBError(f"onnxruntime cannot load the model {named}: {exc} -- delete it to have it rebuilt") from exc
            _SESSIONS[key] = session
        return session


class OnnxBertEncoder:
    """Tokenize with the model's tokenizer.json, run the ONNX graph, mean-pool over tokens, L2-normalise.

    This is what sentence-transformers does for all-MiniLM-L6-v2 (Transformer ->
    mean Pooling -> Normalize): truncation to ``max_seq_length`` tokens including
    [CLS]/[SEP], padding to the longest text of each batch, the mean over real tokens
    only. Texts are sorted by token count before batching so short names are not
    padded to the length of long definitions.
    """

    def __init__(
        self,
        source_dir: Path,
        *,
        max_seq_length: int,
        variant: str = "fp32",
        cache_dir: Path | None = None,
    ) -> None:
        self.source_dir = Path(source_dir)
        self.max_seq_length = max_seq_length
        self.variant = variant
        self.cache_dir = cache_dir
        self._lock = threading.Lock()
        self._tokenizer: Any = None
        self._session: Any = None
        self._query_session: Any = None
        self.model: CachedModel | None = None

    def _ready(self, query: bool = False) -> tuple[Any, Any]:
        """The tokenizer and the session: the batch session (ONNX Runtime's default threads) or, for
        ``query``, the single-query one (QUERY_THREADS).

        Why two sessions: a batch of thousands of texts gains from one thread per core, while one short
        query gains nothing from splitting its small matrix products and, run beside the graph store's
        queries on a small machine, loses to thread hand-offs and spinning (on 2 busy cores a query took
        23 ms with the default threads and 15 ms with one). A process that only answers questions
        creates only the query session."""
        override = None if query or _env_threads() is not None else _BATCH_THREADS.get()
        if override is not None:  # a session of that many threads (the query session's when one)
            tokenizer, _ = self._ready(query=True)
            assert self.model is not None
            return tokenizer, _session(self.model, self.variant, override)
        if self._tokenizer is None or (self._query_session if query else self._session) is None:
            with self._lock:
                if self._tokenizer is None:
                    from tokenizers import Tokenizer

                    path = self.source_dir / _TOKENIZER_FILE
                    try:
                        tok = Tokenizer.from_file(str(path))
                    except Exception as exc:  # tokenizers raises a bare Exception on bad files
                        raise ConfigError(f"cannot load the tokenizer {path}: {exc} -- reinstall the model package") from exc
                    tok.enable_truncation(max_length=self.max_seq_length)
                    tok.no_padding()
                    self._tokenizer = tok
                if self.model is None:
                    self.model = ensure_onnx_model(self.source_dir, self.variant, cache_dir=self.cache_dir)
                threads = _env_threads()
                if query and self._query_session is None:
                    self._query_session = _session(self.model, self.variant, threads or QUERY_THREADS)
                if not query and self._session is None:
                    self._session = _session(self.model, self.variant, threads)
        return self._tokenizer, self._query_session if query else self._session

    def encode(self, texts: list[str], batch_size: int, *, query: bool = False) -> np.ndarray:
        """Unit vectors of ``texts``; ``query``: run on the single-query session (see ``_ready``)."""
        tokenizer, session = self._ready(query)
        encodings = tokenizer.encode_batch(texts, add_special_tokens=True)
        lengths = np.fromiter((len(e.ids) for e in encodings), dtype=np.int64, count=len(encodings))
        order = np.argsort(-lengths, kind="stable")
        out: np.ndarray | None = None
        for start in range(0, len(order), batch_size):
            rows = order[start : start + batch_size]
            width = int(lengths[rows].max())
            ids = np.zeros((len(rows), width), dtype=np.int64)
            mask = np.zeros((len(rows), width), dtype=np.int64)
            for r, j in enumerate(rows):
                enc = encodings[int(j)]
                ids[r, : len(enc.ids)] = enc.ids
                mask[r, : len(enc.ids)] = enc.attention_mask
            (hidden,) = session.run(["last_hidden_state"], {"input_ids": ids, "attention_mask": mask})
            weights = mask.astype(np.float32)[:, :, None]
            pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
            if out is None:
                out = np.empty((len(texts), pooled.shape[1]), dtype=np.float32)
            out[rows] = pooled
        assert out is not None
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return np.ascontiguousarray(out / np.maximum(norms, 1e-12), dtype=np.float32)
