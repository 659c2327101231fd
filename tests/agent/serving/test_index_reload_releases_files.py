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
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mcp import Client

from agent import AgentConfig, ask
from agent.serving.mcp import build_server
from agent.serving.toolkit import SKBToolkit
from graphs.build import IndexConfig, build_index
from graphs.bundle import IndexBundle
from graphs.loaders.jsonl import write_jsonl
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


#: Rebuilds ``skb index ARGS`` once per line read, in one process (the command's imports paid once), and says
#: "::built" (or "::failed" and the traceback) on stdout after each (the command's own report comes before).
_REBUILDER = """
import sys, traceback
from agent.cli import app
for _ in sys.stdin:
    try:
        app(sys.argv[1:], standalone_mode=False)
        print("::built", flush=True)
    except BaseException:
        print("::failed " + traceback.format_exc().replace(chr(10), " | "), flush=True)
"""


def test_a_reader_of_a_complete_index_stays_flat_over_twenty_rebuilds_by_another_process(tmp_path: Path) -> None:
    """Every stage built (not ``--stage core``: the relation-path planner, the stored linker and scoring
    records), rebuilt by ``skb index --force`` in another process while this one keeps asking: each replaced
    build's mapped files (the compact SKB's arrays) used to stay open here, 22 descriptors per rebuild, and
    after ``close()`` too."""
    write_jsonl(_graph(0), tmp_path / "data")
    index_dir = tmp_path / "index"
    args = ["index", "--dataset", "jsonl", "--data", str(tmp_path / "data"), "--index-dir", str(index_dir),
            "--embedder", "hash:64", "--force", "--quiet"]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    rebuilder = subprocess.Popen([sys.executable, "-c", _REBUILDER, *args], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True, env=env)  # fmt: skip
    assert rebuilder.stdin is not None and rebuilder.stdout is not None

    def rebuild() -> None:
        assert rebuilder.stdin is not None and rebuilder.stdout is not None
        rebuilder.stdin.write("\n")
        rebuilder.stdin.flush()
        said = ""
        while not said.startswith("::"):
            said = rebuilder.stdout.readline()
            assert said, "the rebuilding process ended"
        assert said.strip() == "::built", f"skb index failed: {said}"

    config = AgentConfig(planner="offline")
    try:
        rebuild()
        bundle = IndexBundle.open(index_dir)
        ask(QUESTION, bundle=bundle, config=config)
        assert not bundle.missing, f"a complete index: {bundle.missing}"
        baseline, _ = _fds_into(index_dir)
        counts: list[int] = []
        started = time.monotonic()
        for version in range(1, 21):
            before = bundle.reloads
            rebuild()
            assert ask(QUESTION, bundle=bundle, config=config).context, "the reloaded bundle answers"
            assert bundle.reloads == before + 1
            deleted, _ = _fds_into(index_dir)
            counts.append(len(os.listdir("/proc/self/fd")))
            assert deleted <= baseline, (
                f"after rebuild {version}: {deleted} descriptors on deleted files "
                f"(before: {baseline}, {time.monotonic() - started:.0f} s in)"
            )
        assert max(counts) - min(counts) <= 2, f"descriptors over 20 rebuilds: {counts}"
        bundle.close()
        gc.collect()
        deleted, inside = _fds_into(index_dir)
        assert deleted <= baseline and inside == 0, f"after close: {inside} on the index, {deleted} on deleted files"
    finally:
        rebuilder.stdin.close()
        rebuilder.wait(timeout=60)
