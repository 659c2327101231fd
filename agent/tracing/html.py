"""One trace as a single self-contained HTML page (no scripts, fonts or styles fetched from anywhere).

Why a static page: it can be attached to an issue, opened from a CI artifact or mailed, and it
renders the same offline. The run tree uses <details>/<summary>, so collapsing needs no JavaScript.

Why so strict about markup: a trace database may come from elsewhere (a colleague, a CI artifact)
and every one of its fields is then attacker-controlled. Every value is HTML-escaped, values used
as class names are reduced to a safe token, and the page carries a Content-Security-Policy that
allows no script at all and no style but its own stylesheet (by hash), so a missed escape still
cannot run anything.
The page answers the questions one asks of a retrieval run: what did each step search for, which
nodes did it find, which Cypher ran, and what did the LLM calls cost per stage.
"""

from __future__ import annotations

import ast
import base64
import hashlib
import html
import json
import re
from importlib import resources
from pathlib import Path
from string import Template
from typing import Any

from pydantic import BaseModel, Field

from agent.results import StageUsage
from agent.tracing.tracer import TraceRun, TraceStore
from graphs.errors import ConfigError
from graphs.manifest import atomic_write_text
from tools.results import Rows, parse_result

__all__ = ["ToolStep", "content_security_policy", "format_ms", "render_trace_html", "tool_steps", "write_trace_html"]

_MAX_KEYS_SHOWN = 30
_CYPHER_KEYWORDS = (
    "OPTIONAL MATCH|MATCH|WHERE|WITH|RETURN|ORDER BY|LIMIT|SKIP|UNWIND|AS|AND|OR|NOT|IN|DISTINCT|"
    "COUNT|COLLECT|CASE|WHEN|THEN|ELSE|END|DESC|ASC|IS NULL|IS NOT NULL|CONTAINS|STARTS WITH|ENDS WITH|CALL|YIELD"
)
_CYPHER_TOKEN = re.compile(
    rf"(?P<str>'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\")|(?P<param>\$\w+)|(?P<kw>\b(?:{_CYPHER_KEYWORDS})\b)",
    re.IGNORECASE,
)


class ToolStep(BaseModel):
    """One tool call of a trace and the nodes it surfaced."""

    index: int
    step: int | None
    tool: str
    run_id: str
    query: str
    keys: list[str] = Field(default_factory=list)
    rows: int | None = None
    error: str | None = None


def format_ms(ms: float | None) -> str:
    if ms is None:
        return "running"
    return f"{ms:.1f} ms" if ms < 1000 else f"{ms / 1000:.2f} s"


def _tool_args(run: TraceRun) -> dict[str, Any]:
    """Tool inputs as a dict: LangChain records the call's dict, or only its str() in older paths."""
    inputs = run.inputs if isinstance(run.inputs, dict) else {}
    if set(inputs) == {"input"} and isinstance(inputs["input"], str):
        text = inputs["input"]
        for parse in (json.loads, ast.literal_eval):
            try:
                value = parse(text)
            except (ValueError, SyntaxError, TypeError):
                continue
            if isinstance(value, dict):
                return value
        return {"input": text}
    return inputs


def _tool_payload(run: TraceRun) -> dict[str, Any] | None:
    """The JSON payload a tool returned (artifact if recorded, else its content text)."""
    out = run.outputs.get("output") if isinstance(run.outputs, dict) else run.outputs
    if isinstance(out, dict) and isinstance(out.get("artifact"), dict):
        return out["artifact"]
    if isinstance(out, dict) and "content" in out:
        out = out["content"]
    if isinstance(out, dict):
        return out
    if isinstance(out, str):
        try:
            value = json.loads(out)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    return None


def _keys_of(tool: str, payload: dict[str, Any], args: dict[str, Any]) -> tuple[list[str], int | None]:
    """The node keys a recorded tool result names (and its row count for cypher), read through the typed
    result models; traces written before results were typed (``triples`` lists) are still read."""
    result = parse_result(tool, payload)
    if result is not None:
        if not isinstance(result, Rows):
            return list(dict.fromkeys(result.found_keys())), None
        cols = [str(c).lower() for c in result.columns]
        key_cols = [i for i, c in enumerate(cols) if c == "key" or c.endswith((".key", "key"))]
        found = [str(row[i]) for row in result.rows for i in key_cols if i < len(row) and row[i] is not None]
        return list(dict.fromkeys(found)), len(result.rows)
    keys: list[str] = []
    if isinstance(payload.get("hits"), list):
        keys = [str(h.get("key")) for h in payload["hits"] if isinstance(h, dict) and h.get("key")]
    elif isinstance(payload.get("triples"), list):
        asked = {str(k) for k in args.get("keys", []) or []}
        for t in payload["triples"]:
            if not isinstance(t, dict):
                continue
            for side in ("dst", "src"):
                key = t.get(side)
                if key and str(key) not in asked:
                    keys.append(str(key))
    elif isinstance(payload.get("keys"), list):
        keys = [str(k) for k in payload["keys"]]
    return list(dict.fromkeys(keys)), None


