"""`skb serve`: replicas of the HTTP app (`agent.serving.endpoints`) on Ray Serve, over one index directory.

Why Ray Serve: it places replicas on the cores and machines it has, balances requests over them, checks
their health, restarts one that dies and scales between bounds -- the same code on a laptop and on a
cluster. Each replica is one process with the index open; what can be shared is:

- the index files: opened memory-mapped (`IndexBundle`), so replicas on one machine share the pages;
- the graph server: the serving process starts the index's FalkorDB server once and keeps it running
  (also across rebuilds); replicas attach to it through its state file (waiting a few seconds for it
  rather than starting their own, which would die with them), or all reach the user's Neo4j;
- the trace store: one SQLite file in WAL mode, safe for many writing processes.

A rebuild swapped into the index directory is followed by every replica on its next question
(`IndexBundle` reloads; a question that raced the swap is asked again on the new build), so a new
generation rolls out without dropping requests.

Ray is imported by this module only: the rest of `skb` never pays for it (`skb serve` imports it lazily).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import ray
from ray import serve
from starlette.applications import Starlette

from agent.serving.replica_lost import PROXY_CALLBACK, PROXY_CALLBACK_ENV
from agent.serving.worker_setup import HOOK
from graphs.errors import ConfigError

if TYPE_CHECKING:
    from ray.serve import Deployment

log = logging.getLogger("skb.serve")

APP_NAME = "skb"
DEPLOYMENT_NAME = "SKBReplica"
#: Seconds a replica waits for the serving process's graph server before starting one of its own.
ATTACH_WAIT_S = 20.0
#: Requests one replica works on at once (the rest queue at the proxy); questions are CPU-bound, a few
#: threads per replica keep its core busy while one waits on the graph server.
MAX_ONGOING_REQUESTS = 8
#: Requests queued per deployment before new ones are refused (503): the graph server's queue bound too.
MAX_QUEUED_REQUESTS = 256
#: Environment the replicas get from the serving process (the token never: they hold its digest).
FORWARDED_ENV_PREFIXES = ("SKB_",)
FORWARDED_ENV = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "TOKENIZERS_PARALLELISM")
NOT_FORWARDED = ("SKB_MCP_TOKEN",)
#: glibc's malloc arenas a replica's process may make (its ``MALLOC_ARENA_MAX``, unless the serving process's
#: environment sets one). Why: glibc gives each thread that allocates at once an arena of its own, up to eight per
#: core, and each keeps the memory it once held; a replica's request threads left 30-45 MB of them on HPO, memory no
#: other replica shares (``evals/reports/serve/memory``). Set at the process's start, where glibc reads it.
MALLOC_ARENAS = "2"
#: The longest a request that finds every replica busy waits before Ray Serve's router tries again (its default is
#: 0.5 s). Why: a request beyond a replica's ``MAX_ONGOING_REQUESTS`` retries with a doubling back-off, and the
#: replica that finishes its work idles until the next retry; one replica under 32 clients on HPO answered 10.3
#: questions a second with 0.69 cores busy, and 21.1 with 1.37 at 0.05 s (``evals/reports/serve/hpo``).
ROUTER_MAX_BACKOFF_S = 0.05


@serve.deployment(name="SKBReplica")
@serve.ingress()
class SKBReplica:
    """One copy of the app: the index opened memory-mapped, the tools and agent built once, the app over them."""

    def __init__(self, index_dir: str, host: str, token_sha256: str | None, env: Mapping[str, str]) -> None:
        os.environ.update(env)
        from agent.serving.endpoints import build_serve_app
        from agent.serving.toolkit import SKBToolkit

        self._toolkit = SKBToolkit(Path(index_dir), include_ask=True)
        self._toolkit.bundle.warm_up().join()  # embedder and graph server before the first request
        self._toolkit.graph()  # the agent, compiled once
        context = serve.get_replica_context()
        replica = {"replica": context.replica_id.unique_id if context else "", "pid": os.getpid()}
        self._app = build_serve_app(self._toolkit, host=host, token_sha256=token_sha256, replica=replica)

    def __serve_build_asgi_app__(self) -> Starlette:
        return self._app

    def check_health(self) -> None:
        """Ray Serve's periodic check: the index is still readable (a failure restarts the replica)."""
        _ = self._toolkit.bundle.manifest


