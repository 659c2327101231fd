"""Benchmark question files: our CSVs and STaRK's layout, with split selection.

Accepted inputs:
- a CSV with columns ``id,query,answer_ids`` plus any extra columns (``target_type``,
  ``style``, ...); ``answer_ids`` is a JSON list of ints (STaRK node ids) or strings
  (our external keys), normalised to strings;
- a STaRK dataset directory (``<dataset>/stark_qa/stark_qa.csv`` + ``<dataset>/split/*.index``).

Answer keys the index does not know are never dropped: ``check_answers`` counts
them, keeps examples and flags questions none of whose answers exist, so a key
mismatch (e.g. STaRK integer ids against an index keyed by names) shows up in the
report instead of as silently low scores.
"""

from __future__ import annotations

import ast
import csv
import json
from collections.abc import Container, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from graphs.errors import LoaderError

REQUIRED_COLUMNS = ("id", "query", "answer_ids")
SPLITS = ("train", "val", "test")
MAX_EXAMPLES = 20


class Question(BaseModel):
    """One benchmark question; ``extra`` keeps every column beyond the known ones."""

    id: str
    query: str
    answer_ids: list[str]
    target_type: str | None = None
    style: str | None = None
    extra: dict[str, str] = Field(default_factory=dict)

    def group(self, column: str) -> str | None:
        """The value of a grouping column (``target_type``, ``style`` or any extra column)."""
        if column == "target_type":
            return self.target_type
        if column == "style":
            return self.style
        return self.extra.get(column)


class Bench(BaseModel):
    """Questions plus where they came from (recorded in the report)."""

    source: str
    split: str | None = None
    questions: list[Question]
    split_ids_missing: int = 0

    def limited(self, limit: int | None) -> Bench:
        if limit is None:
            return self
        if limit < 1:
            raise LoaderError(self.source, f"--limit must be >= 1, got {limit}", fix="pass a positive number")
        return self.model_copy(update={"questions": self.questions[:limit]})


class AnswerCoverage(BaseModel):
    """Answer keys missing from the index's SKB."""

    n_questions: int
    n_answer_keys: int
    unknown_count: int
    unknown_examples: list[str]
    all_unknown_questions: list[str]
    partly_unknown_questions: int


def _parse_answers(raw: str, path: Path, record: str) -> list[str]:
    text = raw.strip()
    value: Any
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        try:  # STaRK files written by pandas sometimes use Python reprs.
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            raise LoaderError(
                str(path), f"answer_ids {raw!r} is not a JSON list", record=record,
                fix='write it as a JSON list, e.g. ["OMIM:101200"] or [18423]',
            ) from None
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, (int, str)) and not isinstance(v, bool) for v in value):
        raise LoaderError(str(path), f"answer_ids {raw!r} must be a list of ints or strings", record=record,
                          fix='write it as a JSON list, e.g. ["OMIM:101200"] or [18423]')
    answers = [str(v).strip() for v in value]
    answers = list(dict.fromkeys(a for a in answers if a))
    if not answers:
        raise LoaderError(str(path), "answer_ids is empty; a question without answers cannot be scored",
                          record=record, fix="give at least one answer key or remove the row")
    return answers


