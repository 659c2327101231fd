"""Shared helpers for the graph-store tests: a tiny SKB with every shape the stores must handle.

Shapes covered: two parallel edges with different properties (FalkorDB merges them when the
relationship variable is unbound), a self-loop, list and nested-dict properties, None values,
and a label/relationship name that needs backtick quoting.
"""

from __future__ import annotations

import socket
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from graphs.skb.model import SKB, Edge, Node, NodeType
from graphs.store.aggregate import NeighborAggregate
from graphs.store.base import GraphStore
from graphs.store.falkordb_server import FalkorDBServer
from graphs.store.falkordb_store import FalkorDBStore


def tiny_skb() -> SKB:
    skb = SKB("tiny", node_types=[NodeType(label="Disease", description="A disorder")])
    nodes = [
        Node("OMIM:1", "Disease", {"name": "Epilepsy", "synonyms": ["Seizure disorder", "Fits"], "extra": None}),
        Node("OMIM:2", "Disease", {"name": "Migraine", "synonyms": [], "meta": {"source": "omim", "year": 1990}}),
        Node("HP:1", "Phenotype", {"name": "Seizure", "depth": 3}),
        Node("HP:2", "Phenotype", {"name": "Headache", "depth": 2}),
        Node("HP:3", "Phenotype", {"name": "Visual aura", "depth": 4}),
        Node("SCN1A", "Gene", {"name": "SCN1A", "score": 0.5}),
        Node("CACNA1A", "Gene", {"name": "CACNA1A", "score": 0.25}),
        Node("X:1", "Odd Label", {"name": "needs quoting"}),
    ]
    for node in nodes:
        skb.add_node(node)
    edges = [
        Edge("OMIM:1", "HAS_PHENOTYPE", "HP:1", {"frequency": "frequent"}),
        Edge("OMIM:2", "HAS_PHENOTYPE", "HP:2"),
        Edge("OMIM:2", "HAS_PHENOTYPE", "HP:3"),
        Edge("HP:3", "IS_A", "HP:2"),
        Edge("HP:2", "IS_A", "HP:2"),  # self-loop
        Edge("OMIM:1", "ASSOCIATED_WITH", "SCN1A", {"source": "omim"}),
        Edge("OMIM:1", "ASSOCIATED_WITH", "SCN1A", {"source": "orphanet"}),  # parallel edge
        Edge("OMIM:2", "ASSOCIATED_WITH", "CACNA1A", {"source": "omim"}),
        Edge("X:1", "ODD REL", "OMIM:1"),
    ]
    for edge in edges:
        skb.add_edge(edge)
    skb.validate()
    return skb


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


ARCADEDB_PASSWORD = "skb-test-password"
_QUIET_JUL = """handlers = java.util.logging.ConsoleHandler
.level = WARNING
java.util.logging.ConsoleHandler.level = SEVERE
"""


class ArcadeDBChild:
    """An ArcadeDB server with its Neo4j-compatible Bolt plugin, in a child process: ``uri`` and ``stop()``.

    Why a child process: the server is a JVM, and a JVM in the test process dies with it. The JVM handles its own
    SIGSEGVs (safepoint polls, implicit null checks); pytest's faulthandler, disabled when the run ends, puts back
    the handler it found and so removes the JVM's, after which any JVM thread that polls kills the test process
    with a segmentation fault after a green run. Small heap and quiet logging; ``databases`` are created before
    ``uri`` is known.
    """

    def __init__(self, root: Path, databases: list[str]) -> None:
        import subprocess
        import sys

        root.mkdir(parents=True, exist_ok=True)
        (root / "logging.properties").write_text(_QUIET_JUL)
        code = "import sys; from tests.store_fixtures import serve_arcadedb; serve_arcadedb(sys.argv[1:])"
        log = root / "arcadedb.log"  # a file, not a pipe: nobody reads the child's output while it serves
        with log.open("w") as sink:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", code, str(root), *databases],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=sink, text=True,
                cwd=Path(__file__).resolve().parent.parent,
            )
        assert self._proc.stdout is not None
        line = self._proc.stdout.readline().strip()  # the child's first line: its Bolt URI, once it serves
        if not line.startswith("bolt://"):
            self.stop()
            raise RuntimeError(f"ArcadeDB did not start: {line!r} {log.read_text(errors='replace')[-2000:]}")
        self.uri = line

    def stop(self) -> None:
        import subprocess

        if self._proc.poll() is None and self._proc.stdin is not None:
            self._proc.stdin.close()  # the child stops its server when its standard input ends
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()


def start_arcadedb(root: Path, databases: list[str]) -> ArcadeDBChild:
    """Start ArcadeDB in a child process with ``databases`` created; the caller calls ``stop()``."""
    return ArcadeDBChild(root, databases)