def tool_steps(tree: TraceRun) -> list[ToolStep]:
    """Every tool run in the tree, in order, with the keys it found."""
    steps: list[ToolStep] = []
    for _, run in tree.walk():
        if run.run_type != "tool":
            continue
        args = _tool_args(run)
        payload = _tool_payload(run) or {}
        keys, rows = _keys_of(run.name, payload, args)
        err = run.error
        if isinstance(payload.get("error"), dict):
            e = payload["error"]
            err = f"{e.get('type', 'error')}: {e.get('message', '')}"
        query = args.get("query") or args.get("text") or args.get("keys") or args.get("input")
        if query is None:
            query = {k: v for k, v in args.items() if k not in ("step", "question")}
        step = args.get("step")
        prov = payload.get("provenance")
        if step is None and isinstance(prov, dict):
            step = prov.get("step")
        steps.append(
            ToolStep(
                index=len(steps) + 1,
                step=int(step) if isinstance(step, int) else None,
                tool=run.name,
                run_id=run.id,
                query=query if isinstance(query, str) else json.dumps(query, ensure_ascii=False),
                keys=keys,
                rows=rows,
                error=err.splitlines()[0][:300] if err else None,
            )
        )
    return steps


# -- rendering ----------------------------------------------------------------------------------

_e = html.escape
_UNSAFE_CLASS_CHARS = re.compile(r"[^A-Za-z0-9_-]")
_STYLE_BLOCK = re.compile(r"<style>(.*?)</style>", re.DOTALL)


def _cls(prefix: str, value: str) -> str:
    """A class name from stored text: anything but letters, digits, _ and - becomes _ (no extra classes,
    no quote to break out of), so styling hooks stay usable whatever the database holds."""
    return prefix + _UNSAFE_CLASS_CHARS.sub("_", value)[:40]


def _duration_ms(run: TraceRun) -> float | None:
    """The run's duration, or None when a foreign database holds timestamps that are not ISO 8601."""
    try:
        return run.duration_ms
    except (TypeError, ValueError):
        return None


def content_security_policy(stylesheet: str) -> str:
    """The page's CSP: nothing may load or run; the one inline stylesheet is allowed by its SHA-256."""
    digest = base64.b64encode(hashlib.sha256(stylesheet.encode("utf-8")).digest()).decode("ascii")
    return (
        f"default-src 'none'; script-src 'none'; style-src 'sha256-{digest}'; img-src 'none'; "
        "object-src 'none'; base-uri 'none'; form-action 'none'"
    )


def highlight_cypher(query: str) -> str:
    """Escaped Cypher with keywords, strings and $params wrapped in spans."""
    out: list[str] = []
    pos = 0
    for m in _CYPHER_TOKEN.finditer(query):
        out.append(_e(query[pos : m.start()]))
        kind = m.lastgroup or "kw"
        out.append(f'<span class="{kind}">{_e(m.group(0))}</span>')
        pos = m.end()
    out.append(_e(query[pos:]))
    return "".join(out)


def _pretty(value: Any) -> str:
    if isinstance(value, dict) and set(value) == {"output"} and isinstance(value["output"], str):
        value = value["output"]
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return _e(value)
    return _e(json.dumps(value, indent=2, ensure_ascii=False, default=str))


def _badge(run_type: str) -> str:
    cls = run_type if run_type in {"chain", "llm", "tool", "retriever"} else "other"
    return f'<span class="badge b-{cls}">{_e(run_type)}</span>'


