"""Phrasing variants of a bench CSV, made by generic transformations only.

Why: a benchmark whose questions mark the topic entity (MetaQA "vanilla": ``[Tom Hanks]``) says
nothing about questions that do not. ``unbracket`` removes the brackets (``[X]`` -> ``X``) and keeps
every other column, so the same gold answers measure the agent on the unmarked phrasing.

Usage::

    python -m evals.studies.variants unbracket --bench in.csv --out out.csv [--per-style 300] [--seed 2026]
"""

from __future__ import annotations

import argparse
import csv
import random
import re
import sys
from collections import defaultdict
from pathlib import Path

_BRACKET = re.compile(r"\[([^\[\]]*)\]")


def unbracket(text: str) -> str:
    """``which films did [Tom Hanks] act in`` -> ``which films did Tom Hanks act in``."""
    return _BRACKET.sub(r"\1", text)


def sample_rows(rows: list[dict[str, str]], per_style: int | None, seed: int) -> list[dict[str, str]]:
    """A stratified sample: ``per_style`` rows of each ``style`` value (all rows when None)."""
    if not per_style:
        return rows
    groups: dict[str, list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        groups[row.get("style", "")].append(row)
    rng = random.Random(seed)
    out: list[dict[str, str]] = []
    for style in sorted(groups):
        group = groups[style]
        out.extend(rng.sample(group, min(per_style, len(group))))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("variant", choices=["unbracket", "same"], help="transformation of the query column")
    parser.add_argument("--bench", required=True, type=Path, help="input bench CSV (needs a 'query' column)")
    parser.add_argument("--out", required=True, type=Path, help="output CSV")
    parser.add_argument("--per-style", type=int, default=None, help="stratified sample size per style")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args(argv)
    with args.bench.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        fields = list(reader.fieldnames or [])
        rows = list(reader)
    if "query" not in fields:
        sys.exit(f"{args.bench}: no 'query' column (columns: {fields}) -- pass a bench CSV")
    rows = sample_rows(rows, args.per_style, args.seed)
    if args.variant == "unbracket":
        rows = [{**row, "query": unbracket(row["query"])} for row in rows]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
