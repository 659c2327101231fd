"""Shared pytest fixtures. Keep this file small; append fixtures with a docstring saying who needs them.

- ``hpo_mini_skb``: the SKB of tests/fixtures/hpo_mini (60 nodes: Apert/Crouzon/Marfan... phenotypes, genes).
- ``hpo_index_dir``: a real index (FalkorDB store, HNSW, BM25, MiniLM embeddings) built once per session.
- ``hpo_bundle``: an IndexBundle on that index, opened once per session (its FalkorDB server closes at the end).
- ``_token_calibration_per_test`` (autouse): token-count calibration reset around every test.
- ``orchard``: an IndexBundle (FalkorDB store, hashing embedder) on ``small_graphs.orchard_skb``, per module: the
  in-process aggregate and walk tests compare its SKB with its store, the fast-path tests ask it questions.
- ``ray_local``: one local Ray (2 CPUs, no dashboard, workers' logs kept off the terminal) for the whole session;
  the Ray engine and Ray Serve tests share it (library code starts Ray only when none is running).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

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
from tests import small_graphs
from tests.openai_stub import openai_stub  # noqa: F401


@pytest.fixture(autouse=True)
def _token_calibration_per_test() -> Iterator[None]:
    """Every test: the token-count calibration (``graphs.tokens``, per model name, process-wide) starts empty,
    so the usage a scripted model reports in one test does not scale the counts of the next."""
    from graphs.tokens import reset_calibration

    reset_calibration()
    yield
    reset_calibration()


# -- markers: ``integration`` (starts FalkorDB or ArcadeDB, or loads the embedding model) and ``unit`` (the rest) --

#: Fixtures that build a real index (FalkorDB server, MiniLM embeddings): a test that uses one, directly or
#: through another fixture, is an integration test without saying so.
INTEGRATION_FIXTURES = frozenset({"hpo_index_dir", "hpo_bundle", "catalog"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test gets exactly one of ``unit`` and ``integration``.

    Why automatic: a marker each author must remember drifts; the fixtures a test uses say whether it needs a
    server. A test that starts one inline says so with ``pytest.mark.integration`` (on the test or the module);
    ``make test-unit`` then refuses (``pytest_configure`` below) a unit test that starts one anyway.
    """
    for item in items:
        if item.get_closest_marker("integration") is None and not INTEGRATION_FIXTURES.isdisjoint(
            getattr(item, "fixturenames", ())
        ):
            item.add_marker(pytest.mark.integration)
        if item.get_closest_marker("integration") is None:
            item.add_marker(pytest.mark.unit)
    # Tests on the session's local Ray run last: Ray's daemons, once started, stay up until the session ends and
    # take CPU from every test after them (the suite took minutes longer with them in the middle).
    items.sort(key=lambda item: "ray_local" in getattr(item, "fixturenames", ()))


def _unit_run(config: pytest.Config) -> bool:
    """Whether this run's ``-m`` expression can select no integration test (``-m unit``, ``-m "unit and not
    slow"``, ``-m "not integration"``), evaluated by pytest's own expression parser rather than by words."""
    from _pytest.mark.expression import Expression

    expression = str(config.getoption("markexpr") or "").strip()
    if not expression:
        return False
    compiled = Expression.compile(expression)
    # an integration test carries ``integration`` and perhaps ``slow`` (never ``unit``: collection gives one of two)
    for marks in ({"integration"}, {"integration", "slow"}):
        if compiled.evaluate(lambda name, /, _marks=marks, **_: name in _marks):
            return False
    return True


def pytest_configure(config: pytest.Config) -> None:
    """In a unit-only run, starting FalkorDB or ArcadeDB or loading the embedding model fails the test by name.

    Why: ``pytest -m unit`` promises a run with no server and no model; a test that breaks the promise is
    mismarked, and this says which and what to do instead of letting it pass slowly (or hang without a server).
    Patched for the whole run, not per test, so that a module- or session-scoped fixture is caught too.
    """
    if not _unit_run(config):
        return
    monkeypatch = pytest.MonkeyPatch()

    def refuse(what: str) -> Any:
        def refused(*_args: Any, **_kwargs: Any) -> Any:
            test = os.environ.get("PYTEST_CURRENT_TEST", "a test").rsplit(" ", 1)[0]
            raise AssertionError(f"{test} (or a fixture it uses) is marked unit but {what}; mark the test "
                                 "pytest.mark.integration")
        return refused

    from graphs.embedding.embedder import MiniLMEmbedder, TorchMiniLMEmbedder
    from graphs.store.falkordb_server import FalkorDBServer

    patched: list[tuple[type, str, str]] = [
        (FalkorDBServer, "start", "starts a FalkorDB server"),
        (MiniLMEmbedder, "__init__", "loads the MiniLM embedding model"),
        (TorchMiniLMEmbedder, "__init__", "loads the MiniLM embedding model"),
    ]
    from tests.store_fixtures import ArcadeDBChild

    patched.append((ArcadeDBChild, "__init__", "starts an ArcadeDB server"))
    for owner, name, what in patched:
        monkeypatch.setattr(owner, name, refuse(what))
    config.add_cleanup(monkeypatch.undo)


# -- small graphs' indexes shared across folders (the graphs: tests/small_graphs.py) --


@pytest.fixture(scope="module")
def catalog(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from graphs.build import IndexConfig, build_index
    from graphs.bundle import IndexBundle

    index_dir = tmp_path_factory.mktemp("catalog") / "index"
    summary = build_index(small_graphs.catalog_skb(), index_dir, IndexConfig(dataset="catalog", store="none"))
    assert "phrases" in summary.timings_s
    bundle = IndexBundle.open(index_dir, store="none")
    yield bundle
    bundle.close()


@pytest.fixture(scope="module")
def orchard(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexBundle]:
    from graphs.build import IndexConfig, build_index
    from graphs.bundle import IndexBundle

    path = tmp_path_factory.mktemp("orchard") / "index"
    build_index(small_graphs.orchard_skb(), path, IndexConfig(dataset="orchard", embedder="hash:32"))
    bundle = IndexBundle.open(path)
    yield bundle
    bundle.close()


@pytest.fixture(scope="session")
def ray_local() -> Iterator[Any]:
    import ray

    from agent.serving.replicas import proxy_env

    proxy_env()  # Ray Serve's proxies (started by this Ray) answer a request whose replica died with a clear 503
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True,
             configure_logging=False)
    yield ray
    ray.shutdown()
