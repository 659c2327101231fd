"""Progress and table output when stdout/stderr are not a terminal (logs, CI, pipes), and --quiet.

The CLI runs as a real child process with pipes (so isatty() is false, as in a log) on the mini HPO
fixture; the index is built by the real pipeline (MiniLM embedder, hnswlib, bm25s).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from graphs.progress import ProgressReporter, print_table
from tests.paths import FIXTURES, REPO

pytestmark = pytest.mark.integration

SKB = [sys.executable, "-c", "from agent.cli.main import app; app()"]
# Markers of third-party progress bars (tqdm, transformers "Loading weights", rich bars) and warnings.
THIRD_PARTY = ("it/s]", "%|", "Loading weights", "Batches:", "Warning", "warn(", "━━")


def _skb(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "60"}  # a narrow "terminal": tables must still not wrap
    return subprocess.run([*SKB, *args], capture_output=True, text=True, timeout=600, env=env,
                          cwd=str(cwd or REPO), check=False)


@pytest.fixture(scope="module")
def piped_build(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    index_dir = tmp_path_factory.mktemp("progress") / "idx"
    result = _skb("index", "--dataset", "hpo", "--data", str(FIXTURES / "hpo_mini"), "--index-dir", str(index_dir),
                  "--store", "none")
    return index_dir, result


def test_reporter_lines_mode_prints_periodic_status() -> None:
    stream = io.StringIO()
    with ProgressReporter(stream=stream, interval_s=3600) as progress:
        assert progress.mode == "lines"
        for done in range(101):
            progress("embed", done, 100)
        progress("embed", 100, 100)  # a repeated final report prints nothing more
    lines = stream.getvalue().splitlines()
    # the first report, one per 10 % step, and the finish: 11 lines, not 101
    assert len(lines) == 11
    assert lines[0].startswith("[embed] 0/100 (0%)")
    assert "[embed] 50/100 (50%)" in lines[5] and "eta" in lines[5]
    assert lines[-1].startswith("[embed] 100/100 (100%)") and lines[-1].endswith("done")


def test_reporter_lines_mode_time_interval() -> None:
    stream = io.StringIO()
    with ProgressReporter(stream=stream, interval_s=0.0) as progress:
        for done in range(1, 6):
            progress("store", done, 1000)  # far below 10 % steps: only the interval makes lines
    assert len(stream.getvalue().splitlines()) == 5


def test_reporter_quiet_prints_nothing() -> None:
    stream = io.StringIO()
    with ProgressReporter(stream=stream, quiet=True) as progress:
        progress("embed", 5, 10)
        progress("embed", 10, 10)
    assert stream.getvalue() == ""


def test_print_table_plain_is_aligned_and_unwrapped() -> None:
    buf = io.StringIO()
    console = Console(file=buf, width=40)
    long_name = "Autosomal dominant inheritance with a very long descriptive name"
    print_table(console, "search", ["rank", "key", "name", "score"],
                [["1", "HP:0000006", long_name, "1.0000"], ["10", "HP:1", "x", "0.5000"]],
                right=["rank", "score"], plain=True)
    lines = buf.getvalue().splitlines()
    assert lines[0] == "# search"
    assert lines[1].split() == ["rank", "key", "name", "score"]
    assert long_name in lines[2]  # one row, one line, whatever the console width
    assert len(lines) == 4
    assert lines[2].index("HP:0000006") == lines[3].index("HP:1")  # columns aligned
    assert lines[2].endswith("1.0000") and lines[3].endswith("0.5000")


def test_index_piped_prints_stage_lines_and_no_third_party_bars(
    piped_build: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, result = piped_build
    assert result.returncode == 0, result.stderr
    for stage in ("load", "embed", "hnsw", "bm25"):
        assert f"[{stage}] " in result.stderr, result.stderr
    assert "done" in result.stderr
    for marker in THIRD_PARTY:
        assert marker not in result.stderr + result.stdout, (marker, result.stderr)
    assert "\x1b[" not in result.stderr  # no control codes in a log
    # the summary table: one line per row, not wrapped at the 60 columns of COLUMNS
    assert any(line.split()[:2] == ["nodes", "Phenotype"] for line in result.stdout.splitlines()), result.stdout
    assert "built in" in result.stdout and "size" in result.stdout.split("built in")[1].splitlines()[0]


def test_index_quiet_prints_no_progress(tmp_path: Path) -> None:
    result = _skb("index", "--dataset", "hpo", "--data", str(FIXTURES / "hpo_mini"), "--index-dir",
                  str(tmp_path / "idx"), "--store", "none", "--quiet")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    assert "built in" in result.stdout


def test_search_piped_table_not_wrapped(piped_build: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    index_dir, _ = piped_build
    result = _skb("search", "abnormality of the aortic root and the heart valves", "--index-dir", str(index_dir),
                  "--mode", "bm25", "--k", "3")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("# bm25 search: 'abnormality of the aortic root and the heart valves'")
    assert lines[1].split() == ["rank", "key", "type", "name", "score"]
    rows = lines[2:]
    assert len(rows) == 3 and all(r.split()[0] == str(i) for i, r in enumerate(rows, 1))
    assert "┃" not in result.stdout and "│" not in result.stdout
    for marker in THIRD_PARTY:
        assert marker not in result.stderr + result.stdout, (marker, result.stderr)


def test_search_json_unchanged(piped_build: tuple[Path, subprocess.CompletedProcess[str]]) -> None:
    import json

    index_dir, _ = piped_build
    result = _skb("search", "Marfan", "--index-dir", str(index_dir), "--mode", "bm25", "--k", "2", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["mode"] == "bm25" and len(data["hits"]) == 2


def test_eval_piped_prints_status_lines_and_quiet_silences(
    piped_build: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path,
) -> None:
    index_dir, _ = piped_build
    bench = tmp_path / "bench.csv"
    bench.write_text('id,query,answer_ids,target_type,style\n1,Marfan syndrome,"[""OMIM:154700""]",disease,names\n'
                     '2,Loeys-Dietz syndrome,"[""OMIM:610168""]",disease,names\n')
    common = ["eval", "run", "--bench", str(bench), "--index-dir", str(index_dir), "--method", "bm25",
              "--resamples", "50"]
    loud = _skb(*common, "--out", str(tmp_path / "loud"))
    assert loud.returncode == 0, loud.stderr
    assert "[bm25] 2/2 (100%)" in loud.stderr, loud.stderr
    assert "\x1b[" not in loud.stderr
    quiet = _skb(*common, "--out", str(tmp_path / "quiet"), "--quiet")
    assert quiet.returncode == 0, quiet.stderr
    assert "[bm25]" not in quiet.stderr
    # the summary table: the method's row on one line
    assert any(line.startswith("bm25 ") for line in quiet.stdout.splitlines()), quiet.stdout
