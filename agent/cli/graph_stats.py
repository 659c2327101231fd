"""`skb graph stats`: how many similarity edges each SAGE setting would keep, on an existing index.

Mounted by the main CLI with ``app.add_typer(graph_app, name="graph")``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from graphs.errors import ConfigError, SKBError
from graphs.progress import ProgressReporter, print_error, print_table, print_text

graph_app = typer.Typer(help="Similarity-graph (SAGE) tools.", no_args_is_help=True)
console = Console(soft_wrap=True)
err_console = Console(stderr=True, soft_wrap=True)


@graph_app.callback()
def _graph() -> None:
    """Similarity-graph (SAGE) tools; a callback keeps `stats` a subcommand even when it is the only one."""


def _parse_percentiles(text: str) -> list[float]:
    out: list[float] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            value = float(part)
        except ValueError as exc:
            raise ConfigError(f"--percentiles: {part!r} is not a number; write e.g. 90,95,97,99") from exc
        if not 0 <= value <= 100:
            raise ConfigError(f"--percentiles: {value:g} is outside [0, 100]")
        out.append(value)
    if not out:
        raise ConfigError("--percentiles is empty; write e.g. 90,95,97,99")
    return out


def _parse_logics(text: str) -> list[str]:
    out = [part.strip().lower() for part in text.split(",") if part.strip()]
    bad = [lg for lg in out if lg not in ("or", "and")]
    if bad or not out:
        raise ConfigError(f"--logic {text!r}: use or, and, or or,and")
    return list(dict.fromkeys(out))


def _parse_fields(items: list[str] | None) -> dict[str, list[str]] | None:
    if not items:
        return None
    out: dict[str, list[str]] = {}
    for item in items:
        label, sep, names = item.partition("=")
        fields = [f.strip() for f in names.split(",") if f.strip()]
        if not sep or not label.strip() or not fields:
            raise ConfigError(f"--fields {item!r}: write LABEL=field1,field2 (e.g. Phenotype=name,synonyms)")
        out[label.strip()] = fields
    return out


@graph_app.command("stats")
def stats_command(
    index_dir: Annotated[Path, typer.Option(help="an index built by `skb index`", envvar="SKB_INDEX_DIR")],
    percentiles: Annotated[str, typer.Option(help="comma-separated percentiles")] = "90,95,97,99",
    logic: Annotated[str, typer.Option(help="or, and, or both: or,and")] = "or,and",
    knn: Annotated[int, typer.Option(help="neighbours per node in the candidate kNN graph")] = 20,
    fields: Annotated[
        list[str] | None, typer.Option(help="LABEL=field1,field2 (repeatable); default: text-rich types' text fields")
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="write stats.json and degree_hist.png here (default: runs/graph-stats/<index>)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="no progress output")] = False,
) -> None:
    """Edges, % of candidate pairs kept, average degree and density per percentile and logic (index unchanged)."""
    from graphs.bundle import IndexBundle
    from graphs.sage.stats import collect_stats

    try:
        pcts = _parse_percentiles(percentiles)
        logics = _parse_logics(logic)
        field_map = _parse_fields(fields)
        if knn < 1:
            raise ConfigError(f"--knn must be >= 1, got {knn}")
        out_dir = out if out is not None else Path("runs") / "graph-stats" / Path(index_dir).resolve().name
        with IndexBundle.open(index_dir) as bundle, ProgressReporter(quiet=quiet) as progress:
            report = collect_stats(bundle, pcts, logics, knn=knn, fields=field_map, out_dir=out_dir,  # type: ignore[arg-type]
                                   progress=progress)
    except SKBError as exc:
        print_error(err_console, exc)
        raise typer.Exit(code=2) from None
    if as_json:
        typer.echo(json.dumps(report.model_dump(mode="json"), indent=2))
        return
    cols = ["percentile", "logic", "edges", "% candidates kept", "avg degree", "density", "max degree", "isolated %"]
    rows = [[f"{row.percentile:g}", row.logic.upper(), f"{row.edges:,}", f"{row.kept_pct:.2f}", f"{row.avg_degree:.3f}",
             f"{row.density:.2e}", str(row.max_degree), f"{row.isolated_pct:.1f}"] for row in report.rows]
    print_table(console, f"SAGE similarity edges (kNN {report.knn}) -- {report.index_dir}", cols, rows, right=cols)
    fields_line = "; ".join(f"{lab}: {', '.join(fs)} ({report.nodes.get(lab, 0):,} nodes)"
                            for lab, fs in report.fields.items())
    print_text(console, f"fields: {fields_line}")
    print_text(console, f"candidate pairs: {sum(report.candidate_pairs.get(lab, 0) for lab in report.fields):,}; "
               f"time: {report.timings_s}")
    if report.histogram_png:
        print_text(console, f"degree histograms: {report.histogram_png}")
