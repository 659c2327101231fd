"""The documentation site builds with no warning, keeps every topic the long README had, and renders.

- `mkdocs build --strict` (broken links, missing anchors, pages left out of the navigation and API references that
  do not resolve all fail), built once per module into a temp directory;
- every `##`/`###` heading of the README before the site existed maps to a page in the navigation that holds it;
- README's first screen holds the pitch, the two commands and the first example, within 300 lines in all;
- headless Chromium renders one built page to a PNG that is not blank.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")

# The headings of README.md as it was before the site (one line each, as written then) -> the page of the site
# that now holds that topic, and the heading (or bold paragraph title) it has there.
OLD_README_SECTIONS: dict[str, tuple[str, str]] = {
    "Quickstart": ("getting-started.md", "Install and the demo"),
    "Architecture": ("concepts/state-machine.md", "The state machine"),
    "Index directory": ("concepts/index-stages.md", "Index directory"),
    "CLI": ("reference/cli.md", "Command line"),
    "Python API": ("getting-started.md", "The first question, from Python"),
    "Use it from LangChain": ("guides/tools.md", "As a LangChain retriever"),
    "Use your Neo4j database": ("guides/neo4j.md", "Use your Neo4j database"),
    "Configuration": ("reference/configuration.md", "Configuration"),
    "LLM planner: endpoints, modes, budgets, optional stages": ("guides/llm.md", "LLM endpoints and budgets"),
    "Bring your own graph (no profile needed)": ("guides/own-graph.md", "Bring your own graph"),
    "Domain profiles": ("guides/profiles.md", "Domain profiles"),
    "Safety": ("guides/safety.md", "Safety"),
    "Limits on model-written Cypher": ("guides/safety.md", "Limits on model-written Cypher"),
    "The embedded FalkorDB server": ("guides/safety.md", "The embedded FalkorDB server"),
    "MCP over HTTP": ("guides/mcp.md", "MCP over HTTP: sessions, tokens and limits"),
    "Trace pages and pickles": ("guides/safety.md", "Trace pages and pickles"),
    "Graph stores: what was verified against what": ("guides/neo4j.md", "Graph stores: what was verified against what"),
    "Using it from other tools (chat assistants, trace inspection, tool reuse)": ("guides/tools.md", "Tools in other agents"),
    "1. Chat assistant: multi-turn memory, streaming, LangGraph Server": (
        "guides/tools.md", "Chat assistant: multi-turn memory, streaming, LangGraph Server"),
    "2. Trace inspection: what did each step search, find and cost?": ("guides/traces.md", "Traces"),
    "3. Tool reuse: our retrieval tools in your agent": ("guides/tools.md", "Our retrieval tools in your agent"),
    "Benchmarks": ("benchmarks/index.md", "Quality"),
    "HPO dev benchmark (`../shared/bench/hpo_cases_dev.csv`, 1,236 questions, 618 disease + 618 gene)": (
        "benchmarks/index.md", "HPO dev benchmark"),
    "MetaQA (multi-hop questions over a movie KB)": ("benchmarks/index.md", "MetaQA (multi-hop questions over a movie KB)"),
    "SAGE similarity edges (HPO, knn 20, 699,464 candidate pairs)": ("benchmarks/performance.md", "SAGE similarity edges"),
    "Index build and cold start (HPO: 36,853 nodes, 556,888 edges)": (
        "benchmarks/performance.md", "Index build and cold start (HPO: 36,853 nodes, 556,888 edges)"),
    "First run: an answer before the vectors (issue 25)": (
        "benchmarks/performance.md", "First run: an answer before the vectors"),
    "Scale: 10 thousand to a million nodes (issue 25)": ("benchmarks/performance.md", "Scale: 10 thousand to a million nodes"),
    "Load (fixture index, offline planner, 8 threads × 200 calls)": (
        "benchmarks/performance.md", "Load (fixture index, offline planner, 8 threads × 200 calls)"),
}


def _nav_pages(nav: Any) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for item in nav for page in _nav_pages(item)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return []


def _config() -> dict[str, Any]:
    class _Loader(yaml.SafeLoader):
        pass

    # mkdocs.yml may use !!python/name tags (Material's emoji); read only what this test needs
    _Loader.add_multi_constructor("tag:yaml.org,2002:python/", lambda loader, suffix, node: None)
    config: dict[str, Any] = yaml.load((REPO / "mkdocs.yml").read_text(), Loader=_Loader)
    return config


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--clean", "--site-dir", str(out)],
        cwd=REPO, capture_output=True, text=True, env=env, timeout=300, check=False,
    )
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert "WARNING" not in log, log[-4000:]
    return out


def test_strict_build_renders_every_page_and_the_api_reference(site: Path) -> None:
    pages = _nav_pages(_config()["nav"])
    for page in pages:
        built = site / (page.removesuffix(".md").removesuffix("index") + "/index.html").lstrip("/")
        built = site / "index.html" if page == "index.md" else built
        assert built.exists(), f"{page} was not built ({built})"
    api = (site / "reference" / "api" / "index.html").read_text()
    for name in ("ask", "aask", "build_agent", "AgentConfig", "AgentResult", "IndexBundle", "SKBToolkit", "SKBRetriever"):
        assert f'id="agent.{name}"' in api or f'id="graphs.bundle.{name}"' in api, f"API reference lacks {name}"


_PARAGRAPH = re.compile(r"<p>(.*?)</p>", re.DOTALL)
_LIST_LINE = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+\S", re.MULTILINE)


def test_no_list_is_rendered_inside_a_paragraph(site: Path) -> None:
    """A list written right under a paragraph line, without a blank line, renders as that paragraph's text
    ("... from the data: - node types: ..."): every page's paragraphs are read from the built site."""
    found = []
    for page in sorted(site.rglob("*.html")):
        for paragraph in _PARAGRAPH.findall(page.read_text(encoding="utf-8")):
            hit = _LIST_LINE.search(paragraph)
            if hit:
                found.append(f"{page.relative_to(site)}: {paragraph[max(0, hit.start() - 60) : hit.end() + 40]!r}")
    assert found == [], "add a blank line before these lists:\n" + "\n".join(found)


