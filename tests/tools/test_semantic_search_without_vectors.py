"""``semantic_search`` on a staged index without its vectors says so, directly and over MCP.

It used to return ``{"hits": []}`` -- indistinguishable from "nothing similar" -- while
``skb search --mode vss`` named the missing vectors. The note names them and what to run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from agent.serving.mcp import build_server
from agent.serving.toolkit import SKBToolkit
from graphs.build import IndexConfig, build_index
from graphs.bundle import IndexBundle
from graphs.skb.model import SKB, Edge, Node, NodeType
from tools import make_tools

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def core_bundle(tmp_path_factory: pytest.TempPathFactory) -> Iterator[IndexBundle]:
    skb = SKB("orchard", node_types=[NodeType(label="Tree", description="A tree"), NodeType(label="Fruit", description="A fruit")])
    skb.add_node(Node("t1", "Tree", {"name": "Old pear tree"}))
    skb.add_node(Node("f1", "Fruit", {"name": "Conference pear"}))
    skb.add_edge(Edge("t1", "BEARS", "f1"))
    skb.validate()
    index_dir = Path(tmp_path_factory.mktemp("orchard")) / "index"
    build_index(skb, index_dir, IndexConfig(dataset="orchard", stage="core"))
    bundle = IndexBundle.open(index_dir)
    yield bundle
    bundle.close()


def _says_vectors_missing(text: str) -> None:
    assert "no node vectors" in text and "--stage core" in text and "skb index" in text, text


def test_the_tool_names_the_missing_vectors(core_bundle: IndexBundle) -> None:
    assert "vectors" in core_bundle.missing
    tool = next(t for t in make_tools(core_bundle) if t.name == "semantic_search")
    message = tool.invoke({"type": "tool_call", "id": "c1", "name": tool.name, "args": {"text": "pear", "k": 3}})
    payload = json.loads(str(message.content))
    assert payload["hits"] == []
    _says_vectors_missing(payload["note"])
    assert message.artifact.note == payload["note"]


def test_the_mcp_tool_names_the_missing_vectors(core_bundle: IndexBundle) -> None:
    toolkit = SKBToolkit(core_bundle, callbacks=[])

    async def main() -> Any:
        async with Client(build_server(toolkit)) as client:
            return await client.call_tool("semantic_search", {"text": "pear", "k": 3})

    result = asyncio.run(main())
    _says_vectors_missing(json.dumps(result.structured_content))
    _says_vectors_missing(" ".join(getattr(c, "text", "") for c in result.content))