def _run_html(run: TraceRun, depth: int, steps_by_run: dict[str, ToolStep]) -> str:
    classes = ["run", _cls("t-", run.run_type), _cls("status-", run.status)]
    if run.run_type == "tool" and run.name == "cypher":
        classes.append("cypher")
    is_open = depth < 2 or run.status == "error" or run.name == "cypher"
    meta = [format_ms(_duration_ms(run))]
    p, c, t = run.subtree_tokens()
    if t:
        meta.append(f"{t} tok ({p} in / {c} out)")
    if run.stage and depth > 0:
        meta.append(f"stage {run.stage}")
    step = steps_by_run.get(run.id)
    if step is not None:
        found = f"{len(step.keys)} nodes" if step.rows is None else f"{step.rows} rows, {len(step.keys)} keys"
        meta.append(found)
    status = ' <span class="err">error</span>' if run.status == "error" else ""
    summary = (
        f'<summary>{_badge(run.run_type)}<span class="name">{_e(run.name)}</span>{status}'
        f'<span class="meta">{_e(" · ".join(meta))}</span></summary>'
    )
    body: list[str] = []
    if run.name == "cypher" and run.run_type == "tool":
        query = _tool_args(run).get("query")
        if isinstance(query, str):
            body.append('<div class="label">cypher</div>')
            body.append(f'<pre class="cypher-query">{highlight_cypher(query)}</pre>')
    if step is not None and step.keys:
        shown = "".join(f"<code>{_e(k)}</code>" for k in step.keys[:_MAX_KEYS_SHOWN])
        more = f" … +{len(step.keys) - _MAX_KEYS_SHOWN}" if len(step.keys) > _MAX_KEYS_SHOWN else ""
        body.append(f'<div class="label">nodes found</div><div class="keys">{shown}{more}</div>')
    if run.error:
        body.append(f'<div class="label err">error</div><pre>{_e(run.error)}</pre>')
    body.append(f'<details><summary class="label">inputs</summary><pre>{_pretty(run.inputs)}</pre></details>')
    if run.outputs is not None:
        body.append(f'<details><summary class="label">outputs</summary><pre>{_pretty(run.outputs)}</pre></details>')
    children = "\n".join(_run_html(child, depth + 1, steps_by_run) for child in run.child_runs)
    return (
        f'<details class="{_e(" ".join(classes))}" data-run-id="{_e(run.id)}"{" open" if is_open else ""}>'
        f'{summary}<div class="body">{"".join(body)}{children}</div></details>'
    )


def _question(tree: TraceRun) -> str | None:
    inputs = tree.inputs if isinstance(tree.inputs, dict) else {}
    for key in ("question", "input"):
        if isinstance(inputs.get(key), str):
            return str(inputs[key])
    for msg in reversed(inputs.get("messages") or []):
        if (
            isinstance(msg, dict)
            and (msg.get("type") or msg.get("role")) in ("human", "user")
            and isinstance(msg.get("content"), str)
        ):
            return str(msg["content"])
    return None


def _answer(tree: TraceRun) -> str | None:
    outputs = tree.outputs if isinstance(tree.outputs, dict) else {}
    result = outputs.get("result")
    if isinstance(result, dict) and isinstance(result.get("answer"), str):
        return str(result["answer"])
    for msg in reversed(outputs.get("messages") or []):
        if isinstance(msg, dict) and msg.get("type") == "ai" and isinstance(msg.get("content"), str) and msg["content"]:
            return str(msg["content"])
    return None


def _usage_from_tree(tree: TraceRun) -> dict[str, StageUsage]:
    usage: dict[str, StageUsage] = {}
    for _, run in tree.walk():
        if run.llm_call:
            acc = usage.setdefault(run.stage or "?", StageUsage())
            acc.llm_calls += 1
            acc.prompt_tokens += run.prompt_tokens
            acc.completion_tokens += run.completion_tokens
    return usage


