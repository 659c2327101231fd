"""The baseline the speed guard measures against: the project's own tree at a pinned commit, from git.

Why a commit and not pinned numbers: the 2-core VM's speed drifts (the same process ran a reference workload in
4.1 ms and in 7.9 ms minutes apart), and the question path's stages drift by other factors than any fixed reference
does, so a ratio pinned on one day strayed 8-11 % between processes and 14 % in a faster state of the machine. Two
builds run in lock-step on one CPU share whatever state the machine is in; what differs between them is the code.
"""

from __future__ import annotations

import io
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Top-level packages the worker imports from a build (the rest of a tree is not needed to run its question path).
PACKAGES = ("graphs", "tools", "agent", "prompts")


class BaselineError(RuntimeError):
    """The baseline cannot be had: the message says what is missing and what to do."""


def repo_root() -> Path:
    """The checkout this module belongs to: the build under test."""
    return Path(__file__).resolve().parents[2]


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, timeout=120, check=False)
    except FileNotFoundError as exc:
        raise BaselineError("the speed guard needs git to check out its baseline commit: install git") from exc


def resolve(rev: str, repo: Path) -> str:
    """The full commit id of `rev` in `repo`, fetched from ``origin`` when a shallow clone lacks it, or a
    :class:`BaselineError` saying how to get it."""
    done = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    if done.returncode != 0 and _git(repo, "fetch", "--quiet", "--depth=1", "origin", rev).returncode == 0:
        done = _git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")  # a shallow clone's origin had it
    if done.returncode != 0:
        raise BaselineError(
            f"the speed guard's baseline commit {rev} is not in the history of {repo} (a shallow clone or a source "
            "archive): run `git fetch --unshallow`, or pass --baseline-dir with a checkout of that commit"
        )
    return done.stdout.decode().strip()


@contextmanager
def checkout(rev: str, repo: Path | None = None) -> Iterator[tuple[str, Path]]:
    """(the commit id of `rev`, the project's packages at it extracted into a temporary directory) for the block
    (``git archive``: nothing in the repository, its worktrees or its index changes)."""
    repo = repo or repo_root()
    commit = resolve(rev, repo)
    done = _git(repo, "archive", "--format=tar", commit, *PACKAGES)
    if done.returncode != 0:
        raise BaselineError(f"git archive of the baseline {commit} failed: {done.stderr.decode(errors='replace')[-500:]}")
    with tempfile.TemporaryDirectory(prefix="skb-speed-baseline-") as tmp:
        with tarfile.open(fileobj=io.BytesIO(done.stdout)) as archive:
            archive.extractall(tmp, filter="data")
        yield commit, Path(tmp)
