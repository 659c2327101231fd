"""Loaders refuse bad input files early and say what is wrong.

- A file that is one enormous line is refused after reading at most ``max_line_bytes`` of it
  (a 2 GB one-line file took 4 GB of memory before the refusal); the limit is a parameter, so the
  test uses a small one and measures the peak allocation.
- A FIFO passed as --data is "not a regular file", not "file not found" (and is never opened).
"""

from __future__ import annotations

import gzip
import json
import os
import tracemalloc
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from graphs.errors import LoaderError
from graphs.loaders import load_dataset
from graphs.loaders.jsonl import load_jsonl
from graphs.loaders.lines import line_blocks
from graphs.loaders.triples import read_triples

LIMIT = 1 << 20  # 1 MB
LINE = 40 * LIMIT  # a 40 MB line


def _peak_while(fn: object) -> int:
    tracemalloc.start()
    try:
        with pytest.raises(LoaderError, match="longer than 1,048,576 bytes") as info:
            fn()  # type: ignore[operator]
        return tracemalloc.get_traced_memory()[1], info.value  # type: ignore[return-value]
    finally:
        tracemalloc.stop()


def _one_line(path: Path, prefix: bytes = b"a|b|") -> Path:
    with path.open("wb") as fh:
        fh.write(b"x|linked_to|y\n")
        fh.write(prefix)
        chunk = b"z" * (1 << 20)
        for _ in range(LINE // len(chunk)):
            fh.write(chunk)
    return path


def test_a_huge_single_line_triples_file_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    path = _one_line(tmp_path / "one_line.txt")
    peak, error = _peak_while(lambda: read_triples(path, max_line_bytes=LIMIT))
    assert "line 2" in str(error)
    assert peak < 16 * LIMIT, f"peak {peak / 1e6:.0f} MB to refuse a {LINE / 1e6:.0f} MB line"


def test_a_huge_single_line_jsonl_file_is_refused_in_bounded_memory(tmp_path: Path) -> None:
    directory = tmp_path / "graph"
    directory.mkdir()
    _one_line(directory / "nodes.jsonl", prefix=b'{"key": "k", "label": "Rock", "name": "')
    peak, _ = _peak_while(lambda: load_jsonl(directory, max_line_bytes=LIMIT))
    assert peak < 16 * LIMIT, f"peak {peak / 1e6:.0f} MB to refuse a {LINE / 1e6:.0f} MB line"


def test_line_blocks_keep_every_line_and_number_the_long_one(tmp_path: Path) -> None:
    text = b"".join(f"{i}\n".encode() for i in range(10_000)) + b"x" * 50 + b"\nlast"
    path = tmp_path / "lines.txt.gz"
    with gzip.open(path, "wb") as out:
        out.write(text)
    with gzip.open(path, "rb") as fh:
        assert b"".join(line_blocks(fh, str(path), max_line_bytes=64, block_bytes=100)) == text
    with gzip.open(path, "rb") as fh, pytest.raises(LoaderError, match="line 10001"):
        list(line_blocks(fh, str(path), max_line_bytes=8, block_bytes=100))


def test_normal_files_still_load(tmp_path: Path) -> None:
    path = tmp_path / "kb.txt"
    path.write_bytes(b"\xef\xbb\xbfOslo|capital_of|Norway\r\nBergen|city_in|Norway\n\nTromso|city_in|Norway")
    assert read_triples(path) == [("Oslo", "capital_of", "Norway"), ("Bergen", "city_in", "Norway"),
                                  ("Tromso", "city_in", "Norway")]
    directory = tmp_path / "graph"
    directory.mkdir()
    (directory / "nodes.jsonl").write_text("\n".join(json.dumps({"key": f"r{i}", "label": "Rock", "name": f"rock {i}"})
                                                     for i in range(5)))
    assert len(load_jsonl(directory).nodes) == 5


@pytest.mark.parametrize("dataset", ["triples", "jsonl"])
def test_a_fifo_as_data_is_not_a_regular_file(tmp_path: Path, dataset: str) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(LoaderError, match="not a regular file: it is a FIFO"):
        load_dataset(dataset, fifo)  # type: ignore[arg-type]
    result = CliRunner().invoke(app, ["index", "--dataset", dataset, "--data", str(fifo), "--index-dir", str(tmp_path / "ix")])
    assert result.exit_code == 2
    assert "not a regular file" in result.stderr and "file not found" not in result.stderr
    assert "Traceback" not in result.stderr
