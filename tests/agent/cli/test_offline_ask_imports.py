"""A cold offline ``skb ask`` imports what the question needs and nothing of the LLM stack, plotting, the
MCP server or the tracer's HTML: each of those costs a cold start hundreds of milliseconds for a question
that never uses it. Checked in a fresh interpreter, after the answer is printed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

#: Modules (and their submodules) an offline ask must not import.
NOT_NEEDED = (
    "langchain_openai", "openai", "tiktoken", "matplotlib", "mcp", "agent.serving.mcp", "agent.tracing.html", "jinja2",
)
#: Modules it needs (the agent is a LangGraph state machine).
NEEDED = ("langgraph", "agent.graph", "tools.search_nodes")


def test_an_offline_ask_imports_only_what_it_needs(hpo_index_dir: Path, tmp_path: Path) -> None:
    dump = tmp_path / "modules.txt"
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(dump)!r}, 'w').write('\\n'.join(sorted(sys.modules))))\n"
        "from agent.cli import app\n"
        "sys.argv = ['skb', 'ask', 'Which disease shows seizures and microcephaly?', "
        f"'--index-dir', {str(hpo_index_dir)!r}]\n"
        "app()\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    modules = set(dump.read_text().split())
    for name in NEEDED:
        assert name in modules
    loaded = sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in NOT_NEEDED))
    assert loaded == []
