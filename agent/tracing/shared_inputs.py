"""A step's inputs stored once per trace: a state value a later step sees unchanged is kept as a reference.

Why: a LangGraph node's inputs are the whole graph state, and most of it (the candidate pool, the scratchpad of
tool results) passes through every node of a question unchanged. Stored in full at each node, one HPO question
wrote about 1.6 MB of JSON (0.9 MB this way), all of it compressed and stored on a core the agent also uses. The writer keeps, per
open trace, the encoded text of each state key and the run that stored it; a later run of the same trace whose
value encodes to the same text stores ``{"$same_as_run": "<run id>"}`` in its place, and `resolve` puts the value
back when a trace is read. Texts are compared in full (no digest that data from a graph could make collide).
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any

from agent.tracing.runs import TraceRun
from agent.tracing.serialise import MAX_PAYLOAD_CHARS, _dump_payload

SAME_AS = "$same_as_run"
#: Values shorter than this are stored as they are: a reference would save little and read worse.
MIN_SHARED_CHARS = 512
#: Open traces whose texts are kept (a server answers a few questions at once; the oldest is forgotten first).
MAX_TRACES = 64


class TraceInputs:
    """Per open trace, each state key's last stored text and the run that stored it."""

    def __init__(self, max_traces: int = MAX_TRACES) -> None:
        self.max_traces = max_traces
        self._lock = threading.Lock()
        self._traces: OrderedDict[str, dict[str, tuple[str, str]]] = OrderedDict()

    def encode(self, trace_id: str, run_id: str, inputs: Any) -> str | None:
        """``inputs`` as JSON with the values an earlier run of the trace stored as references; None where
        this does not apply (not a mapping of text keys, or too large: the caller encodes it whole)."""
        if not isinstance(inputs, Mapping) or not inputs or not all(isinstance(k, str) for k in inputs):
            return None
        texts = {key: _dump_payload(value) or "null" for key, value in inputs.items()}
        if sum(map(len, texts.values())) > MAX_PAYLOAD_CHARS:
            return None
        with self._lock:
            seen = self._traces.get(trace_id)
            if seen is None:
                seen = self._traces[trace_id] = {}
                while len(self._traces) > self.max_traces:
                    self._traces.popitem(last=False)
            parts = []
            for key, text in texts.items():
                held = seen.get(key)
                if held is not None and held[0] == text:
                    text = json.dumps({SAME_AS: held[1]})
                elif len(text) >= MIN_SHARED_CHARS:
                    seen[key] = (text, run_id)
                parts.append(f"{json.dumps(key, ensure_ascii=False)}:{text}")
        return "{" + ",".join(parts) + "}"

    def forget(self, trace_id: str) -> None:
        """The trace ended: its texts are no longer needed."""
        with self._lock:
            self._traces.pop(trace_id, None)


def _reference(value: Any) -> str | None:
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get(SAME_AS), str):
        return str(value[SAME_AS])
    return None


def resolve(runs: Iterable[TraceRun]) -> None:
    """Put back, in place, each input value a run stored as a reference to an earlier run of its trace."""
    runs = list(runs)
    by_id = {run.id: run for run in runs}
    for run in runs:
        if not isinstance(run.inputs, dict):
            continue
        for key, value in run.inputs.items():
            ref = _reference(value)
            if ref is None:
                continue
            source = by_id.get(ref)
            held = source.inputs.get(key) if source is not None and isinstance(source.inputs, dict) else None
            if held is None or _reference(held) is not None:
                run.inputs[key] = f"<the value stored with run {ref}, which this trace no longer holds>"
            else:
                run.inputs[key] = held
