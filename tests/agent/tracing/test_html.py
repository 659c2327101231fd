"""The trace page: self-contained HTML, rendered by a real headless Chromium.

The trace combines a real agent run (offline planner) with direct calls of the real cypher and
semantic_search tools, so the page has every part: run tree, nodes per step, a Cypher run.
Chromium comes from the Debian package (`scripts/ensure_chromium.sh`); without it the browser
tests skip with that reason.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableLambda

from agent.api import build_agent
from agent.tracing.html import highlight_cypher, render_trace_html, tool_steps, write_trace_html
from agent.tracing.tracer import LocalTracer, TraceRun
from tools import make_tools

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
QUESTION = "Which disease is characterized by brachyturricephaly, proptosis and midface retrusion?"
CYPHER = "MATCH (d:Disease)-[:HAS_PHENOTYPE]->(p:Phenotype) WHERE p.key = $key RETURN d.key, d.name LIMIT 5"


@pytest.fixture(scope="module")
def traced(hpo_bundle: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[LocalTracer, TraceRun]:
    """One trace: a session that asks the agent, then runs a Cypher query and a semantic search."""
    tracer = LocalTracer(tmp_path_factory.mktemp("html") / "traces.sqlite")
    graph = build_agent(bundle=hpo_bundle)
    tools = {t.name: t for t in make_tools(hpo_bundle)}

    def session(question: str) -> dict[str, Any]:
        state = graph.invoke({"question": question})
        rows = tools["cypher"].invoke(
            {
                "type": "tool_call",
                "id": "c1",
                "name": "cypher",
                "args": {"query": CYPHER, "params": {"key": "HP:0000520"}},
            }
        )
        hits = tools["semantic_search"].invoke({"text": "bulging eyes", "k": 3})
        return {"answer": state["result"].answer, "cypher": rows.content, "hits": hits}

    RunnableLambda(session, name="session").invoke(QUESTION, {"callbacks": [tracer]})
    tracer.flush()
    assert tracer.errors == []
    return tracer, tracer.store.get_tree(tracer.store.list_traces()[0].id)


def test_tool_steps_list_the_nodes_each_call_found(traced: tuple[LocalTracer, TraceRun]) -> None:
    _, tree = traced
    steps = tool_steps(tree)
    assert [s.index for s in steps] == list(range(1, len(steps) + 1))
    cypher = [s for s in steps if s.tool == "cypher"]
    assert len(cypher) == 1 and cypher[0].rows is not None and cypher[0].rows >= 3
    assert "OMIM:101200" in cypher[0].keys  # Apert syndrome has proptosis
    search = [s for s in steps if s.tool == "semantic_search" and s.query == "bulging eyes"]
    assert len(search) == 1 and len(search[0].keys) == 3
    finish = [s for s in steps if s.tool == "finish"]
    assert finish and finish[-1].keys[0] in {"OMIM:101200", "ORPHA:87"}


def test_page_is_self_contained_and_shows_tree_steps_and_cypher(traced: tuple[LocalTracer, TraceRun]) -> None:
    _, tree = traced
    page = render_trace_html(tree)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    # no external assets: nothing fetched by src/href/url()/@import
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page)
    assert "url(" not in page and "@import" not in page and "<script" not in page
    runs = list(tree.walk())
    assert page.count('<details class="run') == len(runs)
    assert page.count("<summary>") == len(runs)
    assert 'class="run t-tool status-success cypher"' in page
    assert '<span class="kw">MATCH</span>' in page and '<span class="param">$key</span>' in page
    assert "Nodes found per step" in page and "<code>OMIM:101200</code>" in page
    assert QUESTION in page
    # payloads are escaped, not injected
    assert "<script" not in render_trace_html(_with_input(tree, "<script>alert(1)</script>"))


def _with_input(tree: TraceRun, text: str) -> TraceRun:
    copy = tree.model_copy(deep=True)
    copy.inputs = {"question": text}
    return copy


def test_highlight_cypher_escapes_and_marks_tokens() -> None:
    out = highlight_cypher("MATCH (n) WHERE n.name = '<b>' RETURN n LIMIT $k")
    assert out.count('<span class="kw">') == 4
    assert '<span class="str">&#x27;&lt;b&gt;&#x27;</span>' in out
    assert '<span class="param">$k</span>' in out


def _chromium(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    cmd = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={tmp / 'profile'}",
        *args,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)


needs_chromium = pytest.mark.skipif(
    not (Path(CHROMIUM).exists() or shutil.which("chromium")),
    reason="headless Chromium missing: run scripts/ensure_chromium.sh (apt-get install chromium)",
)


@needs_chromium
def test_chromium_renders_the_page(traced: tuple[LocalTracer, TraceRun], tmp_path: Path) -> None:
    from PIL import Image

    tracer, tree = traced
    page = write_trace_html(tracer.store, tree.id, tmp_path / "trace.html")
    url = page.resolve().as_uri()

    dom = _chromium("--dump-dom", url, tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert "Trace: session" in html and "Run tree" in html and "Nodes found per step" in html
    for name in ("link_entities", "plan", "call_planner", "finalize", "cypher", "semantic_search", "OfflinePlanner"):
        assert f'<span class="name">{name}</span>' in html
    assert html.count("<details") >= len(list(tree.walk()))

    png = tmp_path / "trace.png"
    shot = _chromium(f"--screenshot={png}", "--window-size=1200,900", url, tmp=tmp_path)
    assert shot.returncode == 0 and png.exists(), shot.stderr[-2000:]
    assert png.stat().st_size > 20_000
    image = Image.open(png).convert("RGB")
    assert image.size == (1200, 900)
    colours = image.getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 200  # text, badges, tables: not a blank page
    dominant = max(colours)[0] / (1200 * 900)
    assert dominant < 0.97


# -- a tampered or foreign trace database ---------------------------------------------------------
#
# Every field of the runs table is attacker-controlled once the file comes from elsewhere. Each
# payload, if it ran, would retitle the page and mark <body>; the dumped DOM shows whether it did.

_ROOT_ID = "00000000-0000-7000-8000-00000000a001"


def _js(tag: str) -> str:
    return f"document.title='XSS-{tag}';document.body.setAttribute('data-xss','{tag}')"


def _attr(tag: str) -> str:
    """Breaks out of a double-quoted attribute; an open <details> fires `toggle` by itself."""
    return f'x" ontoggle="{_js(tag)}" autofocus tabindex="1" onfocus="{_js(tag)}" y="'


def _text(tag: str) -> str:
    """Breaks out of text content (and of <pre>/<code>/<title>) into markup."""
    return f'</pre></code></title><img src=x onerror="{_js(tag)}"><script>{_js(tag)}</script>'


def _tampered_rows() -> list[dict[str, Any]]:
    base: dict[str, Any] = {"trace_id": _ROOT_ID, "start_time": "2026-01-01T00:00:00+00:00",
                            "end_time": "2026-01-01T00:00:01+00:00", "status": "success",
                            "prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0, "llm_call": 0}  # fmt: skip
    cypher = f"MATCH (n) WHERE n.name = '{_text('cypher-str')}' RETURN n.key AS key LIMIT $k{_text('cypher')}"
    artifact = {"columns": ["key"], "rows": [[_text("row-key")], [_attr("row-key-attr")]]}
    return [
        {**base, "id": _ROOT_ID, "dotted_order": "a", "name": _text("root-name"), "run_type": "chain",
         "inputs": json.dumps({"question": _text("question")}),
         "outputs": json.dumps({"result": {"answer": _text("answer")}}), "error": _text("root-error"),
         "tags": json.dumps([_text("tag")]), "extra": json.dumps({"x": _text("extra")})},
        {**base, "id": "00000000-0000-7000-8000-00000000a002", "parent_run_id": _ROOT_ID, "dotted_order": "a.1",
         "name": _text("odd-name"), "run_type": _attr("run_type"), "status": _attr("status"),
         "inputs": json.dumps({"input": _text("input")}), "outputs": json.dumps({"output": _text("output")})},
        {**base, "id": _attr("run-id"), "parent_run_id": _ROOT_ID, "dotted_order": "a.2", "name": "cypher",
         "run_type": "tool", "inputs": json.dumps({"query": cypher, "params": {"k": 1}, "step": 1}),
         "outputs": json.dumps({"output": {"content": json.dumps(artifact), "artifact": artifact}})},
        {**base, "id": "00000000-0000-7000-8000-00000000a004", "parent_run_id": _ROOT_ID, "dotted_order": "a.3",
         "name": _attr("tool-name"), "run_type": "tool", "status": "error", "error": _text("tool-error"),
         "inputs": json.dumps({"text": _text("tool-text"), "step": 2}),
         "outputs": json.dumps({"output": json.dumps({"hits": [{"key": _attr("hit-key")}],
                                                      "error": {"type": _attr("err-type"), "message": _text("m")}})})},
        {**base, "id": "00000000-0000-7000-8000-00000000a005", "parent_run_id": _ROOT_ID, "dotted_order": "a.4",
         "name": "ChatModel", "run_type": "llm", "stage": _attr("stage"), "llm_call": 1,
         "prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7,
         "inputs": json.dumps({"messages": [_text("prompt")]}), "outputs": json.dumps({"text": _text("completion")})},
    ]  # fmt: skip


@pytest.fixture
def tampered_db(tmp_path: Path) -> Path:
    from agent.tracing.tracer import TraceStore

    db = tmp_path / "foreign.sqlite"
    store = TraceStore(db)
    store.upsert_many(_tampered_rows())
    store.close()
    return db


class _Markup(HTMLParser):
    """Every start tag with its attributes, as the browser's tokenizer would see them."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


