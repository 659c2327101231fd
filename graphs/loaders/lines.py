"""Line-oriented input read in bounded blocks, and paths checked before they are opened.

Why blocks, not ``readline``/``readlines``: both read a whole line whatever its length, so a 2 GB file
that is one line took 4 GB of memory before the loader could refuse it. Here a file is read
``block_bytes`` at a time; a line still open after ``max_line_bytes`` is refused at once, having held
at most that much. Blocks end at a newline, so a caller splits them with the usual C-speed calls.

Why check the path first: a FIFO, a device or a socket passed as a data file is neither a file nor a
directory, and was reported "file not found"; opening one can also block forever.
"""

from __future__ import annotations

import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from graphs.errors import LoaderError


class Readable(Protocol):
    def read(self, size: int = -1, /) -> bytes: ...


#: Longest line (bytes, decompressed) a loader accepts: far above any sane record, far below memory.
MAX_LINE_BYTES = 64 << 20
#: Bytes read at once.
BLOCK_BYTES = 4 << 20


def line_blocks(
    fh: Readable, src: str, *, max_line_bytes: int = MAX_LINE_BYTES, block_bytes: int = BLOCK_BYTES
) -> Iterator[bytes]:
    """``fh``'s bytes in blocks of whole lines (each ends with ``\\n``, except the file's last when it has
    none). LoaderError naming the line once a line grows past ``max_line_bytes``."""
    carry = b""
    lineno = 1  # the line ``carry`` starts
    while True:
        block = fh.read(block_bytes)
        if not block:
            if carry:
                yield carry
            return
        data = carry + block if carry else block
        cut = data.rfind(b"\n") + 1
        whole, carry = data[:cut], data[cut:]
        if len(whole) > max_line_bytes:  # a long line may sit inside the block: the first one is named
            for i, line in enumerate(whole.split(b"\n")):
                if len(line) > max_line_bytes:
                    raise _too_long(src, lineno + i, max_line_bytes)
        lineno += whole.count(b"\n")
        if len(carry) > max_line_bytes:
            raise _too_long(src, lineno, max_line_bytes)
        if whole:
            yield whole


def _too_long(src: str, lineno: int, max_line_bytes: int) -> LoaderError:
    return LoaderError(
        src, f"a line longer than {max_line_bytes:,} bytes (not a line-per-record file, or a record far too large)",
        record=f"line {lineno}", fix="one record per line; split the file or check that it is the right file",
    )


def check_data_path(path: Path) -> None:
    """LoaderError for a path that exists but is neither a regular file nor a directory (a missing path
    is left to the loader, whose message says what it expected there)."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")
    raise LoaderError(
        str(path), f"not a regular file: it is {kind}",
        fix="write the data to a regular file (or a directory of files) and pass that",
    )