def test_every_old_readme_section_is_a_page_in_the_navigation() -> None:
    nav = set(_nav_pages(_config()["nav"]))
    assert {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")} == nav, "a page outside the navigation"
    for old, (page, heading) in OLD_README_SECTIONS.items():
        assert page in nav, f"{old!r}: {page} is not in the navigation"
        text = (DOCS / page).read_text()
        assert re.search(rf"^#+ {re.escape(heading)}\s*$", text, re.MULTILINE), f"{old!r}: {page} has no heading {heading!r}"


def test_no_issue_numbers_or_development_stops_in_user_facing_text() -> None:
    pages = [REPO / "README.md", *(p for p in DOCS.rglob("*.md") if p.name != "ARCHITECTURE.md")]
    pattern = re.compile(r"\(issue \d+\)|\bissue \d+\b|\b[Ss]tops? \d+\b|the issue's|\bthis branch\b")
    found = [f"{p.relative_to(REPO)}:{n}: {line.strip()[:100]}" for p in pages
             for n, line in enumerate(p.read_text().splitlines(), 1) if pattern.search(line)]
    assert found == []


def test_readme_first_screen() -> None:
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 300
    first = "\n".join(lines[:40])
    assert "make demo" in first and "make test" in first
    assert "```python" in first and "```text" in first  # the first example and its printed result
    assert first.count("```") >= 6


needs_chromium = pytest.mark.skipif(
    not (Path(CHROMIUM).exists() or shutil.which("chromium")),
    reason="headless Chromium missing: run scripts/ensure_chromium.sh (apt-get install chromium)",
)


@needs_chromium
def test_chromium_renders_a_page_of_the_site(site: Path, tmp_path: Path) -> None:
    from PIL import Image

    png = tmp_path / "getting-started.png"
    page = (site / "getting-started" / "index.html").as_uri()
    shot = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
         f"--screenshot={png}", "--window-size=1280,1000", "--hide-scrollbars", page],
        capture_output=True, text=True, timeout=120, check=False,
    )
    assert shot.returncode == 0 and png.exists(), shot.stderr[-2000:]
    keep = os.environ.get("SKB_DOCS_SCREENSHOT")  # where to keep a copy to look at
    if keep:
        shutil.copy(png, keep)
    image = Image.open(png).convert("RGB")
    assert image.size == (1280, 1000)
    colours = image.getcolors(maxcolors=1_000_000)
    assert colours is not None and len(colours) > 300  # text, the header bar, the code blocks: not a blank page
    assert max(colours)[0] / (1280 * 1000) < 0.95
    # Material's header bar (indigo) across the top: the theme's stylesheet loaded from the built site
    r, g, b = image.getpixel((640, 20))  # type: ignore[misc]
    assert b > r and b > g, (r, g, b)
