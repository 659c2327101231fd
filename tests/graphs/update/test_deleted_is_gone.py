"""Deleted means gone: after a change set deletes a node, no path of the index returns it -- BM25, dense,
phrases, the lexicon, similarity edges, graph walks, the tools (semantic_search, search_nodes, cypher),
SAGE expansion and the answer of ask(). Every path is first shown to return the node before the delete."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from agent.api import ask
from graphs.build import IndexConfig, build_index
from graphs.bundle import IndexBundle
from graphs.index.phrases import phrase_index_for
from graphs.sage.edges import SimilarityConfig
from graphs.sage.expand import expand
from graphs.update import parse_changes, update_index
from tests.small_graphs import catalog_skb
from tools import make_tools

pytestmark = pytest.mark.integration

GONE = "C_KETTLE"
QUESTION = "Find the appliance that boils water with an electric heating element"
TEXT = "electric kettle that boils water"


def call(tool: Any, args: dict[str, Any]) -> str:
    message = tool.invoke({"type": "tool_call", "id": "c1", "name": tool.name, "args": args})
    return json.dumps(message.artifact.model_dump(mode="json"))


def every_path(bundle: IndexBundle) -> dict[str, str]:
    """What each path answers for the kettle, as text (a key anywhere in it counts)."""
    tools = {t.name: t for t in make_tools(bundle, lambda: QUESTION)}
    phrases = phrase_index_for(bundle)
    assert phrases is not None
    query = bundle.embedder.embed_query(TEXT)
    lexicon = {name: keys for name, keys in bundle.lexicon.items() if "kettle" in name}
    skb = bundle.skb
    walks = [(e.src, e.dst) for key in ("P_BREAKFAST", "C_APPL") for e in [*skb.out_edges(key), *skb.in_edges(key)]]
    store = bundle.store.neighbors(["P_BREAKFAST", "P_KITCHEN", "C_APPL"])
    result = ask(QUESTION, bundle=bundle)
    return {
        "bm25": json.dumps([h.key for h in bundle.search(TEXT, mode="bm25", k=20)]),
        "dense": json.dumps([h.key for h in bundle.search(TEXT, mode="vss", k=20)]),
        "hybrid": json.dumps([h.key for h in bundle.search(TEXT, mode="hybrid", k=20)]),
        "phrases": json.dumps(phrases.search(query[None, :], 20)),
        "lexicon": json.dumps(lexicon),
        "similarity edges": json.dumps([bundle.similarity_neighbors(k) for k in ("C_TOASTER", "C_BLENDER", "C_FAN")]),
        "graph walks": json.dumps(walks),
        "graph store": json.dumps([str(t) for t in store]),
        "semantic_search": call(tools["semantic_search"], {"text": TEXT, "k": 20}),
        "search_nodes": call(tools["search_nodes"], {"keys": ["P_BREAKFAST", "P_KITCHEN", "C_APPL"]}),
        "cypher": call(tools["cypher"], {"query": "MATCH (p:Product)-[:IN_CATEGORY]->(c:Category) "
                                         "RETURN p.key AS p, c.key AS c, c.name AS name"}),
        "sage": json.dumps(expand(bundle, TEXT, [("P_BREAKFAST", 1.0), ("C_APPL", 1.0)], k_prime=20)),
        "ask": json.dumps([[c.key for c in result.context], result.answer]),
    }


@pytest.mark.parametrize("share", [None, 100.0], ids=["as-configured", "every-graph-patched"])
def test_a_deleted_node_is_returned_by_no_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                               share: float | None) -> None:
    """On this small graph the deleted rows pass the rebuild share, so the graphs are built anew; with the share
    raised the parent's HNSW and phrase graphs are patched, and the node is gone from them as well."""
    if share is not None:
        monkeypatch.setattr("graphs.update.hnsw_patch.REBUILD_SHARE", share)
        monkeypatch.setattr("graphs.update.phrase_patch.REBUILD_SHARE", share)
    index_dir = tmp_path / "index"
    build_index(catalog_skb(), index_dir, IndexConfig(dataset="catalog", embedder="hash:64",
                                                       similarity=SimilarityConfig(percentile=50)))
    with IndexBundle.open(index_dir) as bundle:
        before = every_path(bundle)
        shown = {path: GONE in text for path, text in before.items()}
        assert all(shown.values()), f"paths that never returned the node, so cannot test its deletion: {shown}"
        summary = update_index(index_dir, parse_changes(json.dumps({"op": "delete", "node": {"key": GONE}}).encode()))
        assert summary.hnsw["phrases_patched"] is (share is not None)
        after = every_path(bundle)  # the open bundle follows the new generation
        assert bundle.reloads >= 1
    leaked = {path: text for path, text in after.items() if GONE in text}
    assert leaked == {}
    assert "electric kettle" in before["ask"] and "electric kettle" not in after["ask"]
