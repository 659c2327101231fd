"""`skb mcp`: the retrieval tools and the whole agent as an MCP server (stdio or streamable HTTP).

Why MCP: desktop assistants, IDE agents and other frameworks speak MCP; serving the same
`SKBToolkit` tools there means one implementation, one set of schemas (taken from the tools'
pydantic argument models, injected arguments removed) and the same JSON payloads as in-process.

Built on the low-level `mcp.server.Server` (mcp 2.x) rather than the decorator API, because the
tools already exist with their own schemas; nothing is re-declared here.

HTTP is guarded three ways (see `build_http_app`): sessions are capped and expire when idle, and at
the cap the least recently used idle session is evicted rather than new clients refused; a bearer
token (from $SKB_MCP_TOKEN or --token-file, never from the command line, never logged) can be
required of every request, and must be when binding beyond the loopback interface; on loopback the
SDK's Host/Origin checks stop DNS-rebinding pages in a local browser.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
import math
import os
import socket
import stat
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

import anyio
import mcp_types as types
import typer
from langchain_core.tools import BaseTool
from mcp.server import Server, ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthorizationContext
from mcp.server.streamable_http import StreamableHTTPServerTransport
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agent.serving.toolkit import AGENT_INSTRUCTIONS, ASK_NAME, SKBToolkit, tool_input_schema
from graphs.errors import ConfigError, SKBError
from graphs.progress import terminal_text
from tools.results import parse_result

log = logging.getLogger("skb.mcp")

SERVER_NAME = "skb-agent"
INSTRUCTIONS = (
    "Retrieval over a semi-structured knowledge base (a typed graph whose nodes carry text). "
    + AGENT_INSTRUCTIONS
    + " Follow-ups on the keys ask returns: search_nodes follows typed edges from node keys, "
    "semantic_search finds nodes by meaning, cypher runs read-only Cypher."
)
INSTRUCTIONS_NO_ASK = (
    "Retrieval over a semi-structured knowledge base (a typed graph whose nodes carry text). "
    "semantic_search finds nodes by meaning; search_nodes follows typed edges from node keys; "
    "cypher runs read-only Cypher."
)


def _payload_of(tool: BaseTool, output: Any) -> dict[str, Any] | None:
    """The structured content of a tool's output: the typed result's dump for the retrieval tools and
    the AgentResult dump for ``ask`` (see ``_invoke``), the object itself or its JSON text otherwise."""
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
        is_error = bool(payload and (payload.get("kind") == "error" or isinstance(payload.get("error"), dict)))
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=_text_of(output))],
            structured_content=payload,
            is_error=is_error,
        )

    return Server(
        SERVER_NAME,
        version=_version(),
        instructions=INSTRUCTIONS if ASK_NAME in tools else INSTRUCTIONS_NO_ASK,
        on_list_tools=on_list_tools,
        on_call_tool=on_call_tool,
    )


def _invoke(tool: BaseTool, args: dict[str, Any]) -> Any:
    """Run a tool; content_and_artifact tools are called as a tool call so the artifact comes back too."""
    if getattr(tool, "response_format", "content") == "content_and_artifact":
        message = tool.invoke({"type": "tool_call", "id": "mcp", "name": tool.name, "args": args})
        # the typed result (tools.results) is the structured content, with its kind; text stays budgeted.
        # ask's artifact is the whole AgentResult dump: the structured content, beside its compact text
        artifact = getattr(message, "artifact", None)
        result = parse_result(tool.name, artifact) if tool.name != ASK_NAME else None
        structured = result.model_dump(mode="json") if result else artifact if isinstance(artifact, dict) else {}
        return (getattr(message, "content", message), structured)
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


# -- HTTP: sessions, token, app -----------------------------------------------------------------

MCP_PATH = "/mcp"
DEFAULT_MAX_SESSIONS = 128
"""Open sessions kept at once. A session costs ~30 KB of server memory (measured: evals/mcp_flood.py),
so the table stays under ~5 MB; 128 is far beyond the few clients a local server has."""
DEFAULT_SESSION_IDLE_TIMEOUT_S = 600.0
"""A session with no request in flight for this long is closed (its id then answers 404 and the
client initializes again). Long tool calls are requests in flight and do not count as idle."""
TOKEN_ENV = "SKB_MCP_TOKEN"
MIN_TOKEN_CHARS = 16
_TOKEN_HINT = "python -c 'import secrets; print(secrets.token_urlsafe(32))'"


class BoundedSessionManager(StreamableHTTPSessionManager):
    """The SDK's session manager with eviction at the cap instead of refusal.

    Why: the SDK answers 503 to every new client once ``max_sessions`` are open, until sessions
    expire -- so anyone who can send ``initialize`` a few thousand times locks everyone out for the
    whole idle timeout. Here a new session first evicts the least recently used *idle* sessions
    (no request in flight); only when every session is busy is the new client refused (503).
    An evicted client gets 404 on its next request and initializes again, as the protocol says.

    The SDK keeps its table private; this relies on ``_server_instances``/``_session_owners`` and
    the ``_admit_session`` hook of mcp 2.3 (pinned <3 in pyproject; tests/agent/serving/test_mcp_sessions.py
    fails if that changes).
    """

    evicted: int = 0

    def _admit_session(self, requestor: AuthorizationContext | None) -> StreamableHTTPServerTransport | None:
        if self.max_sessions is not None:
            self._evict_idle(len(self._server_instances) - self.max_sessions + 1)
        return super()._admit_session(requestor)

    def _evict_idle(self, count: int) -> None:
        """Close the ``count`` least recently used idle sessions (expired ones first).

        A session's idle deadline is infinite while a request is in flight (or before its opening
        request finished) and otherwise last-activity + idle timeout, so the smallest finite
        deadline is the least recently used idle session. Dropping it from the table first makes
        its id answer 404 at once; cancelling its idle scope ends its server task, which then
        terminates the transport (the same path as an idle timeout).
        """
        if count <= 0:
            return
        candidates: list[tuple[float, str]] = []
        for session_id, transport in self._server_instances.items():
            scope = transport.idle_scope
            if scope is None:
                continue
            if scope.cancel_called:
                candidates.append((-math.inf, session_id))
            elif math.isfinite(scope.deadline):
                candidates.append((scope.deadline, session_id))
        candidates.sort()
        for _, session_id in candidates[:count]:
            transport = self._server_instances.pop(session_id)
            self._session_owners.pop(session_id, None)
            if transport.idle_scope is not None:
                transport.idle_scope.cancel()
            self.evicted += 1
        if candidates:
            log.info(
                "session cap %s reached: evicted %d idle session(s)", self.max_sessions, min(count, len(candidates))
            )

    @property
    def open_sessions(self) -> int:
        return len(self._server_instances)


class BearerTokenMiddleware:
    """Every HTTP request must carry ``Authorization: Bearer <token>``; anything else gets 401.

    Why not the SDK's OAuth resource-server machinery: a local tool server needs one shared secret,
    not an authorization server. The comparison is constant-time; neither the expected nor the
    presented token is logged or echoed.
    """

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode("utf-8")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        log.debug("rejected an HTTP request without a valid bearer token")
        body = {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32001, "message": "unauthorized: send the header 'Authorization: Bearer <token>'"},
        }
        response = JSONResponse(body, status_code=401, headers={"WWW-Authenticate": 'Bearer realm="skb-mcp"'})
        await response(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope["headers"]:
            if name == b"authorization":
                scheme, _, credential = bytes(value).partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(credential.strip(), self._token)
        return False


def is_loopback(host: str) -> bool:
    """True for addresses only this machine can reach (127.0.0.0/8, ::1, "localhost")."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to a public interface


