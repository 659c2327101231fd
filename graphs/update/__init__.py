"""Keeping an index up to date: change sets (``changes``) applied as a new generation (``apply``)."""

from graphs.update.apply import UpdateSummary, lock_path, update_index, update_lock
from graphs.update.changes import ApplyReport, Change, ChangeSet, apply_changes, parse_changes, read_changes

__all__ = [
    "ApplyReport",
    "Change",
    "ChangeSet",
    "UpdateSummary",
    "apply_changes",
    "lock_path",
    "parse_changes",
    "read_changes",
    "update_index",
    "update_lock",
]
