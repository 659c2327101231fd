"""The tuning stage end to end: mine the graph's pairs, train, export; what ``skb tune`` and
``skb index --tune-encoder`` run."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphs.tuning.pairs import mine_pairs
from graphs.tuning.train import TuneConfig

if TYPE_CHECKING:
    from graphs.skb.model import SKB

__all__ = ["tune_encoder"]

Progress = Callable[[int, int], None]


def tune_encoder(
    skb: SKB,
    out_dir: Path,
    config: TuneConfig,
    *,
    base_dir: Path | None = None,
    progress: Progress | None = None,
    checkpoint_dir: Path | None = None,
    checkpoint_every: int = 0,
) -> dict[str, Any]:
    """Fine-tune the shipped encoder (or ``base_dir``) on ``skb``'s own pairs and write it to ``out_dir``.

    Returns the sidecar record. ``checkpoint_dir``: every ``checkpoint_every`` steps the weights so far
    are written there as ``step-<n>/`` model directories (for a learning curve; not used by an index).
    """
    from graphs.embedding.embedder import MINILM_NAME, _minilm_path
    from graphs.tuning.export import write_tuned_model
    from graphs.tuning.train import train_encoder

    config.check()
    base = Path(base_dir) if base_dir is not None else _minilm_path()
    base_name = MINILM_NAME if base_dir is None else base.name
    pairs = mine_pairs(skb, kinds=config.kinds, hard_negatives=config.hard_negatives, seed=config.seed)
    settings = _settings(config)

    def checkpoint(step: int, state: dict[str, Any]) -> None:
        assert checkpoint_dir is not None
        write_tuned_model(
            Path(checkpoint_dir) / f"step-{step}", base, state, pairs=[], settings={**settings, "steps": step},
            stats={"train_seconds": None}, base_model_name=base_name,
        )

    result = train_encoder(
        base, pairs, config, progress=progress,
        on_checkpoint=checkpoint if checkpoint_dir is not None else None, checkpoint_every=checkpoint_every,
    )
    settings = _settings(result.config)  # what ran: the device's steps, batch and learning rate
    stats = {
        "train_seconds": round(result.seconds, 1),
        "device": result.device,
        "peak_rss_mb": round(result.peak_rss_mb, 1),
        "peak_gpu_mb": None if result.peak_gpu_mb is None else round(result.peak_gpu_mb, 1),
        "final_loss": round(sum(result.losses[-10:]) / max(1, len(result.losses[-10:])), 4),
        "first_loss": round(sum(result.losses[:10]) / max(1, len(result.losses[:10])), 4),
    }
    return write_tuned_model(
        out_dir, base, result.state_dict, pairs=pairs, settings=settings, stats=stats, base_model_name=base_name
    )


def _settings(config: TuneConfig) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in dataclasses.asdict(config).items()}


#: Where an index keeps its tuned encoder, and the spec its manifest records for it.
INDEX_ENCODER_DIR = "encoder"


def _base_seq(spec: str) -> int:
    """The token window of a ``minilm[:<n>][:int8]`` spec (what a tuned encoder for that index runs with)."""
    from graphs.errors import ConfigError

    base, *options = spec.split(":")
    if base.strip().lower() not in ("minilm", "all-minilm-l6-v2"):
        raise ConfigError(
            f"encoder tuning adapts the bundled MiniLM; --embedder {spec!r} is not it -- use minilm[:<max tokens>]"
        )
    digits = [o for o in options if o.strip().isdigit()]
    return int(digits[0]) if digits else 128


def index_encoder(
    skb: SKB,
    build_dir: Path,
    embedder_spec: str,
    tune: TuneConfig | None,
    *,
    progress: Progress | None = None,
) -> str:
    """Put the index's tuned encoder in ``build_dir/encoder`` and return the spec the manifest records.

    ``tune``: train one on ``skb`` now (its token window follows ``embedder_spec``, a MiniLM spec);
    otherwise ``embedder_spec`` is ``tuned:<dir>`` naming one trained before (``skb tune``), which is
    copied in. Either way the index holds its encoder, so it can move and still embed its queries.
    """
    from graphs.embedding.tuned import tuned_from_spec
    from graphs.tuning.export import copy_tuned_model, read_sidecar

    target = Path(build_dir) / INDEX_ENCODER_DIR
    if tune is not None:
        seq = _base_seq(embedder_spec)
        tune_encoder(skb, target, dataclasses.replace(tune, max_seq_length=seq), progress=progress)
    else:
        _, *options = embedder_spec.split(":")
        source = tuned_from_spec(embedder_spec, options, None)
        seq = source.max_seq_length
        copy_tuned_model(source.model_dir, target)
    read_sidecar(target)
    return f"tuned:{INDEX_ENCODER_DIR}:{seq}"
