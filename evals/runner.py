"""Run one method over the questions: resumable, optionally threaded, with a progress bar.

Why a JSONL file per method: a full benchmark run of the agent takes hours; each
finished question is appended (one line, flushed) so a crash or Ctrl-C loses at
most the questions in flight. A rerun reads the file, ignores a half-written last
line (and truncates it so new lines start clean), retries questions that ended in
an error and skips the rest. ``config.json`` next to the results pins the method
configuration: resuming with a different configuration would mix two experiments
in one file, so it is refused.
"""

from __future__ import annotations

import gc
import json
import os
import re
import threading
import time
from collections.abc import Callable, Container, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

from pydantic import BaseModel, Field, ValidationError

from evals.bench import Question
from evals.metrics import CURVE_MAX_K, dedupe, question_metrics
from evals.protocol import Retrieval, Retriever
from graphs.errors import ConfigError, LoaderError
from graphs.manifest import atomic_write_json
from graphs.progress import ProgressReporter

RESULTS_FILE = "results.jsonl"
CONFIG_FILE = "config.json"
KEEP_RANKED = CURVE_MAX_K


class QuestionResult(BaseModel):
    """One line of ``results.jsonl``: the ranking (top 100), its metrics and its cost."""

    id: str
    query: str
    answer_ids: list[str]
    target_type: str | None = None
    style: str | None = None
    groups: dict[str, str] = Field(default_factory=dict)
    ranked: list[tuple[str, float]] = Field(default_factory=list)
    n_returned: int = 0
    metrics: dict[str, float] = Field(default_factory=dict)
    unknown_answers: list[str] = Field(default_factory=list)
    all_answers_unknown: bool = False
    timings_ms: dict[str, float] = Field(default_factory=dict)
    llm_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    tool_calls: int = 0
    tool_output_tokens: int = 0
    error: str | None = None

    @property
    def ranked_keys(self) -> list[str]:
        return [key for key, _ in self.ranked]


class RunSummary(BaseModel):
    """What one ``run_method`` call did (the report reads the files, not this)."""

    method: str
    results_path: str
    total: int
    skipped: int
    ran: int
    errors: int
    first_error: str | None = None


def method_dir_name(method: str) -> str:
    """A portable directory name for a method (``agent+sage:always`` -> ``agent+sage_always``)."""
    return re.sub(r"[^A-Za-z0-9+._-]", "_", method)


def score_question(
    question: Question,
    retrieval: Retrieval | None,
    *,
    known: Container[str] | None = None,
    error: str | None = None,
    elapsed_ms: float | None = None,
) -> QuestionResult:
    """Turn a retrieval (or a failure) into a result line; errors score as misses."""
    ranked = [] if retrieval is None else [(str(k), float(s)) for k, s in retrieval.ranked]
    distinct = dedupe(k for k, _ in ranked)
    scores = {k: s for k, s in reversed(ranked)}  # first occurrence wins
    kept = [(k, scores[k]) for k in distinct[:KEEP_RANKED]]
    unknown = [a for a in question.answer_ids if known is not None and a not in known]
    timings = {} if retrieval is None else {str(k): float(v) for k, v in retrieval.timings_ms.items()}
    if elapsed_ms is not None:
        timings.setdefault("total", elapsed_ms)
    groups = {k: v for k, v in question.extra.items() if v}
    return QuestionResult(
        id=question.id,
        query=question.query,
        answer_ids=question.answer_ids,
        target_type=question.target_type,
        style=question.style,
        groups=groups,
        ranked=kept,
        n_returned=len(distinct),
        metrics=question_metrics(distinct, question.answer_ids),
        unknown_answers=unknown,
        all_answers_unknown=bool(unknown) and len(unknown) == len(question.answer_ids),
        timings_ms=timings,
        llm_calls=0 if retrieval is None else retrieval.llm_calls,
        prompt_tokens=0 if retrieval is None else retrieval.prompt_tokens,
        completion_tokens=0 if retrieval is None else retrieval.completion_tokens,
        tool_calls=0 if retrieval is None else retrieval.tool_calls,
        tool_output_tokens=0 if retrieval is None else retrieval.tool_output_tokens,
        error=error,
    )


def read_results(path: Path, *, repair: bool = False) -> list[QuestionResult]:
    """Parse a results file; the latest line per id wins.

    A last line without a newline is what a crash mid-write leaves: it is ignored,
    and with ``repair`` truncated away so that appending continues on a clean line.
    Any other unparsable line is corruption and raises.
    """
    if not path.exists():
        return []
    data = path.read_bytes()
    cut = data.rfind(b"\n") + 1
    if cut < len(data) and repair:
        with path.open("r+b") as handle:
            handle.truncate(cut)
    by_id: dict[str, QuestionResult] = {}
    for line_no, raw in enumerate(data[:cut].splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            result = QuestionResult.model_validate_json(raw)
        except ValidationError as exc:
            raise LoaderError(str(path), f"unreadable result line: {exc.errors()[0]['msg']}", record=line_no,
                              fix="delete the line (or the file) and rerun; finished questions are skipped") from None
        by_id[result.id] = result
    return list(by_id.values())


def check_config(method_dir: Path, config: dict[str, Any]) -> None:
    """Write ``config.json``, or refuse to resume a directory produced by another configuration."""
    path = method_dir / CONFIG_FILE
    normal = json.loads(json.dumps(config, sort_keys=True, default=str))
    if path.exists():
        previous = json.loads(path.read_text(encoding="utf-8"))
        if previous != normal:
            changed = sorted(k for k in set(previous) | set(normal) if previous.get(k) != normal.get(k))
            raise ConfigError(
                f"{method_dir} holds results of a different configuration (changed: {', '.join(changed)}); "
                "use another --out directory or delete this one to start over"
            )
        return
    method_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, normal)