def render_trace_html(tree: TraceRun, usage: dict[str, StageUsage] | None = None) -> str:
    """The page for ``tree`` (a run with its descendants, e.g. from `TraceStore.get_tree`)."""
    usage = usage if usage is not None else _usage_from_tree(tree)
    steps = tool_steps(tree)
    steps_by_run = {s.run_id: s for s in steps}
    runs = list(tree.walk())
    p, c, t = tree.subtree_tokens()
    cards = [
        (format_ms(_duration_ms(tree)), "duration"),
        (str(len(runs)), "runs"),
        (str(sum(1 for _, r in runs if r.llm_call)), "LLM calls"),
        (str(len(steps)), "tool calls"),
        (f"{t}", f"tokens ({p} in / {c} out)"),
        (tree.status, "status"),
    ]
    cards_html = "".join(f'<div class="card"><b>{_e(v)}</b><span>{_e(k)}</span></div>' for v, k in cards)

    q_parts = []
    if (question := _question(tree)) is not None:
        q_parts.append(f'<div class="label">question</div><pre>{_e(question)}</pre>')
    if (answer := _answer(tree)) is not None:
        q_parts.append(f'<div class="label">answer</div><pre>{_e(answer)}</pre>')
    if tree.error:
        q_parts.append(f'<div class="label err">error</div><pre>{_e(tree.error)}</pre>')

    if usage:
        stage_rows = "".join(
            f'<tr><td>{_e(stage)}</td><td class="num">{u.llm_calls}</td><td class="num">{u.prompt_tokens}</td>'
            f'<td class="num">{u.completion_tokens}</td></tr>'
            for stage, u in sorted(usage.items())
        )
        stage_table = (
            "<table><tr><th>stage</th><th>LLM calls</th><th>prompt tokens</th><th>completion tokens</th></tr>"
            f"{stage_rows}</table>"
        )
    else:
        stage_table = "<p>No LLM calls in this trace (offline planner or cached).</p>"

    if steps:
        rows: list[str] = []
        for s in steps:
            keys = " ".join(f"<code>{_e(k)}</code>" for k in s.keys[:_MAX_KEYS_SHOWN])
            if len(s.keys) > _MAX_KEYS_SHOWN:
                keys += f" … +{len(s.keys) - _MAX_KEYS_SHOWN}"
            err = f'<span class="err">{_e(s.error)}</span>' if s.error else ""
            rows.append(
                f'<tr class="step {_e(_cls("tool-", s.tool))}"><td class="num">{s.index}</td>'
                f'<td class="num">{"" if s.step is None else s.step}</td><td>{_e(s.tool)}</td>'
                f'<td><code>{_e(s.query[:200])}</code></td><td class="num">{len(s.keys)}</td>'
                f'<td class="keys">{keys}{err}</td></tr>'
            )
        steps_table = (
            "<table><tr><th>#</th><th>step</th><th>tool</th><th>query</th><th>nodes</th><th>keys</th></tr>"
            + "".join(rows)
            + "</table>"
        )
    else:
        steps_table = "<p>No tool calls in this trace.</p>"

    cypher_runs = [r for _, r in runs if r.run_type == "tool" and r.name == "cypher"]
    cypher_block = ""
    if cypher_runs:
        parts = ["<h2>Cypher</h2>"]
        for r in cypher_runs:
            q = _tool_args(r).get("query")
            if isinstance(q, str):
                parts.append(f'<pre class="cypher-query" data-run-id="{_e(r.id)}">{highlight_cypher(q)}</pre>')
        cypher_block = "\n".join(parts)

    text = resources.files("agent.tracing").joinpath("templates/trace.html").read_text(encoding="utf-8")
    stylesheet = _STYLE_BLOCK.search(text)
    if stylesheet is None:  # the packaged template is ours; this guards edits that drop the block
        raise RuntimeError("templates/trace.html has no <style> block to allow in the page's CSP")
    return Template(text).substitute(
        csp=_e(content_security_policy(stylesheet.group(1)), quote=False),  # single quotes are fine in "…"
        title=_e(f"Trace: {tree.name}"),
        trace_id=_e(tree.id),
        start_time=_e(tree.start_time),
        cards=cards_html,
        question_block="\n".join(q_parts),
        stage_table=stage_table,
        steps_table=steps_table,
        cypher_block=cypher_block,
        tree=_run_html(tree, 0, steps_by_run),
    )


def write_trace_html(store: TraceStore, run_id: str, out: Path) -> Path:
    """Render run ``run_id`` (full id or unique prefix) of ``store`` to ``out`` atomically."""
    tree = store.get_tree(run_id)
    page = render_trace_html(tree, store.usage_by_stage(tree.trace_id) if tree.parent_run_id is None else None)
    out = Path(out)
    if out.is_dir():
        raise ConfigError(f"--out {out} is a directory; name a file, e.g. {out / 'trace.html'}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, page)
    except OSError as exc:
        raise ConfigError(f"cannot write the trace page to {out} ({exc.strerror or exc}); "
                          "pass --out PATH in a writable directory with free space") from exc
    return out
