"""Core-stage build time against the number of distinct relation names.

    python -m evals.studies.many_relations --relations 250 --relations 1000 --relations 5000

Why: real graphs (knowledge-base dumps, enterprise graphs) have thousands of relation types, and
every per-relation step of a build that is not linear shows up there first (5,000 names once took
minutes: a Cypher statement per relation pattern, quadratic type naming). Each point generates a
triples file of N relation names, ``--edges`` edges each, between random subjects (so each relation
meets several target types), then loads it (typing included) and builds the core stage into a
temporary directory. It prints the load, the build and the build's stages, one JSON line per point;
``--out`` keeps them.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from graphs.build import IndexConfig, build_index
from graphs.loaders import load_dataset


def write_triples(path: Path, relations: int, edges: int, seed: int = 7) -> None:
    """``relations`` names, ``edges`` triples each: subject i/j, object a random subject."""
    rng = random.Random(seed)
    lines = [
        f"Item {i} {j}|rel_{i:05d}|Item {rng.randrange(relations)} {rng.randrange(edges)}"
        for i in range(relations)
        for j in range(edges)
    ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def measure(relations: int, edges: int) -> dict[str, Any]:
    """One point of the curve (seconds), built in a temporary directory that is removed after."""
    tmp = Path(tempfile.mkdtemp(prefix=f"many-relations-{relations}-"))
    try:
        write_triples(tmp / "kb.txt", relations, edges)
        t0 = time.perf_counter()
        skb = load_dataset("triples", tmp / "kb.txt")
        t1 = time.perf_counter()
        summary = build_index(skb, tmp / "index", IndexConfig(dataset="triples", stage="core"))
        t2 = time.perf_counter()
        return {
            "relations": relations, "labels": len({n.label for n in skb.nodes.values()}), "nodes": len(skb.nodes),
            "edges": len(skb.edges), "load_s": round(t1 - t0, 2), "core_build_s": round(t2 - t1, 2),
            "stages_s": summary.timings_s, "load_average": os.getloadavg()[0],
        }  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(
    relations: Annotated[list[int], typer.Option("--relations", min=1, help="relation names per point")],
    edges: Annotated[int, typer.Option("--edges", min=1, help="edges per relation name")] = 6,
    out: Annotated[Path | None, typer.Option("--out", help="append the JSON lines here")] = None,
) -> None:
    for n in relations:
        point = json.dumps(measure(n, edges))
        typer.echo(point)
        if out is not None:
            with out.open("a", encoding="utf-8") as fh:
                fh.write(point + "\n")


if __name__ == "__main__":
    typer.run(main)
