"""Our tools inside someone else's agent: a LangChain agent (`create_agent`) over `SKBToolkit` tools,
driven by any OpenAI-compatible chat model, on benchmark questions.

Why: "plug our tools into another agent" is one of the ways the project is used, and what decides
its quality is not our retrieval but whether the other agent's model calls the right tool and uses
its result. Per question this records which tool the model called first, whether its final answer
names `ask`'s top answer (and the gold answer), the endpoint's real token counts (`usage`, as
LangChain's ``usage_metadata``) and wall seconds.

    python -m evals.studies.toolkit_agent --index-dir .skb/hpo \\
        --bench ../shared/bench/hpo_cases_dev_answerable.csv --style names -n 20 \\
        --base-url http://127.0.0.1:8771/v1 --model local --out runs/toolkit-agent

Writes ``questions.jsonl`` (one row per question, as it finishes) and ``summary.json`` under ``--out``.
Traces are off: the index directory is never written to.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage, ToolMessage


def load_questions(bench: Path, style: str | None, n: int) -> list[dict[str, Any]]:
    """The first ``n`` rows of a benchmark CSV (query, answer_ids; optionally only one ``style``)."""
    with bench.open(newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if style is None or r.get("style") == style]
    out: list[dict[str, Any]] = []
    for row in rows[:n]:
        answers = json.loads(row["answer_ids"]) if row.get("answer_ids") else []
        out.append({"id": row.get("id", str(len(out))), "question": row["query"], "answer_ids": answers})
    return out


def _mentions(text: str, name: str) -> bool:
    return bool(name) and name.casefold() in text.casefold()


def summarize_run(messages: list[BaseMessage], gold_names: list[str], gold_keys: list[str]) -> dict[str, Any]:
    """What one agent run did: the tools in call order, ask's top answer, the final text, usage."""
    calls = [c["name"] for m in messages if isinstance(m, AIMessage) for c in m.tool_calls]
    ask_results = [
        m.artifact for m in messages if isinstance(m, ToolMessage) and m.name == "ask" and isinstance(m.artifact, dict)
    ]
    top1 = ask_results[0]["context"][0] if ask_results and ask_results[0].get("context") else None
    finals = [m for m in messages if isinstance(m, AIMessage) and not m.tool_calls]
    final = str(finals[-1].content) if finals else ""
    usages = [m.usage_metadata for m in messages if isinstance(m, AIMessage) and m.usage_metadata]
    prompt = [int(u.get("input_tokens", 0)) for u in usages]
    return {
        "tool_calls": calls,
        "first_tool": calls[0] if calls else None,
        "ask_top1": None if top1 is None else {"key": top1["key"], "name": top1["name"]},
        "ask_top1_correct": top1 is not None and top1["key"] in gold_keys,
        "final": final[:1000],
        "final_names_ask_top1": top1 is not None and _mentions(final, top1["name"]),
        "final_names_gold": any(_mentions(final, n) for n in gold_names),
        "llm_calls": len(usages),
        "prompt_tokens": sum(prompt),
        "max_prompt_tokens": max(prompt, default=0),
        "completion_tokens": sum(int(u.get("output_tokens", 0)) for u in usages),
    }


