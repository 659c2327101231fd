"""Measure the constraint and rerank stages with a real model, per question and per stage.

Why beside ``evals.studies.llm_plan_once``: the same question picks and plan-once settings, but each row keeps
what the generic eval ``Retrieval`` drops -- the constraint extraction (valid first try? repaired?),
the relaxation steps, the rerank outcome (calls, valid replies, order changed, notes), Hit@1/Hit@5 of
the seed order before each stage and after, and LLM calls / prompt tokens / time per stage -- next to
the offline planner with constraints from its plan on the same questions. The default LLM method is
``offline+llm`` (the offline planner plans, the model serves only the stages: ``stage_llm="openai"``),
so a measurement pays the stages' calls and no plan call; ``--method plan-once`` plans with the model too.
The model is whatever OPENAI_BASE_URL / OPENAI_API_KEY point at (a measuring instrument only)::

    python -m evals.studies.llm_stages --bench FILE.csv --index-dir .skb/hpo --n 10 --model local \
        --out evals/reports/llm-stages/hpo [--stratify target_type] [--set rerank_top=5] \
        [--set constraints=false --set 'rerank="pairwise"']
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Sequence
from typing import Any

from agent import AgentConfig, ask
from evals.bench import Question, load_bench
from evals.studies.llm_plan_once import METHODS, config_for, pick, run_rows, runner_arguments, token_agreement
from graphs.bundle import IndexBundle

STAGES = ("plan", "act", "constraints", "rerank")


def run_one(bundle: IndexBundle, question: Question, cfg: AgentConfig, method: str) -> dict[str, Any]:
    started = time.perf_counter()
    result = ask(question.query, bundle=bundle, config=cfg)
    wall = time.perf_counter() - started
    keys = [c.key for c in result.context]
    answers = set(question.answer_ids)
    constraints = result.constraints or {}
    extraction = constraints.get("extraction") or {}
    rerank = result.rerank or {}
    return {
        "id": question.id,
        "method": method,
        "query": question.query,
        "answers": list(question.answer_ids),
        "top": keys[0] if keys else None,
        "hit1": bool(keys) and keys[0] in answers,
        "hit5": bool(set(keys[:5]) & answers),
        "wall_s": round(wall, 2),
        "llm_calls": result.llm_calls,
        "prompt_tokens": result.prompt_tokens,
        "estimated_prompt_tokens": sum(u.estimated_prompt_tokens for u in result.usage_by_stage.values()),
        "usage": {k: v.model_dump() for k, v in result.usage_by_stage.items()},
        "ms": {k: result.timings_ms.get(k) for k in (*STAGES, "total") if k in result.timings_ms},
        "constraints": {
            "source": constraints.get("source"),
            "valid_first_try": extraction.get("valid_first_try"),
            "valid": extraction.get("valid"),
            "repaired": extraction.get("repaired"),
            "errors": extraction.get("errors"),
            "loosened": extraction.get("loosened"),
            "n": len(constraints.get("constraints") or []),
            "relaxations": max(0, len(constraints.get("relaxations") or []) - 1),
            "front": constraints.get("front"),
            "skipped": constraints.get("skipped"),
        },
        "rerank": {k: rerank.get(k) for k in ("mode", "calls", "valid_calls", "changed", "notes")},
        "hits": _hits_by_stage(keys, constraints, rerank, answers),
        "plan_valid": (result.plan or {}).get("valid"),
        "stopped_by_budget": result.stopped_by_budget,
        "degraded": result.degraded,
    }


def _hits_by_stage(
    final: Sequence[str], constraints: dict[str, Any], rerank: dict[str, Any], answers: set[str]
) -> dict[str, list[bool]]:
    """Hit@1 / Hit@5 of the seed order each stage found (its report's ``before``) and of the final
    context: ``{"before_constraints": [hit1, hit5], "before_rerank": ..., "final": ...}``."""
    def hits(keys: Sequence[str]) -> list[bool]:
        return [bool(keys) and keys[0] in answers, bool(set(keys[:5]) & answers)]

    out: dict[str, list[bool]] = {}
    if constraints.get("before") is not None:
        out["before_constraints"] = hits(constraints["before"])
    if rerank.get("before") is not None:
        out["before_rerank"] = hits(rerank["before"])
    out["final"] = hits(final)
    return out


def summarize(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for method in METHODS:
        mine = [r for r in rows if r["method"] == method]
        if not mine:
            continue
        n = len(mine)
        llm = [r["constraints"] for r in mine if r["constraints"]["source"] == "llm" or r["constraints"]["valid"]
               is not None]
        per_stage = {
            stage: {
                "calls_mean": statistics.fmean(r["usage"].get(stage, {}).get("llm_calls", 0) for r in mine),
                "prompt_tokens_mean": statistics.fmean(r["usage"].get(stage, {}).get("prompt_tokens", 0) for r in mine),
                "ms_mean": statistics.fmean(float(r["ms"].get(stage) or 0.0) for r in mine),
            }
            for stage in STAGES
        }
        out[method] = {
            "n": n,
            "hit1": sum(1 for r in mine if r["hit1"]) / n,
            "hit5": sum(1 for r in mine if r["hit5"]) / n,
            "llm_calls_mean": statistics.fmean(r["llm_calls"] for r in mine),
            "prompt_tokens_mean": statistics.fmean(r["prompt_tokens"] for r in mine),
            "prompt_tokens_max": max(r["prompt_tokens"] for r in mine),
            "wall_s_mean": statistics.fmean(r["wall_s"] for r in mine),
            "wall_s_max": max(r["wall_s"] for r in mine),
            "constraints_asked": len(llm),
            "constraints_valid_first_try": sum(1 for c in llm if c["valid_first_try"]),
            "constraints_valid_after_repair": sum(1 for c in llm if c["valid"]),
            "constraints_used": sum(1 for r in mine if r["constraints"]["n"]),
            "relaxations_mean": statistics.fmean(r["constraints"]["relaxations"] for r in mine),
            "rerank_calls": sum(r["rerank"].get("calls") or 0 for r in mine),
            "rerank_valid_calls": sum(r["rerank"].get("valid_calls") or 0 for r in mine),
            "hits_by_stage": {
                stage: [sum(1 for r in have if r["hits"][stage][i]) / len(have) for i in (0, 1)] + [len(have)]
                for stage in ("before_constraints", "before_rerank", "final")
                if (have := [r for r in mine if stage in r.get("hits", {})])
            },
            "rerank_changed": sum(1 for r in mine if r["rerank"].get("changed")),
            "rerank_with_notes": sum(1 for r in mine if r["rerank"].get("notes")),
            "budget_stops": sum(1 for r in mine if r["stopped_by_budget"]),
            "per_stage": per_stage,
            **token_agreement(mine),
        }
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = runner_arguments(__doc__.split("\n\n")[0], n=10)
    parser.add_argument("--run-first", type=int, default=None, help="run only the first K picked questions now")
    args = parser.parse_args(argv)
    overrides: dict[str, Any] = {"constraints": True, "rerank": "listwise"}
    overrides.update({k: json.loads(v) for k, v in (item.split("=", 1) for item in args.set)})
    questions = pick(load_bench(args.bench), args.n, args.stratify)
    # the offline planner has no model to rerank with: the stage would only note that
    configs = [(method, config_for(method, args.model, {**overrides, "rerank": "none"} if method == "offline"
                                   else overrides)) for method in args.method or ["offline+llm", "offline"]]
    rows = run_rows(
        args.out, args.index_dir, questions[: args.run_first], configs, run_one,
        lambda row: (f"hit1={row['hit1']} calls={row['llm_calls']} prompt={row['prompt_tokens']} "
                     f"wall={row['wall_s']}s constraints={row['constraints']} rerank={row['rerank']}"),
    )
    summary = {"bench": str(args.bench), "index_dir": str(args.index_dir), "n": len(questions), "model": args.model,
               "overrides": overrides, "methods": summarize(rows)}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
