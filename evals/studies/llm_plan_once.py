"""Measure the LLM planner's plan-once (SPARK) mode against the offline planner on the same questions.

Why a separate runner (not only ``skb eval -m agent-plan-once``): the questions of the issue are about
the *plan* -- valid on the first try? after one repair? -- which the generic eval ``Retrieval`` does not
carry; here every question's ``AgentResult.plan`` report, LLM calls, prompt tokens and wall time are
kept per question (JSONL, resumable: a run of minutes per question survives an interruption).

The LLM is whatever OpenAI-compatible endpoint OPENAI_BASE_URL / OPENAI_API_KEY point at (a measuring
instrument; nothing in the project depends on it)::

    python -m evals.studies.llm_plan_once --bench FILE.csv --index-dir .skb/hpo --n 20 --model local \
        --out evals/reports/llm-plan-once/hpo [--stratify style] [--set max_hops=3]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from agent import AgentConfig, ask
from evals.bench import Bench, Question, load_bench
from graphs.bundle import IndexBundle

METHODS = ("plan-once", "guided", "offline", "offline+llm")
"""offline+llm: the offline planner plans, the model only serves the optional stages (``stage_llm="openai"``)."""


def pick(bench: Bench, n: int, stratify: str | None) -> list[Question]:
    """``n`` questions spread evenly over the file (and over the groups of column ``stratify``)."""
    questions = list(bench.questions)
    if not stratify:
        step = max(1, len(questions) // n)
        return questions[::step][:n]
    groups: dict[str, list[Question]] = defaultdict(list)
    for q in questions:
        groups[str(q.group(stratify))].append(q)
    names = sorted(groups)
    per_group: list[list[Question]] = []
    for i, name in enumerate(names):
        want = n // len(names) + (1 if i < n % len(names) else 0)
        members = groups[name]
        step = max(1, len(members) // max(1, want))
        per_group.append(members[::step][:want])
    # round-robin over the groups: any prefix of the run (an interrupted run) stays balanced
    picked: list[Question] = []
    for i in range(max((len(g) for g in per_group), default=0)):
        picked.extend(g[i] for g in per_group if i < len(g))
    return picked


def config_for(method: str, model: str, overrides: dict[str, Any]) -> AgentConfig:
    base: dict[str, Any] = {"policy": "never"}
    if method == "plan-once":
        base.update(
            planner="openai", planner_mode="plan-once", model=model, llm_timeout_s=170.0, max_wall_s=180.0,
            llm_attempts=3,
        )
    if method == "guided":
        base.update(
            planner="openai", planner_mode="guided", model=model, llm_timeout_s=170.0, max_wall_s=240.0,
            llm_attempts=3,
        )
    if method == "offline+llm":
        base.update(
            stage_llm="openai", model=model, llm_timeout_s=170.0, max_wall_s=240.0, llm_attempts=3,
        )
    return AgentConfig.model_validate({**base, **overrides})


def run_one(bundle: IndexBundle, question: Question, cfg: AgentConfig, method: str) -> dict[str, Any]:
    started = time.perf_counter()
    result = ask(question.query, bundle=bundle, config=cfg)
    wall = time.perf_counter() - started
    top = result.context[0].key if result.context else None
    plan = result.plan or {}
    return {
        "id": question.id,
        "method": method,
        "query": question.query,
        "answers": list(question.answer_ids),
        "top": top,
        "hit1": top in set(question.answer_ids),
        "hit5": bool({c.key for c in result.context[:5]} & set(question.answer_ids)),
        "wall_s": round(wall, 2),
        "llm_calls": result.llm_calls,
        "prompt_tokens": result.prompt_tokens,
        "estimated_prompt_tokens": sum(u.estimated_prompt_tokens for u in result.usage_by_stage.values()),
        "completion_tokens": result.completion_tokens,
        "plan": plan,
        "guided": result.guided or [],
        "target_type": result.target_type,
        "relation_paths": result.relation_paths,
        "stopped_by_budget": result.stopped_by_budget,
        "degraded": result.degraded,
    }


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Per method: plan validity, calls, tokens, wall time, Hit@1/Hit@5."""
    out: dict[str, Any] = {}
    present = [m for m in METHODS if any(r["method"] == m for r in rows)]
    common = set.intersection(*({r["id"] for r in rows if r["method"] == m} for m in present)) if present else set()
    for method in METHODS:
        mine = [r for r in rows if r["method"] == method and r["id"] in common]  # the same questions for all
        if not mine:
            continue
        n = len(mine)
        plans = [r["plan"] for r in mine if r["plan"]]
        out[method] = {
            "n": n,
            "valid_first_try": sum(1 for p in plans if p.get("valid_first_try")) / n if plans else None,
            "valid_after_repair": sum(1 for p in plans if p.get("valid")) / n if plans else None,
            "near_json_fixed": sum(1 for p in plans if p.get("fixes")) if plans else None,
            "paths_from_llm": sum(1 for p in plans if p.get("valid") and "relation_paths" not in p.get("completed", []))
            / n if plans else None,
            "target_from_llm": sum(1 for p in plans if p.get("valid") and "target_type" not in p.get("completed", []))
            / n if plans else None,
            "llm_calls_mean": statistics.fmean(r["llm_calls"] for r in mine),
            "llm_calls_max": max(r["llm_calls"] for r in mine),
            "prompt_tokens_mean": statistics.fmean(r["prompt_tokens"] for r in mine),
            "prompt_tokens_max": max(r["prompt_tokens"] for r in mine),
            "completion_tokens_mean": statistics.fmean(r["completion_tokens"] for r in mine),
            "wall_s_mean": statistics.fmean(r["wall_s"] for r in mine),
            "wall_s_max": max(r["wall_s"] for r in mine),
            "hit1": sum(1 for r in mine if r["hit1"]) / n,
            "hit5": sum(1 for r in mine if r["hit5"]) / n,
            "budget_stops": sum(1 for r in mine if r["stopped_by_budget"]),
            "degraded": sum(1 for r in mine if r["degraded"]),
            "over_3_min": sum(1 for r in mine if r["wall_s"] > 180),
            "over_4_min": sum(1 for r in mine if r["wall_s"] > 240),
            **token_agreement(mine),
            **_guided_summary(mine),
        }
    return out


