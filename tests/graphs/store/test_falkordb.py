"""FalkorDBStore and FalkorDBServer against a real redis-server + FalkorDB module child process."""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from graphs.errors import (
    CypherValidationError,
    LoaderError,
    QueryTimeoutError,
    ReadOnlyViolationError,
    StoreError,
    StoreUnavailableError,
)
from graphs.skb.model import SKB, Edge, Node
from graphs.store.falkordb_server import STATE_FILE, FalkorDBServer, pid_alive
from graphs.store.falkordb_store import FalkorDBStore
from tests.paths import REPO
from tests.store_fixtures import tiny_skb

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FalkorDBServer]:
    srv = FalkorDBServer(tmp_path_factory.mktemp("falkordb"))
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def store(server: FalkorDBServer) -> Iterator[FalkorDBStore]:
    st = FalkorDBStore(server.data_dir, graph_name="tiny", server=server)
    st.load(tiny_skb())
    yield st
    st.close()


def _pairs(triples: list) -> Counter[tuple[str, str, str]]:
    return Counter((t.src, t.rel, t.dst) for t in triples)


# -- process lifecycle ---------------------------------------------------------


def test_second_server_object_attaches_to_running_server(server: FalkorDBServer) -> None:
    state = json.loads((server.data_dir / STATE_FILE).read_text())
    assert state["pid"] == server.pid and state["port"] == server.port
    other = FalkorDBServer(server.data_dir).start()
    assert other.owned is False
    assert (other.pid, other.port) == (server.pid, server.port)
    other.stop()  # detaching must not shut down the owner's server
    assert server.is_running()
    assert server.connection().ping()


def test_data_persists_across_stop_and_start(tmp_path: Path) -> None:
    first = FalkorDBServer(tmp_path)
    with FalkorDBStore(tmp_path, server=first.start()) as st:
        st.load(tiny_skb())
    first.stop()
    assert first.pid is None and not (tmp_path / STATE_FILE).exists()
    assert (tmp_path / "dump.rdb").stat().st_size > 0
    with FalkorDBStore(tmp_path) as again:
        assert again.server.owned
        assert again.count_nodes() == len(tiny_skb().nodes)
        assert again.query("MATCH (n:Gene {key: 'SCN1A'}) RETURN n.score").rows == [[0.5]]


def test_stale_state_file_is_replaced(tmp_path: Path) -> None:
    (tmp_path / STATE_FILE).write_text(json.dumps({"pid": 2**22 + 12345, "port": 1, "host": "127.0.0.1"}))
    srv = FalkorDBServer(tmp_path).start()
    try:
        assert srv.owned and srv.pid != 2**22 + 12345
        assert json.loads((tmp_path / STATE_FILE).read_text())["pid"] == srv.pid
    finally:
        srv.stop()


def test_stop_leaves_no_process_behind(tmp_path: Path) -> None:
    srv = FalkorDBServer(tmp_path).start()
    pid = srv.pid
    assert pid is not None and pid_alive(pid)
    srv.stop()
    assert not pid_alive(pid)
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped: no zombie left


def test_killed_child_is_restarted_on_next_call(tmp_path: Path) -> None:
    st = FalkorDBStore(tmp_path)
    try:
        st.load(tiny_skb())
        old_pid = st.server.pid
        st.server.kill()
        result = st.query("MATCH (n:Disease) RETURN n.key ORDER BY n.key")
        assert result.rows == [["OMIM:1"], ["OMIM:2"]]
        assert st.server.pid != old_pid and st.server.owned
    finally:
        st.close()


def test_dead_server_without_auto_restart_is_unavailable(tmp_path: Path) -> None:
    st = FalkorDBStore(tmp_path, auto_restart=False)
    try:
        st.server.kill()
        with pytest.raises(StoreUnavailableError, match="not running"):
            st.count_nodes()
    finally:
        st.close()


