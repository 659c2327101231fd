"""Who may talk to a managed FalkorDB server, and how: the ACL of its one user, the per-start password
beside the data, and a client connection without retries.

Why a room of its own: the port is reachable by every local user, so the allow-list of commands and the
password handling are the server's security boundary; the lifecycle only writes and reads them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

HOST = "127.0.0.1"
SECRET_FILE = "falkordb.secret"  # the password, mode 0600
ACL_FILE = "falkordb.acl"  # users and their rights (password as SHA-256 only), mode 0600
USERNAME = "skb"

# The only commands our user may run (allow-list; the `default` user may run none).
# GRAPH.UDF (loads code), GRAPH.RESTORE/COPY/EFFECT/DEBUG and all admin
# commands except the three below stay refused.
ALLOWED_COMMANDS = (
    "ping", "info", "config|get", "save", "shutdown",
    "graph.query", "graph.ro_query", "graph.delete", "graph.list", "graph.explain",
    "graph.profile", "graph.info", "graph.memory", "graph.slowlog", "graph.constraint",
)  # fmt: skip

LOAD_COMMANDS = ("graph.bulk",)
"""Allowed only on a server that builds (``persist=True``): the binary bulk load
(``graphs.store.falkordb_bulk``), whose bytes the server trusts. A served index's server refuses it."""


def _no_retry() -> Retry:
    """redis-py retries with backoff by default: a dead server would cost seconds per call, and
    a retried write could apply twice. We detect and restart dead servers ourselves."""
    return Retry(NoBackoff(), 0)


def acl_text(password: str, *, load: bool = False) -> str:
    """The ACL file for a server whose one user `USERNAME` authenticates with `password`
    (``load``: the user may also run LOAD_COMMANDS)."""
    digest = hashlib.sha256(password.encode("utf-8")).hexdigest()
    allowed = " ".join(f"+{c}" for c in ALLOWED_COMMANDS + (LOAD_COMMANDS if load else ()))
    return (
        "user default off resetpass resetkeys resetchannels -@all\n"
        f"user {USERNAME} on #{digest} ~* resetchannels -@all +@connection -@dangerous {allowed}\n"
    )


def read_password(data_dir: Path) -> str | None:
    """The password of the server serving `data_dir`, or None where there is none (or it is not ours)."""
    try:
        return (Path(data_dir) / SECRET_FILE).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def connect(port: int, password: str | None, *, socket_timeout: float | None = 30.0, **kw: Any) -> redis.Redis:
    """A plain redis client for our user on `port` (no retries: see _no_retry)."""
    return redis.Redis(
        host=HOST,
        port=port,
        username=USERNAME if password else None,
        password=password,
        socket_timeout=socket_timeout,
        retry=_no_retry(),
        **kw,
    )