@contextmanager
def _progress(enabled: bool, description: str, total: int, done: int) -> Iterator[Callable[[], None]]:
    """A bar with counts and ETA on a terminal, a periodic status line in a log (graphs.progress), or nothing."""
    count = done
    with ProgressReporter(quiet=not enabled) as progress:
        progress(description, count, total)

        def advance() -> None:
            nonlocal count
            count += 1
            progress(description, count, total)

        yield advance


def _retrieve(retriever: Retriever, question: Question, known: Container[str] | None) -> QuestionResult:
    start = time.perf_counter()
    try:
        retrieval = retriever.retrieve(question.query)
    except Exception as exc:  # noqa: BLE001 - one failing question must not end a long run; it is recorded
        elapsed = (time.perf_counter() - start) * 1000.0
        return score_question(question, None, known=known, error=f"{type(exc).__name__}: {exc}", elapsed_ms=elapsed)
    elapsed = (time.perf_counter() - start) * 1000.0
    return score_question(question, retrieval, known=known, elapsed_ms=elapsed)


#: Questions after which a run's heap counts as warm (caches filled, lazily opened parts loaded).
WARM_QUESTIONS = 20


def settle_heap() -> None:
    """Collect once, then freeze what survives (the index's tables, caches, modules).

    Why: a warm agent process holds millions of long-lived objects; every full cyclic collection
    rescanned them all, a pause of 100-300 ms that landed on a random question (HPO dev, 300
    questions, quiet 2 cores: p95 145 / 107 ms plain, 101 / 86 ms frozen; p50 unchanged). Frozen
    objects are never scanned again; everything allocated later is collected as usual."""
    gc.collect()
    gc.freeze()


def run_method(
    retriever: Retriever,
    questions: Sequence[Question],
    out_dir: Path,
    *,
    workers: int = 1,
    known: Container[str] | None = None,
    progress: bool = True,
) -> RunSummary:
    """Append results for the questions not yet finished in ``<out_dir>/<method>/results.jsonl``."""
    if workers < 1:
        raise ConfigError(f"--workers must be >= 1, got {workers}")
    method_dir = out_dir / method_dir_name(retriever.name)
    check_config(method_dir, retriever.config)
    path = method_dir / RESULTS_FILE
    wanted = {q.id for q in questions}
    finished = {r.id for r in read_results(path, repair=True) if r.error is None and r.id in wanted}
    pending = [q for q in questions if q.id not in finished]
    lock = threading.Lock()
    errors = 0
    first_error: str | None = None

    with path.open("a", encoding="utf-8") as handle, \
            _progress(progress, retriever.name, len(questions), len(questions) - len(pending)) as advance:

        def record(result: QuestionResult) -> None:
            nonlocal errors, first_error
            with lock:
                _write_line(handle, result)
                if result.error is not None:
                    errors += 1
                    first_error = first_error or f"{result.id}: {result.error}"
                advance()

        if workers == 1:
            for n, question in enumerate(pending, 1):
                record(_retrieve(retriever, question, known))
                if n == WARM_QUESTIONS:
                    settle_heap()
        else:
            _run_threaded(retriever, pending, known, workers, record)
        handle.flush()
        os.fsync(handle.fileno())
    return RunSummary(method=retriever.name, results_path=str(path), total=len(questions),
                      skipped=len(questions) - len(pending), ran=len(pending), errors=errors,
                      first_error=first_error)


def _write_line(handle: TextIO, result: QuestionResult) -> None:
    handle.write(result.model_dump_json() + "\n")
    handle.flush()


def _run_threaded(
    retriever: Retriever,
    pending: Sequence[Question],
    known: Container[str] | None,
    workers: int,
    record: Callable[[QuestionResult], None],
) -> None:
    """Keep at most ``2 * workers`` questions in flight so a crash loses little and memory stays flat."""
    queue = iter(pending)
    in_flight: set[Future[QuestionResult]] = set()
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="skb-eval") as pool:
        try:
            while True:
                while len(in_flight) < 2 * workers:
                    question = next(queue, None)
                    if question is None:
                        break
                    in_flight.add(pool.submit(_retrieve, retriever, question, known))
                if not in_flight:
                    break
                done, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
                for future in done:
                    record(future.result())
        except BaseException:
            for future in in_flight:
                future.cancel()
            raise
