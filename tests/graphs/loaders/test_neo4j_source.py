"""An existing Bolt database as the source of an index, end to end over real Bolt (ArcadeDB's plugin).

The test plays the user: it puts a graph into "their" database with its own tooling (Neo4jStore.load,
as any import script would), then runs `skb index --dataset neo4j` and `skb ask` against it and
checks that (1) the answers are those of the same graph built from JSON lines, (2) nothing was written
to the database, (3) a change to the database is reported as stale with the command that brings the index up to date, and
(4) that command, run again, applies the database's changes as an update equal to a rebuild.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from graphs.build import IndexConfig, build_index
from graphs.bundle import IndexBundle
from graphs.errors import ConfigError, IndexMismatchError, LoaderError
from graphs.loaders import load_dataset
from graphs.loaders.jsonl import write_jsonl
from graphs.loaders.neo4j_source import Neo4jSource, read_neo4j
from graphs.manifest import Manifest
from graphs.skb.model import SKB, Edge, Node
from graphs.store.neo4j_store import Neo4jStore
from graphs.update.apply import config_for_update
from tests.paths import REPO
from tests.store_fixtures import ARCADEDB_PASSWORD, start_arcadedb

pytestmark = pytest.mark.integration

METAQA = REPO / "tests" / "fixtures" / "metaqa_mini" / "kb.txt"
USER_DB = "userdb"
MOVIES_DB = "movies"
OTHER_DB = "otherdb"
LIVE_DB = "livedb"
runner = CliRunner()
QUESTIONS = [
    "Which genes are associated with Marfan syndrome?",
    "Which disease is characterized by craniosynostosis and syndactyly?",
    "Which rare disease is characterized by brachyturricephaly, proptosis and cutaneous syndactyly of toes?",
    "Which gene is implicated in a patient with dural ectasia and ectopia lentis?",
]


def canonical(skb: SKB) -> SKB:
    """The SKB in the order a database read returns it: nodes by (label, key), edges by (src, rel, dst, props)."""
    out = SKB(skb.name, skb.node_types.values())
    out.profile = skb.profile
    for node in sorted(skb.nodes.values(), key=lambda n: (n.label, n.key)):
        out.add_node(Node(node.key, node.label, {k: v for k, v in node.props.items() if v is not None}))
    for edge in sorted(skb.edges, key=lambda e: (e.src, e.rel, e.dst, json.dumps(e.props, sort_keys=True))):
        out.add_edge(Edge(edge.src, edge.rel, edge.dst, dict(edge.props)))
    return out


def snapshot(store: Neo4jStore) -> tuple[list[Any], list[Any]]:
    """Every node and relationship with its properties: equal before and after means nothing was written."""
    nodes = store.query("MATCH (n) RETURN labels(n) AS l, properties(n) AS p", max_rows=100_000).rows
    rels = store.query(
        "MATCH (a)-[r]->(b) RETURN a.key AS s, type(r) AS t, b.key AS d, properties(r) AS p", max_rows=100_000
    ).rows
    key = lambda row: json.dumps(row, sort_keys=True, default=str)
    return sorted(nodes, key=key), sorted(rels, key=key)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, str]]:
    pytest.importorskip("arcadedb_embedded")
    srv = start_arcadedb(tmp_path_factory.mktemp("arcadedb_source"), [USER_DB, OTHER_DB, MOVIES_DB, LIVE_DB])
    try:
        yield srv, srv.uri
    finally:
        srv.stop()


@pytest.fixture(scope="module")
def graph(hpo_mini_skb: SKB) -> SKB:
    return canonical(hpo_mini_skb)


@pytest.fixture(scope="module")
def user_db(server: tuple[Any, str], graph: SKB) -> Iterator[Neo4jStore]:
    """The user's database, filled by the user's own tooling."""
    store = Neo4jStore(server[1], "root", ARCADEDB_PASSWORD, USER_DB, timeout_s=30)
    store.load(graph)
    yield store
    store.close()


@pytest.fixture(scope="module")
def jsonl_index(tmp_path_factory: pytest.TempPathFactory, graph: SKB) -> tuple[Path, Path]:
    """(the JSON-lines directory, the index built from it with the embedded store)."""
    root = tmp_path_factory.mktemp("jsonl_source")
    write_jsonl(graph, root / "data")
    build_index(load_dataset("jsonl", root / "data"), root / "index", IndexConfig(dataset="jsonl"))
    return root / "data", root / "index"


def _index_argv(uri: str, index_dir: Path, *extra: str) -> list[str]:
    return ["index", "--dataset", "neo4j", "--uri", uri, "--user", "root", "--database", USER_DB,
            "--index-dir", str(index_dir), "--quiet", *extra]


@pytest.fixture(scope="module")
def neo4j_index(
    server: tuple[Any, str], user_db: Neo4jStore, jsonl_index: tuple[Path, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Path]:
    mp = pytest.MonkeyPatch()
    mp.setenv("NEO4J_PASSWORD", ARCADEDB_PASSWORD)
    for name in ("NEO4J_URI", "NEO4J_USER", "NEO4J_USERNAME", "NEO4J_DATABASE"):
        mp.delenv(name, raising=False)
    index_dir = tmp_path_factory.mktemp("neo4j_source") / "index"
    before = snapshot(user_db)
    result = runner.invoke(app, _index_argv(server[1], index_dir, "--profile", str(jsonl_index[0] / "schema.json")))
    assert result.exit_code == 0, result.output
    assert snapshot(user_db) == before  # read, never written
    yield index_dir
    mp.undo()


def _ask(index_dir: Path, question: str) -> list[tuple[str, float]]:
    result = runner.invoke(app, ["ask", question, "--index-dir", str(index_dir), "--json", "--no-trace"])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.stdout)
    assert answer["degraded"] == [], answer["degraded"]
    # the graph tools ran (on the live database for an index built from it), not only the vector search
    assert {p["tool"] for item in answer["context"] for p in item["provenance"]} & {"search_nodes", "cypher"}
    return [(item["key"], item["score"]) for item in answer["context"]]


def readme_commands(prefix: str) -> list[list[str]]:
    """The `skb ...` lines of the Neo4j guide's "Use your Neo4j database" section, as argument lists."""
    text = (REPO / "docs" / "guides" / "neo4j.md").read_text()
    section = text.split("## Use your Neo4j database", 1)[1].split("\n## ", 1)[0]
    lines = [line.split("#")[0].strip() for line in section.splitlines() if line.startswith(prefix)]
    return [shlex.split(line)[1:] for line in lines]


