"""``skb eval``: run methods over a benchmark, write the report, compare runs.

Mounted by the main CLI with ``app.add_typer(eval_app, name="eval")``. Both
``skb eval run --bench ...`` and the short ``skb eval --bench ...`` work: the group
callback runs the evaluation itself when it gets options and no subcommand.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from agent.cli.options import parse_settings
from evals.bench import AnswerCoverage, Bench, check_answers, load_bench
from evals.compare import compare_runs, render_comparison
from evals.methods import make_method, method_names, method_options
from evals.metrics import DEFAULT_RESAMPLES, DEFAULT_SEED, HEADLINE_METRICS
from evals.report import METRIC_LABELS, RUN_FILE, RunInfo, read_run_info, write_report
from evals.runner import run_method
from graphs.errors import ConfigError, SKBError
from graphs.manifest import atomic_write_json, atomic_write_text
from graphs.progress import print_error, print_table, print_text

eval_app = typer.Typer(
    name="eval",
    help="Evaluate retrieval methods on a benchmark (STaRK metrics, CIs, latency, cost).",
    no_args_is_help=False,
    add_completion=False,
)
console = Console(stderr=True)
out_console = Console()

DEFAULT_METHODS = ("bm25", "vss", "hybrid")

BenchOpt = Annotated[Path | None, typer.Option("--bench", help="Benchmark CSV (id,query,answer_ids[,target_type,"
                                               "style,...]) or a STaRK dataset directory.")]
IndexOpt = Annotated[Path | None, typer.Option("--index-dir", help="Index directory built by `skb index`.")]
MethodOpt = Annotated[list[str] | None, typer.Option("--method", "-m", help="Method, repeatable: " +
                                                     ", ".join(method_names()) + ". Default: bm25, vss, hybrid.")]
LimitOpt = Annotated[int | None, typer.Option("--limit", help="Only the first N questions (after --split).")]
WorkersOpt = Annotated[int, typer.Option("--workers", "-w", help="Questions run concurrently (threads).")]
SplitOpt = Annotated[str | None, typer.Option("--split", help="train|val|test (STaRK split/*.index) or an .index "
                                              "file.")]
OutOpt = Annotated[Path | None, typer.Option("--out", help="Run directory (resumable: finished questions are "
                                             "skipped).")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", help="Method setting KEY=VALUE (JSON value), repeatable; "
                                                  "goes to every selected method that accepts KEY; METHOD.KEY=VALUE "
                                                  "targets one method (see `skb eval methods`).")]
StoreOpt = Annotated[str | None, typer.Option("--store", help="Graph store for agent methods (falkordb|neo4j).")]
ResamplesOpt = Annotated[int, typer.Option("--resamples", help="Bootstrap resamples.")]
SeedOpt = Annotated[int, typer.Option("--seed", help="Bootstrap seed.")]
ProgressOpt = Annotated[bool, typer.Option("--progress/--no-progress", help="Show progress (a bar on a terminal, "
                                                                         "a status line every 10 s or 10% otherwise).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress output (same as --no-progress).")]

def open_bundle(index_dir: Path, store: str | None = None) -> Any:
    """The index handle methods search; a seam for tests (monkeypatched with a fake)."""
    from graphs.bundle import IndexBundle

    return IndexBundle.open(index_dir, store=store)


def known_keys(bundle: Any) -> Any:
    """The SKB's node keys (a dict, so membership is O(1)); None when the bundle has no SKB."""
    skb = getattr(bundle, "skb", None)
    return getattr(skb, "nodes", None)


def _fail(exc: SKBError) -> typer.Exit:
    print_error(console, exc)
    return typer.Exit(code=2)


