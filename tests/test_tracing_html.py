"""The trace page: self-contained HTML, rendered by a real headless Chromium.

The trace combines a real agent run (offline planner) with direct calls of the real cypher and
semantic_search tools, so the page has every part: run tree, nodes per step, a Cypher run.
Chromium comes from the Debian package (`scripts/ensure_chromium.sh`); without it the browser
tests skip with that reason.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from langchain_core.runnables import RunnableLambda

from agent.api import build_agent
from agent.trace_html import highlight_cypher, render_trace_html, tool_steps, write_trace_html
from agent.tracing import LocalTracer, TraceRun
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
    for name in ("link_entities", "plan", "act", "finalize", "cypher", "semantic_search", "OfflinePlanner"):
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