def read_questions(path: Path) -> list[Question]:
    """Parse a benchmark CSV; every problem names the file, the row and the fix."""
    if not path.is_file():
        raise LoaderError(str(path), "benchmark file not found", fix="pass an existing CSV with --bench")
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        columns = reader.fieldnames or []
        missing = [c for c in REQUIRED_COLUMNS if c not in columns]
        if missing:
            raise LoaderError(str(path), f"missing column(s) {', '.join(missing)} (found: {', '.join(columns)})",
                              fix="the header must contain id,query,answer_ids")
        questions: list[Question] = []
        seen: set[str] = set()
        for line_no, row in enumerate(reader, start=2):
            record = f"line {line_no}"
            qid = (row.get("id") or "").strip()
            query = (row.get("query") or "").strip()
            if not qid:
                raise LoaderError(str(path), "empty id", record=record, fix="give every row a unique id")
            if qid in seen:
                raise LoaderError(str(path), f"duplicate id {qid!r}", record=record, fix="ids must be unique")
            if not query:
                raise LoaderError(str(path), f"empty query for id {qid!r}", record=record, fix="fill in the query")
            seen.add(qid)
            answers = _parse_answers(row.get("answer_ids") or "", path, record)
            extra = {k: (v or "") for k, v in row.items()
                     if k not in (*REQUIRED_COLUMNS, "target_type", "style") and k is not None}
            questions.append(Question(
                id=qid, query=query, answer_ids=answers,
                target_type=(row.get("target_type") or "").strip() or None,
                style=(row.get("style") or "").strip() or None,
                extra=extra,
            ))
    if not questions:
        raise LoaderError(str(path), "no questions", fix="the CSV has a header but no rows")
    return questions


def read_split_ids(path: Path) -> list[str]:
    """One id per line (STaRK ``split/*.index``); blank lines ignored."""
    if not path.is_file():
        raise LoaderError(str(path), "split file not found", fix="pass --split train|val|test next to a STaRK layout, "
                          "or a path to an .index file")
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _resolve_csv(path: Path) -> Path:
    if path.is_dir():
        candidate = path / "stark_qa" / "stark_qa.csv"
        if candidate.is_file():
            return candidate
        raise LoaderError(str(path), "directory has no stark_qa/stark_qa.csv",
                          fix="pass a benchmark CSV or a STaRK dataset directory")
    return path


def _resolve_split(csv_path: Path, split: str) -> Path:
    explicit = Path(split)
    if explicit.suffix == ".index" or explicit.is_file():
        return explicit
    if split not in SPLITS:
        raise LoaderError(str(csv_path), f"unknown split {split!r}", fix=f"use one of {', '.join(SPLITS)} or a path "
                          "to an .index file")
    for base in (csv_path.parent, csv_path.parent.parent):
        candidate = base / "split" / f"{split}.index"
        if candidate.is_file():
            return candidate
    raise LoaderError(str(csv_path), f"no split/{split}.index next to the benchmark",
                      fix="use the STaRK layout <dataset>/stark_qa/stark_qa.csv + <dataset>/split/<split>.index, "
                      "or drop --split")


def load_bench(path: Path, split: str | None = None, limit: int | None = None) -> Bench:
    """Questions of a CSV or STaRK dataset directory, optionally restricted to a split, in split order."""
    csv_path = _resolve_csv(path)
    questions = read_questions(csv_path)
    missing = 0
    if split is not None:
        ids = read_split_ids(_resolve_split(csv_path, split))
        by_id = {q.id: q for q in questions}
        selected = [by_id[i] for i in ids if i in by_id]
        missing = len(ids) - len(selected)
        if not selected:
            raise LoaderError(str(csv_path), f"none of the {len(ids)} ids of split {split!r} is in the file",
                              fix="check that the split belongs to this benchmark")
        questions = selected
    return Bench(source=str(csv_path), split=split, questions=questions, split_ids_missing=missing).limited(limit)


def check_answers(questions: Sequence[Question], known: Container[str]) -> AnswerCoverage:
    """Count answer keys not in ``known`` (e.g. ``bundle.skb.nodes``) and flag unanswerable questions."""
    unknown: list[str] = []
    all_unknown: list[str] = []
    partly = 0
    total = 0
    for q in questions:
        missing = [a for a in q.answer_ids if a not in known]
        total += len(q.answer_ids)
        unknown.extend(missing)
        if missing and len(missing) == len(q.answer_ids):
            all_unknown.append(q.id)
        elif missing:
            partly += 1
    examples = list(dict.fromkeys(unknown))[:MAX_EXAMPLES]
    return AnswerCoverage(
        n_questions=len(questions), n_answer_keys=total, unknown_count=len(unknown),
        unknown_examples=examples, all_unknown_questions=all_unknown, partly_unknown_questions=partly,
    )