def serve_arcadedb(argv: list[str]) -> None:
    """The child's side of ``ArcadeDBChild``: argv is the root directory and the databases to create."""
    import os
    import sys

    import jpype
    import jpype.config
    from arcadedb_embedded.server import ArcadeDBServer

    root, databases = Path(argv[0]), argv[1:]
    jpype.config.onexit = False
    bolt_port = free_port()
    server = ArcadeDBServer(
        str(root / "databases"),
        root_password=ARCADEDB_PASSWORD,
        config={
            "host": "127.0.0.1",
            "http_port": free_port(),
            "server_plugins": "Bolt:com.arcadedb.bolt.BoltProtocolPlugin",
            "bolt_port": bolt_port,
        },
        jvm_kwargs={"heap_size": "384m",
                    "jvm_args": [f"-Djava.util.logging.config.file={root / 'logging.properties'}"]},
    )
    server.start()
    for name in databases:
        server.create_database(name)
    print(f"bolt://127.0.0.1:{bolt_port}", flush=True)
    os.dup2(os.open(root / "arcadedb.out", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), 1)  # not the read pipe
    sys.stdin.read()
    server.stop()


# -- the neighbour aggregation, computed in Python: what every store's search_nodes query must return --

Direction = Literal["out", "in", "both"]


def expected(
    skb: SKB, keys: list[str], rels: list[str] | None, direction: Direction, target: str | None
) -> list[tuple[str, list[str], list[str], int]]:
    """The aggregation in Python: (neighbour, sorted seeds, sorted rel types, edge count), server order."""
    seeds: dict[str, set[str]] = defaultdict(set)
    types: dict[str, set[str]] = defaultdict(set)
    paths: dict[str, int] = defaultdict(int)
    for edge in skb.edges:
        if rels and edge.rel not in rels:
            continue
        ends = []
        if direction in ("out", "both") and edge.src in keys:
            ends.append((edge.src, edge.dst))
        if direction in ("in", "both") and edge.dst in keys:
            ends.append((edge.dst, edge.src))
        for seed, other in ends:
            if target is not None and skb.nodes[other].label != target:
                continue
            seeds[other].add(seed)
            types[other].add(edge.rel)
            paths[other] += 1
    rows = [(k, sorted(seeds[k]), sorted(types[k]), paths[k]) for k in paths]
    return sorted(rows, key=lambda r: (-r[3], r[0]))


def run(
    store: GraphStore,
    label: str,
    keys: list[str],
    rels: list[str] | None,
    direction: Direction,
    target: str | None,
    limit: int = 100,
    weight: str | None = None,
) -> list[NeighborAggregate]:
    return store.aggregate_neighbors(
        label, keys, rel_types=rels, direction=direction, target_label=target, weight_property=weight, limit=limit
    )


def normalised(rows: list[NeighborAggregate]) -> list[tuple[str, list[str], list[str], int]]:
    """(key, distinct seeds, relation types, edge count); the query repeats a seed per parallel edge."""
    return [(r.key, sorted(set(r.seeds)), sorted(r.rels), r.paths) for r in rows]


#: (seed label, keys, rel types, direction, target label): no self-loops seen from both ends
CASES: list[tuple[str, list[str], list[str] | None, Direction, str | None]] = [
    ("Disease", ["OMIM:1"], None, "out", None),  # a parallel edge: SCN1A reached by 2 edges
    ("Disease", ["OMIM:1", "OMIM:2"], ["HAS_PHENOTYPE"], "out", "Phenotype"),
    ("Disease", ["OMIM:1", "OMIM:2"], ["ASSOCIATED_WITH", "HAS_PHENOTYPE"], "out", None),
    ("Disease", ["OMIM:1"], None, "in", None),  # a label and relation type that need quoting
    ("Phenotype", ["HP:1", "HP:2"], ["HAS_PHENOTYPE"], "in", "Disease"),
    ("Gene", ["SCN1A", "CACNA1A"], None, "both", None),
]


@contextmanager
def served_store(data_dir: Path, fill: Callable[[Any], None], **server_options: Any) -> Iterator[FalkorDBStore]:
    """A served (``persist=False``) FalkorDB store over a graph that ``fill`` writes (given the builder server's
    ``skb`` graph), the way a built index is served; ``server_options`` go to the serving ``FalkorDBServer``."""
    builder = FalkorDBServer(data_dir)
    builder.start()
    fill(builder.client(socket_timeout=120).select_graph("skb"))
    builder.stop()
    server = FalkorDBServer(data_dir, persist=False, **server_options)
    store = FalkorDBStore(data_dir, server=server)
    try:
        yield store
    finally:
        store.close()
        server.stop()
