"""`skb index --update`: a change set becomes a new generation equal to a rebuild, safely under readers,
serialized, recorded in the manifest and refused whole when it cannot apply."""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from graphs.build import IndexConfig, build_index
from graphs.bundle import IndexBundle
from graphs.errors import ConfigError
from graphs.manifest import Manifest
from graphs.skb.model import SKB, Edge, Node
from graphs.update import parse_changes, update_index, update_lock
from tests.small_graphs import catalog_skb

pytestmark = pytest.mark.integration
runner = CliRunner()

CHANGES: list[dict[str, Any] | str] = [
    {"op": "delete", "node": {"key": "C_KETTLE"}},
    {"op": "upsert", "node": {"key": "C_IRON", "label": "Category",
                              "props": {"name": "steam iron", "gloss": "A household appliance that presses cloth."}}},
    {"op": "upsert", "edge": {"src": "C_IRON", "rel": "SUBCLASS_OF", "dst": "C_APPL"}},
    {"op": "upsert", "edge": {"src": "P_CLEAN", "rel": "IN_CATEGORY", "dst": "C_IRON"}},
    {"op": "upsert", "node": {"key": "C_TOASTER", "label": "Category",
                              "props": {"name": "toaster oven", "gloss": "An oven that toasts and bakes."}}},
]
QUESTIONS = ["electric kettle that boils water", "steam iron for cloth", "toaster oven that bakes",
             "household appliance", "cleaning products"]


def build(skb: SKB, index_dir: Path) -> Path:
    build_index(skb, index_dir, IndexConfig(dataset="catalog", store="none", embedder="hash:64"))
    return index_dir


def write_changes(path: Path, lines: Sequence[dict[str, Any] | str]) -> Path:
    path.write_text("".join((x if isinstance(x, str) else json.dumps(x)) + "\n" for x in lines), encoding="utf-8")
    return path


def changed_by_hand() -> SKB:
    """The catalog with CHANGES made by editing the graph directly: what a user rebuilds from."""
    skb = catalog_skb()
    del skb.nodes["C_KETTLE"]
    skb.edges = [e for e in skb.edges if "C_KETTLE" not in (e.src, e.dst)]
    skb.nodes["C_TOASTER"].props = {"name": "toaster oven", "gloss": "An oven that toasts and bakes."}
    skb.add_node(Node("C_IRON", "Category", {"name": "steam iron", "gloss": "A household appliance that presses cloth."}))
    skb.add_edge(Edge("C_IRON", "SUBCLASS_OF", "C_APPL"))
    skb.add_edge(Edge("P_CLEAN", "IN_CATEGORY", "C_IRON"))
    return skb


def test_cli_update_writes_a_child_generation_once_and_verify_checks_its_lineage(tmp_path: Path) -> None:
    index_dir = build(catalog_skb(), tmp_path / "index")
    parent = Manifest.read(index_dir).generation
    changes = write_changes(tmp_path / "changes.jsonl", CHANGES)
    first = runner.invoke(app, ["index", "--update", str(changes), "--index-dir", str(index_dir), "-q"])
    assert first.exit_code == 0, first.output
    assert "node deleted" in first.output and "parent" in first.output
    manifest = Manifest.read(index_dir)
    digest = manifest.extra["update"]["changes_sha256"]
    assert manifest.generation != parent and manifest.extra["update"]["parent"] == parent
    assert manifest.extra["applied_changes"] == [digest] and len(digest) == 64
    again = runner.invoke(app, ["index", "--update", str(changes), "--index-dir", str(index_dir), "-q"])
    assert again.exit_code == 0 and "applied to" in again.output and "before" in again.output
    assert Manifest.read(index_dir).generation == manifest.generation
    verified = runner.invoke(app, ["verify", "--index-dir", str(index_dir)])
    assert verified.exit_code == 0, verified.output
    raw = json.loads((index_dir / "manifest.json").read_text())
    raw["extra"]["update"]["parent"] = raw["generation"]
    (index_dir / "manifest.json").write_text(json.dumps(raw))
    broken = runner.invoke(app, ["verify", "--index-dir", str(index_dir)])
    assert broken.exit_code == 2 and "update lineage" in broken.output and "Traceback" not in broken.output


@pytest.mark.parametrize(
    ("lines", "named"),
    [
        ([CHANGES[0], '{"op": "upsert"'], "line 2"),
        ([CHANGES[0], {"op": "upsert", "edge": {"src": "P_CLEAN", "rel": "IN_CATEGORY", "dst": "C_GONE"}}],
         "missing node 'C_GONE'"),
        ([{"op": "delete", "node": {"key": "C_GONE"}}], "unknown node 'C_GONE'"),
        ([{"op": "upsert", "node": {"key": "S1", "label": "Shop", "props": {}}}], "label 'Shop'"),
    ],
)
def test_cli_refuses_a_bad_change_set_with_exit_2_and_changes_nothing(
    tmp_path: Path, lines: list[dict[str, Any] | str], named: str
) -> None:
    index_dir = build(catalog_skb(), tmp_path / "index")
    before = Manifest.read(index_dir)
    changes = write_changes(tmp_path / "changes.jsonl", lines)
    result = runner.invoke(app, ["index", "--update", str(changes), "--index-dir", str(index_dir), "-q"])
    assert result.exit_code == 2 and named in result.output and "Traceback" not in result.output
    after = Manifest.read(index_dir)
    assert (after.generation, after.files) == (before.generation, before.files)