@dataclass
class Scale:
    """Fixed replicas, or autoscaling between bounds."""

    replicas: int | None = None
    min_replicas: int | None = None
    max_replicas: int | None = None

    def options(self) -> dict[str, Any]:
        if self.min_replicas is None and self.max_replicas is None:
            return {"num_replicas": self.replicas or 1}
        if self.replicas is not None:
            raise ConfigError("give --replicas or --min-replicas/--max-replicas, not both")
        low, high = self.min_replicas or 1, self.max_replicas or max(1, self.min_replicas or 1)
        if low > high:
            raise ConfigError(f"--min-replicas {low} is above --max-replicas {high}")
        return {"autoscaling_config": {"min_replicas": low, "max_replicas": high,
                                       "target_ongoing_requests": MAX_ONGOING_REQUESTS // 2}}


@dataclass
class Served:
    """A running `skb serve` application; ``stop()`` removes it (and what this process started)."""

    url: str
    index_dir: Path
    started_ray: bool
    graph_server: Any = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _keeper: threading.Thread | None = None

    def stop(self) -> None:
        self._stop.set()
        if self._keeper is not None:
            self._keeper.join(timeout=10)
        with contextlib.suppress(Exception):
            serve.delete(APP_NAME)
        if self.started_ray:
            with contextlib.suppress(Exception):
                serve.shutdown()
            ray.shutdown()
        if self.graph_server is not None:
            self.graph_server.stop()

    def wait(self) -> None:
        """Block until ``stop()`` (another thread) or Ctrl-C."""
        try:
            while not self._stop.wait(1.0):
                pass
        except KeyboardInterrupt:
            pass


def replica_env(index_dir: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """What every replica's environment must hold: one trace store (this index's, by absolute path, unless
    $SKB_TRACE_DB names another), the attach wait for the graph server, and the caller's SKB_ settings."""
    from agent.tracing.tracer import default_trace_db

    env = dict(os.environ if environ is None else environ)
    out = {k: v for k, v in env.items() if (k.startswith(FORWARDED_ENV_PREFIXES) or k in FORWARDED_ENV)}
    for name in NOT_FORWARDED:
        out.pop(name, None)
    trace_db = Path(env["SKB_TRACE_DB"]).expanduser() if env.get("SKB_TRACE_DB") else default_trace_db(index_dir)
    out["SKB_TRACE_DB"] = str(trace_db.absolute())
    out.setdefault("SKB_FALKORDB_ATTACH_WAIT_S", str(ATTACH_WAIT_S))
    return out


def replica_options(replica_cpus: float, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The Ray Serve options of the replicas' deployment, beside its scale: the CPUs a replica reserves, its
    process's malloc arenas (``MALLOC_ARENAS``), the requests it works on and queues, its health check and the
    router's back-off (``ROUTER_MAX_BACKOFF_S``)."""
    from ray.serve.config import RequestRouterConfig

    arenas = (os.environ if environ is None else environ).get("MALLOC_ARENA_MAX", MALLOC_ARENAS)
    return {
        "ray_actor_options": {"num_cpus": replica_cpus, "runtime_env": {"env_vars": {"MALLOC_ARENA_MAX": arenas}}},
        "max_ongoing_requests": MAX_ONGOING_REQUESTS,
        "max_queued_requests": MAX_QUEUED_REQUESTS,
        "health_check_period_s": 5.0,
        # Ray declares the field PositiveFloat, which mypy reads through its pydantic plugin as a dict
        "request_router_config": RequestRouterConfig(max_backoff_s=ROUTER_MAX_BACKOFF_S),  # type: ignore[arg-type]
    }


def _start_graph_server(index_dir: Path) -> Any:
    """The index's FalkorDB server, started (or attached to) by this process; None for other stores."""
    from graphs.bundle_source import live_source
    from graphs.manifest import Manifest
    from graphs.store import FALKORDB_SUBDIR

    manifest = Manifest.read(index_dir)
    store = str(manifest.extra.get("store", "falkordb"))
    if store != "falkordb" or live_source(manifest, store) is not None:
        return None
    from graphs.store.falkordb_server import FalkorDBServer

    return FalkorDBServer(index_dir / FALKORDB_SUBDIR, persist=False, attach_wait_s=0).start()


def _keep_graph_server(served: Served, period_s: float = 0.5) -> None:
    """Keep one graph server up for the replicas: a rebuild stops the previous build's server, and the next
    check starts the new build's (replicas waiting to attach find it)."""
    server = served.graph_server
    while not served._stop.wait(period_s):
        try:
            server.ensure_running()
        except Exception as exc:  # noqa: BLE001 -- an index mid-swap; the next check tries again
            log.warning("graph server for %s not running: %s", served.index_dir, exc)


def proxy_env() -> None:
    """Have the HTTP proxies of a Ray started after this call answer a request whose replica died with a clear 503
    (`agent.serving.replica_lost`). Ray Serve reads the setting in each proxy's process, which inherits the
    environment of the Ray that this process starts; a cluster started with ``ray start`` needs it in that
    command's environment."""
    os.environ.setdefault(PROXY_CALLBACK_ENV, PROXY_CALLBACK)


def init_ray(address: str | None = None, *, include_dashboard: bool | None = None) -> None:
    """Start (or join, at ``address``) the Ray that serves: its proxies answer for a dead replica
    (``proxy_env``), and the processes of this job skip pandas (``agent.serving.worker_setup``).
    ``include_dashboard``: as ``ray.init`` takes it (None: Ray decides; the load study turns it off)."""
    proxy_env()
    extra: dict[str, Any] = {} if include_dashboard is None else {"include_dashboard": include_dashboard}
    ray.init(address=address, log_to_driver=False, configure_logging=False,
             runtime_env={"worker_process_setup_hook": HOOK}, **extra)  # fmt: skip


def _reclaim_sigterm() -> None:
    """Give SIGTERM back to Python's handler (Ray's: exit, so ``finally`` blocks run and ``Served.stop`` removes
    the app, Ray and the graph server). Ray's core installs a crash handler over it that prints a stack and
    kills the process at once, which left Ray's agents running without their node."""
    if threading.current_thread() is threading.main_thread():
        handler = signal.getsignal(signal.SIGTERM)
        if callable(handler):
            signal.signal(signal.SIGTERM, handler)


def start(
    index_dir: Path,
    *,
    scale: Scale | None = None,
    ray_address: str | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    token_sha256: str | None = None,
    replica_cpus: float = 1.0,
    on_ready: Callable[[Served], None] | None = None,
) -> Served:
    """Open the index's graph server, start Ray Serve (joining ``ray_address`` when given, else the Ray this
    process already runs, else a local one) and deploy the replicas; returns once they all answer."""
    from graphs.bundle import IndexBundle

    index_dir = Path(index_dir).absolute()
    scale = scale or Scale(replicas=1)
    deployment_options = scale.options()
    IndexBundle.open(index_dir).close()  # a missing or damaged index fails here, by name, before Ray starts
    graph_server = _start_graph_server(index_dir)
    started_ray = False
    try:
        if not ray.is_initialized():
            init_ray(ray_address)
            started_ray = True
            _reclaim_sigterm()
        serve.start(http_options={"host": host, "port": port}, logging_config={"log_level": "WARNING"})
        deployment = cast("Deployment", SKBReplica).options(**replica_options(replica_cpus), **deployment_options)
        app = deployment.bind(str(index_dir), host, token_sha256, replica_env(index_dir))
        serve.run(app, name=APP_NAME, route_prefix="/", blocking=False)
    except BaseException:
        if started_ray:
            with contextlib.suppress(Exception):
                serve.shutdown()
            ray.shutdown()
        if graph_server is not None:
            graph_server.stop()
        raise
    served = Served(url=f"http://{host}:{port}", index_dir=index_dir, started_ray=started_ray,
                    graph_server=graph_server)
    if graph_server is not None:
        served._keeper = threading.Thread(target=_keep_graph_server, args=(served,), name="skb-graph-keeper",
                                          daemon=True)
        served._keeper.start()
    if on_ready is not None:
        on_ready(served)
    return served


def replica_pids() -> list[int]:
    """The process ids of the running replicas (for the load study's memory readings and the tests)."""
    pids: list[int] = []
    actors = ray.util.list_named_actors(all_namespaces=True)
    for entry in actors:
        name = entry["name"] if isinstance(entry, dict) else str(entry)
        if DEPLOYMENT_NAME not in name:
            continue
        namespace = entry.get("namespace") if isinstance(entry, dict) else None
        with contextlib.suppress(Exception):  # a replica that died since the listing is not running
            handle = ray.get_actor(name, namespace=namespace)
            pid: Any = ray.get(handle.__ray_call__.remote(lambda _self: os.getpid()), timeout=10)
            pids.append(int(pid))
    return sorted(pids)


def running_replicas() -> int:
    """How many replicas Ray Serve reports RUNNING (started and passing their health checks)."""
    app = serve.status().applications.get(APP_NAME)
    deployment = app.deployments.get(DEPLOYMENT_NAME) if app is not None else None
    if deployment is None:
        return 0
    return sum(n for state, n in deployment.replica_states.items() if str(state).endswith("RUNNING"))


def wait_for_replicas(count: int, timeout_s: float = 90.0) -> None:
    """Wait until ``count`` replicas run (after a restart or an upscale); TimeoutError naming the count otherwise."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if running_replicas() >= count:
            return
        time.sleep(0.5)
    raise TimeoutError(f"{running_replicas()} of {count} replicas running after {timeout_s:.0f} s")


__all__ = ["APP_NAME", "SKBReplica", "Scale", "Served", "init_ray", "proxy_env", "replica_env", "replica_pids", "running_replicas", "start",
           "wait_for_replicas"]
