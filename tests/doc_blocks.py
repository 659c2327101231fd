"""The tagged Python blocks of README.md and docs/ (``<!-- doc-test: TAG -->``), found and run for the tests
that check what each block prints (the serving tests and the README examples test share them)."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from tests.paths import REPO

PAGES = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


def doc_block(tag: str) -> str:
    for page in PAGES:
        match = re.search(rf"<!-- doc-test: {re.escape(tag)} -->\s*```python\n(.*?)```", page.read_text(), re.DOTALL)
        if match:
            return match.group(1)
    raise AssertionError(f"no python block tagged {tag!r} in README.md or docs/")


def run_block(tag: str, index_dir: Path) -> str:
    code = doc_block(tag).replace(".skb/hpo", str(index_dir))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"docs:{tag}", "exec"), {"__name__": f"users_doc_{tag}"})  # noqa: S102 -- the doc example is the test
    return out.getvalue()
