"""Build safety and index integrity through the real `skb index` CLI, FalkorDB and MiniLM (issue 15).

- A build never deletes a directory that is not an index, nor anything a build did not create:
  user files beside the index's own parts (``traces.sqlite``, notes) survive ``--force``; a
  foreign file inside a build-owned subdirectory makes the rebuild refuse instead of deleting it.
- ``--index-dir .`` (or any directory holding the working directory) is an exit-2 message.
- The graph data (``falkordb/dump.rdb``) is covered by the manifest: a missing, empty or altered
  dump is refused at open with the rebuild command, and serving an index never rewrites it.
"""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from graphs.bundle import IndexBundle
from graphs.errors import IndexCorruptError
from graphs.loaders.jsonl import write_jsonl
from graphs.skb.model import SKB, Node
from tests.store_fixtures import tiny_skb
from tools import make_tools

pytestmark = pytest.mark.integration

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny SKB of the store tests as a JSONL dataset directory."""
    data = tmp_path_factory.mktemp("tiny_data")
    write_jsonl(tiny_skb(), data)
    return data


def skb_index(data: Path, index_dir: Path | str, *extra: str) -> tuple[int, str]:
    """Run `skb index --dataset jsonl` in-process; (exit code, stdout + stderr)."""
    result = runner.invoke(app, ["index", "--dataset", "jsonl", "--data", str(data), "--index-dir", str(index_dir),
                                 "--json", *extra])  # fmt: skip
    return result.exit_code, result.stdout + result.stderr


def built(data: Path, index_dir: Path, *extra: str) -> Path:
    code, out = skb_index(data, index_dir, *extra)
    assert code == 0, out
    return index_dir


def clean_error(code: int, out: str, *needles: str) -> None:
    out = " ".join(out.split())  # Rich wraps long messages at the terminal width
    assert code == 2, out
    assert "Traceback" not in out, out
    for needle in needles:
        assert needle in out, (needle, out)


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# -- item 1: a build never deletes a directory that is not an index ------------------------------------
@pytest.mark.parametrize("force", [False, True], ids=["plain", "force"])
def test_a_directory_that_is_not_an_index_is_refused_and_kept(tiny_data: Path, tmp_path: Path, force: bool) -> None:
    victim = tmp_path / "v"
    (victim / "sub").mkdir(parents=True)
    (victim / "notes.txt").write_text("precious")
    (victim / "sub" / "deep.txt").write_text("also precious")
    before = tree(victim)
    code, out = skb_index(tiny_data, victim, *(["--force"] if force else []))
    clean_error(code, out, str(victim), "not an skb index")
    assert tree(victim) == before
    assert not list(tmp_path.glob(".v.*"))  # no temp build left beside it


def test_a_directory_with_a_foreign_manifest_json_is_not_an_index(tiny_data: Path, tmp_path: Path) -> None:
    """A web app's manifest.json does not make a directory replaceable."""
    victim = tmp_path / "webapp"
    victim.mkdir()
    (victim / "manifest.json").write_text('{"name": "my app", "icons": []}')
    (victim / "index.html").write_text("<html></html>")
    before = tree(victim)
    code, out = skb_index(tiny_data, victim, "--force")
    clean_error(code, out, "not an skb index")
    assert tree(victim) == before


def test_an_empty_directory_and_an_existing_index_are_built_into(tiny_data: Path, tmp_path: Path) -> None:
    target = tmp_path / "empty"
    target.mkdir()
    built(tiny_data, target)
    assert (target / "manifest.json").is_file()
    built(tiny_data, target, "--force")
    with IndexBundle.open(target) as bundle:
        assert bundle.store.count_nodes() == len(tiny_skb().nodes)


def test_a_directory_holding_only_trace_databases_is_built_into_and_they_are_kept(
    tiny_data: Path, tmp_path: Path
) -> None:
    """What `skb ask`/`skb serve` keep in an index dir (its trace and thread databases) survives a build into it."""
    target = tmp_path / "index"
    target.mkdir()
    for name in ("traces.sqlite", "threads.sqlite"):
        db = sqlite3.connect(target / name)
        db.execute("CREATE TABLE t (x)")
        db.commit()
        db.close()
    built(tiny_data, target)
    assert (target / "manifest.json").is_file()
    assert (target / "traces.sqlite").is_file() and (target / "threads.sqlite").is_file()