def test_the_read_is_the_graph(user_db: Neo4jStore, graph: SKB, jsonl_index: tuple[Path, Path]) -> None:
    source = Neo4jSource(uri=user_db.uri, user="root", database=USER_DB, batch_size=7,  # several pages per label
                         schema_file=str(jsonl_index[0] / "schema.json"))
    read = read_neo4j(source, password=ARCADEDB_PASSWORD)
    assert list(read.nodes) == list(graph.nodes)
    assert all(read.nodes[k].props == graph.nodes[k].props for k in graph.nodes)
    assert [(e.src, e.rel, e.dst, e.props) for e in read.edges] == [(e.src, e.rel, e.dst, e.props) for e in graph.edges]
    assert all(read.node_text(k) == graph.node_text(k) for k in graph.nodes)


def test_index_from_the_live_database_answers_like_the_jsonl_build(
    neo4j_index: Path, jsonl_index: tuple[Path, Path], user_db: Neo4jStore
) -> None:
    manifest = json.loads((neo4j_index / "manifest.json").read_text())
    assert manifest["extra"]["store"] == "neo4j" and not (neo4j_index / "falkordb").exists()  # no copy of the graph
    recorded = manifest["extra"]["config"]["source"]
    assert recorded["kind"] == "neo4j" and "password" not in json.dumps(recorded)
    assert recorded["state"]["nodes"] == {label: n for label, n in manifest["counts"]["nodes"].items()}
    before = snapshot(user_db)
    for question in QUESTIONS:
        live, copied = _ask(neo4j_index, question)[:20], _ask(jsonl_index[1], question)[:20]
        assert [k for k, _ in live] == [k for k, _ in copied], question
        assert [s for _, s in live] == pytest.approx([s for _, s in copied]), question
        assert len(live) == 20 or len(live) == len(copied)
    assert snapshot(user_db) == before
    with IndexBundle.open(neo4j_index) as bundle:  # the agent's store is the live database
        assert isinstance(bundle.store, Neo4jStore) and bundle.store.uri == user_db.uri
        assert bundle.store.count_nodes() == user_db.count_nodes()


