"""``make test-unit`` (``pytest -m "unit and not slow"``) promises no server and no model: a unit-only run
patches the server start and the model loads to fail by name, and any other run leaves them alone."""

from __future__ import annotations

from typing import Any

import pytest

from tests import conftest


class _Config:
    """The two things ``pytest_configure`` reads from pytest's config: the ``-m`` expression and cleanups."""

    def __init__(self, markexpr: str) -> None:
        self.markexpr = markexpr
        self.cleanups: list[Any] = []

    def getoption(self, name: str) -> str:
        assert name == "markexpr"
        return self.markexpr

    def add_cleanup(self, func: Any) -> None:
        self.cleanups.append(func)

    def close(self) -> None:
        for func in reversed(self.cleanups):
            func()


@pytest.mark.parametrize(
    ("markexpr", "unit_only"),
    [("unit", True), ("unit and not slow", True), ("not integration", True), ("not slow", False), ("", False),
     ("integration", False), ("not unit", False), ("unit or integration", False), ("unit or slow", False),
     ("(unit) and not slow", True), ("not integration and not slow", True)],
)
def test_which_runs_count_as_unit_only(markexpr: str, unit_only: bool) -> None:
    assert conftest._unit_run(_Config(markexpr)) is unit_only  # type: ignore[arg-type]


def test_a_unit_only_run_refuses_a_server_start_and_a_model_load_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    from graphs.embedding.embedder import MiniLMEmbedder
    from graphs.store.falkordb_server import FalkorDBServer

    original = (FalkorDBServer.start, MiniLMEmbedder.__init__)
    monkeypatch.setenv("PYTEST_CURRENT_TEST", "tests/test_x.py::test_y (call)")
    config = _Config("unit and not slow")
    conftest.pytest_configure(config)  # type: ignore[arg-type]
    try:
        with pytest.raises(AssertionError, match=r"tests/test_x.py::test_y .*starts a FalkorDB server.*integration"):
            FalkorDBServer.start(object())  # type: ignore[arg-type]
        with pytest.raises(AssertionError, match="loads the MiniLM embedding model"):
            MiniLMEmbedder()
    finally:
        config.close()
    assert (FalkorDBServer.start, MiniLMEmbedder.__init__) == original


def test_a_full_run_patches_nothing() -> None:
    from graphs.store.falkordb_server import FalkorDBServer

    before = FalkorDBServer.start
    config = _Config("not slow")
    conftest.pytest_configure(config)  # type: ignore[arg-type]
    assert FalkorDBServer.start is before and not config.cleanups