def test_tampered_trace_fields_are_escaped_in_text_and_attributes(tampered_db: Path, tmp_path: Path) -> None:
    from agent.tracing.tracer import TraceStore

    page = write_trace_html(TraceStore(tampered_db, read_only=True), _ROOT_ID, tmp_path / "t.html").read_text()
    parser = _Markup()
    parser.feed(page)
    names = {tag for tag, _ in parser.tags}
    assert "script" not in names and "img" not in names
    for tag, attrs in parser.tags:
        for attr, value in attrs:
            assert not attr.startswith("on") and attr not in ("autofocus", "tabindex", "y"), (tag, attr, value)
            if attr == "class":
                assert value is not None and re.fullmatch(r"[A-Za-z0-9_ -]*", value), value
    # the hostile values are still shown, as text
    assert "XSS-run_type" in page and "XSS-question" in page and "XSS-row-key" in page


def test_page_declares_a_content_security_policy_without_script(tampered_db: Path) -> None:
    from agent.tracing.tracer import TraceStore

    page = render_trace_html(TraceStore(tampered_db, read_only=True).get_tree(_ROOT_ID))
    head = page[: page.index("</head>")]
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]+)">', head)
    assert csp is not None, "no CSP meta in <head>"
    assert head.index("Content-Security-Policy") < head.index("<title>")  # applies before any content
    directives = dict(d.strip().split(" ", 1) for d in csp.group(1).split(";") if d.strip())
    assert directives["default-src"] == "'none'" and directives["script-src"] == "'none'"
    assert directives["base-uri"] == "'none'" and directives["form-action"] == "'none'"
    style = re.search(r"<style>(.*?)</style>", page, re.DOTALL)
    assert style is not None
    digest = base64.b64encode(hashlib.sha256(style.group(1).encode()).digest()).decode()
    assert directives["style-src"] == f"'sha256-{digest}'"  # the page's own stylesheet and nothing else
    assert "unsafe-inline" not in csp.group(1) and " style=" not in page


