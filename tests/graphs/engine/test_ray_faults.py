"""Worker faults in a Ray build, on the session's local Ray: a worker killed mid-stage (SIGKILL, as the
kernel's OOM killer or a lost node does it) is retried by Ray and the build ends as without the fault; a
worker that dies on every try ends the build with a message naming the stage, exit code 2 and no
traceback, and the index being served (the previous generation) keeps its files, its generation and its
answers.

The fault is injected by wrapping a stage function of ``graphs.engine.ray_engine`` in a closure that kills
its own worker process: Ray ships the closure by value, so the worker runs it as a real task would."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.cli import app
from evals.studies.scale.generate import generate
from graphs.build import IndexConfig, build_index
from graphs.bundle import IndexBundle
from graphs.manifest import Manifest

pytestmark = pytest.mark.integration

runner = CliRunner()


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A graph smaller than two embedding batches: the node texts are embedded in the build process, so the
    test starts no actor pool and spends its time on the stage tasks it kills."""
    root = tmp_path_factory.mktemp("ray-faults")
    generate(600, root / "data", seed=7)
    return root / "data"


def _dying(stage: Callable[..., Any], marker: Path, times: int) -> Callable[..., Any]:
    """``stage``, except that its first ``times`` calls (across workers: one marker file per death) kill
    the worker running them before it returns."""

    def run(*args: Any, **kwargs: Any) -> Any:
        for i in range(times):
            try:
                fd = os.open(f"{marker}.{i}", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                continue
            os.close(fd)
            os.kill(os.getpid(), signal.SIGKILL)
        return stage(*args, **kwargs)

    return run


def _deaths(marker: Path) -> int:
    return len(list(marker.parent.glob(marker.name + ".*")))


def _answers(index: Path, questions: list[str]) -> list[list[tuple[str, float]]]:
    bundle = IndexBundle.open(index, store="none")
    try:
        return [[(h.key, h.score) for h in bundle.search(q, mode="hybrid", k=10)] for q in questions]
    finally:
        bundle.close()


def _questions(data: Path) -> list[str]:
    from graphs.loaders.jsonl import load_jsonl

    skb = load_jsonl(data)
    return [skb.node_text(k)[:60] for k in list(skb.nodes)[::60]]


def test_a_worker_killed_mid_stage_is_retried_and_the_build_ends_as_without_it(
    data: Path, ray_local: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphs.engine import ray_engine
    from graphs.loaders.jsonl import load_jsonl

    skb = load_jsonl(data)
    config = IndexConfig(dataset="gen", embedder="hash:64", store="none")
    marker = tmp_path / "died"
    monkeypatch.setattr(ray_engine, "hnsw_shard", _dying(ray_engine.hnsw_shard, marker, 1))
    monkeypatch.setattr(ray_engine, "bm25_terms", _dying(ray_engine.bm25_terms, tmp_path / "bm25-died", 1))
    engine = ray_engine.RayEngine(shards=2)
    try:
        build_index(skb, tmp_path / "faulty", config, engine=engine)
        monkeypatch.undo()
        build_index(skb, tmp_path / "clean", config, engine=engine)
    finally:
        engine.close()
    assert _deaths(marker) == 1 and _deaths(tmp_path / "bm25-died") == 1  # each stage lost a worker once
    Manifest.read(tmp_path / "faulty").verify(tmp_path / "faulty", full=True)
    questions = _questions(data)
    assert _answers(tmp_path / "faulty", questions) == _answers(tmp_path / "clean", questions)


def test_a_worker_that_dies_on_every_try_fails_the_build_clearly_and_leaves_the_served_index(
    data: Path, ray_local: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from graphs.engine import ray_engine

    index = tmp_path / "index"
    args = ["index", "--dataset", "jsonl", "--data", str(data), "--index-dir", str(index), "--embedder", "hash:64",
            "--store", "none", "--quiet"]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    served = IndexBundle.open(index, store="none")
    before = Manifest.read(index)
    questions = _questions(data)
    answers = _answers(index, questions)

    retries = 1  # each try of the task costs a worker start: one retry proves the retry without four starts
    monkeypatch.setattr(ray_engine, "MAX_RETRIES", retries)
    marker = tmp_path / "died"
    monkeypatch.setattr(ray_engine, "hnsw_shard", _dying(ray_engine.hnsw_shard, marker, 100))
    try:
        failed = runner.invoke(app, [*args, "--engine", "ray", "--hnsw-shards", "2", "--force"])
        assert failed.exit_code == 2, failed.output
        message = " ".join(failed.stderr.split())
        assert "Ray HNSW stage failed" in message and "retried up to 1 time." in message, message
        assert "unchanged" in message and "Traceback" not in failed.output, message
        assert _deaths(marker) >= retries + 1  # the first try and every retry each lost their worker

        after = Manifest.read(index)
        assert after.generation == before.generation and after.files == before.files
        after.verify(index, full=True)
        assert not list(index.parent.glob(f".{index.name}.tmp-*"))  # the failed build's directory is gone
        assert [[(h.key, h.score) for h in served.search(q, mode="hybrid", k=10)] for q in questions] == answers
        assert _answers(index, questions) == answers
    finally:
        served.close()


def test_an_embedding_actor_killed_mid_batch_is_replaced_and_every_vector_comes_back(
    ray_local: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The actor pool's side of a fault: an embedding actor dies on its first batch (SIGKILL); Ray Data starts
    another and retries the batch, and the vectors equal those embedded in one process, each in its text's row."""
    import numpy as np

    from graphs.embedding.embedder import embed_all, get_embedder
    from graphs.engine import ray_engine
    from graphs.engine.local import EmbedderSpec

    marker = tmp_path / "actor-died"

    class DyingActor(ray_engine._EmbedActor):  # defined here, so Ray ships it (and the marker) by value
        def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            try:
                os.close(os.open(f"{marker}.0", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return super().__call__(batch)
            os.kill(os.getpid(), signal.SIGKILL)
            raise AssertionError("unreachable")

    monkeypatch.setattr(ray_engine, "_EmbedActor", DyingActor)
    texts = [f"node {i} of the graph, text {i * 7 % 13}" for i in range(1_300)]  # past two batches: the pool runs
    embedder = get_embedder("hash:64")
    engine = ray_engine.RayEngine()
    try:
        vectors = engine.embed(embedder, EmbedderSpec("hash:64"), texts, chunk=512, progress=None)
    finally:
        engine.close()
    assert _deaths(marker) == 1
    assert np.allclose(vectors, embed_all(embedder, texts), atol=1e-6)
