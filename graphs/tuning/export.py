"""Writing a tuned encoder: a model directory the ONNX builder and sentence-transformers both read.

Layout (``<dir>/``): the base model's small files (config, tokenizer, pooling), ``model.safetensors``
(the tuned weights), ``model.int8.onnx`` (built by :func:`graphs.embedding.onnx_graph.build_bert_onnx`
and quantized like the shipped model's int8 variant), ``pairs.jsonl`` (every training pair with the node
keys and fields it came from) and ``encoder.json`` (the sidecar: hashes of the weights and the ONNX graph,
the tuning settings, the pair counts by kind, the time and memory it took). Every file is written
atomically; the sidecar last, so a directory with a sidecar is complete.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from graphs.errors import ConfigError
from graphs.manifest import atomic_write_bytes, atomic_write_text

__all__ = ["ENCODER_SIDECAR", "ONNX_FILE", "PAIRS_FILE", "WEIGHTS_FILE", "read_sidecar", "write_tuned_model"]

from graphs.embedding.tuned import (
    ENCODER_SIDECAR,
    ONNX_FILE,
    PAIRS_FILE,
    SIDECAR_FORMAT,
    WEIGHTS_FILE,
    read_sidecar,
    vector_file_hashes,
)

#: The base model's files a tuned directory keeps (everything but its weights): small, and they make the
#: directory loadable by sentence-transformers as well as by the ONNX builder.
_CARRIED = (
    "config.json",
    "config_sentence_transformers.json",
    "modules.json",
    "sentence_bert_config.json",
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "1_Pooling/config.json",
)


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def weights_bytes(state_dict: dict[str, Any]) -> bytes:
    """The state dict as safetensors bytes (tensors only; buffers such as position ids are kept as saved)."""
    from safetensors.torch import save

    tensors = {k: v for k, v in state_dict.items() if hasattr(v, "contiguous")}
    data: bytes = save(tensors, metadata={"format": "pt"})
    return data


def write_tuned_model(
    out_dir: Path,
    base_dir: Path,
    state_dict: dict[str, Any],
    *,
    pairs: Sequence[Any],
    settings: dict[str, Any],
    stats: dict[str, Any],
    base_model_name: str = "all-MiniLM-L6-v2",
) -> dict[str, Any]:
    """Write the model directory (see the module docstring) and return its sidecar record.

    ``base_model_name``: the identity of the encoder tuned (the tuned model's name extends it)."""
    from graphs.embedding.onnx_graph import GRAPH_VERSION, build_bytes

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    for rel in _CARRIED:
        src = Path(base_dir) / rel
        if src.is_file():
            atomic_write_bytes(out_dir / rel, src.read_bytes())
    if not (out_dir / "tokenizer.json").is_file() or not (out_dir / "config.json").is_file():
        raise ConfigError(f"the base encoder at {base_dir} lacks tokenizer.json or config.json -- reinstall it")
    weights = weights_bytes(state_dict)
    atomic_write_bytes(out_dir / WEIGHTS_FILE, weights)
    onnx = build_bytes(out_dir, "int8")
    atomic_write_bytes(out_dir / ONNX_FILE, onnx)
    lines = "".join(json.dumps(p.record(), ensure_ascii=False, sort_keys=True) + "\n" for p in pairs)
    atomic_write_text(out_dir / PAIRS_FILE, lines)
    record = {
        "format": SIDECAR_FORMAT,
        "graph_version": GRAPH_VERSION,
        "base_model_name": base_model_name,
        "base_sha256": _sha256((Path(base_dir) / WEIGHTS_FILE).read_bytes()),
        "weights_sha256": _sha256(weights),
        "onnx_sha256": _sha256(onnx),
        "files_sha256": vector_file_hashes(out_dir),
        "onnx_variant": "int8",
        "pairs_sha256": _sha256(lines.encode("utf-8")),
        "pairs": dict(sorted(Counter(p.kind for p in pairs).items())),
        "hard_negatives": sum(1 for p in pairs if p.negative is not None),
        "settings": settings,
        **stats,
    }
    atomic_write_text(out_dir / ENCODER_SIDECAR, json.dumps(record, indent=2, sort_keys=True) + "\n")
    return record


def copy_tuned_model(src: Path, dst: Path) -> dict[str, Any]:
    """Copy a tuned model directory (checked by its sidecar) into ``dst``: what an index stores."""
    record = read_sidecar(src)
    for rel in (*_CARRIED, WEIGHTS_FILE, ONNX_FILE, PAIRS_FILE, ENCODER_SIDECAR):
        path = Path(src) / rel
        if path.is_file():
            (Path(dst) / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, Path(dst) / rel)
    return record
