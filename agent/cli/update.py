"""`skb index --update CHANGES.jsonl`: a change set applied to an existing index (``graphs.update``)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from graphs.errors import SKBError
from graphs.progress import ProgressReporter, print_table, print_text


def run_update(changes_path: Path, index_dir: Path, *, as_json: bool, quiet: bool, console: Console) -> None:
    """Apply the change set and print what was applied and skipped (SKBErrors go to the caller: exit 2)."""
    from graphs.update import read_changes, update_index

    if not (index_dir / "manifest.json").is_file():
        raise SKBError(f"--update applies a change set to an existing index, and {index_dir} holds none "
                       "(manifest.json missing); build it first with `skb index --dataset ... --index-dir "
                       f"{index_dir}`")
    changes = read_changes(changes_path)
    with ProgressReporter(quiet=quiet) as progress:
        summary = update_index(index_dir, changes, progress=progress)
    if as_json:
        print(summary.model_dump_json(indent=2))
        return
    if summary.status == "already applied":
        print_text(console, f"change set {summary.changes_sha256[:12]} was applied to {index_dir} before; "
                   "nothing to do")
        return
    rows = [["applied", what, f"{n:,}"] for what, n in sorted(summary.applied.items())]
    rows += [["skipped", f"{what} (equal to the index)", f"{n:,}"] for what, n in sorted(summary.skipped.items())]
    print_table(console, f"update {index_dir}", ["", "change", "count"], rows, right=["count"])
    if summary.status == "unchanged":
        print_text(console, "every change equals what the index holds; no new generation was written")
        return
    total = sum(summary.timings_s.values())
    print_text(console, f"generation {summary.generation[:12]} (parent {summary.parent[:12]}) written in "
               f"{total:.1f}s; {summary.changed_nodes} node(s) changed, {summary.deleted_nodes} deleted")
