"""A total deadline for the planner's HTTP calls, which no dripping response can extend.

Why: httpx's timeouts are per socket operation. A server that sends one byte a second never trips a
60 s read timeout, so a reply that keeps arriving held a question for as long as the server liked
(``max_wall_s`` included). Here every connect, read and write of the model's HTTP client gets at most
the time left before the call's deadline (``total_deadline``), and none starts once it has passed; the
client sees an ordinary ``httpx.ReadTimeout`` (``openai.APITimeoutError``), so the planner's timeout
handling applies unchanged. The deadline is per thread: a call's reads run in the thread that made it.

The clamp lives in the network backend of the client's connection pools (``httpcore``), the one layer
that sees every socket operation, headers and body alike; httpx has no public hook for it, so
``deadline_http_client`` fails loudly, not silently, if that layer changes shape.
"""

from __future__ import annotations

import ssl
import threading
import time
import typing
from collections.abc import Iterable, Iterator
from contextlib import contextmanager

import httpcore
import httpx

_local = threading.local()


@contextmanager
def total_deadline(seconds: float | None) -> Iterator[None]:
    """Within the block, the model client's socket operations (this thread's) end by ``seconds`` from now.

    ``None`` leaves the per-operation timeouts alone. Nested blocks restore the outer deadline on exit.
    """
    previous = getattr(_local, "deadline", None)
    _local.deadline = None if seconds is None else time.monotonic() + seconds
    try:
        yield
    finally:
        _local.deadline = previous


def _clamp(timeout: float | None, exc: type[Exception]) -> float | None:
    """The operation's timeout cut to the time left; ``exc`` when none is left."""
    deadline: float | None = getattr(_local, "deadline", None)
    if deadline is None:
        return timeout
    left = deadline - time.monotonic()
    if left <= 0:
        raise exc("the call's total deadline passed (a slow or dripping response)")
    return left if timeout is None else min(timeout, left)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _clamp(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _clamp(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: ssl.SSLContext, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, _clamp(timeout, httpcore.ConnectTimeout)))

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.NetworkStream:
        stream = self._inner.connect_tcp(host, port, _clamp(timeout, httpcore.ConnectTimeout), local_address, socket_options)
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None
    ) -> httpcore.NetworkStream:
        return _DeadlineStream(self._inner.connect_unix_socket(path, _clamp(timeout, httpcore.ConnectTimeout), socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def _clamped(transport: httpx.BaseTransport) -> None:
    pool = getattr(transport, "_pool", None)
    backend = getattr(pool, "_network_backend", None)
    if not isinstance(backend, httpcore.NetworkBackend):
        raise TypeError(
            f"cannot put a total deadline on {type(transport).__name__}: its connection pool has no network backend "
            "(httpx/httpcore changed shape); pin httpx<0.29 / httpcore<2 or update agent.llm.deadline"
        )
    if not isinstance(backend, _DeadlineBackend):
        pool._network_backend = _DeadlineBackend(backend)  # type: ignore[union-attr]


def deadline_http_client(timeout_s: float) -> httpx.Client:
    """An httpx client for the model whose calls honour ``total_deadline`` (proxy transports included)."""
    client = httpx.Client(
        transport=httpx.HTTPTransport(),
        timeout=timeout_s,
        follow_redirects=True,
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=20),
    )
    _clamped(client._transport)
    for mounted in client._mounts.values():
        if mounted is not None:
            _clamped(mounted)
    return client
