"""`skb serve`: the retriever as replicas on Ray Serve over one index (MCP at /mcp, POST /ask, GET /health).

A thin wrapper: the application is `agent.serving.replicas`; this module reads the options, the token and
says where it serves. Ray is imported only here, when the command runs, and a missing Ray is an error
naming the extra to install.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from graphs.errors import ConfigError, SKBError
from graphs.progress import terminal_text

if TYPE_CHECKING:
    from agent.serving.replicas import Served

RAY_HINT = "pip install 'skb-agent[ray]'"


def serve_command(
    index_dir: Annotated[
        Path, typer.Option("--index-dir", help="index directory (built by `skb index`)", envvar="SKB_INDEX_DIR")
    ],
    replicas: Annotated[
        int | None, typer.Option("--replicas", min=1, max=1024, help="fixed number of replicas [default: 1]")
    ] = None,
    min_replicas: Annotated[
        int | None, typer.Option("--min-replicas", min=0, max=1024, help="autoscaling: fewest replicas")
    ] = None,
    max_replicas: Annotated[
        int | None, typer.Option("--max-replicas", min=1, max=1024, help="autoscaling: most replicas")
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option("--ray-address", help="join this Ray cluster (e.g. ray://head:10001 or auto) [default: a local Ray]"),
    ] = None,
    host: Annotated[
        str, typer.Option("--host", help="HTTP bind address; beyond 127.0.0.1 a bearer token is required")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="HTTP port")] = 8000,
    token_file: Annotated[
        Path | None,
        typer.Option("--token-file", help="file holding a bearer token every request must send (or set $SKB_MCP_TOKEN)"),
    ] = None,
    replica_cpus: Annotated[
        float, typer.Option("--replica-cpus", min=0.01, max=256.0, help="CPUs Ray reserves for each replica")
    ] = 1.0,
) -> None:
    """Serve MCP (stateless streamable HTTP at /mcp), POST /ask and GET /health from replicas on Ray Serve."""
    from agent.serving.mcp import SERVER_NAME, bind_http, build_http_app, load_token

    try:
        token = load_token(token_file)
        if token is None:
            from mcp.server import Server

            build_http_app(Server(SERVER_NAME), host=host)  # beyond loopback: the error that says what to do
        if replicas is not None and (min_replicas is not None or max_replicas is not None):
            raise ConfigError("give --replicas N, or --min-replicas A --max-replicas B, not both")
        try:
            serving = importlib.import_module("agent.serving.replicas")
        except ImportError as exc:
            if exc.name is None or not exc.name.startswith("ray"):
                raise
            raise ConfigError(f"`skb serve` runs on Ray Serve, which is not installed: {RAY_HINT}") from exc
        from agent.serving.endpoints import token_digest

        if ray_address is None:
            bind_http(host, port).close()  # a busy port or a bad address fails here, by name, before Ray starts

        scale = serving.Scale(replicas=replicas, min_replicas=min_replicas, max_replicas=max_replicas)
        auth = "bearer token required" if token is not None else "no token: loopback only"

        def ready(served: Served) -> None:
            line = (f"serving {index_dir} on {served.url}: MCP at /mcp, POST /ask, GET /health ({auth}); "
                    "Ctrl-C stops")
            typer.echo(terminal_text(line), err=True)

        served = serving.start(
            index_dir, scale=scale, ray_address=ray_address, host=host, port=port,
            token_sha256=token_digest(token) if token is not None else None, replica_cpus=replica_cpus,
            on_ready=ready,
        )  # fmt: skip
    except SKBError as exc:
        typer.echo(f"error: {terminal_text(exc)}", err=True)
        raise typer.Exit(code=2) from exc
    except (ConnectionError, TimeoutError, RuntimeError) as exc:  # Ray's own: no cluster there, a deploy failed
        where = f"the Ray cluster at {ray_address}" if ray_address else "a local Ray"
        typer.echo(f"error: Ray Serve could not start on {where}: {terminal_text(str(exc))}", err=True)
        raise typer.Exit(code=2) from exc
    try:
        served.wait()
    finally:
        served.stop()
