"""How long an update of N changed nodes takes on a built index, stage by stage.

The change set is drawn from the index's own graph, whatever its labels and relations: 60 % of N nodes get their
text field edited, 20 % are deleted and 20 % are added, each new node with three edges copied from the relation and
end label of an existing node of its label. It runs on a copy of the index (``--copy``: the index is never
written) so it can be repeated. Prints the update's summary with the build's per-stage timings as JSON.

    python -m evals.studies.update_timing --index .skb/hpo --copy /tmp/upd --nodes 100
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from graphs.build import default_cache_dir


def copy_index(index: Path, to: Path) -> None:
    """A copy of a built index at ``to`` with its embedding cache beside it (so an update or a rebuild there embeds
    only what changed, as on the original), without its trace database."""
    shutil.copytree(index, to, ignore=shutil.ignore_patterns("traces.sqlite*"))
    cache = default_cache_dir(index)
    if cache.is_dir():
        shutil.copytree(cache, default_cache_dir(to))


def change_lines(index_dir: Path, nodes: int, seed: int = 0,
                 counts: tuple[int, int, int] | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """The change set (as JSON-ready lines) for ``nodes`` changed nodes of the index's graph; ``counts``: (edited,
    deleted, added) nodes instead of 60 / 20 / 20 % of ``nodes``."""
    from graphs.loaders.jsonl import load_jsonl

    skb = load_jsonl(index_dir / "skb")
    rng = random.Random(seed)
    keys = sorted(skb.nodes)
    edits, deletes, adds = counts or (round(nodes * 0.6), round(nodes * 0.2), nodes - round(nodes * 0.6) - round(nodes * 0.2))
    picked = rng.sample(keys, edits + deletes)
    lines: list[dict[str, Any]] = []
    for key in picked[:edits]:
        node = skb.nodes[key]
        props = dict(node.props)
        field = next((k for k, v in props.items() if isinstance(v, str) and v), "name")
        props[field] = f"{props.get(field, key)} (revised)"
        lines.append({"op": "upsert", "node": {"key": key, "label": node.label, "props": props}})
    gone = set(picked[edits:])
    lines += [{"op": "delete", "node": {"key": key}} for key in sorted(gone)]
    out_edges: dict[str, list[tuple[str, str]]] = {}
    for edge in skb.edges:
        out_edges.setdefault(edge.src, []).append((edge.rel, skb.nodes[edge.dst].label))
    by_label: dict[str, list[str]] = {}
    for key in keys:
        if key not in gone:
            by_label.setdefault(skb.nodes[key].label, []).append(key)
    templates = [k for k in keys if out_edges.get(k) and k not in gone]
    for i in range(adds):
        model = skb.nodes[rng.choice(templates)]
        key = f"update-timing:{seed}:{i}"
        lines.append({"op": "upsert", "node": {"key": key, "label": model.label,
                                               "props": {"name": f"new entry {i} of {model.label}"}}})
        for rel, end_label in rng.sample(out_edges[model.key], min(3, len(out_edges[model.key]))):
            dst = rng.choice(by_label[end_label])
            lines.append({"op": "upsert", "edge": {"src": key, "rel": rel, "dst": dst}})
    return lines


def main(argv: list[str] | None = None) -> int:
    from graphs.update import read_changes, update_index

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--index", type=Path, required=True)
    parser.add_argument("--copy", type=Path, required=True, help="work directory: the index and its cache are copied here")
    parser.add_argument("--nodes", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--counts", help="EDITED,DELETED,ADDED nodes instead of 60 / 20 / 20 %% of --nodes")
    args = parser.parse_args(argv)
    counts: tuple[int, int, int] | None = None
    if args.counts:
        try:
            parts = [int(x) for x in args.counts.split(",")]
        except ValueError:
            parts = []
        if len(parts) != 3 or min(parts) < 0:
            parser.error(f"--counts takes three whole numbers, EDITED,DELETED,ADDED; got {args.counts!r}")
        counts = (parts[0], parts[1], parts[2])
    if args.copy.exists():
        shutil.rmtree(args.copy)
    index = args.copy / "index"
    copy_index(args.index, index)
    changes = args.copy / "changes.jsonl"
    changes.write_text("".join(json.dumps(line) + "\n" for line in change_lines(index, args.nodes, args.seed, counts)))
    load = os.getloadavg()
    started = time.perf_counter()
    summary = update_index(index, read_changes(changes))
    wall = time.perf_counter() - started
    out = summary.model_dump(mode="json", exclude={"build"})
    out |= {"wall_s": round(wall, 2), "load_before": [round(x, 2) for x in load],
            "load_after": [round(x, 2) for x in os.getloadavg()],
            "build_timings_s": summary.build.timings_s if summary.build else None}
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