def summary_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Counts and per-question medians over the finished rows."""
    n = len(rows)

    def med(field: str) -> float:
        return float(statistics.median(r[field] for r in rows)) if rows else 0.0

    return {
        "questions": n,
        "ask_first": sum(r["first_tool"] == "ask" for r in rows),
        "first_tools": {
            t: sum(str(r["first_tool"]) == t for r in rows) for t in sorted({str(r["first_tool"]) for r in rows})
        },
        "final_names_ask_top1": sum(r["final_names_ask_top1"] for r in rows),
        "ask_top1_correct": sum(r["ask_top1_correct"] for r in rows),
        "final_names_gold": sum(r["final_names_gold"] for r in rows),
        "errors": sum(bool(r.get("error")) for r in rows),
        "median_seconds": med("seconds"),
        "mean_seconds": round(sum(r["seconds"] for r in rows) / n, 2) if n else 0.0,
        "median_prompt_tokens": med("prompt_tokens"),
        "median_max_prompt_tokens_per_call": med("max_prompt_tokens"),
        "median_completion_tokens": med("completion_tokens"),
        "median_llm_calls": med("llm_calls"),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index-dir", type=Path, required=True)
    parser.add_argument("--bench", type=Path, required=True)
    parser.add_argument("--style", default=None, help="only rows of this style column value (e.g. names)")
    parser.add_argument("-n", type=int, default=20)
    parser.add_argument("--base-url", default=os.environ.get("OPENAI_BASE_URL"), help="OpenAI-compatible endpoint")
    parser.add_argument("--model", default="local")
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="environment variable holding the key")
    parser.add_argument("--max-steps", type=int, default=4, help="most model turns per question")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per model call")
    parser.add_argument(
        "--system-prompt",
        default=None,
        help="system prompt: 'toolkit' for SKBToolkit.instructions, other text as given (default: none)",
    )
    parser.add_argument("--dump-messages", action="store_true", help="keep every message in questions.jsonl")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if not args.bench.is_file():
        print(f"error: --bench {args.bench} is not a file", file=sys.stderr)
        return 2
    if not (args.index_dir / "manifest.json").is_file():
        print(
            f"error: --index-dir {args.index_dir} is not an index (no manifest.json); build it with `skb index`",
            file=sys.stderr,
        )
        return 2

    from langchain.agents import create_agent
    from langchain_openai import ChatOpenAI
    from pydantic import SecretStr

    from agent.serving.toolkit import SKBToolkit

    questions = load_questions(args.bench, args.style, args.n)
    args.out.mkdir(parents=True, exist_ok=True)
    model = ChatOpenAI(
        model=args.model,
        base_url=args.base_url,
        api_key=SecretStr(os.environ.get(args.api_key_env) or "none"),
        temperature=0,
        timeout=args.timeout,
        max_retries=1,
    )
    rows: list[dict[str, Any]] = []
    system_prompt: str | None = None
    with SKBToolkit(args.index_dir, callbacks=[]) as toolkit, (args.out / "questions.jsonl").open("w") as fh:
        nodes = toolkit.bundle.skb.nodes
        system_prompt = toolkit.instructions if args.system_prompt == "toolkit" else args.system_prompt
        agent = create_agent(model, toolkit.get_tools(), system_prompt=system_prompt)
        for q in questions:
            gold_names = [nodes[k].name for k in q["answer_ids"] if k in nodes]
            start = time.perf_counter()
            error = None
            messages: list[BaseMessage] = []
            try:  # state by state: a run stopped by the step limit still shows what it did
                for state in agent.stream(
                    {"messages": [{"role": "user", "content": q["question"]}]},
                    {"recursion_limit": 2 * args.max_steps + 1},
                    stream_mode="values",
                ):
                    messages = list(state["messages"])
            except Exception as exc:  # noqa: BLE001 -- a measurement records every failure and goes on
                error = f"{type(exc).__name__}: {str(exc)[:300]}"
            if args.dump_messages:
                row_messages = [m.model_dump(mode="json", exclude={"artifact"}) for m in messages]
            row = {
                "id": q["id"],
                "question": q["question"],
                "gold": q["answer_ids"],
                **summarize_run(messages, gold_names, q["answer_ids"]),
                "seconds": round(time.perf_counter() - start, 2),
                "error": error,
            }
            if args.dump_messages:
                row["messages"] = row_messages
            rows.append(row)
            fh.write(json.dumps(row, ensure_ascii=False) + "\n")
            fh.flush()
            print(
                f"{q['id']}: first={row['first_tool']} top1={row['ask_top1']} names_top1={row['final_names_ask_top1']} "
                f"prompt={row['prompt_tokens']} {row['seconds']}s {error or ''}",
                flush=True,
            )
    summary = {"model": args.model, "base_url": args.base_url, "system_prompt": system_prompt, **summary_of(rows)}
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
