"""Call the `skb mcp` server from an MCP client (the official `mcp` SDK), over stdio.

    python examples/mcp_client.py --index-dir .skb/hpo

Spawns `python -m agent.serving.mcp --index-dir ...`, lists its tools, runs a semantic search and
asks the whole agent. Any MCP host (Claude Desktop, IDEs) can launch the same command.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from mcp import Client, StdioServerParameters


async def run(index_dir: Path, question: str) -> dict[str, Any]:
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "agent.serving.mcp", "--index-dir", str(index_dir)]
    )
    async with Client(params) as client:
        tools = await client.list_tools()
        print("tools:", ", ".join(t.name for t in tools.tools))
        hits = await client.call_tool("semantic_search", {"text": "bulging eyes", "k": 3})
        for hit in (hits.structured_content or {}).get("hits", []):
            print(f"  {hit['key']:<14} {hit['score']:.3f}  {hit['name']}")
        answer = await client.call_tool("ask", {"question": question, "k": 5})
        result: dict[str, Any] = answer.structured_content or {}
        print(result.get("answer", answer.content[0].text if answer.content else ""))
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--index-dir", type=Path, default=Path(".skb/hpo"))
    parser.add_argument(
        "--question", default="Which disease is characterized by brachyturricephaly, proptosis and midface retrusion?"
    )
    args = parser.parse_args()
    asyncio.run(run(args.index_dir, args.question))


if __name__ == "__main__":
    main()
