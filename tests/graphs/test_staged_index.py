"""An index built in stages: the ``core`` stage (no model) answers first and names what it lacks; the
complete build swapped in under a serving process is picked up as one new generation."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent import AgentConfig, ask
from agent.cli.main import app
from evals.studies.scale.generate import generate
from graphs.build import IndexConfig, build_index
from graphs.bundle import IndexBundle
from graphs.errors import StageMissingError
from graphs.skb.model import SKB

pytestmark = pytest.mark.integration

APERT = (
    "Which rare disease is characterized by brachyturricephaly, proptosis, midface retrusion "
    "and cutaneous syndactyly of toes?"
)
runner = CliRunner()


@pytest.fixture()
def core_index(tmp_path: Path, hpo_mini_skb: SKB) -> Path:
    index_dir = tmp_path / "index"
    build_index(hpo_mini_skb, index_dir, IndexConfig(dataset="hpo", stage="core"))
    return index_dir


def test_a_core_index_answers_from_what_exists_and_names_what_is_missing(core_index: Path) -> None:
    assert not (core_index / "hnsw").exists() and not (core_index / "phrases").exists()  # no model ran
    bundle = IndexBundle.open(core_index)
    try:
        assert bundle.missing == ["vectors", "phrases"]
        note = bundle.missing_note()
        assert note is not None and "node vectors" in note and "phrase vectors" in note and "--stage core" in note
        hybrid = bundle.search("brachyturricephaly", mode="hybrid", k=3)
        assert [h.key for h in hybrid] == [h.key for h in bundle.search("brachyturricephaly", mode="bm25", k=3)]
        with pytest.raises(StageMissingError, match="no node vectors yet"):
            bundle.search("brachyturricephaly", mode="vss", k=3)
        result = ask(APERT, bundle=bundle, config=AgentConfig(planner="offline"))
        assert "OMIM:101200" in [item.key for item in result.context[:5]]  # answered from graph, names, BM25
        assert note in result.degraded
    finally:
        bundle.close()


def test_the_cli_says_in_one_line_what_a_partial_index_lacks(core_index: Path) -> None:
    asked = runner.invoke(app, ["ask", APERT, "--index-dir", str(core_index), "--no-trace"])
    assert asked.exit_code == 0, asked.stderr
    assert "OMIM:101200" in asked.stdout
    partial = [line for line in asked.stderr.splitlines() if "partial index" in line]
    assert len(partial) == 1 and "not built yet" in partial[0] and "node vectors" in partial[0]  # one line
    dense = runner.invoke(app, ["search", "proptosis", "--index-dir", str(core_index), "--mode", "vss"])
    assert dense.exit_code == 2 and "--stage core" in dense.stderr and "Traceback" not in dense.stderr
    lexical = runner.invoke(app, ["search", "proptosis", "--index-dir", str(core_index), "--mode", "hybrid"])
    assert lexical.exit_code == 0 and "partial index" in lexical.stderr


def test_the_complete_build_swapped_in_while_serving_is_one_new_generation(core_index: Path,
                                                                           hpo_mini_skb: SKB) -> None:
    bundle = IndexBundle.open(core_index)
    try:
        first = ask(APERT, bundle=bundle, config=AgentConfig(planner="offline"))
        assert any("partial index" in note for note in first.degraded)
        old_generation, old_skb, old_bm25 = bundle.manifest.generation, bundle.skb, bundle.bm25
        with bundle.pinned():  # a question in flight while the complete build lands keeps its own build
            before = bundle.hnsw
            build_index(hpo_mini_skb, core_index, IndexConfig(dataset="hpo"))
            assert bundle.hnsw is before and len(before) == 0 and bundle.missing == ["vectors", "phrases"]
            assert bundle.manifest.generation == old_generation
        assert bundle.missing == []  # the next access sees the new generation, every part of it
        assert bundle.manifest.generation != old_generation and bundle.reloads == 1
        assert len(bundle.hnsw) == len(hpo_mini_skb.nodes)
        assert bundle.skb is not old_skb and bundle.bm25 is not old_bm25
        assert bundle.missing_note() is None
        second = ask(APERT, bundle=bundle, config=AgentConfig(planner="offline"))
        assert not any("partial index" in note for note in second.degraded)
        assert "OMIM:101200" in [item.key for item in second.context[:5]]
        assert bundle.search("bulging eyes", mode="vss", k=3)  # dense search exists now
    finally:
        bundle.close()


def test_staged_cli_builds_never_downgrade_a_complete_index(tmp_path: Path) -> None:
    """On a generated graph with other labels and relations: core, then complete, then core is a no-op."""
    generate(300, tmp_path / "data", seed=3)
    common = ["index", "--dataset", "jsonl", "--data", str(tmp_path / "data"), "--index-dir", str(tmp_path / "idx"),
              "--embedder", "hash:16", "--store", "none", "--quiet"]
    core = runner.invoke(app, [*common, "--stage", "core"])
    assert core.exit_code == 0, core.stderr
    assert IndexBundle.open(tmp_path / "idx").missing == ["vectors"]
    complete = runner.invoke(app, common)
    assert complete.exit_code == 0 and "up to date" not in " ".join(complete.stdout.split())
    bundle = IndexBundle.open(tmp_path / "idx")
    assert bundle.missing == [] and len(bundle.hnsw) == 300
    again = runner.invoke(app, [*common, "--stage", "core"])
    assert again.exit_code == 0 and "up to date" in " ".join(again.stdout.split())
    assert IndexBundle.open(tmp_path / "idx").missing == []
    bad = runner.invoke(app, [*common, "--stage", "half"])
    assert bad.exit_code == 2 and "--stage" in bad.stderr
