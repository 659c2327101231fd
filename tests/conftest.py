"""Shared pytest fixtures. Keep this file small; append fixtures with a docstring saying who needs them.

- ``hpo_mini_skb``: the SKB of tests/fixtures/hpo_mini (60 nodes: Apert/Crouzon/Marfan... phenotypes, genes).
- ``hpo_index_dir``: a real index (FalkorDB store, HNSW, BM25, MiniLM embeddings) built once per session.
- ``hpo_bundle``: an IndexBundle on that index, opened once per session (its FalkorDB server closes at the end).
- ``_token_calibration_per_test`` (autouse): token-count calibration reset around every test.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

if TYPE_CHECKING:
    from graphs.bundle import IndexBundle
    from graphs.skb.model import SKB

FIXTURES = Path(__file__).parent / "fixtures"


@pytest.fixture(scope="session")
def hpo_mini_skb() -> SKB:
    from graphs.loaders.hpo import load_hpo

    return load_hpo(FIXTURES / "hpo_mini")


@pytest.fixture(scope="session")
def hpo_index_dir(tmp_path_factory: pytest.TempPathFactory, hpo_mini_skb: SKB) -> Path:
    from graphs.build import IndexConfig, build_index

    index_dir = tmp_path_factory.mktemp("hpo_mini_index") / "index"
    build_index(hpo_mini_skb, index_dir, IndexConfig(dataset="hpo"))
    return index_dir


@pytest.fixture(scope="session")
def hpo_bundle(hpo_index_dir: Path) -> Iterator[IndexBundle]:
    from graphs.bundle import IndexBundle

    bundle = IndexBundle.open(hpo_index_dir)
    yield bundle
    bundle.close()


# ``openai_stub``: a local OpenAI-compatible HTTP server with scripted replies (see tests/openai_stub.py).
from tests.openai_stub import openai_stub  # noqa: F401


@pytest.fixture(autouse=True)
def _token_calibration_per_test() -> Iterator[None]:
    """Every test: the token-count calibration (``graphs.tokens``, per model name, process-wide) starts empty,
    so the usage a scripted model reports in one test does not scale the counts of the next."""
    from graphs.tokens import reset_calibration

    reset_calibration()
    yield
    reset_calibration()
