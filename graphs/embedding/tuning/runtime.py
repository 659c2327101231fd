"""Running a tuned encoder: the shipped model's ONNX int8 path over the tuned directory's own graph.

Why its own embedder class: the tuned ONNX graph is stored with the index (its hash in the manifest),
not in the user model cache, and is never rebuilt from a query path; the model name carries the graph's
hash, so vectors, caches and indexes of two tunings never mix.
"""

from __future__ import annotations

from pathlib import Path

from graphs.embedding.embedder import MiniLMEmbedder, minilm_model_name
from graphs.embedding.tuning.export import ONNX_FILE, read_sidecar
from graphs.errors import ConfigError

__all__ = ["TUNED_PREFIX", "TunedEmbedder", "tuned_from_spec", "tuned_model_name"]

#: Spec prefix: ``tuned:<model dir>[:<max tokens>]``; a relative directory is read from the index directory.
TUNED_PREFIX = "tuned"


def tuned_model_name(max_seq_length: int, onnx_sha256: str) -> str:
    """``all-MiniLM-L6-v2@64+int8+tuned-<12 hex>``: the base identity plus the tuned graph's hash."""
    return f"{minilm_model_name(max_seq_length, 'int8')}+tuned-{onnx_sha256[:12]}"


class TunedEmbedder(MiniLMEmbedder):
    """A tuned model directory (see :mod:`graphs.embedding.tuning.export`) on ONNX Runtime, int8."""

    def __init__(self, model_dir: Path, batch_size: int = 64, max_seq_length: int | None = None) -> None:
        record = read_sidecar(model_dir)
        seq = int(max_seq_length or record.get("settings", {}).get("max_seq_length", 128))
        super().__init__(batch_size=batch_size, max_seq_length=seq, quantize=True)
        self.model_dir = Path(model_dir)
        self.onnx_sha256 = str(record["onnx_sha256"])
        self.model_name = tuned_model_name(seq, self.onnx_sha256)

    def _get_encoder(self) -> object:
        if self._encoder is None:
            with self._lock:
                if self._encoder is None:
                    from graphs.embedding.onnx_runtime import CachedModel, OnnxBertEncoder

                    encoder = OnnxBertEncoder(self.model_dir, max_seq_length=self.max_seq_length, variant="int8")
                    # the stored graph, named by its recorded hash: never rebuilt (the manifest checks the file)
                    encoder.model = CachedModel(self.model_dir / ONNX_FILE, self.onnx_sha256, None, rebuilt=False)
                    self._encoder = encoder
        return self._encoder


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
