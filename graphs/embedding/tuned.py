"""Running a tuned encoder: the shipped model's ONNX int8 path over the tuned directory's own graph.

Why its own embedder class: the tuned ONNX graph is stored with the index (its hash in the manifest),
not in the user model cache, and is never rebuilt from a query path; the model name carries the graph's
hash, so vectors, caches and indexes of two tunings never mix.

Why the files are hashed at load: a directory is data that can be copied, edited or swapped. The ONNX
graph and the files that shape its input (tokenizer, config) must be the ones the sidecar records, or the
encoder is refused; the embedding cache is keyed by the hash of what is actually there
(``content_sha256``), never by the name a sidecar claims.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graphs.errors import ConfigError
from graphs.manifest import sha256_file

__all__ = [
    "ENCODER_SIDECAR",
    "ONNX_FILE",
    "PAIRS_FILE",
    "TUNED_PREFIX",
    "WEIGHTS_FILE",
    "TunedEmbedder",
    "read_sidecar",
    "tuned_from_spec",
    "tuned_model_name",
    "vector_file_hashes",
]

#: The files of a tuned model directory (written by ``graphs.tuning.export``).
SIDECAR_FORMAT = 1
ENCODER_SIDECAR = "encoder.json"
WEIGHTS_FILE = "model.safetensors"
ONNX_FILE = "model.int8.onnx"
PAIRS_FILE = "pairs.jsonl"

#: The files besides the ONNX graph that decide a vector: the tokenizer (token ids) and the config (its size).
VECTOR_FILES = ("tokenizer.json", "config.json")

#: Spec prefix: ``tuned:<model dir>[:<max tokens>]``; a relative directory is read from the index directory.
TUNED_PREFIX = "tuned"


def read_sidecar(model_dir: Path) -> dict[str, Any]:
    """The sidecar of a tuned model directory, checked to name an int8 ONNX graph that exists."""
    path = Path(model_dir) / ENCODER_SIDECAR
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(
            f"{model_dir} is not a tuned encoder (no {ENCODER_SIDECAR}) -- build one with `skb index --tune-encoder` "
            "or `skb tune`"
        ) from exc
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read {path}: {exc} -- rebuild the tuned encoder") from exc
    if not isinstance(record, dict) or record.get("format") != SIDECAR_FORMAT or "onnx_sha256" not in record:
        raise ConfigError(f"{path} is not a tuned-encoder sidecar this version reads -- rebuild the tuned encoder")
    if not (Path(model_dir) / ONNX_FILE).is_file():
        raise ConfigError(f"{model_dir} lacks {ONNX_FILE} -- rebuild the tuned encoder")
    return record


def vector_file_hashes(model_dir: Path) -> dict[str, str]:
    """sha256 of each of ``VECTOR_FILES`` present in ``model_dir`` (what the sidecar records)."""
    return {name: sha256_file(Path(model_dir) / name) for name in VECTOR_FILES if (Path(model_dir) / name).is_file()}


def verify_files(model_dir: Path, record: dict[str, Any]) -> dict[str, str]:
    """The hashes of the files that decide the vectors (the ONNX graph and ``VECTOR_FILES``), each checked
    against the sidecar: a mismatch is a ConfigError naming the file (swapped, edited, or a sidecar edited)."""
    model_dir = Path(model_dir)
    found = {ONNX_FILE: sha256_file(model_dir / ONNX_FILE), **vector_file_hashes(model_dir)}
    recorded = record.get("files_sha256")
    expected = {ONNX_FILE: record.get("onnx_sha256"), **(recorded if isinstance(recorded, dict) else {})}
    for name, want in expected.items():
        got = found.get(name)
        if got != want:
            raise ConfigError(
                f"tuned encoder {model_dir}: {name} " + (f"has sha256 {got[:12]}..., which does not match the "
                f"{str(want)[:12]}... that {ENCODER_SIDECAR} records" if got else f"is missing but {ENCODER_SIDECAR} "
                "records it") + " -- the file was replaced or the sidecar edited; restore the directory or "
                "rebuild the tuned encoder (`skb tune`, or `skb index --tune-encoder`)"
            )
    return found


def _max_seq_length(record: dict[str, Any], path: Path) -> int:
    settings = record.get("settings")
    value = settings.get("max_seq_length", 128) if isinstance(settings, dict) else 128
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{path / ENCODER_SIDECAR}: settings.max_seq_length must be an integer, got {value!r:.40} "
                          "-- rebuild the tuned encoder")
    return value


def tuned_model_name(base_model: str, max_seq_length: int, onnx_sha256: str) -> str:
    """``all-MiniLM-L6-v2@64+int8+tuned-<12 hex>``: the base identity (named as the bundled model's int8
    variant is, see ``embedder.minilm_model_name``) plus the tuned graph's hash."""
    name = base_model if max_seq_length == 128 else f"{base_model}@{max_seq_length}"
    return f"{name}+int8+tuned-{onnx_sha256[:12]}"