@needs_chromium
def test_chromium_runs_no_script_from_a_tampered_trace_database(tampered_db: Path, tmp_path: Path) -> None:
    from PIL import Image

    from agent.tracing.tracer import TraceStore

    page = write_trace_html(TraceStore(tampered_db, read_only=True), _ROOT_ID, tmp_path / "tampered.html")
    url = page.resolve().as_uri()
    dom = _chromium("--virtual-time-budget=3000", "--dump-dom", url, tmp=tmp_path)
    assert dom.returncode == 0, dom.stderr[-2000:]
    html = dom.stdout
    assert "<h2>Run tree</h2>" in html and "XSS-root-name" in html  # rendered, payloads shown as text
    title = re.search(r"<title>(.*?)</title>", html, re.DOTALL)
    assert title is not None
    assert not title.group(1).startswith("XSS-"), f"a payload ran: title {title.group(1)!r}"
    body = re.search(r"<body[^>]*>", html)
    assert body is not None
    assert "data-xss" not in body.group(0), f"a payload ran: {body.group(0)}"
    assert 'id="tree"' in html

    # the policy keeps the page's own stylesheet: the Cypher block has its yellow background (--cy)
    png = tmp_path / "tampered.png"
    shot = _chromium(f"--screenshot={png}", "--window-size=1200,1600", url, tmp=tmp_path)
    assert shot.returncode == 0 and png.exists(), shot.stderr[-2000:]
    colours = {rgb: n for n, rgb in Image.open(png).convert("RGB").getcolors(maxcolors=1_000_000) or []}
    assert colours.get((0xFF, 0xF8, 0xC5), 0) > 10_000


def test_trace_cli_prints_foreign_fields_as_plain_text(tmp_path: Path) -> None:
    """`skb trace list/show` on a foreign database: Rich markup and terminal escapes in stored fields are
    shown as text, never interpreted (no hyperlinks, retitled terminals, or a crash on a stray tag)."""
    from typer.testing import CliRunner

    from agent.cli.trace import trace_app
    from agent.tracing.tracer import TraceStore

    hostile = "evil\x1b]0;PWNED\x07 [/red][link=https://evil.example]click[/link] \x9b31m"
    root = "00000000-0000-7000-8000-00000000b001"
    base: dict[str, Any] = {"trace_id": root, "start_time": "2026-01-01T00:00:00+00:00",
                            "end_time": "2026-01-01T00:00:01+00:00", "prompt_tokens": 0, "completion_tokens": 0,
                            "total_tokens": 0, "llm_call": 0}  # fmt: skip
    db = tmp_path / "foreign.sqlite"
    store = TraceStore(db)
    store.upsert_many([
        {**base, "id": root, "dotted_order": "a", "name": hostile, "run_type": "chain", "status": "success",
         "inputs": json.dumps({"question": hostile})},
        {**base, "id": "00000000-0000-7000-8000-00000000b002", "parent_run_id": root, "dotted_order": "a.1",
         "name": hostile, "run_type": f"[bold]{hostile}", "status": "error", "error": hostile},
    ])  # fmt: skip
    store.close()
    runner = CliRunner()
    for args in (["list", "--db", str(db)], ["show", root, "--db", str(db)]):
        result = runner.invoke(trace_app, args, env={"COLUMNS": "400"})
        assert result.exit_code == 0, (args, result.output, result.exception)
        assert "\x1b" not in result.output and "\x07" not in result.output and "\x9b" not in result.output
        assert "[/red][link=https://evil.example]click" in result.output, result.output  # shown, not parsed
        assert "\\x1b]0;PWNED\\x07" in result.output  # the escape is visible as text