def test_unstartable_server_names_the_problem(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(StoreUnavailableError, match="not-a-dir"):
        FalkorDBServer(blocker / "falkordb").start()


# -- loading -------------------------------------------------------------------


def test_load_counts_and_properties(store: FalkorDBStore) -> None:
    skb = tiny_skb()
    assert store.count_nodes() == len(skb.nodes)
    rels = store.query("MATCH ()-[r]->() RETURN count(r)").rows
    assert rels == [[len(skb.edges)]]
    row = store.query("MATCH (n:Disease {key: $k}) RETURN n.name, n.synonyms, n.extra, n.meta", {"k": "OMIM:1"}).rows[0]
    assert row[:3] == ["Epilepsy", ["Seizure disorder", "Fits"], None]
    meta = store.query("MATCH (n:Disease {key: 'OMIM:2'}) RETURN n.meta").rows[0][0]
    assert json.loads(meta) == {"source": "omim", "year": 1990}


def test_load_creates_key_index_per_label(store: FalkorDBStore) -> None:
    rows = store.query("CALL db.indexes() YIELD label, properties RETURN label, properties").rows
    indexed = {label for label, props in rows if "key" in props}
    assert indexed == {"Disease", "Phenotype", "Gene", "Odd Label"}


def test_load_reports_progress_and_replaces_graph(server: FalkorDBServer) -> None:
    st = FalkorDBStore(server.data_dir, graph_name="progress", server=server)
    calls: list[tuple[int, int]] = []
    st.load(tiny_skb(), batch_size=2, progress=lambda done, total: calls.append((done, total)))
    total = len(tiny_skb().nodes) + len(tiny_skb().edges)
    assert calls[0] == (0, total) and calls[-1] == (total, total)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    small = SKB("small")
    small.add_node(Node("only", "Thing", {"name": "only"}))
    st.load(small)
    assert st.count_nodes() == 1
    assert st.schema().label_names() == ["Thing"]


def test_load_refuses_dangling_edges(server: FalkorDBServer) -> None:
    st = FalkorDBStore(server.data_dir, graph_name="dangling", server=server)
    skb = SKB("bad")
    skb.add_node(Node("a", "A", {}))
    skb.add_edge(Edge("a", "R", "missing"))
    with pytest.raises(LoaderError, match="missing"):
        st.load(skb)


def test_unloaded_graph_reads_as_empty_and_query_explains(server: FalkorDBServer) -> None:
    st = FalkorDBStore(server.data_dir, graph_name="never_loaded", server=server)
    assert st.count_nodes() == 0
    assert st.schema().labels == []
    with pytest.raises(StoreError, match="not been loaded"):
        st.query("MATCH (n) RETURN n")


# -- read-only enforcement -----------------------------------------------------


def test_static_guard_refuses_write_before_the_server(store: FalkorDBStore) -> None:
    with pytest.raises(ReadOnlyViolationError, match="CREATE"):
        store.query("MATCH (n:Disease) CREATE (m:Disease {key: 'new'}) RETURN m")
    assert store.count_nodes() == len(tiny_skb().nodes)


def test_server_refuses_write_on_ro_query(store: FalkorDBStore) -> None:
    graph = store._graph()
    with pytest.raises(redis.ResponseError, match="read-only"):
        graph.ro_query("CREATE (:Disease {key: 'sneaky'})")
    # and the store maps the server's refusal when the guard is bypassed
    with pytest.raises(ReadOnlyViolationError, match="read-only"):
        store._run("MERGE (:Disease {key: 'sneaky'})", None, read_only=True, timeout_ms=1000)
    assert store.query("MATCH (n {key: 'sneaky'}) RETURN count(n)").rows == [[0]]


# -- query ---------------------------------------------------------------------


def test_query_with_params_and_node_values(store: FalkorDBStore) -> None:
    res = store.query(
        "MATCH (d:Disease)-[:HAS_PHENOTYPE]->(p:Phenotype) WHERE d.key IN $keys RETURN d, p.name ORDER BY p.name",
        {"keys": ["OMIM:2"]},
    )
    assert res.columns == ["d", "p.name"]
    assert [r[1] for r in res.rows] == ["Headache", "Visual aura"]
    node = res.rows[0][0]
    assert node["labels"] == ["Disease"] and node["properties"]["key"] == "OMIM:2"
    assert res.truncated is False


def test_row_cap_truncates(store: FalkorDBStore) -> None:
    res = store.query("UNWIND range(1, 50) AS x RETURN x", max_rows=10)
    assert [r[0] for r in res.rows] == list(range(1, 11))
    assert res.truncated is True
    full = store.query("UNWIND range(1, 50) AS x RETURN x", max_rows=50)
    assert len(full.rows) == 50 and full.truncated is False


def test_timeout_maps_to_query_timeout_error(store: FalkorDBStore) -> None:
    slow = "UNWIND range(1, 3000) AS x UNWIND range(1, 3000) AS y RETURN count(*)"
    with pytest.raises(QueryTimeoutError, match="1 ms"):
        store.query(slow, timeout_ms=1)


def test_syntax_and_semantic_errors_carry_server_message(store: FalkorDBStore) -> None:
    with pytest.raises(CypherValidationError, match="Invalid input"):
        store.query("MATCH (n RETURN n")
    with pytest.raises(CypherValidationError, match="not defined"):
        store.query("MATCH (n) RETURN m")


# -- neighbors -----------------------------------------------------------------


def test_neighbors_keeps_parallel_edges(store: FalkorDBStore) -> None:
    out = store.neighbors(["OMIM:1"], direction="out")
    assert _pairs(out) == Counter({("OMIM:1", "ASSOCIATED_WITH", "SCN1A"): 2, ("OMIM:1", "HAS_PHENOTYPE", "HP:1"): 1})
    sources = sorted(t.props["source"] for t in out if t.rel == "ASSOCIATED_WITH")
    assert sources == ["omim", "orphanet"]
    assert {(t.src_label, t.dst_label) for t in out} == {("Disease", "Gene"), ("Disease", "Phenotype")}


def test_neighbors_direction_and_orientation(store: FalkorDBStore) -> None:
    incoming = store.neighbors(["OMIM:1"], direction="in")
    assert _pairs(incoming) == Counter({("X:1", "ODD REL", "OMIM:1"): 1})
    both = store.neighbors(["OMIM:1"], direction="both")
    assert sum(_pairs(both).values()) == 4


def test_neighbors_filters(store: FalkorDBStore) -> None:
    by_rel = store.neighbors(["OMIM:1", "OMIM:2"], rel_types=["HAS_PHENOTYPE"], direction="out")
    assert _pairs(by_rel) == Counter(
        {("OMIM:1", "HAS_PHENOTYPE", "HP:1"): 1, ("OMIM:2", "HAS_PHENOTYPE", "HP:2"): 1,
         ("OMIM:2", "HAS_PHENOTYPE", "HP:3"): 1}
    )  # fmt: skip
    genes = store.neighbors(["OMIM:1", "OMIM:2"], target_label="Gene")
    assert _pairs(genes) == Counter(
        {("OMIM:1", "ASSOCIATED_WITH", "SCN1A"): 2, ("OMIM:2", "ASSOCIATED_WITH", "CACNA1A"): 1}
    )
    assert len(store.neighbors(["OMIM:1", "OMIM:2"], limit=2)) == 2


def test_neighbors_across_labels_and_self_loop_once(store: FalkorDBStore) -> None:
    triples = store.neighbors(["HP:2", "HP:3", "CACNA1A"], direction="both")
    assert _pairs(triples) == Counter(
        {("HP:2", "IS_A", "HP:2"): 1, ("HP:3", "IS_A", "HP:2"): 1, ("OMIM:2", "HAS_PHENOTYPE", "HP:2"): 1,
         ("OMIM:2", "HAS_PHENOTYPE", "HP:3"): 1, ("OMIM:2", "ASSOCIATED_WITH", "CACNA1A"): 1}
    )  # fmt: skip


def test_neighbors_unknown_names_and_keys(store: FalkorDBStore) -> None:
    assert store.neighbors(["no-such-key"]) == []
    with pytest.raises(CypherValidationError, match="HAS_PHENOTYPE"):
        store.neighbors(["OMIM:1"], rel_types=["HAS_PHENOTYPES"])
    with pytest.raises(CypherValidationError, match="Gene"):
        store.neighbors(["OMIM:1"], target_label="Genes")


# -- schema --------------------------------------------------------------------


def test_schema_matches_the_skb(store: FalkorDBStore) -> None:
    schema = store.schema()
    expected = tiny_skb().schema()
    assert {(i.label, i.count) for i in schema.labels} == {(i.label, i.count) for i in expected.labels}
    assert {(r.rel, r.src_label, r.dst_label, r.count) for r in schema.relations} == {
        (r.rel, r.src_label, r.dst_label, r.count) for r in expected.relations
    }
    disease = next(i for i in schema.labels if i.label == "Disease")
    props = {p.name: p for p in disease.properties}
    assert [p.name for p in disease.properties][:2] == ["key", "name"]
    assert props["synonyms"].type == "LIST"
    assert "extra" not in props  # None values are not stored
    assert sorted(props["name"].samples) == ["Epilepsy", "Migraine"]
    gene = next(i for i in schema.labels if i.label == "Gene")
    assert {p.name: p.type for p in gene.properties}["score"] == "FLOAT"
    assert store.schema() is schema  # cached


def test_open_store_uses_the_index_falkordb_dir(tmp_path: Path) -> None:
    from graphs.errors import ConfigError
    from graphs.store import open_store

    with open_store("falkordb", tmp_path) as st:
        assert isinstance(st, FalkorDBStore)
        assert st.data_dir == tmp_path / "falkordb"
        assert (tmp_path / "falkordb" / STATE_FILE).exists()
    with pytest.raises(ConfigError, match="falkordb"):
        open_store("sqlite", tmp_path)  # type: ignore[arg-type]


def test_attached_store_takes_over_when_the_owner_stops(tmp_path: Path) -> None:
    owner = FalkorDBStore(tmp_path)
    owner.load(tiny_skb())
    follower = FalkorDBStore(tmp_path)  # a second "process": attaches to the owner's server
    try:
        assert follower.server.owned is False and follower.server.pid == owner.server.pid
        owner.close()  # SHUTDOWN SAVE: the follower's server is gone
        assert follower.count_nodes() == len(tiny_skb().nodes)  # restarted from dump.rdb, now owned
        assert follower.server.owned is True
    finally:
        follower.close()
        owner.close()


def test_awkward_values_round_trip(server: FalkorDBServer) -> None:
    weird = "line1\nline2\t\"dq\" 'sq' back\\slash ünïcødé 😀 $x {`a`}"
    skb = SKB("weird")
    skb.add_node(Node('k"1\\', "A", {"name": weird, "odd key-@": 1, "nan": float("nan"), "'tick": "t"}))
    skb.add_node(Node("k2", "A", {"name": "plain", "nested": [[1, 2], [3]]}))
    skb.add_edge(Edge('k"1\\', "R", "k2", {"w": weird}))
    st = FalkorDBStore(server.data_dir, graph_name="weird", server=server)
    st.load(skb)
    props = st.query("MATCH (n:A {key: $k}) RETURN properties(n)", {"k": 'k"1\\'}).rows[0][0]
    assert props == {"key": 'k"1\\', "name": weird, "odd key-@": 1, "'tick": "t"}
    assert st.query("MATCH (n:A {key: 'k2'}) RETURN n.nested").rows == [[["[1, 2]", "[3]"]]]
    assert [t.props["w"] for t in st.neighbors(["k2"])] == [weird]
    with pytest.raises(CypherValidationError, match="parameters"):
        st.query("RETURN $p", {"p": {"": 1}})
    # names no parameter map carries were rewritten (a backtick to a quote) or dropped (""): now refused by name
    skb.nodes["k2"].props.update({"`tick": "t", "": "e"})
    with pytest.raises(LoaderError, match="'`tick' has a backtick .*'' has an empty name"):
        st.load(skb)


def test_sigterm_to_the_owner_stops_its_server(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    script = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from graphs.store.falkordb_server import FalkorDBServer\n"
        "srv = FalkorDBServer(Path(sys.argv[1])).start()\n"
        "print(srv.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    root = REPO
    owner = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True, cwd=root)
    server_pid = 0
    try:
        assert owner.stdout is not None
        server_pid = int(owner.stdout.readline())
        assert pid_alive(server_pid)
        owner.send_signal(signal.SIGTERM)
        assert owner.wait(timeout=60) == -signal.SIGTERM
        deadline = time.monotonic() + 30
        while pid_alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not pid_alive(server_pid)
        assert not (tmp_path / STATE_FILE).exists()
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()
        if server_pid and pid_alive(server_pid):
            os.kill(server_pid, signal.SIGKILL)  # never leave a server behind when the test fails