def test_cli_update_needs_an_index_and_takes_no_dataset(tmp_path: Path) -> None:
    changes = write_changes(tmp_path / "changes.jsonl", CHANGES)
    result = runner.invoke(app, ["index", "--update", str(changes), "--index-dir", str(tmp_path / "none")])
    assert result.exit_code == 2 and "holds none" in result.output
    result = runner.invoke(app, ["index", "--update", str(changes), "--dataset", "jsonl", "--index-dir", str(tmp_path)])
    assert result.exit_code == 2 and "drop --dataset" in result.output
    result = runner.invoke(app, ["index", "--index-dir", str(tmp_path / "none")])
    assert result.exit_code == 2 and "--dataset is required" in result.output


def test_an_update_equals_a_rebuild_of_the_changed_data(tmp_path: Path) -> None:
    updated = build(catalog_skb(), tmp_path / "updated")
    summary = update_index(updated, parse_changes(write_changes(tmp_path / "c.jsonl", CHANGES).read_bytes()))
    # every node keeps the parent's vector but the two whose text is new (the renamed toaster, the iron added)
    assert summary.hnsw["bm25_patched"] and summary.hnsw["vectors_reused"] == len(changed_by_hand().nodes) - 2
    rebuilt = build(changed_by_hand(), tmp_path / "rebuilt")
    with IndexBundle.open(updated) as a, IndexBundle.open(rebuilt) as b:
        assert list(a.skb.nodes) == list(b.skb.nodes)
        keys = list(b.skb.nodes)
        # equal up to the float noise of embedding a text in another batch
        assert abs(a.hnsw.vectors(keys) - b.hnsw.vectors(keys)).max() < 1e-6
        for question in QUESTIONS:
            assert (a.bm25.scores(question) == b.bm25.scores(question)).all()
        for question in QUESTIONS:
            for mode in ("bm25", "vss", "hybrid"):
                got = [(h.key, round(h.score, 5)) for h in a.search(question, mode=mode, k=20)]  # type: ignore[arg-type]
                want = [(h.key, round(h.score, 5)) for h in b.search(question, mode=mode, k=20)]  # type: ignore[arg-type]
                assert got == want, (question, mode)
        assert a.lexicon == b.lexicon


def test_a_reader_keeps_answering_during_an_update_and_picks_up_the_new_generation(tmp_path: Path) -> None:
    index_dir = build(catalog_skb(), tmp_path / "index")
    bundle = IndexBundle.open(index_dir)
    errors: list[BaseException] = []
    answered = [0]
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                with bundle.pinned():  # one question, one generation (how the agent and the servers ask)
                    hits = bundle.search("steam iron kettle", mode="hybrid", k=5)
                assert hits, "no answer"
                answered[0] += 1
            except BaseException as exc:  # noqa: BLE001 - any failure is the finding
                errors.append(exc)
                return

    reader = threading.Thread(target=read)
    reader.start()
    try:
        update_index(index_dir, parse_changes(write_changes(tmp_path / "c.jsonl", CHANGES).read_bytes()))
    finally:
        stop.set()
        reader.join(30)
    assert errors == [] and answered[0] > 0
    keys = [h.key for h in bundle.search("steam iron", mode="bm25", k=3)]
    assert keys[0] == "C_IRON" and bundle.reloads >= 1 and bundle.node("C_KETTLE") is None
    bundle.close()


def test_updates_are_serialized_and_a_crash_leaves_the_previous_generation_serving(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index_dir = build(catalog_skb(), tmp_path / "index")
    before = Manifest.read(index_dir)
    changes = parse_changes(write_changes(tmp_path / "c.jsonl", CHANGES).read_bytes())
    with update_lock(index_dir), pytest.raises(ConfigError, match="another update"):
        update_index(index_dir, changes, lock_wait_s=0.2)

    import graphs.build

    def crash(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("killed mid-build")

    monkeypatch.setattr(graphs.build, "write_fast_start", crash)
    with pytest.raises(RuntimeError, match="killed"):
        update_index(index_dir, changes)
    monkeypatch.undo()
    after = Manifest.read(index_dir)
    assert after.generation == before.generation
    after.verify(index_dir, full=True)
    assert not list(tmp_path.glob(".index.tmp-*"))
    with IndexBundle.open(index_dir) as bundle:
        assert bundle.node("C_KETTLE") is not None
    assert update_index(index_dir, changes).status == "applied"  # the next run goes through