def test_a_changed_database_is_reported_stale_with_the_rebuild_command(
    server: tuple[Any, str], neo4j_index: Path, user_db: Neo4jStore, graph: SKB,
) -> None:
    serving = IndexBundle.open(neo4j_index)
    serving.check_source()  # fresh: opens the live store
    user_db._write("CREATE (n:Gene {key: 'NEWGENE', name: 'NEWGENE'})")  # the user's own write
    try:
        serving.check_source()  # checked a moment ago: not asked again within the interval
        with pytest.raises(IndexMismatchError, match="is stale.*Gene nodes"):
            serving.check_source(max_age_s=0, wait=True)  # a server holding the index open notices it
        with pytest.raises(IndexMismatchError, match="is stale"):
            serving.check_source()  # and every later question fails by name until the database matches again
        result = runner.invoke(app, ["ask", QUESTIONS[0], "--index-dir", str(neo4j_index), "--no-trace"])
        assert result.exit_code == 2
        text = " ".join(result.output.split())
        assert "is stale" in text and "Gene nodes" in text
        assert f"skb index --dataset neo4j --uri {server[1]} --database {USER_DB}" in text
        assert "--force" not in text and "applies what changed" in text  # the same command, run again
        with IndexBundle.open(neo4j_index) as bundle, pytest.raises(IndexMismatchError, match="stale"):
            _ = bundle.store
    finally:
        user_db._write("MATCH (n:Gene {key: 'NEWGENE'}) DELETE n")
    serving.check_source(max_age_s=0, wait=True)  # the same database again: fresh
    serving.close()
    assert _ask(neo4j_index, QUESTIONS[0])


def test_induced_node_types_and_label_selection(server: tuple[Any, str], user_db: Neo4jStore) -> None:
    source = Neo4jSource(uri=server[1], user="root", database=USER_DB, labels=["Gene", "Disease"],
                         text_properties=["name", "symbol", "nothing"])
    read = read_neo4j(source, password=ARCADEDB_PASSWORD)
    assert set(read.labels()) == {"Gene", "Disease"}
    assert {t.label: t.text_fields for t in read.node_types.values()}["Disease"] == ["name"]
    assert all(read.nodes[e.src].label in {"Gene", "Disease"} and read.nodes[e.dst].label in {"Gene", "Disease"}
               for e in read.edges)
    assert read.edges  # edges between the selected labels are kept


