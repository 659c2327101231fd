"""Every Python and shell example in README.md and docs/ runs, so none can rot.

The examples are written against the index `make demo` builds (`.skb/hpo`); here they run in a scratch directory
whose `.skb/hpo` is the small HPO fixture index (60 nodes) and whose `examples/` is the project's, so the same text
runs in seconds. The blocks of one page run in order in one namespace (a page reads top to bottom); a shell block
runs in bash with the project's `skb` on the PATH. A ```text block right after an example is its printed result and
is compared: line by line when it holds no `...` line, else as lines that must appear in that order.

Markers, an HTML comment on the line before a fence (invisible when rendered):
- `<!-- docs-test: skip REASON -->`: not run, and the reason is required (e.g. a command that builds the complete
  HPO index or starts a server that runs until stopped);
- `<!-- docs-test: llm-stub -->`: run with OPENAI_BASE_URL pointing at a local OpenAI-compatible stub that plays a
  good tool-calling model (the LLM is the only fake);
- `<!-- doc-test: TAG -->`: run and checked in detail by tests/agent/serving/test_readme_examples.py, so not run twice here.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.openai_stub import Stub, completion

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]
RUN_LANGS = {"python": "python", "py": "python", "bash": "bash", "sh": "bash", "shell": "bash", "console": "bash"}
FENCE = re.compile(r"^```\s*([\w+-]*)\s*$")
MARKER = re.compile(r"^<!--\s*(docs?-test):\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Example:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str  # "python" | "bash"
    code: str
    marker: str  # "" | "skip REASON" | "llm-stub" | "tag TAG"
    expected: str | None  # the ```text block right after it

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def _fences(text: str) -> list[tuple[int, str, str, str]]:
    """(line, language, body, marker) of every fenced block; the marker is the comment on the line before it."""
    lines = text.splitlines()
    blocks: list[tuple[int, str, str, str]] = []
    i = 0
    while i < len(lines):
        opened = FENCE.match(lines[i])
        if not opened:
            i += 1
            continue
        start, lang = i, opened.group(1).lower()
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"unclosed code fence at line {start + 1}")
        before = lines[start - 1].strip() if start else ""
        found = MARKER.match(before)
        marker = ""
        if found:
            marker = f"tag {found.group(2)}" if found.group(1) == "doc-test" else found.group(2)
        blocks.append((start + 1, lang, "\n".join(body) + "\n", marker))
        i += 1
    return blocks


def collect(page: Path) -> list[Example]:
    text = page.read_text()
    blocks = _fences(text)
    lines = text.splitlines()
    examples = []
    for n, (line, lang, body, marker) in enumerate(blocks):
        if lang not in RUN_LANGS:
            continue
        expected = None
        if n + 1 < len(blocks) and blocks[n + 1][1] == "text":
            # only blank lines between this block's closing fence and the text block
            close = line + body.count("\n")  # 0-based index of the closing fence
            between = lines[close + 1 : blocks[n + 1][0] - 1]
            if all(not ln.strip() for ln in between):
                expected = blocks[n + 1][2]
        examples.append(Example(page, line, RUN_LANGS[lang], body, marker, expected))
    return examples


ALL = [example for page in PAGES for example in collect(page)]


def _lines(text: str) -> list[str]:
    return [" ".join(line.split()) for line in text.strip().splitlines()]


def check_output(example: Example, out: str) -> None:
    if example.expected is None:
        return
    want, got = _lines(example.expected), _lines(out)
    if "..." not in want:
        assert got == want, f"{example.where}: printed\n{out}\nbut the page shows\n{example.expected}"
        return
    position = 0
    for line in (w for w in want if w != "..."):
        while position < len(got) and got[position] != line:
            position += 1
        assert position < len(got), f"{example.where}: {line!r} not printed (in order); printed:\n{out}"
        position += 1


def _good_model(request: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """A tool-calling model that calls `ask` with the user's question and replies with its top answer; without
    tools (a chain's prompt) it answers in one line."""
    messages = request["messages"]
    results = [m for m in messages if m["role"] == "tool"]
    if request.get("tools") and not results:
        question = next(m["content"] for m in messages if m["role"] == "user")
        return completion(calls=[("ask", json.dumps({"question": question}))])
    if results:
        return completion(content="It is " + json.loads(results[-1]["content"])["top_answer"] + ".")
    return completion(content="FBN1 [FBN1]")


@pytest.fixture(scope="module")
def workspace(hpo_index_dir: Path, hpo_bundle: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch directory laid out like the project after `make demo`: `.skb/hpo` (here the small fixture index)
    and `examples/`."""
    root = tmp_path_factory.mktemp("docs_examples")
    (root / ".skb").mkdir()
    (root / ".skb" / "hpo").symlink_to(hpo_index_dir, target_is_directory=True)
    (root / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    return root


@pytest.fixture()
def example_env(workspace: Path, monkeypatch: pytest.MonkeyPatch, openai_stub: Stub) -> Iterator[dict[str, str]]:
    openai_stub.replies = [_good_model] * 50
    monkeypatch.chdir(workspace)
    monkeypatch.setenv("SKB_TRACE_DB", str(workspace / "traces.sqlite"))
    monkeypatch.setenv("SKB_THREADS_DB", str(workspace / "threads.sqlite"))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    monkeypatch.setenv("PATH", os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    env = dict(os.environ)
    yield env


def run_python(example: Example, namespace: dict[str, Any]) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(example.code, example.where, "exec"), namespace)  # noqa: S102 -- the page's example is the test
    return out.getvalue()


def run_bash(example: Example, env: dict[str, str]) -> str:
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", example.code],
        capture_output=True, text=True, env=env, timeout=180, check=False,
    )
    assert done.returncode == 0, f"{example.where}: exit {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def _close_all(namespace: dict[str, Any]) -> None:
    """Close what a page's examples left open (bundles, toolkits, retrievers), newest first."""
    for value in reversed(list(namespace.values())):
        close = getattr(value, "close", None)
        if type(value).__module__.startswith(("graphs.bundle", "agent.serving")) and callable(close):
            with contextlib.suppress(Exception):
                close()


def _tagged_elsewhere() -> set[str]:
    """Tags that the tests running tagged blocks name: `run_block("TAG", ...)` anywhere under tests/, and the quoted
    names in tests/agent/serving/test_readme_examples.py ("trace-commands")."""
    tags = set(re.findall(r'"([\w-]+)"', (REPO / "tests" / "agent" / "serving" / "test_readme_examples.py").read_text()))
    for path in (REPO / "tests").rglob("*.py"):
        tags |= set(re.findall(r'run_block\("([\w-]+)"', path.read_text()))
    return tags


@pytest.mark.parametrize("page", [p for p in PAGES if any(e.page == p for e in ALL)], ids=lambda p: str(p.relative_to(REPO)))
def test_page_examples_run(page: Path, example_env: dict[str, str]) -> None:
    namespace: dict[str, Any] = {"__name__": f"docs_example_{page.stem}"}
    try:
        for example in (e for e in ALL if e.page == page):
            if example.marker.startswith(("skip", "tag ")):
                continue
            assert example.marker in ("", "llm-stub"), f"{example.where}: unknown marker {example.marker!r}"
            out = run_python(example, namespace) if example.lang == "python" else run_bash(example, example_env)
            check_output(example, out)
    finally:
        _close_all(namespace)


def test_every_example_runs_or_says_why_not() -> None:
    """The count the docs promise, and no example left out silently: a skip names its reason, a tag names a test
    that runs it."""
    skipped = [e for e in ALL if e.marker.startswith("skip")]
    tagged = [e for e in ALL if e.marker.startswith("tag ")]
    for example in skipped:
        assert len(example.marker.removeprefix("skip").strip()) >= 20, f"{example.where}: a skip needs its reason"
    elsewhere = _tagged_elsewhere()
    for example in tagged:
        assert example.marker.removeprefix("tag ") in elsewhere, f"{example.where}: no test runs {example.marker!r}"
    run_here = len(ALL) - len(skipped) - len(tagged)
    print(f"docs examples: {len(ALL)} in all, {run_here} run here, {len(tagged)} run by the tests that name their tag, "
          f"{len(skipped)} skipped with a reason")
    assert run_here + len(tagged) >= 20 and len(skipped) <= len(ALL) // 3


def test_the_runner_reads_fences_markers_and_outputs() -> None:
    """The parser itself: a marker binds to the next fence only, a text block after an example is its output, and a
    wrong output fails."""
    page = REPO / "README.md"
    text = "intro\n<!-- docs-test: skip reason given here -->\n```bash\nmake demo\n```\n\n```python\nprint(1)\n```\n\n" \
           "```text\n1\n```\n```json\n{}\n```\n"
    blocks = _fences(text)
    assert [(b[1], b[3]) for b in blocks] == [("bash", "skip reason given here"), ("python", ""), ("text", ""), ("json", "")]
    example = Example(page, 7, "python", "print(1)\n", "", "1\n")
    check_output(example, "1\n")
    with pytest.raises(AssertionError):
        check_output(example, "2\n")
    loose = Example(page, 7, "python", "", "", "a\n...\nc\n")
    check_output(loose, "a\nb\nc\n")
    with pytest.raises(AssertionError):
        check_output(loose, "c\na\n")
