"""An index directory: what a build owns in it, what it refuses to replace, and how a finished build replaces
the one being served.

Why apart from the build: these rules decide what may be deleted on a user's disk (only what a build made,
never the working directory, a mount point or a foreign file) and how readers see the change (one atomic
exchange); the build's stages never need them, and the CLI checks a target with them before loading anything.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import shutil
import sys
import time
from pathlib import Path

from graphs.errors import ConfigError
from graphs.manifest import fsync_dir

#: Top-level entries a build writes (the CLI adds ``inputs.sha256``); everything else in an index is the user's.
BUILD_OWNED = frozenset(
    {"manifest.json", "inputs.sha256", "skb", "hnsw", "bm25", "sage", "falkordb", "phrases", "encoder"}
)
#: Build outputs whose every file the manifest lists: a file not listed there is not the build's.
LISTED_OUTPUT_DIRS = ("skb", "hnsw", "bm25", "sage", "phrases", "encoder")
#: SQLite databases the agent keeps in an index dir (agent.tracing.tracer's traces, agent.serving.langgraph_app's threads) with their
#: side files: a directory holding only these is built into (they are kept), not refused as "not an index".
_AGENT_DATABASES = re.compile(r"(traces|threads)\.sqlite(-wal|-shm|-journal)?")


def _is_index(path: Path) -> bool:
    """True when ``path`` holds a manifest this code wrote (any format version: an old index may be replaced)."""
    try:
        raw = json.loads((path / "manifest.json").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return (
        isinstance(raw, dict)
        and isinstance(raw.get("format_version"), int)
        and isinstance(raw.get("files"), dict)
        and isinstance(raw.get("embedder"), dict)
    )


def _foreign_files(index_dir: Path) -> list[str]:
    """Files inside the listed build outputs of an index that its manifest does not list."""
    try:
        raw = json.loads((index_dir / "manifest.json").read_text(encoding="utf-8"))
        listed = set(raw["files"]) | set(raw.get("data_files") or {})
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        listed = set()
    foreign: list[str] = []
    for sub in LISTED_OUTPUT_DIRS:
        root = index_dir / sub
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(index_dir).as_posix()
            if (path.is_file() or path.is_symlink()) and rel not in listed:
                foreign.append(rel)
    return foreign


def check_target(index_dir: Path) -> None:
    """Refuse (ConfigError, nothing touched) a target a build must not replace.

    Allowed: a missing or empty directory, or an skb index without foreign files in its listed
    build outputs. Refused: a file, a non-empty directory that is not an index, a mount point,
    and the working directory or one of its parents (the swap would pull it from under the process).
    """
    index_dir = Path(index_dir)
    resolved = index_dir.resolve()
    cwd = Path.cwd().resolve()
    if resolved == cwd or resolved in cwd.parents:
        raise ConfigError(
            f"--index-dir {index_dir} is the working directory or contains it ({resolved}); a build replaces "
            "the index directory as a whole, so pass a directory below the working directory "
            "(e.g. --index-dir .skb/NAME) or run skb index from elsewhere"
        )
    if index_dir.exists() and not index_dir.is_dir():
        raise ConfigError(f"--index-dir {index_dir} exists and is not a directory; choose another path")
    if resolved.is_dir() and os.path.ismount(resolved):
        raise ConfigError(f"--index-dir {index_dir} is a mount point; pass a directory inside it")
    if not resolved.is_dir() or all(_AGENT_DATABASES.fullmatch(p.name) for p in resolved.iterdir()):
        return
    if not _is_index(resolved):
        raise ConfigError(
            f"--index-dir {index_dir} is not empty and is not an skb index (no manifest.json written by "
            "skb index); a build replaces its index directory, so it refuses to touch this one. Choose a new "
            "or empty directory; nothing was changed"
        )
    foreign = _foreign_files(resolved)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise ConfigError(
            f"the index at {index_dir} holds files no build created: {shown}; a rebuild replaces "
            f"{', '.join(d + '/' for d in LISTED_OUTPUT_DIRS)} as a whole, so move them out first "
            "(files at the top level of the index are kept); nothing was changed"
        )


def missing_index_message(index_dir: Path, build_command: str) -> str:
    """What to do about a directory without a manifest, in words that work: ``build_command`` with this
    ``--index-dir`` only where ``check_target`` would allow the build (missing or empty); else a new
    directory, or this one removed first (a build never replaces what it cannot tell is its own)."""
    index_dir = Path(index_dir)
    try:
        check_target(index_dir)
    except ConfigError:
        owned = index_dir.is_dir() and all(p.name in BUILD_OWNED or _AGENT_DATABASES.fullmatch(p.name)
                                           for p in index_dir.iterdir())
        remove = (f"it holds only build outputs (a broken build): remove it (`rm -r {index_dir}`) and rebuild there"
                  if owned else "or move out what it holds, remove it, and rebuild there")
        return (f"no index at {index_dir} (manifest.json missing), and a build will not replace this non-empty "
                f"directory; build into a new or empty directory: `{build_command} --index-dir NEW_DIR`, or, "
                f"{remove}")
    return f"no index at {index_dir} (manifest.json missing); build one with `{build_command} --index-dir {index_dir}`"


def swap_in(tmp: Path, index_dir: Path) -> None:
    """Replace index_dir with tmp, keep the user's entries, then stop the previous index's server and delete it.

    On Linux the two directories are exchanged by one renameat2(RENAME_EXCHANGE), so a reader
    opening index_dir finds the old or the new index, never none; elsewhere the old dir is moved
    aside first (a short window without index_dir). The old server is stopped only after the
    exchange: a live store then reconnects (auto_restart) to the *new* graph on its next call,
    instead of restarting a server on the old directory just before it is deleted.

    Entries outside BUILD_OWNED (trace and thread databases, notes) are renamed into the new index
    before the exchange (same inode: an open SQLite connection keeps writing to the same file,
    found at the same path afterwards), and once more after it for any created meanwhile. The old
    directory is deleted only when it holds nothing but build-owned parts.
    """
    fsync_dir(tmp)
    if index_dir.exists():
        foreign = _foreign_files(index_dir)  # created since check_target: refuse rather than delete
        if foreign:
            raise ConfigError(
                f"the index at {index_dir} gained files no build created during the build: {', '.join(foreign[:5])}; "
                "move them out and build again; nothing was changed"
            )
        _carry_user_entries(index_dir, tmp)
        old = index_dir.parent / f".{index_dir.name}.old-{os.getpid()}"
        if old.exists():
            shutil.rmtree(old)
        if _exchange(tmp, index_dir):
            os.replace(tmp, old)  # tmp holds the previous index now
        else:
            os.replace(index_dir, old)
            try:
                os.replace(tmp, index_dir)
            except BaseException:
                os.replace(old, index_dir)  # put the previous index back; discard returns the user's entries
                raise
        fsync_dir(index_dir.parent)
        _carry_user_entries(old, index_dir)
        _stop_server_for(old)
        if _foreign_files(old) or any(entry.name not in BUILD_OWNED for entry in old.iterdir()):
            kept = index_dir.parent / f".{index_dir.name}.kept-{os.getpid()}-{time.time_ns()}"
            os.replace(old, kept)  # never delete what the build did not create
        else:
            shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, index_dir)
        fsync_dir(index_dir.parent)


def discard(tmp: Path, index_dir: Path) -> None:
    """Delete a failed build's temp dir, first handing back any user entry a failed swap had moved into it."""
    if tmp.is_dir() and index_dir.is_dir():
        try:
            _carry_user_entries(tmp, index_dir)
        except OSError:
            return  # keep tmp (and what it holds) rather than lose a user's file
        if any(entry.name not in BUILD_OWNED for entry in tmp.iterdir()):
            return
    shutil.rmtree(tmp, ignore_errors=True)


