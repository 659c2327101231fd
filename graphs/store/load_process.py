"""The embedded graph store loaded from a compact SKB by a process of its own, beside the build's vector stages (and,
where the build asks, the planner's stored tables made there first).

Why: at a million nodes the store's load (the bulk rows made from the compact SKB, the server's inserts and its
save) takes tens of seconds, mostly on one core, and its rows (about 1.2 GB for ten million edges) would sit in the
build process beside the vectors and the HNSW graphs. ``skb index`` writes the compact SKB before the vectors are
made; a spawned process reads it memory-mapped and loads the store while the build embeds, builds the graphs and
BM25, and hands its memory back when it ends. Only the path of the compact files crosses to the process, and only
the seconds it took (or its error) come back.

The planner's tables (``graphs.skb.state.precompute``) read the same compact files, so ``tables`` makes them in this
process before the load: at 1.9M nodes and 39M edges they put the build process past 9 GB, and beside the vectors they
cost the build no wall time.
"""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.connection import Connection
from pathlib import Path

from graphs.errors import StoreError

__all__ = ["StoreLoad", "load_compact"]


def load_compact(skb_dir: Path, data_dir: Path, tables: bool = False) -> dict[str, float]:
    """Load the compact SKB written under ``skb_dir`` into a new FalkorDB data directory ``data_dir`` (saved when it
    returns), with ``tables`` first writing the planner's tables under ``skb_dir``; the seconds of each
    (``tables``, ``store_load``)."""
    from graphs.heap import release_heap
    from graphs.skb.compact import open_compact
    from graphs.skb.state import write_tables
    from graphs.store.falkordb_store import FalkorDBStore

    seconds: dict[str, float] = {}
    if tables:
        t0 = time.perf_counter()
        write_tables(open_compact(skb_dir), skb_dir)
        release_heap()  # the tables' memory goes back before the store's rows are made
        seconds["tables"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    with FalkorDBStore(data_dir) as store:
        store.load(open_compact(skb_dir))
    seconds["store_load"] = time.perf_counter() - t0
    return seconds


def _run(skb_dir: Path, data_dir: Path, tables: bool, reply: Connection) -> None:
    try:
        reply.send(("done", load_compact(skb_dir, data_dir, tables)))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the build, named
        try:
            reply.send(("failed", exc))
        except Exception:  # noqa: BLE001 - an exception that cannot be pickled goes back as its text
            reply.send(("failed", StoreError(f"{type(exc).__name__}: {exc}")))
    finally:
        reply.close()


class StoreLoad:
    """One store load (with ``tables``, the planner's tables first) running in a spawned process: ``result`` waits for
    it, ``stop`` ends it (the build failed)."""

    def __init__(self, skb_dir: Path, data_dir: Path, tables: bool = False) -> None:
        context = multiprocessing.get_context("spawn")  # a fork would copy the build's whole heap, and its threads
        self._reply, sent = context.Pipe(duplex=False)
        self._process = context.Process(target=_run, args=(skb_dir, data_dir, tables, sent), name="skb-store-load",
                                        daemon=True)
        self._process.start()
        sent.close()  # the child holds its end: reading ours sees EOF if it dies without a word
        self._data_dir = data_dir

    def result(self) -> dict[str, float]:
        """The seconds of each step (``tables``, ``store_load``) once it has finished; its own error where it
        failed."""
        try:
            status, value = self._reply.recv()
        except EOFError:
            self._process.join()
            raise StoreError(
                f"the process loading the graph store into {self._data_dir} ended without finishing (exit code "
                f"{self._process.exitcode}); check free memory and disk, then run the build again"
            ) from None
        finally:
            self._reply.close()
        self._process.join()
        if status == "failed":
            raise value
        return dict(value)

    def stop(self) -> None:
        """End the load if it still runs, and wait for it: its files can then be removed. Its graph server stops
        with it (``graphs.store.falkordb_process``)."""
        if self._process.is_alive():
            self._process.terminate()
        self._process.join()
        self._reply.close()
