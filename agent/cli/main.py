"""The `skb` command line. This module owns the Typer app; other packages register their commands
at the bottom (graphs: `index`, `search`; evals: `eval`)."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer
from rich.console import Console

from agent.cli.options import parse_settings
from graphs.errors import SKBError
from graphs.progress import print_error, print_table, print_text

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

app = typer.Typer(
    name="skb",
    help="Agentic retrieval over semi-structured knowledge bases.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
console = Console()
err_console = Console(stderr=True)


def _fail(exc: SKBError) -> typer.Exit:
    """User errors print their message (it names the fix) and exit 2, without a traceback."""
    print_error(err_console, exc)
    return typer.Exit(code=2)


@contextlib.contextmanager
def _startup_heap() -> Iterator[None]:
    """Pause the cyclic GC while the agent's modules import and the index opens, then freeze the heap.

    Why: start-up allocates hundreds of thousands of long-lived objects (modules, classes, the
    index's tables); automatic collections rescan them again and again, and a full one in the first
    question rescans them all (about 0.3 s of a cold `skb ask` on 2 cores). Frozen objects are
    never scanned again; objects created afterwards are collected as usual."""
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


def _run_config(index_dir: Path, trace: bool | None) -> RunnableConfig:
    """Callbacks for this call: the local tracer (`skb trace` reads it) when tracing is on.

    A trace database that cannot be opened (damaged, foreign, on a full disk) does not stop the
    answer: the question runs untraced and stderr says why and what to do."""
    from agent.tracing.tracer import callbacks_for  # langsmith's tracer types: only `ask` pays for them

    try:
        callbacks = callbacks_for(index_dir, enabled=trace)
    except SKBError as exc:
        print_text(err_console, ("trace not recorded:", "yellow"), exc)
        return {}
    return {"callbacks": callbacks, "run_name": "skb ask"} if callbacks else {}


def _flush_traces(run_config: RunnableConfig) -> None:
    """Wait for the trace rows (`skb trace` right after `skb ask` must see the finished run) and say
    on stderr if any could not be written, instead of dropping the trace without a word."""
    callbacks = run_config.get("callbacks")
    for callback in callbacks if isinstance(callbacks, list) else []:
        flush = getattr(callback, "flush", None)
        if callable(flush):
            flush()
        errors = list(getattr(callback, "errors", None) or [])
        if errors:
            print_text(err_console, ("trace not recorded:", "yellow"), errors[-1])


@app.command("ask")
def ask_command(
    question: Annotated[str, typer.Argument(help="the question, in natural language")],
    index_dir: Annotated[Path, typer.Option(help="index directory (built by `skb index`)", envvar="SKB_INDEX_DIR")],
    planner: Annotated[str, typer.Option(help="offline | openai")] = "offline",
    k: Annotated[int, typer.Option(help="seed context size", min=1, max=1000)] = 20,
    k_prime: Annotated[int, typer.Option("--k-prime", help="SAGE expansion size", min=0, max=1000)] = 10,
    policy: Annotated[str, typer.Option(help="always | skip-when-explicit-edges | never")] = "skip-when-explicit-edges",
    max_rounds: Annotated[int | None, typer.Option(help="planner rounds T", min=1, max=50)] = None,
    model: Annotated[str | None, typer.Option(help="LLM model name (planner openai)")] = None,
    planner_mode: Annotated[
        str, typer.Option(help="loop (the LLM picks tools every round) | plan-once (one LLM call plans, rules execute) | "
                          "guided (loop mode for small models: enums of what exists, a menu, a bounded state block)")
    ] = "loop",
    max_llm_calls: Annotated[int | None, typer.Option(help="LLM calls per question", min=1)] = None,
    max_prompt_tokens: Annotated[int | None, typer.Option(help="prompt tokens per question", min=1)] = None,
    max_wall_s: Annotated[float | None, typer.Option(help="seconds per question for LLM calls", min=0.001)] = None,
    constraints: Annotated[
        bool,
        typer.Option(
            "--constraints/--no-constraints",
            help="constraint stage: triplet constraints joined in read-only Cypher, relaxed one at a time while "
            "fewer than k answers survive (from the LLM with --planner openai, else from the plan)",
        ),
    ] = False,
    rerank: Annotated[
        str, typer.Option(help="LLM reranking of the top seeds: none | pointwise | listwise | pairwise")
    ] = "none",
    fallback_fusion: Annotated[str, typer.Option(help="fallback search fusion: minmax | rrf | dice")] = "minmax",
    trace: Annotated[
        bool | None, typer.Option("--trace/--no-trace", help="record a local trace (default: on unless SKB_TRACING=0)")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the AgentResult as JSON")] = False,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="any agent setting, repeatable: section.key=value or field=value (clause.candidates=3, "
            "rerank.top=10, llm.timeout_s=30); the value is read as JSON when it parses, else as text; "
            "wins over the options above",
        ),
    ] = None,
) -> None:
    """Ask a question; prints the ranked k + k' context with provenance and the answer."""
    from pydantic import ValidationError

    from agent.config import AgentConfig, describe_errors
    from graphs.bundle import IndexBundle
    from graphs.errors import ConfigError

    try:
        if planner not in ("offline", "openai"):
            raise ConfigError(f"unknown --planner {planner!r}; use offline or openai")
        if policy not in ("always", "skip-when-explicit-edges", "never"):
            raise ConfigError(f"unknown --policy {policy!r}; use always, skip-when-explicit-edges or never")
        if planner_mode not in ("loop", "plan-once", "guided"):
            raise ConfigError(f"unknown --planner-mode {planner_mode!r}; use loop, plan-once or guided")
        if rerank not in ("none", "pointwise", "listwise", "pairwise"):
            raise ConfigError(f"unknown --rerank {rerank!r}; use none, pointwise, listwise or pairwise")
        if fallback_fusion not in ("minmax", "rrf", "dice"):
            raise ConfigError(f"unknown --fallback-fusion {fallback_fusion!r}; use minmax, rrf or dice")
        settings: dict[str, object] = {"planner": planner, "k": k, "k_prime": k_prime, "policy": policy,
                                       "planner_mode": planner_mode, "max_llm_calls": max_llm_calls,
                                       "max_prompt_tokens": max_prompt_tokens, "max_wall_s": max_wall_s,
                                       "constraints": constraints, "rerank": rerank,
                                       "fallback_fusion": fallback_fusion}
        if max_rounds is not None:
            settings["max_rounds"] = max_rounds
        if model is not None:
            settings["model"] = model
        try:
            config = AgentConfig.model_validate(settings)
        except ValidationError as exc:
            raise ConfigError(f"invalid option: {describe_errors(exc)}") from exc
        if set_:
            config = config.with_overrides(parse_settings(set_), runtime_keys=False, trusted=True)
        with _startup_heap():
            bundle = IndexBundle.open(index_dir)
            bundle.warm_up()  # the embedder and graph server start while the agent's modules import
            from agent.api import ask
        with bundle:
            run_config = _run_config(index_dir, trace)
            result = ask(question, bundle=bundle, config=config, run_config=run_config)
            _flush_traces(run_config)
    except SKBError as exc:
        raise _fail(exc) from exc
    if as_json:
        print(result.to_json(indent=2))
        return
    rows = [[str(item.rank), item.key, item.label, item.name, f"{item.score:.4f}", item.origin,
             "; ".join(dict.fromkeys(f"{p.tool}@{p.step}" for p in item.provenance))] for item in result.context]
    print_table(console, f"context for: {question}", ["rank", "key", "type", "name", "score", "origin", "provenance"],
                rows, right=["rank", "score"])
    print_text(console, result.answer)
    notes = [f"steps {result.steps}", f"tool calls {result.tool_calls}", f"{result.timings_ms.get('total', 0):.0f} ms"]
    if result.llm_calls:
        estimated = sum(u.estimated_prompt_tokens for u in result.usage_by_stage.values())
        notes.append(f"LLM calls {result.llm_calls} ({result.prompt_tokens}+{result.completion_tokens} tokens; "
                     f"prompt estimated {estimated} before the calls)")
    if result.fallback_used:
        notes.append("fallback search used")
    if result.stopped_by_budget:
        notes.append(f"LLM calls stopped by the {result.stopped_by_budget} budget")
    if result.constraints is not None:
        steps = result.constraints.get("relaxations") or []
        notes.append(f"constraints ({result.constraints.get('source')}): {result.constraints.get('candidates', 0)} "
                     f"candidates, {max(0, len(steps) - 1)} relaxation(s)")
    if result.rerank is not None:
        notes.append(f"rerank {result.rerank.get('mode')}: {result.rerank.get('calls', 0)} call(s)"
                     + (", order changed" if result.rerank.get("changed") else ""))
    print_text(console, ", ".join(notes), style="dim")
    for note in result.degraded:
        print_text(err_console, ("degraded:", "yellow"), note)
    for note in result.notes:
        print_text(err_console, "note:", note)


# -- commands registered by other packages ------------------------------------------------------
from agent.cli.graph_stats import graph_app as _graph_app
from agent.cli.index import register as _register_graphs
from agent.cli.profile import profile_app as _profile_app
from agent.cli.tune import tune_command as _tune_command

_register_graphs(app)
app.command("tune")(_tune_command)
app.add_typer(_graph_app, name="graph")
app.add_typer(_profile_app, name="profile")

#: Entry-point group through which packages above the agent (``evals``) add ``skb`` subcommands:
#: the CLI lives in ``agent`` but must not import the layers built on it.
COMMANDS_GROUP = "skb_agent.commands"


def _plugin_app(name: str) -> typer.Typer:
    from importlib.metadata import entry_points

    found = entry_points(group=COMMANDS_GROUP, name=name)
    if not found:
        raise typer.BadParameter(
            f"no `skb {name}` command is installed (entry point {COMMANDS_GROUP}:{name}); "
            "reinstall the project (`pip install -e .` or `make install`)"
        )
    return cast("typer.Typer", next(iter(found)).load())


@app.command(
    "eval",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def _eval(ctx: typer.Context) -> None:
    """Run benchmarks and compare runs (`skb eval --help`, `skb eval compare --help`).

    A forwarder: the benchmark harness (``evals``) sits above the agent and registers itself as an
    entry point, so `skb ask` neither imports nor pays for it.
    """
    _plugin_app("eval")(args=list(ctx.args), prog_name="skb eval")


@app.command(
    "mcp",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def _mcp(ctx: typer.Context) -> None:
    """Serve the retriever over MCP (stdio or HTTP); `skb mcp --help` lists its options.

    Why a forwarder: importing the MCP SDK costs over a second, and every other `skb` command
    (ask, search) paid it at start. The real command is built only when `skb mcp` runs.
    """
    from agent.serving.mcp import mcp_command

    sub = typer.Typer(add_completion=False)
    sub.command()(mcp_command)
    sub(args=list(ctx.args), prog_name="skb mcp")


@app.command(
    "serve",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def _serve(ctx: typer.Context) -> None:
    """Serve the retriever from replicas on Ray Serve (MCP, POST /ask, GET /health); `skb serve --help` lists
    its options. A forwarder for the same reason as `mcp`: Ray is imported only when `skb serve` runs."""
    from agent.cli.serve import serve_command

    sub = typer.Typer(add_completion=False)
    sub.command()(serve_command)
    sub(args=list(ctx.args), prog_name="skb serve")


@app.command(
    "trace",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def _trace(ctx: typer.Context) -> None:
    """Inspect recorded `skb ask` runs (list, show, html); `skb trace --help` lists the subcommands.

    A forwarder for the same reason as `mcp`: the trace viewer imports langsmith's tracer types.
    """
    from agent.cli.trace import trace_app

    trace_app(args=list(ctx.args), prog_name="skb trace")
