"""Aggregate result files into ``metrics.json``, ``report.md`` and PNG plots.

The report is computed from the ``results.jsonl`` files alone (not from in-memory
state of a run), so ``skb eval report OUT`` regenerates it after a resumed or
merged run and two people computing it get the same numbers (seeded bootstrap).
"""

from __future__ import annotations

import io
import json
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from evals.metrics import (
    CURVE_MAX_K,
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    HEADLINE_METRICS,
    Estimate,
    aggregate,
    mean_curve,
    percentiles,
    recall_curve,
)
from evals.runner import CONFIG_FILE, RESULTS_FILE, QuestionResult, read_results
from graphs.errors import LoaderError
from graphs.manifest import atomic_write_bytes, atomic_write_json, atomic_write_text

RUN_FILE = "run.json"
METRICS_FILE = "metrics.json"
REPORT_FILE = "report.md"
PLOT_FILES = ("metrics.png", "recall_at_k.png", "latency.png")
GROUP_COLUMNS = ("target_type", "style", "qtype")  # qtype: MetaQA question shapes (report-only columns)
METRIC_LABELS = {"hit@1": "Hit@1", "hit@5": "Hit@5", "hit@20": "Hit@20", "recall@20": "R@20", "mrr": "MRR"}


class RunInfo(BaseModel):
    """``<out>/run.json``: what was run on what (written by the CLI before running)."""

    bench: str | None = None
    split: str | None = None
    limit: int | None = None
    index_dir: str | None = None
    methods: list[str] = Field(default_factory=list)
    question_ids: list[str] | None = None
    coverage: dict[str, Any] | None = None
    split_ids_missing: int = 0


class MethodRun(BaseModel):
    """One method's configuration and results as read from its directory."""

    name: str
    directory: str
    config: dict[str, Any]
    results: list[QuestionResult]


def load_method_dir(directory: Path) -> MethodRun:
    results_path = directory / RESULTS_FILE
    if not results_path.is_file():
        raise LoaderError(str(directory), f"no {RESULTS_FILE} here", fix="pass a run directory made by `skb eval run` "
                          "or one of its method subdirectories")
    config_path = directory / CONFIG_FILE
    config: dict[str, Any] = json.loads(config_path.read_text(encoding="utf-8")) if config_path.is_file() else {}
    name = str(config.get("method") or directory.name)
    return MethodRun(name=name, directory=str(directory), config=config, results=read_results(results_path))


def read_run_info(out_dir: Path) -> RunInfo:
    path = out_dir / RUN_FILE
    if not path.is_file():
        return RunInfo()
    return RunInfo.model_validate_json(path.read_text(encoding="utf-8"))


def load_run(out_dir: Path) -> list[MethodRun]:
    """Method runs under ``out_dir`` in the order they were requested (then by name)."""
    if (out_dir / RESULTS_FILE).is_file():
        return [load_method_dir(out_dir)]
    if not out_dir.is_dir():
        raise LoaderError(str(out_dir), "run directory not found", fix="pass the --out directory of `skb eval run`")
    runs = [load_method_dir(d) for d in sorted(out_dir.iterdir()) if (d / RESULTS_FILE).is_file()]
    if not runs:
        raise LoaderError(str(out_dir), "no method results found", fix="run `skb eval run ... --out DIR` first")
    order = {name: i for i, name in enumerate(read_run_info(out_dir).methods)}
    return sorted(runs, key=lambda r: (order.get(r.name, len(order)), r.name))


def _est(estimate: Estimate) -> dict[str, Any]:
    return estimate.to_dict()


