"""`skb mcp`: the retrieval tools and the whole agent as an MCP server (stdio or streamable HTTP).

Why MCP: desktop assistants, IDE agents and other frameworks speak MCP; serving the same
`SKBToolkit` tools there means one implementation, one set of schemas (taken from the tools'
pydantic argument models, injected arguments removed) and the same JSON payloads as in-process.

Built on the low-level `mcp.server.Server` (mcp 2.x) rather than the decorator API, because the
tools already exist with their own schemas; nothing is re-declared here.
"""

from __future__ import annotations

import json
import logging
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import mcp_types as types
import typer
from langchain_core.tools import BaseTool
from mcp.server import Server, ServerRequestContext
from pydantic import ValidationError

from graphs.errors import ConfigError, SKBError
from tools.results import parse_result
from tools.toolkit import SKBToolkit, tool_input_schema

log = logging.getLogger("skb.mcp")

SERVER_NAME = "skb-agent"
INSTRUCTIONS = (
    "Retrieval over a semi-structured knowledge base (a typed graph whose nodes carry text). "
    "semantic_search finds nodes by meaning; search_nodes follows typed edges from node keys; "
    "cypher runs read-only Cypher; ask runs the whole agent and returns ranked answer nodes."
)


def _payload_of(tool: BaseTool, output: Any) -> dict[str, Any] | None:
    """The JSON object a tool returned: tools answer with JSON text (and the same dict as artifact)."""
    if isinstance(output, tuple) and len(output) == 2 and isinstance(output[1], dict):
        return output[1]
    if isinstance(output, dict):
        return output
    if isinstance(output, str):
        try:
            value = json.loads(output)
        except ValueError:
            return None
        return value if isinstance(value, dict) else None
    return None


def _text_of(output: Any) -> str:
    if isinstance(output, tuple) and len(output) == 2:
        output = output[0]
    if isinstance(output, str):
        return output
    return json.dumps(output, ensure_ascii=False, default=str)


def build_server(toolkit: SKBToolkit) -> Server[Any]:
    """An MCP server exposing ``toolkit.get_tools()``; calls run in worker threads (tools are sync)."""
    tools = {t.name: t for t in toolkit.get_tools()}
    listed = [
        types.Tool(name=t.name, description=t.description, input_schema=tool_input_schema(t)) for t in tools.values()
    ]

    async def on_list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=listed)

    async def on_call_tool(ctx: ServerRequestContext[Any], params: types.CallToolRequestParams) -> types.CallToolResult:
        tool = tools.get(params.name)
        if tool is None:
            return _error(f"unknown tool {params.name!r}; available: {', '.join(tools)}")
        args = dict(params.arguments or {})
        try:
            output = await anyio.to_thread.run_sync(_invoke, tool, args)
        except ValidationError as exc:
            return _error(f"invalid arguments for {tool.name}: {exc}")
        except SKBError as exc:
            return _error(f"{type(exc).__name__}: {exc}")
        except Exception as exc:
            log.exception("tool %s failed", tool.name)
            return _error(f"{tool.name} failed: {type(exc).__name__}: {exc}")
        payload = _payload_of(tool, output)
        is_error = bool(payload and isinstance(payload.get("error"), dict))
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=_text_of(output))],
            structured_content=payload,
            is_error=is_error,
        )

    return Server(
        SERVER_NAME,
        version=_version(),
        instructions=INSTRUCTIONS,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


def _invoke(tool: BaseTool, args: dict[str, Any]) -> Any:
    """Run a tool; content_and_artifact tools are called as a tool call so the artifact comes back too."""
    if getattr(tool, "response_format", "content") == "content_and_artifact":
        message = tool.invoke({"type": "tool_call", "id": "mcp", "name": tool.name, "args": args})
        # the typed result (tools.results) is the structured content, with its kind; text stays budgeted
        result = parse_result(tool.name, getattr(message, "artifact", None))
        return (getattr(message, "content", message), result.model_dump(mode="json") if result else {})
    return tool.invoke(args)


def _error(text: str) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("skb-agent")
    except Exception:  # noqa: BLE001 -- not installed (source checkout)
        return "0"


async def serve_stdio(server: Server[Any]) -> None:
    from mcp.server.stdio import stdio_server

    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


def serve_http(server: Server[Any], host: str, port: int) -> None:
    import uvicorn

    app = server.streamable_http_app(host=host)
    uvicorn.run(app, host=host, port=port, log_level="warning")


def run(
    index_dir: Path,
    transport: Literal["stdio", "http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
    include_ask: bool = True,
) -> None:
    """Open the index, serve until the client disconnects (stdio) or the process is stopped (http)."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    with SKBToolkit(index_dir, include_ask=include_ask) as toolkit:
        server = build_server(toolkit)
        if transport == "stdio":
            anyio.run(serve_stdio, server)
        elif transport == "http":
            serve_http(server, host, port)
        else:
            raise ConfigError(f"unknown --transport {transport!r}; use stdio or http")


def mcp_command(
    index_dir: Annotated[Path, typer.Option("--index-dir", help="index directory (built by `skb index`)")] = Path(
        ".skb/hpo"
    ),
    transport: Annotated[str, typer.Option("--transport", help="stdio | http (streamable HTTP)")] = "stdio",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="HTTP port (http transport)")] = 8765,
    host: Annotated[str, typer.Option("--host", help="HTTP bind address; keep 127.0.0.1 unless you add auth")] = (
        "127.0.0.1"
    ),
    no_ask: Annotated[bool, typer.Option("--no-ask", help="do not expose the whole agent as the `ask` tool")] = False,
) -> None:
    """Serve semantic_search, search_nodes, cypher and ask over MCP (stdio for desktop clients, or HTTP at /mcp)."""
    try:
        if transport not in ("stdio", "http"):
            raise ConfigError(f"unknown --transport {transport!r}; use stdio or http")
        if transport == "http":
            typer.echo(f"MCP streamable HTTP on http://{host}:{port}/mcp", err=True)
            if host not in ("127.0.0.1", "localhost", "::1"):
                typer.echo(f"warning: --host {host} exposes the tools without authentication", err=True)
        run(index_dir, transport, host, port, include_ask=not no_ask)  # type: ignore[arg-type]
    except SKBError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(code=2) from exc


def main() -> None:
    typer.run(mcp_command)


if __name__ == "__main__":
    main()
