"""`skb trace list | show | html`: read the local trace database that `skb ask` / `skb eval` write.

Registered by the main app as ``app.add_typer(trace_app, name="trace")``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree

from agent.tracing.html import format_ms, tool_steps, write_trace_html
from agent.tracing.tracer import TraceRun, TraceStore, default_trace_db
from graphs.errors import SKBError
from graphs.progress import print_error, print_text, terminal_text

trace_app = typer.Typer(help="Inspect local traces of agent runs (LangSmith-style run trees).", no_args_is_help=True)

IndexDirOpt = Annotated[Path | None, typer.Option("--index-dir", help="index whose traces to read (DIR/traces.sqlite)")]
DbOpt = Annotated[Path | None, typer.Option("--db", help="trace database path (overrides --index-dir)")]


def _plain(value: object) -> str:
    """A stored field as inert terminal text. A trace database may come from elsewhere: Rich markup in it
    would be interpreted (hyperlinks, or a crash on a stray closing tag) and ESC/CSI sequences would
    reach the terminal (retitle it, rewrite lines), so markup is escaped and control characters are
    shown as \\xNN."""
    return escape(terminal_text(value))


def _open(index_dir: Path | None, db: Path | None) -> TraceStore:
    path = db if db is not None else default_trace_db(index_dir)
    return TraceStore(path, read_only=True)


def _fail(exc: SKBError) -> typer.Exit:
    print_error(Console(stderr=True), exc)
    return typer.Exit(code=2)


@trace_app.command("list")
def list_cmd(
    index_dir: IndexDirOpt = None,
    db: DbOpt = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, help="most recent traces to show")] = 20,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON lines instead of a table")] = False,
) -> None:
    """Most recent traces, newest first."""
    try:
        store = _open(index_dir, db)
        traces = store.list_traces(limit)
    except SKBError as exc:
        raise _fail(exc) from exc
    if as_json:
        for t in traces:
            typer.echo(t.model_dump_json())
        return
    table = Table(title=f"traces in {_plain(store.path)}", box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("run id", no_wrap=True, min_width=36)
    table.add_column("started (UTC)", no_wrap=True, min_width=14)
    table.add_column("duration", justify="right", no_wrap=True, min_width=8)
    table.add_column("llm/tool", justify="right", no_wrap=True, min_width=8)
    table.add_column("tokens", justify="right", no_wrap=True, min_width=6)
    table.add_column("question", overflow="ellipsis", no_wrap=True, min_width=12, max_width=60)
    for t in traces:
        duration = "[red]error[/red]" if t.status == "error" else _plain(format_ms(t.duration_ms))
        table.add_row(
            _plain(t.id),
            _plain(t.start_time[5:19].replace("T", " ")),
            duration,
            f"{t.llm_calls}/{t.tool_calls}",
            str(t.total_tokens),
            _plain(t.preview),
        )
    Console().print(table)
    if not traces:
        print_text(Console(), "no traces yet: run `skb ask ...` first")


def _duration(run: TraceRun) -> float | None:
    """The run's duration, or None when a foreign database holds timestamps that are not ISO 8601."""
    try:
        return run.duration_ms
    except (TypeError, ValueError):
        return None


def _label(run: TraceRun, keys_found: dict[str, int]) -> str:
    colour = {"chain": "blue", "llm": "magenta", "tool": "green", "retriever": "yellow"}.get(run.run_type, "white")
    parts = [f"[{colour}]{_plain(run.run_type)}[/{colour}] [bold]{_plain(run.name)}[/bold]", format_ms(_duration(run))]
    p, c, t = run.subtree_tokens()
    if t:
        parts.append(f"{t} tok ({p}/{c})")
    if run.id in keys_found:
        parts.append(f"{keys_found[run.id]} nodes")
    if run.status == "error":
        first = run.error.splitlines()[0][:120] if run.error else ""
        parts.append(f"[red]error: {_plain(first)}[/red]")
    return "  ".join(parts)


@trace_app.command("show")
def show_cmd(
    run_id: Annotated[str, typer.Argument(help="run id (or a unique prefix/suffix) from `skb trace list`")],
    index_dir: IndexDirOpt = None,
    db: DbOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the run tree as JSON")] = False,
) -> None:
    """The run tree of one trace: run types, names, durations, tokens and nodes found per tool call."""
    try:
        store = _open(index_dir, db)
        tree = store.get_tree(run_id)
    except SKBError as exc:
        raise _fail(exc) from exc
    if as_json:
        typer.echo(json.dumps(tree.model_dump(mode="json"), indent=2, ensure_ascii=False))
        return
    keys_found = {s.run_id: len(s.keys) for s in tool_steps(tree)}
    root = Tree(_label(tree, keys_found))
    nodes: dict[str, Tree] = {tree.id: root}
    for _, run in tree.walk():
        if run.id == tree.id:
            continue
        parent = nodes[run.parent_run_id or tree.id]
        nodes[run.id] = parent.add(_label(run, keys_found))
    console = Console()
    console.print(root)
    if tree.parent_run_id is None:
        usage = store.usage_by_stage(tree.trace_id)
        if usage:
            table = Table(title="LLM usage per stage")
            for col in ("stage", "calls", "prompt", "completion"):
                table.add_column(col, justify="left" if col == "stage" else "right")
            for stage, u in sorted(usage.items()):
                table.add_row(_plain(stage), str(u.llm_calls), str(u.prompt_tokens), str(u.completion_tokens))
            console.print(table)


@trace_app.command("html")
def html_cmd(
    run_id: Annotated[str, typer.Argument(help="run id (or a unique prefix/suffix) from `skb trace list`")],
    out: Annotated[Path, typer.Option("--out", "-o", help="HTML file to write")] = Path("trace.html"),
    index_dir: IndexDirOpt = None,
    db: DbOpt = None,
) -> None:
    """Write one trace as a self-contained HTML page (collapsible run tree, inputs/outputs, Cypher)."""
    try:
        store = _open(index_dir, db)
        path = write_trace_html(store, run_id, out)
    except SKBError as exc:
        raise _fail(exc) from exc
    typer.echo(str(path))


if __name__ == "__main__":  # pragma: no cover
    trace_app()
