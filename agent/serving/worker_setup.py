"""What each process of the Ray that `skb serve` starts runs first (Ray's ``worker_process_setup_hook``).

Ray Serve's replica module imports pandas if it is installed, only to encode a reply that is a pandas
DataFrame; our replicas reply JSON built from dictionaries. pandas (with the pyarrow it loads) costs every
replica about 28 MB of memory of its own (a Ray Serve replica: 113 MB before it imports anything of ours,
85 MB without pandas), memory that replicas on one machine do not share. The hook marks pandas as not
importable in the Ray processes `skb serve` starts, before Ray Serve's modules load; Ray Serve then goes on
as it does where pandas is not installed.

Only the Ray that `skb serve` starts itself gets the hook: a Ray the caller started (or a cluster's) keeps
its processes as they are, and the index build's Ray (Ray Data needs pandas) never gets it.

This module imports nothing: Ray imports it in each new worker, before anything else of ours.
"""

from __future__ import annotations

import sys

__all__ = ["HOOK", "without_pandas"]

#: Ray's name for the hook (``runtime_env={"worker_process_setup_hook": HOOK}`` in ``ray.init``).
HOOK = "agent.serving.worker_setup.without_pandas"


def without_pandas() -> None:
    """Make ``import pandas`` raise ImportError in this process, unless it was imported already."""
    if "pandas" not in sys.modules:
        sys.modules["pandas"] = None  # type: ignore[assignment]  # Python's marker for "not importable"