# -- item 9: --force keeps what the build did not create ------------------------------------------------
def test_force_rebuild_keeps_traces_and_user_files(tiny_data: Path, tmp_path: Path) -> None:
    index_dir = built(tiny_data, tmp_path / "index")
    (index_dir / "notes.txt").write_text("my notes")
    (index_dir / "mine").mkdir()
    (index_dir / "mine" / "a.txt").write_text("mine too")
    # a trace database in WAL mode with a connection held open across the rebuild, as a server's tracer does
    conn = sqlite3.connect(index_dir / "traces.sqlite")
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("CREATE TABLE runs (id TEXT)")
        conn.execute("INSERT INTO runs VALUES ('before')")
        conn.commit()
        built(tiny_data, index_dir, "--force")
        conn.execute("INSERT INTO runs VALUES ('after')")  # the open connection still writes into the index
        conn.commit()
    finally:
        conn.close()
    assert (index_dir / "notes.txt").read_text() == "my notes"
    assert (index_dir / "mine" / "a.txt").read_text() == "mine too"
    fresh = sqlite3.connect(index_dir / "traces.sqlite")
    try:
        assert [r[0] for r in fresh.execute("SELECT id FROM runs ORDER BY rowid")] == ["before", "after"]
    finally:
        fresh.close()
    with IndexBundle.open(index_dir) as bundle:  # the rebuilt index verifies
        assert bundle.store.count_nodes() == len(tiny_skb().nodes)


def test_a_foreign_file_inside_a_build_owned_directory_refuses_the_rebuild(tiny_data: Path, tmp_path: Path) -> None:
    index_dir = built(tiny_data, tmp_path / "index")
    (index_dir / "hnsw" / "my-experiment.npy").write_bytes(b"results of a week")
    before = tree(index_dir)
    code, out = skb_index(tiny_data, index_dir, "--force")
    clean_error(code, out, "hnsw/my-experiment.npy")
    assert tree(index_dir) == before


