"""Where the tests' files are, for a test at any depth of tests/.

Why: the tests live in folders that mirror the packages, so ``Path(__file__).parent`` no longer names one
place; these names do.
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
#: The repository root (pyproject.toml, README.md, evals/, examples/).
REPO = TESTS.parent
#: Hand-computed cases (JSON) that table-driven tests read.
DATA = TESTS / "data"
#: Small committed datasets (hpo_mini, metaqa_mini, a STaRK-shaped cut) and their generators.
FIXTURES = TESTS / "fixtures"