def summarize(
    results: Sequence[QuestionResult],
    *,
    group_columns: Sequence[str] = GROUP_COLUMNS,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    """Every aggregate of one method: metrics with CIs overall and per group, curve, latency, cost."""
    rows = [r.metrics for r in results]
    overall = {k: _est(v) for k, v in aggregate(rows, n_resamples=n_resamples, seed=seed).items()}
    answerable_rows = [r.metrics for r in results if not r.all_answers_unknown]
    answerable = (overall if len(answerable_rows) == len(rows) else
                  {k: _est(v) for k, v in aggregate(answerable_rows, n_resamples=n_resamples, seed=seed).items()})
    groups: dict[str, dict[str, Any]] = {}
    for column in group_columns:
        buckets: dict[str, list[QuestionResult]] = defaultdict(list)
        for r in results:
            value = r.target_type if column == "target_type" else r.style if column == "style" else r.groups.get(column)
            if value:
                buckets[value].append(r)
        if buckets:
            groups[column] = {
                value: {k: _est(v) for k, v in aggregate([r.metrics for r in members], n_resamples=n_resamples,
                                                          seed=seed).items()}
                for value, members in sorted(buckets.items())
            }
    stages: dict[str, list[float]] = defaultdict(list)
    for r in results:
        for stage, ms in r.timings_ms.items():
            stages[stage].append(ms)
    latency = {stage: {**percentiles(values), "mean": sum(values) / len(values)} for stage, values in stages.items()}
    n = len(results)
    tokens = [r.prompt_tokens + r.completion_tokens for r in results]
    cost = {
        "llm_calls_mean": _mean(r.llm_calls for r in results),
        "prompt_tokens_mean": _mean(r.prompt_tokens for r in results),
        "completion_tokens_mean": _mean(r.completion_tokens for r in results),
        "tokens_mean": _mean(tokens),
        "tool_calls_mean": _mean(r.tool_calls for r in results),
        "llm_calls_total": sum(r.llm_calls for r in results),
        "tokens_total": sum(tokens),
        "tool_calls_total": sum(r.tool_calls for r in results),
        "tool_output_tokens_median": _median(r.tool_output_tokens for r in results),
    }
    errors = [r for r in results if r.error]
    unknown = [r for r in results if r.unknown_answers]
    return {
        "n": n,
        "errors": len(errors),
        "error_examples": [{"id": r.id, "error": r.error} for r in errors[:5]],
        "overall": overall,
        "overall_answerable": answerable,
        "groups": groups,
        "recall_curve": mean_curve([recall_curve(r.ranked_keys, r.answer_ids, CURVE_MAX_K) for r in results]),
        "latency_ms": latency,
        "cost": cost,
        "questions_with_unknown_answers": len(unknown),
        "questions_all_answers_unknown": [r.id for r in results if r.all_answers_unknown],
    }


def _mean(values: Iterable[float]) -> float:
    data = list(values)
    return sum(data) / len(data) if data else float("nan")


def _median(values: Iterable[float]) -> float:
    data = sorted(values)
    if not data:
        return float("nan")
    mid = len(data) // 2
    return float(data[mid]) if len(data) % 2 else (data[mid - 1] + data[mid]) / 2


def _clean(value: Any) -> Any:
    """NaN/inf -> null so that metrics.json is strict JSON."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def _coverage_from_results(runs: Sequence[MethodRun]) -> dict[str, Any]:
    """Fallback when run.json lacks coverage: union over what the result lines recorded."""
    unknown: dict[str, None] = {}
    all_unknown: dict[str, None] = {}
    keys = 0
    questions: set[str] = set()
    for run in runs:
        for r in run.results:
            if r.id in questions:
                continue
            questions.add(r.id)
            keys += len(r.answer_ids)
            unknown.update(dict.fromkeys(r.unknown_answers))
            if r.all_answers_unknown:
                all_unknown[r.id] = None
    return {
        "n_questions": len(questions), "n_answer_keys": keys, "unknown_count": len(unknown),
        "unknown_examples": list(unknown)[:20], "all_unknown_questions": list(all_unknown),
    }


def ordered_results(results: Sequence[QuestionResult], order: Mapping[str, int] | None) -> list[QuestionResult]:
    """Results in benchmark order (or by id), restricted to ``order``'s ids when given.

    Why: threaded runs append lines in completion order, and the seeded bootstrap
    must see the same sequence for the same set of questions to give the same CI.
    """
    if order is None:
        return sorted(results, key=lambda r: r.id)
    return sorted((r for r in results if r.id in order), key=lambda r: order[r.id])


def build_metrics(
    runs: Sequence[MethodRun],
    info: RunInfo,
    *,
    question_ids: Iterable[str] | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    """The content of metrics.json (restricted to ``question_ids`` when given)."""
    order = {qid: i for i, qid in enumerate(question_ids)} if question_ids is not None else None
    methods: dict[str, Any] = {}
    for run in runs:
        results = ordered_results(run.results, order)
        methods[run.name] = {"config": run.config, "directory": run.directory,
                             **summarize(results, n_resamples=n_resamples, seed=seed)}
    coverage = info.coverage if info.coverage is not None else _coverage_from_results(runs)
    return _clean({
        "bench": {"source": info.bench, "split": info.split, "limit": info.limit, "index_dir": info.index_dir,
                  "split_ids_missing": info.split_ids_missing},
        "unknown_answers": coverage,
        "bootstrap": {"resamples": n_resamples, "seed": seed, "confidence": 0.95},
        "methods": methods,
    })


# -- markdown --------------------------------------------------------------------------------------------------------

def _fmt(est: Mapping[str, Any] | None) -> str:
    if not est or est.get("mean") is None:
        return "–"
    return f"{est['mean']:.3f} [{est['ci_low']:.3f}, {est['ci_high']:.3f}]"


def _num(value: Any, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.{digits}f}"


def _ms_fmt(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "–"
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 1000 else f"{value:.0f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def render_markdown(metrics: Mapping[str, Any]) -> str:
    methods: Mapping[str, Any] = metrics["methods"]
    bench = metrics["bench"]
    lines = ["# Evaluation report", ""]
    lines.append(f"- Benchmark: `{bench.get('source')}`" + (f", split `{bench['split']}`" if bench.get("split") else "")
                 + (f", limit {bench['limit']}" if bench.get("limit") else ""))
    if bench.get("index_dir"):
        lines.append(f"- Index: `{bench['index_dir']}`")
    boot = metrics["bootstrap"]
    lines.append(f"- Metrics: STaRK definitions; 95% CIs by percentile bootstrap ({boot['resamples']} resamples, "
                 f"seed {boot['seed']}). MRR over the full returned ranking.")
    if bench.get("split_ids_missing"):
        lines.append(f"- {bench['split_ids_missing']} split ids are not in the benchmark file.")
    cov = metrics.get("unknown_answers") or {}
    if cov.get("unknown_count"):
        examples = ", ".join(f"`{k}`" for k in cov.get("unknown_examples", [])[:10])
        flagged = cov.get("all_unknown_questions", [])
        lines += ["", "## Answer keys missing from the index", "",
                  (f"**{cov['unknown_count']}** of {cov.get('n_answer_keys', '?')} answer keys are not nodes of the "
                   f"index (examples: {examples}). They stay in the denominators and score as misses."), "",
                  f"**{len(flagged)}** questions have no answer in the index"
                  + (f" (e.g. {', '.join(flagged[:10])})" if flagged else "") + "."]
    else:
        lines.append("- Every answer key is a node of the index.")

    lines += ["", "## Overall", ""]
    header = ["method", "n", *(METRIC_LABELS[m] for m in HEADLINE_METRICS), "p50 ms", "p95 ms", "LLM calls/q",
              "tokens/q", "tool calls/q", "tool-output tokens/q (median)", "errors"]
    rows = []
    for name, m in methods.items():
        total = m["latency_ms"].get("total", {})
        cost = m["cost"]
        rows.append([f"`{name}`", str(m["n"]), *(_fmt(m["overall"].get(k)) for k in HEADLINE_METRICS),
                     _ms_fmt(total.get("p50")), _ms_fmt(total.get("p95")), _num(cost["llm_calls_mean"], 2),
                     _num(cost["tokens_mean"], 0), _num(cost["tool_calls_mean"], 2),
                     _num(cost.get("tool_output_tokens_median"), 0), str(m["errors"])])
    lines += _table(header, rows)

    if any(m["questions_all_answers_unknown"] for m in methods.values()):
        lines += ["", "## Overall, questions with at least one answer in the index", ""]
        rows = [[f"`{name}`", str(m["n"] - len(m["questions_all_answers_unknown"])),
                 *(_fmt(m["overall_answerable"].get(k)) for k in HEADLINE_METRICS)] for name, m in methods.items()]
        lines += _table(["method", "n", *(METRIC_LABELS[m] for m in HEADLINE_METRICS)], rows)

    columns = sorted({c for m in methods.values() for c in m["groups"]}, key=lambda c: (c != "target_type", c))
    for column in columns:
        lines += ["", f"## By {column}", ""]
        rows = []
        for name, m in methods.items():
            for value, est in m["groups"].get(column, {}).items():
                n = next(iter(est.values()))["n"] if est else 0
                rows.append([f"`{name}`", value, str(n), *(_fmt(est.get(k)) for k in HEADLINE_METRICS)])
        lines += _table(["method", column, "n", *(METRIC_LABELS[m] for m in HEADLINE_METRICS)], rows)

    lines += ["", "## Latency per stage (ms)", ""]
    rows = []
    for name, m in methods.items():
        for stage, stats in sorted(m["latency_ms"].items(), key=lambda kv: (kv[0] == "total", kv[0])):
            rows.append([f"`{name}`", stage, _ms_fmt(stats.get("p50")), _ms_fmt(stats.get("p95")), _ms_fmt(stats.get("mean"))])
    lines += _table(["method", "stage", "p50", "p95", "mean"], rows)

    lines += ["", "## Recall@k", ""]
    ks = [1, 5, 10, 20, 50, 100]
    rows = [[f"`{name}`", *(_num(m["recall_curve"][k - 1], 3) if len(m["recall_curve"]) >= k else "–" for k in ks)]
            for name, m in methods.items()]
    lines += _table(["method", *(f"R@{k}" for k in ks)], rows)

    errors = {name: m for name, m in methods.items() if m["errors"]}
    if errors:
        lines += ["", "## Errors", ""]
        for name, m in errors.items():
            lines.append(f"- `{name}`: {m['errors']} questions failed (scored as misses; rerun to retry). "
                         + "; ".join(f"{e['id']}: {e['error']}" for e in m["error_examples"]))

    lines += ["", "## Method configurations", ""]
    for name, m in methods.items():
        lines += [f"### `{name}`", "", "```json", json.dumps(m["config"], indent=2, sort_keys=True), "```", ""]
    lines += ["## Plots", "", *(f"![{p}]({p})" for p in PLOT_FILES), ""]
    return "\n".join(lines)


# -- plots -----------------------------------------------------------------------------------------------------------

def _png(fig: Any) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    return buffer.getvalue()


def plot_metrics(metrics: Mapping[str, Any]) -> bytes:
    """Grouped bars of the headline metrics with 95% CI error bars."""
    import numpy as np
    from matplotlib.figure import Figure

    methods = metrics["methods"]
    fig = Figure(figsize=(max(6.0, 1.6 * len(HEADLINE_METRICS) + 0.3 * len(methods)), 4.0))
    ax = fig.subplots()
    x = np.arange(len(HEADLINE_METRICS))
    width = 0.8 / max(1, len(methods))
    for i, (name, m) in enumerate(methods.items()):
        means: list[float] = []
        low: list[float] = []
        high: list[float] = []
        for k in HEADLINE_METRICS:
            est = m["overall"].get(k) or {}
            mean = float(est.get("mean") or 0.0)
            ci_low = est.get("ci_low")
            ci_high = est.get("ci_high")
            means.append(mean)
            low.append(max(0.0, mean - float(ci_low)) if ci_low is not None else 0.0)
            high.append(max(0.0, float(ci_high) - mean) if ci_high is not None else 0.0)
        ax.bar(x + (i - (len(methods) - 1) / 2) * width, means, width, yerr=[low, high], capsize=3, label=name)
    ax.set_xticks(x, [METRIC_LABELS[k] for k in HEADLINE_METRICS])
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("score (95% CI)")
    ax.set_title("Retrieval metrics")
    ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    return _png(fig)


def plot_recall_curves(metrics: Mapping[str, Any]) -> bytes:
    """Mean Recall@k for k = 1..100, one line per method."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(6.5, 4.0))
    ax = fig.subplots()
    for name, m in metrics["methods"].items():
        curve = [v if v is not None else float("nan") for v in m["recall_curve"]]
        ax.plot(range(1, len(curve) + 1), curve, label=name)
    ax.set_xlabel("k")
    ax.set_ylabel("Recall@k")
    ax.set_xlim(1, CURVE_MAX_K)
    ax.set_ylim(0, 1.02)
    ax.set_title("Recall@k")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return _png(fig)


def plot_latency(runs: Sequence[MethodRun], question_ids: Iterable[str] | None = None) -> bytes:
    """Histogram of per-question total latency per method (log-spaced bins: methods differ by orders)."""
    import numpy as np
    from matplotlib.figure import Figure
    from matplotlib.ticker import NullFormatter

    wanted = set(question_ids) if question_ids is not None else None
    series = {run.name: [r.timings_ms["total"] for r in run.results
                         if "total" in r.timings_ms and (wanted is None or r.id in wanted)] for run in runs}
    values = [v for vs in series.values() for v in vs if v > 0]
    fig = Figure(figsize=(6.5, 4.0))
    ax = fig.subplots()
    if values:
        low, high = min(values), max(values)
        high = high * 1.01 if high > low else low * 10
        bins = [float(b) for b in np.geomspace(low, high, 40)]
        for name, vs in series.items():
            ax.hist([v for v in vs if v > 0], bins=bins, histtype="step", linewidth=1.5, label=name)
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.legend(fontsize="small")
    else:
        ax.text(0.5, 0.5, "no latency recorded", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel("total latency per question (ms, log scale)")
    ax.set_ylabel("questions")
    ax.set_title("Latency")
    return _png(fig)


def write_report(
    out_dir: Path,
    *,
    question_ids: Iterable[str] | None = None,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> dict[str, Any]:
    """Write metrics.json, report.md and the PNGs into ``out_dir``; returns the metrics."""
    info = read_run_info(out_dir)
    runs = load_run(out_dir)
    ids = list(question_ids) if question_ids is not None else info.question_ids
    metrics = build_metrics(runs, info, question_ids=ids, n_resamples=n_resamples, seed=seed)
    atomic_write_json(out_dir / METRICS_FILE, metrics)
    atomic_write_text(out_dir / REPORT_FILE, render_markdown(metrics))
    atomic_write_bytes(out_dir / "metrics.png", plot_metrics(metrics))
    atomic_write_bytes(out_dir / "recall_at_k.png", plot_recall_curves(metrics))
    atomic_write_bytes(out_dir / "latency.png", plot_latency(runs, ids))
    return metrics
