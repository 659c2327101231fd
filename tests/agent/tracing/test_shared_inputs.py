"""A step's inputs stored once per trace: references in the database, whole values for every reader."""

from __future__ import annotations

import json
import sqlite3
import zlib
from pathlib import Path
from typing import Any

import pytest

from agent.api import build_agent
from agent.tracing.runs import TraceRun
from agent.tracing.shared_inputs import MIN_SHARED_CHARS, SAME_AS, TraceInputs, resolve
from agent.tracing.tracer import LocalTracer

QUESTION = "Which disease is characterized by brachyturricephaly, proptosis and midface retrusion?"


def _run(run_id: str, inputs: Any) -> TraceRun:
    return TraceRun.model_validate({
        "id": run_id, "trace_id": "t", "dotted_order": run_id, "name": run_id, "run_type": "chain",
        "status": "success", "start_time": "2026-01-01T00:00:00+00:00", "inputs": inputs,
    })  # fmt: skip


def test_an_unchanged_value_is_stored_once_and_read_back_whole() -> None:
    shared = TraceInputs()
    pool = {f"node{i}": {"score": i / 10, "why": "x" * 20} for i in range(40)}
    first = shared.encode("t", "r1", {"pool": pool, "step": 1})
    second = shared.encode("t", "r2", {"pool": pool, "step": 2})
    changed = shared.encode("t", "r3", {"pool": {**pool, "node99": {"score": 1.0}}, "step": 2})
    other_trace = shared.encode("u", "r4", {"pool": pool, "step": 2})
    assert first is not None and second is not None and changed is not None and other_trace is not None
    assert len(json.dumps(pool)) > MIN_SHARED_CHARS
    assert json.loads(second) == {"pool": {SAME_AS: "r1"}, "step": 2}  # small values stay as they are
    assert "node99" in json.loads(changed)["pool"] and json.loads(other_trace)["pool"] == pool
    runs = [_run(rid, json.loads(text)) for rid, text in (("r1", first), ("r2", second), ("r3", changed))]
    resolve(runs)
    assert runs[1].inputs == {"pool": pool, "step": 2} and runs[2].inputs["pool"]["node99"] == {"score": 1.0}


def test_a_reference_to_a_run_the_trace_lost_reads_as_missing_and_non_text_keys_are_not_shared() -> None:
    runs = [_run("r2", {"pool": {SAME_AS: "r1"}, "step": 2})]
    resolve(runs)
    assert "no longer holds" in runs[0].inputs["pool"] and runs[0].inputs["step"] == 2
    assert TraceInputs().encode("t", "r1", {1: "x"}) is None and TraceInputs().encode("t", "r1", ["x"]) is None
    shared = TraceInputs(max_traces=2)
    for trace in ("a", "b", "c"):
        shared.encode(trace, "r", {"v": "y" * MIN_SHARED_CHARS})
    assert list(shared._traces) == ["b", "c"]
    shared.forget("b")
    assert list(shared._traces) == ["c"]


class _WholeInputs(LocalTracer):
    """A tracer that stores every step's inputs in full: what the shared encoding must read back as."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self._trace_inputs.encode = lambda *_args: None  # type: ignore[method-assign]


@pytest.fixture(scope="module")
def agent_graph(hpo_bundle: Any) -> Any:
    return build_agent(bundle=hpo_bundle)


def _stored_chars(db: Path) -> tuple[int, int]:
    chars = refs = 0
    with sqlite3.connect(db) as conn:
        for (value,) in conn.execute("SELECT inputs FROM runs WHERE inputs IS NOT NULL"):
            text = zlib.decompress(value).decode("utf-8") if isinstance(value, bytes) else value
            chars += len(text)
            refs += text.count(SAME_AS)
    return chars, refs


def test_an_agent_runs_steps_read_back_with_the_inputs_they_saw(agent_graph: Any, tmp_path: Path) -> None:
    """The same run traced twice, with references and in full: every run reads back with equal inputs, and the
    database with references holds far less."""
    shared, whole = LocalTracer(tmp_path / "shared.sqlite"), _WholeInputs(tmp_path / "whole.sqlite")
    agent_graph.invoke({"question": QUESTION}, {"callbacks": [shared, whole]})
    shared.flush()
    whole.flush()
    assert shared.errors == [] and whole.errors == []
    [summary] = shared.store.list_traces()
    got = {run.id: run.inputs for _, run in shared.store.get_tree(summary.id).walk()}
    want = {run.id: run.inputs for _, run in whole.store.get_tree(summary.id).walk()}
    assert got == want and len(got) > 10
    assert SAME_AS not in json.dumps(got)
    shared_chars, refs = _stored_chars(tmp_path / "shared.sqlite")
    whole_chars, none = _stored_chars(tmp_path / "whole.sqlite")
    assert refs > 0 and none == 0 and shared_chars < 0.7 * whole_chars
    assert shared._trace_inputs._traces == {}  # the trace ended: nothing of it is kept