def route_settings(methods: list[str], settings: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Give each method the settings it accepts; ``METHOD.KEY`` targets one method only.

    A setting that no selected method accepts is an error rather than silently ignored.
    """
    options: dict[str, set[str]] = {}
    for name in methods:
        try:
            options[name] = set(method_options(name))
        except ImportError as exc:
            raise ConfigError(f"method {name!r} needs a module that is not available ({exc}); "
                              "choose another method") from None
    routed: dict[str, dict[str, Any]] = {name: {} for name in methods}
    unused: list[str] = []
    for raw_key, value in settings.items():
        target, dot, key = raw_key.rpartition(".")
        if dot and target not in options:
            raise ConfigError(f"--set {raw_key}: {target!r} is not a selected method ({', '.join(methods)})")
        takers = [target] if dot else [name for name in methods if key in options[name]]
        takers = [name for name in takers if key in options[name]]
        if not takers:
            unused.append(raw_key)
        for name in takers:
            routed[name][key] = value
    if unused:
        raise ConfigError(f"no selected method accepts setting(s) {', '.join(sorted(unused))}; "
                          + "; ".join(f"{n}: {', '.join(sorted(o)) or '(none)'}" for n, o in options.items()))
    return routed


def _write_run_info(out: Path, bench: Bench, limit: int | None, index_dir: Path, methods: list[str],
                    coverage: AnswerCoverage | None) -> None:
    previous = read_run_info(out)
    if previous.bench is not None and (previous.bench != bench.source or previous.split != bench.split):
        raise ConfigError(f"{out} holds a run of {previous.bench} (split {previous.split}); use another --out for "
                          f"{bench.source} (split {bench.split})")
    merged = list(dict.fromkeys([*previous.methods, *methods]))
    info = RunInfo(bench=bench.source, split=bench.split, limit=limit, index_dir=str(index_dir), methods=merged,
                   question_ids=[q.id for q in bench.questions],
                   coverage=None if coverage is None else coverage.model_dump(),
                   split_ids_missing=bench.split_ids_missing)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out / RUN_FILE, info.model_dump(mode="json"))


def _print_coverage(coverage: AnswerCoverage | None) -> None:
    if coverage is None:
        print_error(console, "the index exposes no SKB; answer keys were not checked", label="warning:", style="yellow")
        return
    if coverage.unknown_count:
        print_error(
            console,
            f"{coverage.unknown_count} of {coverage.n_answer_keys} answer keys are not in the "
            f"index (e.g. {', '.join(coverage.unknown_examples[:5])}); {len(coverage.all_unknown_questions)} "
            "questions have no answer in the index. They are kept and score as misses; see report.md.",
            label="warning:", style="yellow",
        )


def _print_summary(metrics: dict[str, Any]) -> None:
    columns = ["method", "n", *(METRIC_LABELS[m] for m in HEADLINE_METRICS), "p50 ms"]
    rows = []
    for name, m in metrics["methods"].items():
        cells = []
        for k in HEADLINE_METRICS:
            est = m["overall"].get(k) or {}
            cells.append("–" if est.get("mean") is None else
                         f"{est['mean']:.3f} [{est['ci_low']:.3f}, {est['ci_high']:.3f}]")
        p50 = m["latency_ms"].get("total", {}).get("p50")
        rows.append([name, str(m["n"]), *cells, "–" if p50 is None else f"{p50:.1f}"])
    print_table(out_console, "Overall (mean [95% CI])", columns, rows, right=columns[1:])


def run_eval(
    *,
    bench_path: Path,
    index_dir: Path,
    methods: list[str],
    out: Path,
    limit: int | None = None,
    workers: int = 1,
    split: str | None = None,
    settings: list[str] | None = None,
    store: str | None = None,
    resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
    progress: bool = True,
) -> dict[str, Any]:
    """The whole evaluation: load, check answers, run every method (resumably), write the report."""
    methods = list(dict.fromkeys(methods))
    routed = route_settings(methods, parse_settings(settings))  # validates method names before any slow work
    bench = load_bench(bench_path, split=split, limit=limit)
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    bundle = open_bundle(index_dir, store)
    try:
        keys = known_keys(bundle)
        coverage = check_answers(bench.questions, keys) if keys is not None else None
        _print_coverage(coverage)
        _write_run_info(out, bench, limit, index_dir, methods, coverage)
        for name in methods:
            retriever = make_method(name, bundle, **routed[name])
            summary = run_method(retriever, bench.questions, out, workers=workers, known=keys, progress=progress)
            print_text(console, f"{name}: ran {summary.ran}, skipped {summary.skipped} finished, "
                       f"errors {summary.errors} -> {summary.results_path}")
            if summary.errors:
                print_error(console, f"{name}: {summary.errors} questions failed and score as misses "
                            f"(rerun the same command to retry them); first: {summary.first_error or ''}",
                            label="warning:", style="yellow")
    finally:
        close = getattr(bundle, "close", None)
        if callable(close):
            close()
    metrics = write_report(out, question_ids=[q.id for q in bench.questions], n_resamples=resamples, seed=seed)
    _print_summary(metrics)
    print_text(console, f"report: {out / 'report.md'}")
    return metrics


def _run_from_options(
    bench: Path | None, index_dir: Path | None, method: list[str] | None, limit: int | None, workers: int,
    split: str | None, out: Path | None, settings: list[str] | None, store: str | None, resamples: int, seed: int,
    progress: bool,
) -> None:
    missing = [flag for flag, value in (("--bench", bench), ("--index-dir", index_dir), ("--out", out))
               if value is None]
    if missing:
        print_error(console, f"missing {', '.join(missing)}; e.g. skb eval run --bench "
                    "../shared/bench/hpo_cases_dev.csv --index-dir .skb/hpo --method bm25 --out runs/dev")
        raise typer.Exit(code=2)
    assert bench is not None and index_dir is not None and out is not None
    try:
        run_eval(bench_path=bench, index_dir=index_dir, methods=method or list(DEFAULT_METHODS), out=out,
                 limit=limit, workers=workers, split=split, settings=settings, store=store, resamples=resamples,
                 seed=seed, progress=progress)
    except SKBError as exc:
        raise _fail(exc) from None


@eval_app.command("run")
def run_command(
    bench: BenchOpt = None,
    index_dir: IndexOpt = None,
    method: MethodOpt = None,
    limit: LimitOpt = None,
    workers: WorkersOpt = 1,
    split: SplitOpt = None,
    out: OutOpt = None,
    settings: SetOpt = None,
    store: StoreOpt = None,
    resamples: ResamplesOpt = DEFAULT_RESAMPLES,
    seed: SeedOpt = DEFAULT_SEED,
    progress: ProgressOpt = True,
    quiet: QuietOpt = False,
) -> None:
    """Run methods over a benchmark into --out (resumable) and write metrics.json, report.md and plots."""
    _run_from_options(bench, index_dir, method, limit, workers, split, out, settings, store, resamples, seed,
                      progress and not quiet)


def main(ctx: typer.Context, **options: Any) -> None:
    """Evaluate methods; `skb eval --bench ...` is short for `skb eval run --bench ...`."""
    given = any(options[name] is not None for name in ("bench", "index_dir", "out")) or bool(options["method"])
    if ctx.invoked_subcommand is not None:
        if given:
            print_error(console, "put run options after the subcommand, e.g. skb eval run --bench ...")
            raise typer.Exit(code=2)
        return
    if not given:
        out_console.print(ctx.get_help())
        raise typer.Exit(code=0)
    run_command(**options)


def _with_context(command: Callable[..., None]) -> inspect.Signature:
    """``command``'s options behind a leading ``ctx``: the signature Typer reads for the group callback.

    Why: the short form ``skb eval --bench ...`` needs the run options on the group as well; taking them
    from ``run_command``'s signature declares them once, so the two forms cannot drift apart.
    """
    signature = inspect.signature(command, eval_str=True)
    ctx = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
    return signature.replace(parameters=[ctx, *signature.parameters.values()])


main.__signature__ = _with_context(run_command)  # type: ignore[attr-defined]
eval_app.callback(invoke_without_command=True)(main)


@eval_app.command("report")
def report_command(
    out: Annotated[Path, typer.Argument(help="Run directory.")],
    resamples: ResamplesOpt = DEFAULT_RESAMPLES,
    seed: SeedOpt = DEFAULT_SEED,
) -> None:
    """Recompute metrics.json, report.md and the plots from a run directory's result files."""
    try:
        metrics = write_report(out, n_resamples=resamples, seed=seed)
    except SKBError as exc:
        raise _fail(exc) from None
    _print_summary(metrics)
    print_text(console, f"report: {out / 'report.md'}")


@eval_app.command("compare")
def compare_command(
    run_a: Annotated[Path, typer.Argument(help="Run A: a run directory or a method subdirectory.")],
    run_b: Annotated[Path, typer.Argument(help="Run B: a run directory or a method subdirectory.")],
    out: Annotated[Path | None, typer.Option("--out", help="Also write the comparison here (.json or .md).")] = None,
    resamples: ResamplesOpt = DEFAULT_RESAMPLES,
    seed: SeedOpt = DEFAULT_SEED,
) -> None:
    """Paired comparison B - A per metric: mean difference, paired-bootstrap 95% CI, p-value."""
    try:
        comparisons = compare_runs(run_a, run_b, n_resamples=resamples, seed=seed)
    except SKBError as exc:
        raise _fail(exc) from None
    text = render_comparison(comparisons)
    print_text(out_console, text)
    if out is not None:
        if out.suffix == ".json":
            atomic_write_json(out, [c.model_dump() for c in comparisons])
        else:
            atomic_write_text(out, text)


@eval_app.command("methods")
def methods_command() -> None:
    """List method names and the settings each accepts (--set KEY=VALUE)."""
    for name in method_names():
        try:
            options = ", ".join(method_options(name))
        except ImportError:
            options = "(module not installed)"
        print_text(out_console, f"{name}: {options}")


if __name__ == "__main__":
    eval_app()