class TunedEmbedder:
    """A tuned model directory (see :mod:`graphs.tuning.export`) on ONNX Runtime, int8.

    The same runtime as the bundled MiniLM's int8 variant (``OnnxBertEncoder``): tokenizer.json, the
    ONNX graph, mean pooling, L2 normalisation; batches on the default threads, single queries on one.
    """

    def __init__(self, model_dir: Path, batch_size: int = 64, max_seq_length: int | None = None) -> None:
        record = read_sidecar(model_dir)
        seq = max_seq_length or _max_seq_length(record, Path(model_dir))
        if batch_size < 1 or not 8 <= seq <= 512:
            raise ConfigError(f"tuned encoder: batch_size must be >= 1 and max tokens in [8, 512], got {batch_size}, {seq}")
        hashes = verify_files(Path(model_dir), record)
        self.model_dir = Path(model_dir)
        self.batch_size = batch_size
        self.max_seq_length = seq
        self.onnx_sha256 = hashes[ONNX_FILE]
        self.model_name = tuned_model_name(str(record.get("base_model_name", "all-MiniLM-L6-v2")), seq, self.onnx_sha256)
        #: What the vectors depend on, hashed: the embedding cache's key (``CachedEmbedder``).
        self.content_sha256 = hashlib.sha256(
            json.dumps({"files": hashes, "max_seq_length": seq}, sort_keys=True).encode("utf-8")
        ).hexdigest()
        try:
            self._dim = int(json.loads((self.model_dir / "config.json").read_text(encoding="utf-8"))["hidden_size"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ConfigError(f"cannot read the hidden size from {self.model_dir / 'config.json'}: {exc}") from exc
        self._encoder: Any = None
        self._lock = threading.Lock()

    @property
    def dim(self) -> int:
        return self._dim

    def _get_encoder(self) -> Any:
        if self._encoder is None:
            with self._lock:
                if self._encoder is None:
                    from graphs.embedding.onnx_runtime import CachedModel, OnnxBertEncoder

                    encoder = OnnxBertEncoder(self.model_dir, max_seq_length=self.max_seq_length, variant="int8")
                    # the stored graph, named by its recorded hash: never rebuilt (the manifest checks the file)
                    encoder.model = CachedModel(self.model_dir / ONNX_FILE, self.onnx_sha256, None, rebuilt=False)
                    self._encoder = encoder
        return self._encoder

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        if isinstance(texts, str):
            raise ConfigError("embed() takes a sequence of texts, not a single string -- use embed_query() for one text")
        items = [str(t) for t in texts]
        if not items:
            return np.zeros((0, self.dim), dtype=np.float32)
        # one encoder batch on the single-query session, as MiniLMEmbedder.embed: one session a process that answers
        out: np.ndarray = self._get_encoder().encode(items, self.batch_size, query=len(items) <= self.batch_size)
        return out

    def embed_query(self, text: str) -> np.ndarray:
        vector: np.ndarray = self._get_encoder().encode([str(text)], 1, query=True)[0]
        return vector


def tuned_from_spec(spec: str, options: list[str], base_dir: Path | None) -> TunedEmbedder:
    """``tuned:<dir>[:<max tokens>]`` -> the embedder; ``<dir>`` relative to ``base_dir`` (an index directory)."""
    if not options or not options[0].strip():
        raise ConfigError(f"bad embedder spec {spec!r} -- use 'tuned:<model dir>[:<max tokens>]'")
    path = Path(options[0].strip())
    if not path.is_absolute():
        if base_dir is None:
            path = path.resolve()
        else:
            path = Path(base_dir) / path
    seq: int | None = None
    for option in options[1:]:
        opt = option.strip().lower()
        if opt.isdigit() and seq is None:
            seq = int(opt)
        elif opt != "int8":
            raise ConfigError(f"bad embedder spec {spec!r} -- use 'tuned:<model dir>[:<max tokens>]'")
    if not path.is_dir():
        raise ConfigError(f"tuned encoder directory {path} does not exist (embedder spec {spec!r})")
    return TunedEmbedder(path, max_seq_length=seq)
