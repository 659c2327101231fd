"""Index integrity: atomic builds, interrupted builds, tampered files, readers during a rebuild.

- A build that fails late (or is SIGKILLed mid-way) leaves the previous index usable, and the
  debris of a killed build (temp dir, orphaned FalkorDB server) is cleaned by the next build.
- A tampered file is refused at load with IndexCorruptError naming it.
- Readers keep working while a rebuild swaps the directory: open bundles (SKB/HNSW/BM25 in memory,
  FalkorDB reconnected to the new graph), fresh ``IndexBundle.open`` calls (never a missing or
  half-swapped index), and no leaked server processes.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from graphs.build import IndexConfig, build_index
from graphs.bundle import IndexBundle
from graphs.errors import IndexCorruptError
from graphs.index_dir import clean_stale_builds
from graphs.skb.model import SKB
from tests.paths import FIXTURES, REPO
from tests.reliability_support import copy_index, falkordb_children, within
from tools import make_tools

pytestmark = pytest.mark.integration

FIXTURE = FIXTURES / "hpo_mini"


def usable(index_dir: Path, dataset: str = "hpo") -> None:
    """The index opens with checksums verified and answers lexical, dense and graph queries."""
    with IndexBundle.open(index_dir) as bundle:
        assert bundle.manifest.dataset == dataset
        assert "Apert" in bundle.search("Apert syndrome", mode="bm25")[0].name
        assert bundle.search("Apert syndrome", mode="vss")
        assert bundle.store.count_nodes() == len(bundle.skb.nodes)


def test_a_late_build_failure_keeps_the_previous_index(
    hpo_index_dir: Path, hpo_mini_skb: SKB, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    index_dir = copy_index(hpo_index_dir, tmp_path / "index")
    baseline = len(falkordb_children())

    def full_disk(self: Any, index_dir: Path) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("graphs.manifest.Manifest.write", full_disk)
    with pytest.raises(OSError, match="No space"):
        build_index(hpo_mini_skb, index_dir, IndexConfig(dataset="rebuilt"))
    monkeypatch.undo()
    assert not list(tmp_path.glob(".index.tmp-*")) and not list(tmp_path.glob(".index.old-*"))
    assert len(falkordb_children()) == baseline  # the temp build's server was stopped
    usable(index_dir)


def test_a_killed_build_leaves_the_old_index_and_its_debris_is_cleaned(hpo_index_dir: Path, tmp_path: Path) -> None:
    index_dir = copy_index(hpo_index_dir, tmp_path / "index")
    marker = tmp_path / "loading"
    script = textwrap.dedent(
        f"""
        import time
        from pathlib import Path
        from graphs.build import IndexConfig, build_index
        from graphs.loaders.hpo import load_hpo

        def progress(stage, done, total):
            if stage == "store" and done > 0:
                Path({str(marker)!r}).write_text("x")
                time.sleep(600)  # killed here, halfway through loading the graph

        build_index(load_hpo(Path({str(FIXTURE)!r})), Path({str(index_dir)!r}),
                    IndexConfig(dataset="half", embed_batch=16), progress=progress)
        """
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, env=env)
    try:
        deadline = time.monotonic() + 300
        while not marker.exists():
            assert proc.poll() is None, "the build subprocess ended before reaching the store stage"
            assert time.monotonic() < deadline, "the build subprocess never reached the store stage"
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    debris = tmp_path / f".index.tmp-{proc.pid}"
    assert debris.is_dir()
    state = json.loads((debris / "falkordb" / "falkordb.json").read_text())
    orphan = int(state["pid"])
    os.kill(orphan, 0)  # its FalkorDB server outlived it (own session): this is what cleaning is for

    usable(index_dir)  # the previous index is untouched

    assert clean_stale_builds(index_dir) == [debris]
    assert not debris.exists()
    for _ in range(200):
        try:
            os.kill(orphan, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"orphaned FalkorDB server {orphan} still running after clean_stale_builds")


@pytest.mark.parametrize(
    ("target", "damage"),
    [
        ("bm25", lambda p: p.write_bytes(p.read_bytes()[:-1] + bytes([p.read_bytes()[-1] ^ 1]))),
        ("hnsw", lambda p: p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])),
        ("skb", lambda p: p.unlink()),
    ],
    ids=["bit-flip", "truncated", "missing"],
)
def test_tampered_files_are_refused_at_load(hpo_index_dir: Path, tmp_path: Path, target: str, damage: Any) -> None:
    index_dir = copy_index(hpo_index_dir, tmp_path / "index")
    victim = min(p for p in (index_dir / target).iterdir() if p.is_file())
    damage(victim)
    with pytest.raises(IndexCorruptError, match=victim.name):
        IndexBundle.open(index_dir)


def test_a_garbled_manifest_is_refused(hpo_index_dir: Path, tmp_path: Path) -> None:
    index_dir = copy_index(hpo_index_dir, tmp_path / "index")
    (index_dir / "manifest.json").write_text('{"format_version": 1, "files": ')
    with pytest.raises(IndexCorruptError, match="manifest.json"):
        IndexBundle.open(index_dir)


def test_readers_keep_working_while_a_rebuild_swaps_the_index(
    hpo_index_dir: Path, hpo_mini_skb: SKB, tmp_path: Path
) -> None:
    index_dir = copy_index(hpo_index_dir, tmp_path / "index")
    baseline = len(falkordb_children())
    live = IndexBundle.open(index_dir)
    search_nodes = {t.name: t for t in make_tools(live)}["search_nodes"]
    assert json.loads(search_nodes.invoke({"keys": ["OMIM:101200"]}))["neighbors"]
    stop = threading.Event()
    errors: list[str] = []
    counts = {"search": 0, "expand": 0, "open": 0}
    lock = threading.Lock()

    def note(kind: str) -> None:
        with lock:
            counts[kind] += 1

    def searcher() -> None:
        while not stop.is_set():
            try:
                assert "Apert" in live.search("Apert syndrome", mode="hybrid")[0].name
                note("search")
                out = json.loads(search_nodes.invoke({"keys": ["OMIM:101200"], "question": "skull"}))
                assert out.get("neighbors"), out
                note("expand")
            except Exception as exc:  # noqa: BLE001 - collected and reported below
                errors.append(f"live reader: {type(exc).__name__}: {exc}")

    def opener() -> None:
        while not stop.is_set():
            try:
                with IndexBundle.open(index_dir) as fresh:
                    assert "Apert" in fresh.search("Apert syndrome", mode="bm25")[0].name
                note("open")
            except Exception as exc:  # noqa: BLE001 - collected and reported below
                errors.append(f"opener: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=f, daemon=True) for f in (searcher, searcher, opener)]
    for thread in threads:
        thread.start()
    try:
        within(600, lambda: build_index(hpo_mini_skb, index_dir, IndexConfig(dataset="rebuilt")), "rebuild")
        seen = dict(counts)
        end = time.monotonic() + 60  # keep reading after the swap until each reader ran again
        while time.monotonic() < end and not all(counts[k] > seen[k] + 1 for k in counts):
            time.sleep(0.05)
    finally:
        stop.set()
        for thread in threads:
            thread.join(120)
    assert errors == [], errors[:5]
    assert all(counts[k] > seen[k] + 1 for k in counts), counts  # readers ran before and after the swap
    with IndexBundle.open(index_dir) as fresh:
        assert fresh.manifest.dataset == "rebuilt"
    assert live.manifest.dataset == "rebuilt" and live.reloads == 1  # the live bundle followed the rebuild once
    # the live bundle's store now serves the new graph (its old server was stopped by the swap)
    assert live.store.count_nodes() == len(hpo_mini_skb.nodes)
    live.close()
    assert len(falkordb_children()) == baseline
    assert not list(tmp_path.glob(".index.*"))
