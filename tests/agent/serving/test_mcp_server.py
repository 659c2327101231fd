"""`skb mcp`: a real MCP client (the `mcp` SDK) talks to the server over stdio and streamable HTTP,
on the real index fixture, with the offline planner behind `ask`."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from agent.serving.mcp import build_server
from agent.serving.toolkit import SKBToolkit
from tests.paths import REPO

QUESTION = "Which disease is characterized by brachyturricephaly, proptosis and midface retrusion?"


def _env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "PYTHONPATH": str(REPO) + os.pathsep + env.get("PYTHONPATH", ""),
            "SKB_TRACE_DB": str(tmp / "mcp-traces.sqlite"),
        }
    )
    return env


async def _exercise(client: Client) -> dict[str, Any]:
    listed = await client.list_tools()
    tools = {t.name: t for t in listed.tools}
    search = await client.call_tool("semantic_search", {"text": "Proptosis", "k": 3})
    cypher = await client.call_tool(
        "cypher",
        {"query": "MATCH (g:Gene)-[r]-(d:Disease) WHERE d.key = $key RETURN g.key", "params": {"key": "OMIM:101200"}},
    )
    bad_label = await client.call_tool("semantic_search", {"text": "x", "label": "Planet"})
    missing_arg = await client.call_tool("semantic_search", {"k": 3})
    ask = await client.call_tool("ask", {"question": QUESTION, "k": 5})
    return {
        "tools": tools,
        "search": search,
        "cypher": cypher,
        "bad_label": bad_label,
        "missing_arg": missing_arg,
        "ask": ask,
    }


def _check(out: dict[str, Any]) -> None:
    tools = out["tools"]
    assert set(tools) == {"semantic_search", "search_nodes", "cypher", "ask"}
    schema = tools["semantic_search"].input_schema
    assert schema["type"] == "object" and schema["required"] == ["text"]
    assert set(schema["properties"]) == {"text", "label", "k"}  # injected step/question are hidden
    assert tools["search_nodes"].input_schema["properties"]["direction"]["enum"] == ["out", "in", "both"]
    assert tools["ask"].input_schema["required"] == ["question"]

    search = out["search"]
    assert search.is_error is False
    hits = search.structured_content["hits"]
    assert hits[0]["key"] == "HP:0000520" and len(hits) == 3
    assert '"hits"' in search.content[0].text

    cypher = out["cypher"]
    assert cypher.is_error is False, cypher.content[0].text
    assert ["FGFR2"] in cypher.structured_content["rows"]

    assert out["bad_label"].is_error is True
    assert out["bad_label"].structured_content["error"]["type"] == "unknown_label"
    assert out["missing_arg"].is_error is True and "text" in out["missing_arg"].content[0].text

    ask = out["ask"]
    assert ask.is_error is False, ask.content[0].text
    result = ask.structured_content
    assert result["question"] == QUESTION and 1 <= len(result["context"]) <= 5 + 10
    assert result["context"][0]["key"] in {"OMIM:101200", "ORPHA:87"}  # Apert syndrome
    assert "Apert syndrome" in result["answer"]


def test_in_process_client_sees_the_same_tools_and_payloads(hpo_bundle: Any, tmp_path: Path) -> None:
    toolkit = SKBToolkit(hpo_bundle, callbacks=[])

    async def main() -> dict[str, Any]:
        async with Client(build_server(toolkit)) as client:
            return await _exercise(client)

    _check(asyncio.run(main()))


@pytest.mark.integration
def test_stdio_server_subprocess(hpo_index_dir: Path, hpo_bundle: Any, tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agent.serving.mcp", "--index-dir", str(hpo_index_dir)],
        env=_env(tmp_path),
        cwd=str(REPO),
    )

    async def main() -> dict[str, Any]:
        async with Client(params, read_timeout_seconds=120) as client:
            return await _exercise(client)

    _check(asyncio.run(main()))
    # the ask tool traced its run into the configured trace database
    from agent.tracing.tracer import TraceStore

    traces = TraceStore(tmp_path / "mcp-traces.sqlite", read_only=True).list_traces()
    assert [t.name for t in traces] == ["skb-agent.ask"] and traces[0].preview.startswith(QUESTION[:60])


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.integration
def test_streamable_http_server_on_localhost(hpo_index_dir: Path, hpo_bundle: Any, tmp_path: Path) -> None:
    port = _free_port()
    log = (tmp_path / "server.log").open("w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.serving.mcp", "--index-dir", str(hpo_index_dir), "--transport", "http",
         "--port", str(port), "--no-ask"],
        env=_env(tmp_path), cwd=str(REPO), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None, (tmp_path / "server.log").read_text()
                assert time.monotonic() < deadline, "MCP HTTP server did not start"
                time.sleep(0.3)

        async def main() -> tuple[list[str], dict[str, Any]]:
            async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                names = [t.name for t in (await client.list_tools()).tools]
                hits = await client.call_tool("semantic_search", {"text": "aortic root aneurysm", "k": 2})
                return names, hits.structured_content

        names, hits = asyncio.run(main())
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    assert names == ["semantic_search", "search_nodes", "cypher"]  # --no-ask
    assert hits["hits"][0]["key"] == "HP:0002616"


def test_bad_transport_is_a_clear_error(hpo_index_dir: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from agent.serving.mcp import mcp_command

    app = typer.Typer()
    app.command()(mcp_command)
    result = CliRunner().invoke(app, ["--index-dir", str(hpo_index_dir), "--transport", "carrier-pigeon"])
    assert result.exit_code == 2 and "unknown --transport 'carrier-pigeon'" in result.output
    missing = CliRunner().invoke(app, ["--index-dir", str(hpo_index_dir / "nope")])
    assert missing.exit_code == 2 and "no index at" in missing.output
