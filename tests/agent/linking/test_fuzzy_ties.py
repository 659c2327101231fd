"""A fuzzy link is the same in every process: between candidates of equal score the linker picks by their tokens,
not by the iteration order of a set, which follows the interpreter's string-hash seed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from graphs.build import IndexConfig, build_index
from graphs.skb.model import SKB, Edge, Node, NodeType

pytestmark = pytest.mark.integration

SCRIPT = """
import sys
from graphs.bundle import IndexBundle
from agent.linking.entities import EntityLinker
with IndexBundle.open(sys.argv[1], store="none") as bundle:
    print(EntityLinker(bundle, use_embedding=False)._fuzzy(("lamp", "red"), []))
"""


def test_a_tie_between_fuzzy_candidates_is_broken_the_same_under_every_hash_seed(tmp_path: Path) -> None:
    skb = SKB("shop", [NodeType(label="Item"), NodeType(label="Shelf")])
    # both names hold exactly the mention's words, and each scores 1.0 against "lamp red", which names neither
    for key, name in (("i1", "red lamp"), ("i2", "red red lamp"), ("i3", "blue chair")):
        skb.add_node(Node(key, "Item", {"name": name}))
    skb.add_node(Node("s1", "Shelf", {"name": "front shelf"}))
    for key in ("i1", "i2", "i3"):
        skb.add_edge(Edge(key, "ON", "s1"))
    index_dir = tmp_path / "index"
    build_index(skb, index_dir, IndexConfig(dataset="shop", store="none", embedder="hash:64"))
    root = Path(__file__).resolve().parents[3]
    outputs = set()
    for seed in ("1", "2", "3", "4", "5"):
        done = subprocess.run([sys.executable, "-c", SCRIPT, str(index_dir)], check=True, cwd=root, text=True,
                              capture_output=True, env={**os.environ, "PYTHONHASHSEED": seed})
        outputs.add(done.stdout.strip())
    assert len(outputs) == 1, outputs
    assert outputs.pop() == "[('i1', 1.0)]"  # ("red", "lamp") before ("red", "red", "lamp")
