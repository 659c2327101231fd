"""The embedded graph store loaded from a compact SKB by a process of its own, beside the build's vector stages.

Why: at a million nodes the store's load (the bulk rows made from the compact SKB, the server's inserts and its
save) takes tens of seconds, mostly on one core, and its rows (about 1.2 GB for ten million edges) would sit in the
build process beside the vectors and the HNSW graphs. ``skb index`` writes the compact SKB before the vectors are
made; a spawned process reads it memory-mapped and loads the store while the build embeds, builds the graphs and
BM25, and hands its memory back when it ends. Only the path of the compact files crosses to the process, and only
the seconds it took (or its error) come back.
"""

from __future__ import annotations

import multiprocessing
import time
from multiprocessing.connection import Connection
from pathlib import Path

from graphs.errors import StoreError

__all__ = ["StoreLoad", "load_compact"]


def load_compact(skb_dir: Path, data_dir: Path) -> float:
    """Load the compact SKB written under ``skb_dir`` into a new FalkorDB data directory ``data_dir`` (saved when it
    returns); the seconds it took."""
    from graphs.skb.compact import open_compact
    from graphs.store.falkordb_store import FalkorDBStore

    t0 = time.perf_counter()
    with FalkorDBStore(data_dir) as store:
        store.load(open_compact(skb_dir))
    return time.perf_counter() - t0


def _run(skb_dir: Path, data_dir: Path, reply: Connection) -> None:
    try:
        reply.send(("done", load_compact(skb_dir, data_dir)))
    except BaseException as exc:  # noqa: BLE001 - every failure goes back to the build, named
        try:
            reply.send(("failed", exc))
        except Exception:  # noqa: BLE001 - an exception that cannot be pickled goes back as its text
            reply.send(("failed", StoreError(f"{type(exc).__name__}: {exc}")))
    finally:
        reply.close()


class StoreLoad:
    """One store load running in a spawned process: ``result`` waits for it, ``stop`` ends it (the build failed)."""

    def __init__(self, skb_dir: Path, data_dir: Path) -> None:
        context = multiprocessing.get_context("spawn")  # a fork would copy the build's whole heap, and its threads
        self._reply, sent = context.Pipe(duplex=False)
        self._process = context.Process(target=_run, args=(skb_dir, data_dir, sent), name="skb-store-load",
                                        daemon=True)
        self._process.start()
        sent.close()  # the child holds its end: reading ours sees EOF if it dies without a word
        self._data_dir = data_dir

    def result(self) -> float:
        """The load's seconds once it has finished; its own error where it failed."""
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
        return float(value)

    def stop(self) -> None:
        """End the load if it still runs, and wait for it: its files can then be removed. Its graph server stops
        with it (``graphs.store.falkordb_process``)."""
        if self._process.is_alive():
            self._process.terminate()
        self._process.join()
        self._reply.close()