def token_agreement(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Pre-call estimates against the endpoint's reported prompt tokens, over the questions that called it."""
    called = [r for r in rows if r.get("prompt_tokens") and r.get("estimated_prompt_tokens")]
    if not called:
        return {}
    estimated = sum(r["estimated_prompt_tokens"] for r in called)
    actual = sum(r["prompt_tokens"] for r in called)
    worst = max(abs(r["estimated_prompt_tokens"] - r["prompt_tokens"]) / r["prompt_tokens"] for r in called)
    return {"estimated_prompt_tokens": estimated, "reported_prompt_tokens": actual,
            "estimate_error": round((estimated - actual) / actual, 4), "estimate_error_worst_question": round(worst, 4)}


def _guided_summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Guided rounds: valid calls on the first try and after at most one repair, prompt tokens per call."""
    rounds = [g for r in rows for g in r.get("guided") or []]
    if not rounds:
        return {}
    per_call = [t for g in rounds for t in g.get("prompt_tokens") or []]
    choices: dict[str, int] = defaultdict(int)
    for g in rounds:
        choices[str(g.get("choice"))] += 1
    return {"rounds": len(rounds),
            "valid_calls_first_try": sum(1 for g in rounds if g.get("valid_first_try")) / len(rounds),
            "valid_calls_after_repair": sum(1 for g in rounds if g.get("valid")) / len(rounds),
            "round_prompt_tokens_max": max(per_call, default=0),
            "round_prompt_tokens_mean": statistics.fmean(per_call) if per_call else 0.0,
            "choices": dict(sorted(choices.items()))}


def runner_arguments(description: str, n: int) -> argparse.ArgumentParser:
    """The options both real-model runners share (this one and ``evals.studies.llm_stages``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--bench", type=Path, required=True)
    parser.add_argument("--index-dir", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--n", type=int, default=n)
    parser.add_argument("--stratify", default=None, help="bench column to spread the questions over (e.g. style)")
    parser.add_argument("--model", default=os.environ.get("SKB_OPENAI_MODEL", "local"))
    parser.add_argument("--method", action="append", choices=METHODS, help="default: all")
    parser.add_argument("--set", action="append", default=[], help="AgentConfig KEY=JSON for both methods")
    return parser


RunOne = Callable[[IndexBundle, Question, AgentConfig, str], dict[str, Any]]


def run_rows(
    out: Path,
    index_dir: Path,
    questions: Sequence[Question],
    configs: Sequence[tuple[str, AgentConfig]],
    run: RunOne,
    describe: Callable[[dict[str, Any]], str],
) -> list[dict[str, Any]]:
    """Run every (method, question) not yet in ``<out>/rows.jsonl``, appending a row each (a real model
    takes minutes per question: a stopped run resumes). Returns all rows, old and new."""
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "rows.jsonl"
    rows = [json.loads(line) for line in rows_path.read_text().splitlines()] if rows_path.exists() else []
    done = {(r["id"], r["method"]) for r in rows}
    with IndexBundle.open(index_dir) as bundle, rows_path.open("a") as sink:
        for method, cfg in configs:
            for q in questions:
                if (q.id, method) in done:
                    continue
                row = run(bundle, q, cfg, method)
                rows.append(row)
                sink.write(json.dumps(row) + "\n")
                sink.flush()
                print(f"[{method}] {q.id}: {describe(row)}", file=sys.stderr, flush=True)
    return rows


def main(argv: Sequence[str] | None = None) -> int:
    parser = runner_arguments(__doc__.split("\n\n")[0], n=20)
    parser.add_argument("--run-first", type=int, default=None, help="run only the first K picked questions now")
    args = parser.parse_args(argv)
    overrides = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.set)}
    methods = args.method or list(METHODS)
    questions = pick(load_bench(args.bench), args.n, args.stratify)
    rows = run_rows(
        args.out, args.index_dir, questions[: args.run_first],
        [(method, config_for(method, args.model, overrides)) for method in methods], run_one,
        lambda row: (f"hit1={row['hit1']} calls={row['llm_calls']} prompt={row['prompt_tokens']} "
                     f"wall={row['wall_s']}s plan={row['plan'].get('valid')}"),
    )
    summary = {"bench": str(args.bench), "index_dir": str(args.index_dir), "n": len(questions),
               "model": args.model, "overrides": overrides, "methods": summarize(rows)}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
