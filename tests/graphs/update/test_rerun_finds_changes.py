"""Re-running the command that built an index, on changed data, applies what changed as an update: the same
generation lineage as `--update`, the same answers as a rebuild, and a full build where a change set cannot say it."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli import index as index_cli
from agent.cli.main import app
from graphs.bundle import IndexBundle
from graphs.loaders.jsonl import write_jsonl
from graphs.manifest import Manifest
from graphs.skb.model import Edge, Node
from graphs.update import apply_changes
from graphs.update.diff import diff_changes
from tests.graphs.update.test_update_index import QUESTIONS, build, changed_by_hand
from tests.small_graphs import catalog_skb

pytestmark = pytest.mark.integration
runner = CliRunner()


def _index(data: Path, index_dir: Path, *extra: str) -> str:
    result = runner.invoke(app, ["index", "--dataset", "jsonl", "--data", str(data), "--index-dir", str(index_dir),
                                 "--store", "none", "--embedder", "hash:64", *extra])
    assert result.exit_code == 0, result.output
    return result.output


def test_the_difference_applied_is_the_changed_graph() -> None:
    changes = diff_changes(catalog_skb(), changed_by_hand())
    assert changes is not None and changes.changes
    got, report = apply_changes(catalog_skb(), changes)
    want = changed_by_hand()
    assert {k: (n.label, n.props) for k, n in got.nodes.items()} == {k: (n.label, n.props) for k, n in want.nodes.items()}
    key = lambda e: (e.src, e.rel, e.dst, sorted(e.props.items()))
    assert sorted(map(key, got.edges)) == sorted(map(key, want.edges))
    assert report.deleted_nodes == {"C_KETTLE"}
    same = diff_changes(catalog_skb(), catalog_skb())
    assert same is not None and same.changes == []
    parallel = changed_by_hand()
    parallel.add_edge(Edge("C_IRON", "SUBCLASS_OF", "C_APPL", {"since": 2020}))  # two edges of one name, unlike
    assert diff_changes(catalog_skb(), parallel) is None
    new_label = changed_by_hand()
    new_label.add_node(Node("B_ACME", "Brand", {"name": "Acme"}))  # a node type the index's schema lacks
    assert diff_changes(catalog_skb(), new_label) is None


def test_a_rerun_on_changed_data_updates_and_answers_as_a_rebuild(tmp_path: Path) -> None:
    data, index_dir = tmp_path / "data", tmp_path / "index"
    write_jsonl(catalog_skb(), data)
    _index(data, index_dir, "-q")
    parent = Manifest.read(index_dir).generation
    assert "is up to date" in _index(data, index_dir)
    write_jsonl(changed_by_hand(), data)
    out = _index(data, index_dir)
    assert "applied the changes found in the data as an update" in out and "and 1 deleted nodes" in out
    manifest = Manifest.read(index_dir)
    assert manifest.extra["update"]["parent"] == parent
    assert "is up to date" in _index(data, index_dir)
    rebuilt = build(changed_by_hand(), tmp_path / "rebuilt")
    with IndexBundle.open(index_dir) as a, IndexBundle.open(rebuilt) as b:
        for question in QUESTIONS:
            got = [(h.key, round(h.score, 5)) for h in a.search(question, mode="hybrid", k=20)]
            assert got == [(h.key, round(h.score, 5)) for h in b.search(question, mode="hybrid", k=20)], question
    _index(data, index_dir, "--force", "-q")  # --force still rebuilds: the lineage starts again
    assert "update" not in Manifest.read(index_dir).extra


def test_a_change_of_schema_settings_or_most_nodes_builds_in_full(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    data, index_dir = tmp_path / "data", tmp_path / "index"
    write_jsonl(catalog_skb(), data)
    _index(data, index_dir, "-q")
    monkeypatch.setattr(index_cli, "UPDATE_MIN_NODES", 0)
    write_jsonl(changed_by_hand(), data)  # 5 of 14 nodes: past UPDATE_SHARE, a rebuild is as quick
    assert index_cli.UPDATE_SHARE < 5 / 14 and "as an update" not in _index(data, index_dir)
    monkeypatch.setattr(index_cli, "UPDATE_SHARE", 1.0)  # from here only the schema or the settings decide
    write_jsonl(catalog_skb(), data)
    assert "as an update" in _index(data, index_dir)  # the way back is an update
    grown = changed_by_hand()
    grown.add_node(Node("B_ACME", "Brand", {"name": "Acme"}))
    write_jsonl(grown, data)
    out = _index(data, index_dir)
    assert "as an update" not in out and "update" not in Manifest.read(index_dir).extra
    assert Manifest.read(index_dir).counts.nodes.get("Brand") == 1
    write_jsonl(changed_by_hand(), data)
    other = runner.invoke(app, ["index", "--dataset", "jsonl", "--data", str(data), "--index-dir", str(index_dir),
                                "--store", "none", "--embedder", "hash:32"])
    assert other.exit_code == 0 and "as an update" not in other.output
