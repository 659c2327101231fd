"""Paired comparison of two runs: is B better than A, by how much, and how sure are we?

Pairing per question removes the between-question variance that dominates
unpaired CIs (some questions are hard for every method), so two methods whose
overall CIs overlap can still differ significantly.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import BaseModel

from evals.metrics import DEFAULT_RESAMPLES, DEFAULT_SEED, HEADLINE_METRICS, paired_bootstrap
from evals.report import METRIC_LABELS, MethodRun, load_run
from graphs.errors import ConfigError


class MetricDifference(BaseModel):
    metric: str
    mean_a: float
    mean_b: float
    mean_diff: float
    ci_low: float
    ci_high: float
    p_value: float


class Comparison(BaseModel):
    """B minus A over the questions both runs answered without error."""

    a: str
    b: str
    a_dir: str
    b_dir: str
    n_paired: int
    only_a: int
    only_b: int
    excluded_errors: int
    resamples: int
    seed: int
    metrics: list[MetricDifference]


def _pairs(runs_a: Sequence[MethodRun], runs_b: Sequence[MethodRun]) -> list[tuple[MethodRun, MethodRun]]:
    if len(runs_a) == 1 and len(runs_b) == 1:
        return [(runs_a[0], runs_b[0])]
    by_name_b = {r.name: r for r in runs_b}
    if len(runs_a) == 1 or len(runs_b) == 1:
        single, many, single_is_a = (runs_a[0], runs_b, True) if len(runs_a) == 1 else (runs_b[0], runs_a, False)
        match = next((r for r in many if r.name == single.name), None)
        if match is None:
            raise ConfigError(f"method {single.name!r} is not in the other run ({', '.join(r.name for r in many)}); "
                              "pass method subdirectories (e.g. OUT/bm25 OUT/hybrid) to compare different methods")
        return [(single, match)] if single_is_a else [(match, single)]
    pairs = [(a, by_name_b[a.name]) for a in runs_a if a.name in by_name_b]
    if not pairs:
        raise ConfigError("the two runs share no method name; pass method subdirectories to compare "
                          "different methods")
    return pairs


def compare_methods(
    run_a: MethodRun,
    run_b: MethodRun,
    *,
    metrics: Sequence[str] = HEADLINE_METRICS,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> Comparison:
    a = {r.id: r for r in run_a.results}
    b = {r.id: r for r in run_b.results}
    common = sorted(i for i in a if i in b)
    paired = [i for i in common if a[i].error is None and b[i].error is None]
    if not paired:
        raise ConfigError(f"{run_a.directory} and {run_b.directory} have no question in common (without errors); "
                          "were they run on the same benchmark?")
    differences = []
    for metric in metrics:
        xa = [a[i].metrics[metric] for i in paired]
        xb = [b[i].metrics[metric] for i in paired]
        diff = paired_bootstrap(xa, xb, n_resamples=n_resamples, seed=seed)
        differences.append(MetricDifference(
            metric=metric, mean_a=sum(xa) / len(xa), mean_b=sum(xb) / len(xb), mean_diff=diff.mean_diff,
            ci_low=diff.ci_low, ci_high=diff.ci_high, p_value=diff.p_value,
        ))
    return Comparison(
        a=run_a.name, b=run_b.name, a_dir=run_a.directory, b_dir=run_b.directory, n_paired=len(paired),
        only_a=len(a) - len(common), only_b=len(b) - len(common), excluded_errors=len(common) - len(paired),
        resamples=n_resamples, seed=seed, metrics=differences,
    )


def compare_runs(
    path_a: Path,
    path_b: Path,
    *,
    metrics: Sequence[str] = HEADLINE_METRICS,
    n_resamples: int = DEFAULT_RESAMPLES,
    seed: int = DEFAULT_SEED,
) -> list[Comparison]:
    """Compare run directories (methods matched by name) or two method subdirectories."""
    return [compare_methods(a, b, metrics=metrics, n_resamples=n_resamples, seed=seed)
            for a, b in _pairs(load_run(path_a), load_run(path_b))]


def render_comparison(comparisons: Sequence[Comparison]) -> str:
    """Markdown tables, one per compared method pair."""
    lines: list[str] = []
    for c in comparisons:
        lines += [f"## `{c.b}` minus `{c.a}`", "",
                  (f"{c.n_paired} paired questions (only in A: {c.only_a}, only in B: {c.only_b}, "
                   f"excluded for errors: {c.excluded_errors}); paired bootstrap, {c.resamples} resamples, "
                   f"seed {c.seed}."), "",
                  "| metric | A | B | B - A | 95% CI | p |", "|---|---|---|---|---|---|"]
        for d in c.metrics:
            lines.append(f"| {METRIC_LABELS.get(d.metric, d.metric)} | {d.mean_a:.3f} | {d.mean_b:.3f} | "
                         f"{d.mean_diff:+.3f} | [{d.ci_low:+.3f}, {d.ci_high:+.3f}] | {d.p_value:.3g} |")
        lines.append("")
    return "\n".join(lines)
