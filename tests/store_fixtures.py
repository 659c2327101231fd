"""Shared helpers for the graph-store tests: a tiny SKB with every shape the stores must handle.

Shapes covered: two parallel edges with different properties (FalkorDB merges them when the
relationship variable is unbound), a self-loop, list and nested-dict properties, None values,
and a label/relationship name that needs backtick quoting.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

from graphs.skb.model import SKB, Edge, Node, NodeType


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


def start_arcadedb(root: Path) -> tuple[Any, str]:
    """An in-process ArcadeDB server with its Neo4j-compatible Bolt plugin: (server, bolt URI).

    Small heap, quiet logging, JPype's exit hook off; the caller stops it with ``server.stop()`` and creates
    its databases with ``create_database``.
    """
    import jpype
    import jpype.config
    from arcadedb_embedded.server import ArcadeDBServer

    jpype.config.onexit = False
    jvm_kwargs: dict[str, Any] | None = None
    if not jpype.isJVMStarted():
        (root / "logging.properties").write_text(_QUIET_JUL)
        jvm_kwargs = {
            "heap_size": "384m",
            "jvm_args": [f"-Djava.util.logging.config.file={root / 'logging.properties'}"],
        }
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
        jvm_kwargs=jvm_kwargs,
    )
    server.start()
    return server, f"bolt://127.0.0.1:{bolt_port}"