def load_token(token_file: Path | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The bearer token from ``token_file`` or $SKB_MCP_TOKEN (not both), or None when neither is given.

    Not a command-line value: argv is visible to every local user in `ps`. Errors name the source,
    never the token.
    """
    env = os.environ if environ is None else environ
    from_env = env.get(TOKEN_ENV)
    if token_file is not None and from_env is not None:
        raise ConfigError(f"both ${TOKEN_ENV} and --token-file are set; give the token one way")
    if token_file is not None:
        try:
            token, source = token_file.read_text(encoding="utf-8").strip(), f"--token-file {token_file}"
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read --token-file {token_file}: {exc.__class__.__name__}") from exc
    elif from_env is not None:
        token, source = from_env.strip(), f"${TOKEN_ENV}"
    else:
        return None
    if len(token) < MIN_TOKEN_CHARS:
        raise ConfigError(
            f"the token in {source} is {'empty' if not token else 'too short'}: use at least {MIN_TOKEN_CHARS} "
            f"characters, e.g. from `{_TOKEN_HINT}`"
        )
    if not all(0x21 <= ord(ch) <= 0x7E for ch in token):
        raise ConfigError(f"the token in {source} must be printable ASCII without spaces (it travels in a header)")
    return token


def loopback_security(host: str) -> TransportSecuritySettings | None:
    """The SDK's Host/Origin checks for a server bound to loopback (None beyond it, where the token guards):
    a web page in a local browser must not reach us through DNS rebinding."""
    if not is_loopback(host):
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*", f"{host}:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*", f"http://{host}:*"],
    )


def build_http_app(
    server: Server[Any],
    *,
    host: str = "127.0.0.1",
    token: str | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT_S,
) -> Starlette:
    """The streamable-HTTP ASGI app at /mcp with bounded sessions and, given a token, bearer auth.

    Refuses (ConfigError) to build an app that listens beyond loopback without a token.
    """
    if token is None and not is_loopback(host):
        raise ConfigError(
            f"--host {host} would expose the tools to every machine that can reach it; set a bearer token "
            f"with ${TOKEN_ENV} or --token-file PATH (at least {MIN_TOKEN_CHARS} characters, e.g. from "
            f"`{_TOKEN_HINT}`) and have clients send 'Authorization: Bearer <token>', or bind 127.0.0.1"
        )
    manager = BoundedSessionManager(
        app=server,
        security_settings=loopback_security(host),
        session_idle_timeout=session_idle_timeout,
        max_sessions=max_sessions,
    )
    middleware = [Middleware(BearerTokenMiddleware, token=token)] if token is not None else []
    app = Starlette(
        routes=[Route(MCP_PATH, endpoint=StreamableHTTPASGIApp(manager))],
        middleware=middleware,
        lifespan=lambda _app: manager.run(),
    )
    app.state.session_manager = manager
    return app


def bind_http(host: str, port: int) -> socket.socket:
    """The listening socket, bound before anything says "serving": a busy port or a bad address is a
    ConfigError naming it (exit 2), not a banner followed by uvicorn's own exit."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError as exc:
        raise ConfigError(f"cannot listen on {host}:{port}: {exc}; pass --host an address of this machine") from exc
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {host}:{port} ({exc.strerror or exc}); pick another --port, or stop the process "
            "that uses it"
        ) from exc
    return sock