def _carry_user_entries(src: Path, dst: Path) -> None:
    """Rename every top-level entry of ``src`` outside BUILD_OWNED into ``dst`` (same filesystem).

    SQLite's side files (``-wal``, ``-shm``) move with their database; a name already taken in
    ``dst`` (created there meanwhile) is left in ``src``, which is then kept, not deleted.
    """
    for entry in sorted(src.iterdir()):
        if entry.name in BUILD_OWNED:
            continue
        target = dst / entry.name
        if target.exists() or target.is_symlink():
            continue
        os.rename(entry, target)


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2); False where the OS or filesystem cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):  # glibc < 2.28 or another libc
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    renameat2.restype = ctypes.c_int
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
        return False
    raise OSError(err, f"cannot swap the new index into place: {os.strerror(err)}", str(b))


def clean_stale_builds(index_dir: Path) -> list[Path]:
    """Remove what builds killed mid-way left beside index_dir (``.<name>.tmp-<pid>`` and
    ``.<name>.old-<pid>`` of dead pids), stopping the FalkorDB servers they had started: those
    run in their own session, so they outlive a SIGKILLed build. Returns the removed paths."""
    removed: list[Path] = []
    parent = index_dir.parent
    if not parent.is_dir():
        return removed
    for path in sorted(parent.glob(f".{index_dir.name}.tmp-*")) + sorted(parent.glob(f".{index_dir.name}.old-*")):
        try:
            pid = int(path.name.rsplit("-", 1)[1])
        except (IndexError, ValueError):
            continue
        if pid == os.getpid() or _pid_alive(pid):
            continue
        _stop_server_for(path)
        shutil.rmtree(path, ignore_errors=True)
        removed.append(path)
    return removed


def _pid_alive(pid: int) -> bool:
    """Whether a build's pid is still running (one zombie-aware check, shared with the server module)."""
    from graphs.store.falkordb_server import pid_alive

    return pid_alive(pid)


def _stop_server_for(index_dir: Path) -> None:
    """A FalkorDB server still serving the previous index would keep serving the old graph."""
    from graphs.store.falkordb_server import stop_server_for

    stop_server_for(index_dir / "falkordb")
