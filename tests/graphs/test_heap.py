"""Tables that grow with the graph are not walked by the garbage collector: after a question, no container
the collector still tracks holds one entry per node (keys, labels) or a list of node keys (the scoring
models' targets and terms, the lexicon's rows). A full collection visits every element of every tracked
container, so such tables made each collection, and the question it interrupts, slower as the graph grew."""

from __future__ import annotations

import gc
from pathlib import Path

from agent.api import ask
from agent.config import AgentConfig
from graphs.bundle import IndexBundle
from graphs.heap import one_copy, table, untracked_meta
from tools.common import embedding_matrix


def test_read_only_tables_are_tuples_and_json_metas_hold_them() -> None:
    values = ["a", "b"]
    assert table(values) == ("a", "b") and table(tup := ("x",)) is tup
    meta = untracked_meta({"keys": ["n1", "n2"], "nested": {"by": ["x"]}, "rows": [["a"], ["b"]], "n": 2})
    assert meta == {"keys": ("n1", "n2"), "nested": {"by": ("x",)}, "rows": [["a"], ["b"]], "n": 2}


def _per_node_lists(keys: set[str], labels: set[str]) -> dict[int, int]:
    """id -> length of each list the collector tracks that holds node keys only, or one label per node."""
    n = len(keys)
    return {
        id(obj): len(obj)
        for obj in gc.get_objects()  # tracked objects only
        if type(obj) is list
        and len(obj) >= min(50, n // 2)
        and all(type(item) is str for item in obj)
        and (all(item in keys for item in obj) or (len(obj) == n and set(obj) <= labels))
    }


def test_no_tracked_container_holds_a_per_node_table_after_a_question(
    hpo_index_dir: Path, hpo_bundle: IndexBundle
) -> None:
    keys, labels = set(hpo_bundle.skb.nodes), set(hpo_bundle.skb.labels())
    gc.collect()
    before = _per_node_lists(keys, labels)  # other tests' in-memory SKBs and models
    bundle = IndexBundle.open(hpo_index_dir)
    try:
        ask("Which disease is characterized by seizures and microcephaly?", bundle=bundle, config=AgentConfig())
        gc.collect()
        offenders = {i: n for i, n in _per_node_lists(keys, labels).items() if i not in before}
        assert not offenders
    finally:
        bundle.close()


def _rss_mb() -> float:
    with open("/proc/self/status", encoding="utf-8") as fh:
        return next(int(line.split()[1]) / 1024 for line in fh if line.startswith("VmRSS:"))


def test_memory_freed_below_a_live_block_goes_back_to_the_system() -> None:
    """glibc keeps freed blocks below one that is still alive; ``give_back_freed_memory`` returns them."""
    import sys

    from graphs.heap import give_back_freed_memory

    if not sys.platform.startswith("linux"):
        assert give_back_freed_memory() is False
        return
    blocks = [bytes(4000) + bytes([i % 251]) for i in range(50_000)]  # ~200 MB from malloc (over pymalloc's 512 B)
    alive = blocks[-1]
    del blocks
    gc.collect()
    before = _rss_mb()
    assert give_back_freed_memory() is True
    assert before - _rss_mb() > 100, (before, _rss_mb())
    assert len(alive) == 4001


def test_paused_gc_stops_automatic_collections_and_restores_the_callers_state() -> None:
    """Inside the block no automatic collection runs however many objects are made, and an explicit one
    skips what was alive at its start; on leaving it the collector is as the caller had it (enabled, or
    disabled by the caller, or after an error; objects the caller froze stay frozen)."""
    from graphs.heap import paused_gc

    assert gc.isenabled() and gc.get_freeze_count() == 0
    before = [[i] for i in range(1000)]
    with paused_gc():
        assert gc.get_freeze_count() >= len(before)  # an explicit collection inside does not visit them
        cycle: list[object] = []
        cycle.append(cycle)
        del cycle
        assert gc.collect() >= 1  # what the block made is still collected
    assert gc.get_freeze_count() == 0
    gc.freeze()
    frozen = gc.get_freeze_count()
    try:
        with paused_gc():
            made = [[i] for i in range(1000)]
            with paused_gc():  # would freeze ``made`` if the caller's freeze were not left alone
                assert gc.get_freeze_count() <= frozen < frozen + len(made)
        assert 0 < gc.get_freeze_count() <= frozen
    finally:
        gc.unfreeze()
    runs: list[str] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            runs.append(phase)

    gc.callbacks.append(count)
    try:
        with paused_gc():
            kept = [[i] for i in range(50_000)]  # far past the first generation's threshold (700)
            assert not gc.isenabled() and runs == []
            with paused_gc():
                pass
            assert not gc.isenabled()  # a nested block leaves the outer pause in place
        assert gc.isenabled() and len(kept) == 50_000
        [[i] for i in range(50_000)]
        assert runs, "collections run again after the block"
    finally:
        gc.callbacks.remove(count)
    gc.disable()
    try:
        with paused_gc():
            pass
        assert not gc.isenabled()  # the caller's own disable is kept
    finally:
        gc.enable()
    try:
        with paused_gc():
            raise ValueError("boom")
    except ValueError:
        pass
    assert gc.isenabled()


def test_an_opened_index_holds_one_table_of_keys_and_one_string_per_label(hpo_index_dir: Path) -> None:
    bundle = IndexBundle.open(hpo_index_dir)
    try:
        keys = bundle.skb.node_keys()
        assert bundle.hnsw.keys is keys and bundle.bm25.keys is keys  # the SKB's table, not two more copies
        rows = bundle.skb.key_positions()  # and one key -> row dictionary of it
        assert bundle.hnsw.key_positions() is rows and bundle.bm25.key_positions() is rows
        assert embedding_matrix(bundle).row is rows
        for index in (bundle.hnsw, bundle.bm25):
            assert len({id(label) for label in index.labels}) == len(set(index.labels))
        some = keys[len(keys) // 2]
        assert some in bundle.hnsw and "no such key" not in bundle.hnsw
        assert bundle.hnsw.vector(some).shape == (bundle.hnsw.dim,)
        name = bundle.skb.nodes[some].name
        assert some in [h.key for h in bundle.search(name, mode="bm25", k=20)]  # the shared tables still answer
        assert some in [h.key for h in bundle.search(name, mode="vss", k=20)]
        # another order (an index not built beside this SKB) keeps its own table
        assert not bundle.bm25.share_keys(tuple(reversed(keys)), {}) and bundle.bm25.keys is keys
    finally:
        bundle.close()


def test_one_copy_keeps_order_and_values() -> None:
    values = [str(n % 3) * 2 for n in range(30)]
    held = one_copy(values)
    assert list(held) == values and len({id(v) for v in held}) == 3