def serve_http(
    server: Server[Any],
    host: str,
    port: int,
    *,
    token: str | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT_S,
    sock: socket.socket | None = None,
) -> None:
    """Serve ``server`` over streamable HTTP on ``sock`` (bound by `bind_http` when None)."""
    import uvicorn

    app = build_http_app(
        server, host=host, token=token, max_sessions=max_sessions, session_idle_timeout=session_idle_timeout
    )
    sock = sock if sock is not None else bind_http(host, port)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning")
    with sock:
        uvicorn.Server(config).run(sockets=[sock])


def run(
    index_dir: Path,
    transport: Literal["stdio", "http"] = "stdio",
    host: str = "127.0.0.1",
    port: int = 8765,
    include_ask: bool = True,
    *,
    token: str | None = None,
    max_sessions: int = DEFAULT_MAX_SESSIONS,
    session_idle_timeout: float = DEFAULT_SESSION_IDLE_TIMEOUT_S,
    on_ready: Callable[[], None] | None = None,
) -> None:
    """Open the index, serve until the client disconnects (stdio) or the process is stopped (http).

    ``on_ready`` runs once the index is open (and, for http, the port is bound): the place for a
    "serving on ..." banner, which must never precede a failure to serve."""
    logging.basicConfig(stream=sys.stderr, level=logging.WARNING)
    if transport == "http" and token is None and not is_loopback(host):  # before opening the index
        build_http_app(Server(SERVER_NAME), host=host)  # raises the ConfigError that says what to do
    with SKBToolkit(index_dir, include_ask=include_ask) as toolkit:
        server = build_server(toolkit)
        if transport == "stdio":
            if on_ready is not None:
                on_ready()
            anyio.run(serve_stdio, server)
        elif transport == "http":
            sock = bind_http(host, port)
            if on_ready is not None:
                on_ready()
            serve_http(
                server, host, port, token=token, max_sessions=max_sessions, session_idle_timeout=session_idle_timeout,
                sock=sock,
            )
        else:
            raise ConfigError(f"unknown --transport {transport!r}; use stdio or http")