def test_bad_sources_are_clear_errors(server: tuple[Any, str], tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    other = Neo4jStore(server[1], "root", ARCADEDB_PASSWORD, OTHER_DB, timeout_s=30)
    try:
        other._write("CREATE (n:Thing {name: 'no key here'})")
        with pytest.raises(LoaderError, match=r"1 node\(s\) labelled 'Thing' have no 'key' property.*--labels"):
            read_neo4j(Neo4jSource(uri=server[1], user="root", database=OTHER_DB), password=ARCADEDB_PASSWORD)
        with pytest.raises(LoaderError, match="no nodes labelled 'Movie'.*choose --labels from Thing"):
            read_neo4j(Neo4jSource(uri=server[1], user="root", database=OTHER_DB, labels=["Movie"]),
                       password=ARCADEDB_PASSWORD)
    finally:
        other.close()
    monkeypatch.delenv("NEO4J_PASSWORD", raising=False)
    result = runner.invoke(app, _index_argv(server[1], tmp_path / "idx"))
    assert result.exit_code == 2 and "NEO4J_PASSWORD" in result.output
    result = runner.invoke(app, ["index", "--dataset", "neo4j", "--index-dir", str(tmp_path / "idx")])
    assert result.exit_code == 2 and "--uri bolt://" in result.output
    result = runner.invoke(app, ["index", "--dataset", "jsonl", "--data", str(tmp_path), "--uri", server[1],
                                 "--index-dir", str(tmp_path / "idx")])
    assert result.exit_code == 2 and "--uri applies to --dataset neo4j only" in result.output
    assert not (tmp_path / "idx").exists()


def test_readme_commands_on_a_graph_with_other_labels_and_induced_node_types(
    server: tuple[Any, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Generic: a MetaQA-like graph (Movie, Person, directed_by...) with no profile and no schema file. README's
    commands, run as written (server address, user and paths substituted), answer like the JSON-lines build."""
    from graphs.loaders import load_dataset

    typed = load_dataset("metaqa", METAQA)
    plain = SKB(MOVIES_DB)  # no profile, default node types: what a database says about itself
    for node in typed.nodes.values():
        plain.add_node(Node(node.key, node.label, dict(node.props)))
    for edge in typed.edges:
        plain.add_edge(Edge(edge.src, edge.rel, edge.dst, dict(edge.props)))
    graph = canonical(plain)
    assert {"Movie", "Person"} <= set(graph.labels())
    movies = Neo4jStore(server[1], "root", ARCADEDB_PASSWORD, MOVIES_DB, timeout_s=30)
    movies.load(graph)  # the user's own import
    before = snapshot(movies)
    data = tmp_path / MOVIES_DB
    write_jsonl(graph, data)
    (data / "schema.json").unlink()  # nodes and edges only, as the database holds them
    build_index(load_dataset("jsonl", data), tmp_path / "from-jsonl", IndexConfig(dataset="jsonl"))

    monkeypatch.setenv("NEO4J_PASSWORD", ARCADEDB_PASSWORD)
    for name in ("NEO4J_URI", "NEO4J_USER", "NEO4J_USERNAME", "NEO4J_DATABASE"):
        monkeypatch.delenv(name, raising=False)
    index_dir = tmp_path / "movies-index"
    [index_argv] = readme_commands("skb index --dataset neo4j")
    [ask_argv] = readme_commands("skb ask ")
    swap = {"bolt://localhost:7687": server[1], ".skb/movies": str(index_dir)}
    index_argv = [swap.get(arg, arg) for arg in index_argv]
    index_argv[index_argv.index("--user") + 1] = "root"  # ArcadeDB's user
    result = runner.invoke(app, [*index_argv, "--quiet"])
    assert result.exit_code == 0, result.output
    again = runner.invoke(app, [*index_argv, "--quiet"])
    assert again.exit_code == 0 and "up to date" in " ".join(again.output.split())
    question = ask_argv[1]  # ["ask", QUESTION, "--index-dir", DIR]
    live = runner.invoke(app, [*[swap.get(arg, arg) for arg in ask_argv], "--json", "--no-trace"])
    copied = runner.invoke(app, ["ask", question, "--index-dir", str(tmp_path / "from-jsonl"), "--json", "--no-trace"])
    assert live.exit_code == 0 and copied.exit_code == 0, (live.output, copied.output)
    live_keys = [item["key"] for item in json.loads(live.stdout)["context"]][:20]
    assert live_keys == [item["key"] for item in json.loads(copied.stdout)["context"]][:20]
    assert {"Harbor Lights", "Salt Roads"} <= set(live_keys[:5])
    assert snapshot(movies) == before
    movies.close()


def test_an_index_of_some_labels_serves_a_database_holding_more(
    server: tuple[Any, str], user_db: Neo4jStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Neighbours outside --labels exist in the live graph but not in the index: answers hold only indexed nodes."""
    monkeypatch.setenv("NEO4J_PASSWORD", ARCADEDB_PASSWORD)
    index_dir = tmp_path / "some-labels"
    result = runner.invoke(app, _index_argv(server[1], index_dir, "--labels", "Disease,Gene"))
    assert result.exit_code == 0, result.output
    for question in QUESTIONS:
        result = runner.invoke(app, ["ask", question, "--index-dir", str(index_dir), "--json", "--no-trace"])
        assert result.exit_code == 0, result.output
        answer = json.loads(result.stdout)
        assert answer["context"] and {item["label"] for item in answer["context"]} <= {"Disease", "Gene"}


def _keys(index_dir: Path, question: str) -> list[str]:
    result = runner.invoke(app, ["ask", question, "--index-dir", str(index_dir), "--json", "--no-trace"])
    assert result.exit_code == 0, result.output
    return [item["key"] for item in json.loads(result.stdout)["context"]]


def test_the_same_command_run_again_applies_the_databases_changes_as_an_update(
    server: tuple[Any, str], graph: SKB, jsonl_index: tuple[Path, Path], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The user edits, deletes and adds in their own database; the build command run again reads it, applies
    only the difference (a new generation whose parent is the last), records the state it read (so the index is
    fresh, not stale) and answers as a full rebuild of the changed database does. Nothing is written to it."""
    monkeypatch.setenv("NEO4J_PASSWORD", ARCADEDB_PASSWORD)
    for name in ("NEO4J_URI", "NEO4J_USER", "NEO4J_USERNAME", "NEO4J_DATABASE"):
        monkeypatch.delenv(name, raising=False)
    live = Neo4jStore(server[1], "root", ARCADEDB_PASSWORD, LIVE_DB, timeout_s=30)
    live.load(graph)
    index_dir = tmp_path / "live"
    argv = ["index", "--dataset", "neo4j", "--uri", server[1], "--user", "root", "--database", LIVE_DB,
            "--index-dir", str(index_dir), "--profile", str(jsonl_index[0] / "schema.json"), "--quiet"]
    assert runner.invoke(app, argv).exit_code == 0
    first = json.loads((index_dir / "manifest.json").read_text())["generation"]
    genes = sorted(k for k, n in graph.nodes.items() if n.label == "Gene")
    edited, deleted = genes[0], genes[1]
    assert deleted in {k for e in graph.edges for k in (e.src, e.dst)}  # its relationships go with it
    disease = next(k for k, n in graph.nodes.items() if n.label == "Disease")
    live._write("MATCH (n:Gene {key: $k}) SET n.name = 'QUIXOTASE'", {"k": edited})  # the user's own writes
    live._write("MATCH (n:Gene {key: $k}) DETACH DELETE n", {"k": deleted})
    live._write("CREATE (n:Gene {key: 'ZEPHYRIN', name: 'ZEPHYRIN'})")
    live._write("MATCH (g:Gene {key: 'ZEPHYRIN'}), (d:Disease {key: $d}) CREATE (g)-[:ASSOCIATED_WITH]->(d)",
                {"d": disease})
    before = snapshot(live)

    result = runner.invoke(app, argv)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "applied the changes found in the data as an update" in text, text
    manifest = json.loads((index_dir / "manifest.json").read_text())
    assert manifest["extra"]["update"]["parent"] == first and manifest["generation"] != first
    applied = manifest["extra"]["update"]["applied"]
    assert applied["node deleted"] == 1 and applied["node added"] == 1 and applied["node replaced"] == 1
    with IndexBundle.open(index_dir) as bundle:
        bundle.check_source(max_age_s=0, wait=True)  # the state read now is recorded: fresh
        assert bundle.skb.nodes[edited].props["name"] == "QUIXOTASE" and deleted not in bundle.skb.nodes
        assert "ZEPHYRIN" in bundle.skb.nodes
    assert snapshot(live) == before  # read, never written
    again = runner.invoke(app, argv)
    assert again.exit_code == 0 and "up to date" in " ".join(again.output.split())
    changes = tmp_path / "changes.jsonl"  # a change set of its own would part the index from the database
    changes.write_text(json.dumps({"op": "delete", "node": {"key": edited}}) + "\n")
    refused = runner.invoke(app, ["index", "--update", str(changes), "--index-dir", str(index_dir)])
    assert refused.exit_code == 2 and "serves a live Neo4j database in place" in " ".join(refused.output.split())
    record = manifest["extra"]["config"]["source"]
    other = {**record, "source": {**record["source"], "database": OTHER_DB}}
    with pytest.raises(ConfigError, match="built from another database"):
        config_for_update(Manifest.read(index_dir), index_dir, live_source=other)

    rebuilt = tmp_path / "rebuilt"
    assert runner.invoke(app, [*argv[:argv.index("--index-dir") + 1], str(rebuilt), *argv[argv.index("--profile"):],
                               "--force"]).exit_code == 0
    for question in [*QUESTIONS, "Which disease is associated with ZEPHYRIN?", "QUIXOTASE"]:
        keys = _keys(index_dir, question)
        assert keys[:20] == _keys(rebuilt, question)[:20], question
        assert deleted not in keys
    with IndexBundle.open(index_dir, store="none") as bundle:  # the new and the edited text are indexed
        assert [h.key for h in bundle.search("ZEPHYRIN", mode="bm25", k=1)] == ["ZEPHYRIN"]
        assert [h.key for h in bundle.search("QUIXOTASE", mode="bm25", k=1)] == [edited]
        assert "ZEPHYRIN" in [h.key for h in bundle.search("ZEPHYRIN", mode="vss", k=3, label="Gene")]
        assert disease in bundle.skb.neighbor_keys("ZEPHYRIN", "ASSOCIATED_WITH")
    live.close()
