"""A reader of an index lets go of a replaced build's files at its next reload, and of all at ``close()``.

Every rebuild used to leave the previous build's files open and mapped in each reader (the agent's
entity linker kept the first build's graph for the life of the process; ``close()`` kept the parts):
a server rebuilt nightly ran out of descriptors and kept the old files' disk space. Counted here as
/proc/self/fd entries pointing at deleted files, on a generated graph rebuilt in place.
"""

from __future__ import annotations

import asyncio
import gc
import os
from pathlib import Path

import pytest
from mcp import Client

from agent import AgentConfig, ask
from agent.serving.mcp import build_server
from agent.serving.toolkit import SKBToolkit
from graphs.build import IndexConfig, build_index
from graphs.bundle import IndexBundle
from graphs.skb.model import SKB, Edge, Node, NodeType

pytestmark = [pytest.mark.integration, pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")]

QUESTION = "Which moon circles Planet 3?"


def _graph(version: int) -> SKB:
    skb = SKB("sky", node_types=[NodeType(label="Planet"), NodeType(label="Moon")])
    for i in range(30):
        skb.add_node(Node(f"p{i}", "Planet", {"name": f"Planet {i}", "note": f"v{version}"}))
        skb.add_node(Node(f"m{i}", "Moon", {"name": f"Moon {i} of planet {i}"}))
        skb.add_edge(Edge(f"m{i}", "CIRCLES", f"p{i}"))
    skb.validate()
    return skb


def _fds_into(where: Path) -> tuple[int, int]:
    """(descriptors on deleted files, descriptors on anything under ``where``) of this process."""
    deleted = inside = 0
    root = str(where.parent)
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        deleted += target.endswith(" (deleted)")
        inside += target.startswith(root)
    return deleted, inside


def _rebuild(index_dir: Path, version: int) -> None:
    build_index(_graph(version), index_dir, IndexConfig(dataset="sky", stage="core"))


def test_a_reader_releases_each_replaced_build_and_everything_at_close(tmp_path: Path) -> None:
    index_dir = tmp_path / "sky" / "index"
    _rebuild(index_dir, 0)
    bundle = IndexBundle.open(index_dir)
    config = AgentConfig(planner="offline")
    ask(QUESTION, bundle=bundle, config=config)
    baseline, _ = _fds_into(index_dir)
    for version in range(1, 4):
        _rebuild(index_dir, version)
        result = ask(QUESTION, bundle=bundle, config=config)  # reloads, and links against the new graph
        assert bundle.reloads == version
        assert bundle.skb.nodes["p1"].props.get("note") == f"v{version}"
        assert result.context, "the reloaded bundle answers"
        deleted, _ = _fds_into(index_dir)
        assert deleted <= baseline, f"after rebuild {version}: {deleted} descriptors on deleted files (before: {baseline})"
    bundle.close()
    gc.collect()
    deleted, inside = _fds_into(index_dir)
    assert deleted <= baseline and inside == 0, f"after close: {inside} descriptors on the index, {deleted} on deleted files"
    assert ask(QUESTION, bundle=bundle, config=config).context  # a closed bundle opens again when used


def test_a_server_descriptor_count_stays_flat_over_ten_rebuilds(tmp_path: Path) -> None:
    index_dir = tmp_path / "sky" / "index"
    _rebuild(index_dir, 0)
    bundle = IndexBundle.open(index_dir)
    toolkit = SKBToolkit(bundle, callbacks=[])
    server = build_server(toolkit)

    async def serve_one_round(client: Client) -> None:
        await client.call_tool("search_nodes", {"keys": ["p1"]})
        await client.call_tool("ask", {"question": QUESTION, "k": 3})

    async def main() -> list[int]:
        counts: list[int] = []
        async with Client(server) as client:
            await serve_one_round(client)
            baseline, _ = _fds_into(index_dir)  # descriptors on deleted files that are not the index's
            for version in range(1, 11):
                _rebuild(index_dir, version)
                await serve_one_round(client)
                counts.append(len(os.listdir("/proc/self/fd")))
                deleted, _ = _fds_into(index_dir)
                assert deleted <= baseline, f"rebuild {version}: {deleted} descriptors on deleted files (before: {baseline})"
        return counts

    try:
        counts = asyncio.run(main())
    finally:
        bundle.close()
    assert bundle.reloads == 10
    assert max(counts) - min(counts) <= 2, f"descriptors over 10 rebuilds: {counts}"
