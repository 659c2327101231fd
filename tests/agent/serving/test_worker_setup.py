"""The hook the serving Ray's processes run first: Ray Serve's replica machinery without pandas."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from typing import Any

import pytest

from agent.serving import replicas
from agent.serving.worker_setup import HOOK, without_pandas


def test_ray_serve_replica_module_loads_without_pandas_after_the_hook() -> None:
    script = (
        "import sys\n"
        "from agent.serving.worker_setup import without_pandas\n"
        "without_pandas()\n"
        "import ray.serve._private.replica\n"
        "from ray.serve._private import utils\n"
        "assert utils.pd is None, 'Ray Serve found pandas'\n"
        "try:\n"
        "    import pandas\n"
        "except ImportError:\n"
        "    print('blocked', len(sys.modules))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("blocked")


def test_the_hook_keeps_a_pandas_already_imported(monkeypatch: pytest.MonkeyPatch) -> None:
    sentinel = object()
    monkeypatch.setitem(sys.modules, "pandas", sentinel)
    without_pandas()
    assert sys.modules["pandas"] is sentinel


def test_the_serving_ray_runs_the_hook_in_its_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}
    monkeypatch.setattr(replicas.ray, "init", lambda **kwargs: seen.update(kwargs))
    replicas.init_ray("ray://cluster:10001")
    assert seen["address"] == "ray://cluster:10001"
    assert seen["runtime_env"] == {"worker_process_setup_hook": HOOK}
    assert "include_dashboard" not in seen  # Ray decides, as it did before
    replicas.init_ray(include_dashboard=False)
    assert seen["address"] is None and seen["include_dashboard"] is False
    module, _, name = HOOK.rpartition(".")
    assert getattr(importlib.import_module(module), name) is without_pandas  # the name Ray imports resolves


def test_the_processes_of_the_serving_ray_run_without_pandas() -> None:
    """A Ray started as `skb serve` starts it (in a process of its own: the tests' Ray is shared)."""
    script = (
        "import sys\n"
        "import ray\n"
        "from agent.serving.replicas import init_ray\n"
        "init_ray()\n"
        "@ray.remote\n"
        "def modules():\n"
        "    import ray.serve._private.utils as utils\n"
        "    return sys.modules.get('pandas', 'absent'), utils.pd\n"
        "try:\n"
        "    print(ray.get(modules.remote(), timeout=120))\n"
        "finally:\n"
        "    ray.shutdown()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300, check=False,
        env={**os.environ, "RAY_ADDRESS": ""},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "(None, None)"  # marked not importable; Ray Serve went without