def mcp_command(
    index_dir: Annotated[
        Path, typer.Option("--index-dir", help="index directory (built by `skb index`)", envvar="SKB_INDEX_DIR")
    ],
    transport: Annotated[str, typer.Option("--transport", help="stdio | http (streamable HTTP)")] = "stdio",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="HTTP port (http transport)")] = 8765,
    host: Annotated[
        str, typer.Option("--host", help="HTTP bind address; beyond 127.0.0.1 a bearer token is required")
    ] = "127.0.0.1",
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help=f"HTTP: file holding a bearer token that every request must send (or set ${TOKEN_ENV})",
        ),
    ] = None,
    max_sessions: Annotated[
        int, typer.Option("--max-sessions", min=1, max=100_000, help="HTTP: open sessions kept at once")
    ] = DEFAULT_MAX_SESSIONS,
    session_idle_timeout: Annotated[
        float,
        typer.Option("--session-idle-timeout", min=1.0, max=86_400.0, help="HTTP: close sessions idle this many s"),
    ] = DEFAULT_SESSION_IDLE_TIMEOUT_S,
    no_ask: Annotated[bool, typer.Option("--no-ask", help="do not expose the whole agent as the `ask` tool")] = False,
) -> None:
    """Serve semantic_search, search_nodes, cypher and ask over MCP (stdio for desktop clients, or HTTP at /mcp)."""
    try:
        if transport not in ("stdio", "http"):
            raise ConfigError(f"unknown --transport {transport!r}; use stdio or http")
        token = None
        banner: Callable[[], None] | None = None
        if transport == "http":
            token = load_token(token_file)
            if token_file is not None and token is not None and _readable_by_others(token_file):
                typer.echo(f"warning: --token-file {token_file} is readable by other users; chmod 600 it", err=True)
            if token is None and not is_loopback(host):
                build_http_app(Server(SERVER_NAME), host=host)  # raises the ConfigError that says what to do
            auth = "bearer token required" if token is not None else "no token: loopback only"
            line = (f"MCP streamable HTTP on http://{host}:{port}{MCP_PATH} ({auth}; at most {max_sessions} sessions, "
                    f"idle ones closed after {session_idle_timeout:g} s)")

            def banner() -> None:  # printed once the index is open and the port is bound
                typer.echo(terminal_text(line), err=True)
        elif token_file is not None:
            raise ConfigError("--token-file applies to --transport http only (stdio has no network listener)")
        run(
            index_dir,
            transport,  # type: ignore[arg-type]
            host,
            port,
            include_ask=not no_ask,
            token=token,
            max_sessions=max_sessions,
            session_idle_timeout=session_idle_timeout,
            on_ready=banner,
        )
    except SKBError as exc:
        typer.echo(f"error: {terminal_text(exc)}", err=True)
        raise typer.Exit(code=2) from exc


def _readable_by_others(path: Path) -> bool:
    try:
        return bool(path.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO))
    except OSError:
        return False


def main() -> None:
    typer.run(mcp_command)


if __name__ == "__main__":
    main()