# -- item 11: --index-dir . ------------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["index", "empty", "parent"])
def test_index_dir_holding_the_working_directory_is_a_clean_error(
    tiny_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    index_dir = built(tiny_data, tmp_path / "index")
    empty = tmp_path / "empty"
    empty.mkdir()
    cwd, arg = {"index": (index_dir, "."), "empty": (empty, "."), "parent": (index_dir / "skb", "..")}[where]
    before = tree(tmp_path)
    monkeypatch.chdir(cwd)
    code, out = skb_index(tiny_data, arg, "--force")
    clean_error(code, out, "working directory")
    monkeypatch.undo()
    assert tree(tmp_path) == before


# -- items 4 (graph part) and 5: the graph data is covered by the manifest ------------------------------
def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_manifest_covers_the_graph_and_serving_never_rewrites_it(tiny_data: Path, tmp_path: Path) -> None:
    index_dir = built(tiny_data, tmp_path / "index")
    dump = index_dir / "falkordb" / "dump.rdb"
    manifest = json.loads((index_dir / "manifest.json").read_text())
    assert "falkordb/dump.rdb" in json.dumps(manifest)
    digest = _sha(dump)
    for _ in range(2):  # serve, stop the server, serve again: the dump and its checksum stay valid
        with IndexBundle.open(index_dir) as bundle:
            assert bundle.store.count_nodes() == len(tiny_skb().nodes)
            assert bundle.store.query("MATCH (n:Gene) RETURN n.key ORDER BY n.key").rows == [["CACNA1A"], ["SCN1A"]]
        assert _sha(dump) == digest


@pytest.mark.parametrize("damage", ["deleted", "emptied", "truncated"])
def test_a_missing_or_damaged_graph_is_refused_naming_the_rebuild_command(
    tiny_data: Path, tmp_path: Path, damage: str
) -> None:
    index_dir = built(tiny_data, tmp_path / "index")
    dump = index_dir / "falkordb" / "dump.rdb"
    if damage == "deleted":
        dump.unlink()
    elif damage == "emptied":
        dump.write_bytes(b"")
    else:
        dump.write_bytes(dump.read_bytes()[:-100])
    with pytest.raises(IndexCorruptError, match=r"dump\.rdb") as info:
        IndexBundle.open(index_dir)
    assert "skb index" in str(info.value) and "--force" in str(info.value)
    for command in (["ask", "Which genes are associated with Epilepsy?", "--no-trace"], ["search", "Epilepsy"]):
        result = runner.invoke(app, [*command, "--index-dir", str(index_dir)])
        clean_error(result.exit_code, result.stdout + result.stderr, "dump.rdb", "skb index")


def test_an_altered_graph_is_refused(tiny_data: Path, tmp_path: Path) -> None:
    """A write by another client that the server then saved (what an open server allowed) fails the check."""
    from graphs.store.falkordb_store import FalkorDBStore

    index_dir = built(tiny_data, tmp_path / "index")
    store = FalkorDBStore(index_dir / "falkordb")
    try:
        store._run("CREATE (:Gene {key: 'EVIL', name: 'planted'})", None, read_only=False, timeout_ms=5000)
        store.server.save()
    finally:
        store.close()
    with pytest.raises(IndexCorruptError, match=r"dump\.rdb"):
        IndexBundle.open(index_dir)


# -- item 13: the manifest is validated against the artifacts -------------------------------------------
def _edit_manifest(index_dir: Path, edit: str) -> None:
    path = index_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    if edit == "dim":
        manifest["embedder"]["dim"] += 1
    elif edit == "node-count":
        manifest["counts"]["nodes"]["Gene"] += 1
    elif edit == "edge-count":
        manifest["counts"]["edges"]["IS_A"] -= 1
    elif edit == "hnsw-M":
        manifest["hnsw"]["M"] += 2
    path.write_text(json.dumps(manifest))


@pytest.mark.parametrize(
    ("edit", "needle"),
    [("dim", "embedder.dim"), ("node-count", "counts.nodes"), ("edge-count", "counts.edges"), ("hnsw-M", "hnsw.M")],
)
def test_a_manifest_that_disagrees_with_the_artifacts_is_refused(
    tiny_data: Path, tmp_path: Path, edit: str, needle: str
) -> None:
    index_dir = built(tiny_data, tmp_path / "index")
    _edit_manifest(index_dir, edit)
    with pytest.raises(IndexCorruptError, match=re.escape(needle)) as info:
        IndexBundle.open(index_dir)
    assert "skb index" in str(info.value)


# -- item 8: a process holding an index open across a rebuild serves the new index, all of it ---------------
def _disease_count(bundle: IndexBundle) -> int:
    return next(info.count for info in bundle.schema().labels if info.label == "Disease")


def _second_version() -> SKB:
    """The tiny SKB without OMIM:2 (and its edges) and with HP:1 renamed."""
    old = tiny_skb()
    skb = SKB(old.name, node_types=list(old.node_types.values()))
    for key, node in old.nodes.items():
        if key != "OMIM:2":
            props = {**node.props, "name": "Convulsion"} if key == "HP:1" else node.props
            skb.add_node(Node(key, node.label, props))
    for edge in old.edges:
        if "OMIM:2" not in (edge.src, edge.dst):
            skb.add_edge(edge)
    return skb


def test_an_open_bundle_follows_a_rebuild_as_a_whole(tiny_data: Path, tmp_path: Path) -> None:
    from graphs.build import IndexConfig, build_index

    index_dir = built(tiny_data, tmp_path / "index")
    live = IndexBundle.open(index_dir)
    try:
        first = live.manifest.generation
        assert first and "OMIM:2" in [h.key for h in live.search("Migraine", mode="bm25", k=3)]
        assert live.store.count_nodes() == 8
        assert "migraine" in live.lexicon and _disease_count(live) == 2  # derived caches filled from v1
        build_index(_second_version(), index_dir, IndexConfig(dataset="v2"))
        assert "migraine" not in live.lexicon and "convulsion" in live.lexicon and _disease_count(live) == 1
        # every part answers from the new build: manifest, SKB, lexical and dense search, graph store
        assert live.manifest.dataset == "v2" and live.manifest.generation != first
        assert "OMIM:2" not in live.skb.nodes and live.node("HP:1").name == "Convulsion"  # type: ignore[union-attr]
        assert "OMIM:2" not in [h.key for h in live.search("Migraine", mode="bm25", k=3)]
        assert "OMIM:2" not in [h.key for h in live.search("Migraine", mode="vss", k=7)]
        assert live.store.count_nodes() == 7
        names = {live.node(t.dst).name for t in live.store.neighbors(["OMIM:1"], direction="out")}  # type: ignore[union-attr]
        assert "Convulsion" in names
        # and so do the tools over it
        tools = {t.name: t for t in make_tools(live)}
        hits = json.loads(tools["semantic_search"].invoke({"text": "Migraine", "k": 7}))["hits"]
        assert hits and "OMIM:2" not in [h["key"] for h in hits]
        rows = json.loads(tools["cypher"].invoke({"query": "MATCH (n:Phenotype {key: 'HP:1'}) RETURN n.name AS name"}))
        assert rows["rows"] == [["Convulsion"]]
        assert live.reloads == 1
    finally:
        live.close()


def test_an_open_bundle_refuses_a_broken_rebuild_on_every_access(tiny_data: Path, tmp_path: Path) -> None:
    """Refuse, never mix: when the new index cannot be opened, the old parts are not served beside it."""
    from graphs.build import IndexConfig, build_index

    index_dir = built(tiny_data, tmp_path / "index")
    live = IndexBundle.open(index_dir)
    try:
        assert live.store.count_nodes() == 8
        build_index(_second_version(), index_dir, IndexConfig(dataset="v2"))
        (index_dir / "falkordb" / "dump.rdb").unlink()
        for _ in range(2):
            with pytest.raises(IndexCorruptError, match=r"dump\.rdb"):
                live.search("Migraine", mode="bm25")
            with pytest.raises(IndexCorruptError, match=r"dump\.rdb"):
                live.store.count_nodes()
    finally:
        live.close()
