"""Progress and tables for the CLI: one module so `skb index`, `skb eval` and `skb graph stats` behave alike.

Why: long stages (embedding tens of thousands of texts, a benchmark run) must show that they are alive.
On a terminal that is a live bar with counts, elapsed time and ETA; in a log or CI (stderr not a terminal)
a live bar would either vanish or fill the log with control codes, so we print one plain status line per
stage every ``interval_s`` seconds or every 10 % of its total, plus one when it finishes. ``quiet``
silences both. Progress goes to stderr so stdout stays clean for results and ``--json``.

Tables: rich wraps a wide table into slivers when stdout is not a wide terminal (rich then assumes 80
columns). When stdout is not a terminal we print plain, aligned, never-wrapped columns instead.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Self, TextIO

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

# Control characters (C0 except tab and newline, DEL, C1) and the invisible bidirectional
# overrides/isolates that reorder what a terminal shows.
_TERMINAL_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group(0))
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def terminal_text(value: object) -> str:
    """``value`` as inert terminal text: control and escape characters shown visibly as ``\\xNN``
    (``\\uNNNN`` for bidi overrides), tab and newline kept, lone surrogates replaced.

    Why: node names, questions, paths and error messages may come from a graph or a user; an ESC or
    OSC sequence printed raw clears, recolours or retitles the user's terminal. Every command that
    prints goes through this (``print_text`` / ``print_error`` / ``print_table`` below); Rich markup
    is never interpreted in such text (they hand Rich a ``Text`` object, not a markup string)."""
    text = str(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = re.sub("[\ud800-\udfff]", "\ufffd", text)
    if not _TERMINAL_UNSAFE.search(text):
        return text
    return _TERMINAL_UNSAFE.sub(_visible, text)


def _is_tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty()) if callable(isatty) else False


def _fmt_s(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, sec = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{sec:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class _Stage:
    """One stage's counters for the line mode."""

    def __init__(self, now: float) -> None:
        self.start = now
        self.last_line = now
        self.last_decile = -1
        self.finished = False


class ProgressReporter:
    """Callable ``progress(stage, done, total)`` that renders stages as bars (tty) or periodic lines.

    Use as a context manager around the work; stages appear in the order first reported.
    """

    def __init__(
        self,
        *,
        quiet: bool = False,
        stream: TextIO | None = None,
        interval_s: float = 10.0,
        terminal: bool | None = None,
    ) -> None:
        self.stream: TextIO = stream if stream is not None else sys.stderr
        self.quiet = quiet
        self.interval_s = interval_s
        self.terminal = _is_tty(self.stream) if terminal is None else terminal
        self._stages: dict[str, _Stage] = {}
        self._bar: Progress | None = None
        self._tasks: dict[str, TaskID] = {}

    @property
    def mode(self) -> str:
        """``off`` (quiet), ``bar`` (terminal) or ``lines`` (log/pipe)."""
        return "off" if self.quiet else ("bar" if self.terminal else "lines")

    def __enter__(self) -> Self:
        if self.mode == "bar":
            console = Console(file=self.stream, force_terminal=True)
            self._bar = Progress(
                TextColumn("{task.description:>12}"), BarColumn(), MofNCompleteColumn(),
                TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console,
            )
            self._bar.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._bar is not None:
            self._bar.__exit__(exc_type, exc, tb)
            self._bar = None

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self.mode == "off":
            return
        total = max(int(total), 1)
        done = min(max(int(done), 0), total)
        if self._bar is not None:
            if stage not in self._tasks:
                self._tasks[stage] = self._bar.add_task(stage, total=total)
            self._bar.update(self._tasks[stage], completed=done, total=total)
            return
        self._line(stage, done, total)

    def advance(self, stage: str, done: int, total: int) -> None:
        """Alias of calling the object: reads better at call sites that count items."""
        self(stage, done, total)

    def _line(self, stage: str, done: int, total: int) -> None:
        now = time.monotonic()
        st = self._stages.get(stage)
        first = st is None
        if st is None:
            st = self._stages[stage] = _Stage(now)
        if st.finished:
            return
        decile = done * 10 // total
        finished = done >= total
        due = first or finished or decile > st.last_decile or now - st.last_line >= self.interval_s
        if not due:
            return
        st.last_line = now
        st.last_decile = decile
        st.finished = finished
        elapsed = now - st.start
        text = f"[{stage}] {done:,}/{total:,} ({100.0 * done / total:.0f}%) elapsed {_fmt_s(elapsed)}"
        if finished:
            text += " done"
        elif done > 0:
            text += f" eta {_fmt_s(elapsed * (total - done) / done)}"
        self.stream.write(text + "\n")
        self.stream.flush()


def stdout_is_terminal() -> bool:
    """Whether stdout is an interactive terminal (tables are drawn with rich only then)."""
    return _is_tty(sys.stdout)


def _clean(cell: object) -> str:
    return " ".join(terminal_text(cell).split())


def safe_text(value: object, style: str = "") -> Text:
    """``value`` as a Rich ``Text``: control characters made visible (`terminal_text`) and Rich markup
    shown literally, never interpreted (a ``[/]`` in a node name neither crashes nor styles)."""
    return Text(terminal_text(value), style=style)


def print_text(console: Console, *parts: object, style: str = "") -> None:
    """Print untrusted text (data, arguments, error messages) on one logical line, soft-wrapped.

    ``parts`` are joined by a space; a ``(text, style)`` tuple styles one part (e.g. ``("error:",
    "bold red")``). The one place every command prints data through, so no field can drive the
    terminal or Rich."""
    line = Text(style=style)
    for i, part in enumerate(parts):
        if i:
            line.append(" ")
        if isinstance(part, tuple):
            line.append_text(safe_text(part[0], str(part[1])))
        else:
            line.append_text(safe_text(part))
    console.print(line, soft_wrap=True, highlight=False)


def print_error(console: Console, message: object, *, label: str = "error:", style: str = "bold red") -> None:
    """``error: <message>`` with the message inert (it may quote a node name, a path or a question)."""
    print_text(console, (label, style), message)


def print_table(
    console: Console,
    title: str,
    columns: Sequence[str],
    rows: Sequence[Sequence[str]],
    *,
    right: Sequence[str] = (),
    plain: bool | None = None,
) -> None:
    """A rich table on a terminal; plain aligned columns (never wrapped) otherwise.

    ``plain`` forces the choice (None: plain when stdout is not a terminal). Cells are single-line.
    Titles and cells are data: control characters are shown visibly and Rich markup is never interpreted.
    """
    use_plain = (not stdout_is_terminal()) if plain is None else plain
    if not use_plain:
        table = Table(title=safe_text(title))
        for col in columns:
            table.add_column(safe_text(col), justify="right" if col in right else "left")
        for row in rows:
            table.add_row(*(safe_text(cell) for cell in row))
        console.print(table)
        return
    cells = [[_clean(c) for c in columns]] + [[_clean(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(columns))]
    lines = [f"# {_clean(title)}"] if title else []
    for row in cells:
        parts = [c.rjust(w) if col in right else c.ljust(w) for c, w, col in zip(row, widths, columns, strict=True)]
        lines.append("  ".join(parts).rstrip())
    out = console.file
    out.write("\n".join(lines) + "\n")
    out.flush()
