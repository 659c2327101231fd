"""The index manifest and the atomic-write helpers every index writer shares.

Why a manifest: an index directory is a bundle of files written by different
libraries (hnswlib, bm25s, our jsonl writer). Loading one that was built by a
different embedding model, a different on-disk format, or that was damaged
half-way through a copy would give silently wrong answers. The manifest records
what built the index and the sha256 of every file so ``verify`` can refuse such
an index with a message that says which file or setting is wrong and how to fix it.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import platform
import tempfile
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path, PurePosixPath
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from graphs.errors import IndexCorruptError, IndexMismatchError, IndexNotFoundError

FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
REBUILD_HINT = "rebuild it with `skb index`"
#: Bytes hashed at each end of a large data file by the cheap check at open (see FileDigest).
SAMPLE_BYTES = 1 << 16
#: The graph data of an index built with the embedded FalkorDB store.
GRAPH_FILE = "falkordb/dump.rdb"


def rebuild_hint(index_dir: Path) -> str:
    """The command that replaces a damaged index, with its directory."""
    return (
        f"rebuild it with `skb index --force --index-dir {index_dir}` "
        "(with the --dataset and --data it was built from)"
    )

#: Distributions whose versions are recorded; a mismatch is informative, not fatal.
KEY_PACKAGES = ("hnswlib", "bm25s", "torch", "sentence-transformers", "falkordb", "numpy")

_CHUNK = 1 << 20


# -- atomic writes ---------------------------------------------------------------
def fsync_dir(path: Path) -> None:
    """Persist a directory entry (a rename) on POSIX; a no-op where directories cannot be opened."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """Flush a file some library wrote (hnswlib, bm25s) before it is renamed into place."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` so that readers see either the old file or the complete new one, never a torn one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        try:
            os.unlink(tmp_name)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, obj: Any, *, indent: int | None = 2) -> None:
    atomic_write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False, sort_keys=False) + "\n")


def temp_path_for(path: Path) -> Path:
    """A unique sibling name for libraries that insist on writing to a path themselves (hnswlib)."""
    path = Path(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    return Path(tmp_name)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def checksum_tree(root: Path, *, exclude: tuple[str, ...] = ()) -> dict[str, str]:
    """sha256 of every regular file under ``root``, keyed by POSIX path relative to ``root``."""
    root = Path(root)
    out: dict[str, str] = {}
    for path in sorted(root.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(root).as_posix()
        if any(rel == ex or rel.startswith(ex.rstrip("/") + "/") for ex in exclude):
            continue
        out[rel] = sha256_file(path)
    return out


def verify_checksums(root: Path, files: dict[str, str], *, what: str = "index", hint: str = REBUILD_HINT) -> None:
    """Raise IndexCorruptError naming the first file that is missing or whose sha256 differs."""
    root = Path(root)
    for rel, expected in sorted(files.items()):
        target = _safe_join(root, rel)
        if not target.is_file():
            raise IndexCorruptError(f"{what} file {rel!r} is missing from {root} -- {hint}")
        actual = sha256_file(target)
        if actual != expected:
            raise IndexCorruptError(
                f"{what} file {rel!r} in {root} fails its checksum (expected sha256 {expected[:12]}..., "
                f"found {actual[:12]}...); the file was modified or damaged -- {hint}"
            )


def sample_sha256(path: Path, size: int | None = None) -> str:
    """sha256 over the size and the first and last SAMPLE_BYTES of a file: constant cost at any size."""
    size = path.stat().st_size if size is None else size
    digest = hashlib.sha256(str(size).encode("ascii") + b"\0")
    with open(path, "rb") as handle:
        digest.update(handle.read(SAMPLE_BYTES))
        if size > SAMPLE_BYTES:
            handle.seek(max(SAMPLE_BYTES, size - SAMPLE_BYTES))
            digest.update(handle.read(SAMPLE_BYTES))
    return digest.hexdigest()


class FileDigest(BaseModel):
    """A large data file (the graph dump): checked at open by size and sampled digest, in full on demand.

    Why sampled: the graph dump of a large index is hundreds of MB and every CLI call opens the
    index; hashing it all would cost seconds per start. Redis ends an RDB file with a CRC64 of
    its whole content, so the sampled tail covers a checksum of every byte: truncation, deletion
    and any re-save (which rewrites that CRC and the header's timestamps) are caught at open;
    ``Manifest.verify(full=True)`` compares the full sha256.
    """

    size: int = Field(ge=0)
    sha256: str
    sample_sha256: str

    @classmethod
    def of(cls, path: Path) -> FileDigest:
        size = path.stat().st_size
        return cls(size=size, sha256=sha256_file(path), sample_sha256=sample_sha256(path, size))


def verify_data_files(root: Path, files: dict[str, FileDigest], *, full: bool = False) -> None:
    """Raise IndexCorruptError naming the first data file that is missing, resized or altered."""
    root = Path(root)
    for rel, expected in sorted(files.items()):
        target = _safe_join(root, rel)
        hint = rebuild_hint(root)
        if not target.is_file():
            raise IndexCorruptError(f"index data file {rel!r} is missing from {root} -- {hint}")
        size = target.stat().st_size
        if size != expected.size:
            raise IndexCorruptError(
                f"index data file {rel!r} in {root} has {size} bytes but the manifest records {expected.size}; "
                f"it was truncated, emptied or rewritten -- {hint}"
            )
        actual = sha256_file(target) if full else sample_sha256(target, size)
        if actual != (expected.sha256 if full else expected.sample_sha256):
            raise IndexCorruptError(
                f"index data file {rel!r} in {root} fails its checksum; it was modified after the build -- {hint}"
            )


def _safe_join(root: Path, rel: str) -> Path:
    """Refuse manifest entries that would escape the index directory."""
    pure = PurePosixPath(rel)
    if pure.is_absolute() or ".." in pure.parts or not pure.parts:
        raise IndexCorruptError(f"manifest lists an invalid file path {rel!r} in {root} -- {REBUILD_HINT}")
    return root.joinpath(*pure.parts)


# -- the manifest ------------------------------------------------------------------
def package_versions(names: tuple[str, ...] = KEY_PACKAGES) -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _skb_agent_version() -> str:
    try:
        return metadata.version("skb-agent")
    except metadata.PackageNotFoundError:
        return "0+unknown"


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class EmbedderInfo(BaseModel):
    model_name: str
    dim: int = Field(gt=0)


class HNSWParams(BaseModel):
    """HNSW graph parameters (re-exported by ``graphs.index.hnsw``).

    Defined here so the manifest can record them without importing hnswlib, and
    ``hnsw_index`` can use the atomic-write helpers without an import cycle.
    """

    M: int = Field(default=32, ge=2, le=256)
    ef_construction: int = Field(default=200, ge=8)
    ef: int = Field(default=128, ge=1)
    global_graph: bool | None = None
    """Whether the index also holds one graph of all its nodes beside the per-label graphs; None: where it pays
    (``graphs.index.hnsw_params.wants_global_graph``). A sharded build always makes one per shard."""
    mapped: bool = False
    """Build the graphs with USearch, searched from their memory-mapped files, so that processes on one machine
    share them (``graphs.index.ann``); False: hnswlib, read into each process's memory, about twice as fast."""


class Counts(BaseModel):
    nodes: dict[str, int] = Field(default_factory=dict)
    edges: dict[str, int] = Field(default_factory=dict)


class Manifest(BaseModel):
    """What built an index and the checksum of every file in it."""

    format_version: int = FORMAT_VERSION
    created_at: str = Field(default_factory=_now)
    skb_agent_version: str = Field(default_factory=_skb_agent_version)
    python_version: str = Field(default_factory=platform.python_version)
    packages: dict[str, str | None] = Field(default_factory=package_versions)
    dataset: str
    embedder: EmbedderInfo
    hnsw: HNSWParams = Field(default_factory=HNSWParams)
    counts: Counts = Field(default_factory=Counts)
    files: dict[str, str] = Field(default_factory=dict)
    data_files: dict[str, FileDigest] = Field(default_factory=dict)
    """Large data files (the graph dump), checked by size and sampled digest at open; see FileDigest."""
    generation: str = ""
    """Random id of the build that wrote this manifest: a process holding an index open compares it
    to detect that a rebuild replaced the index ("" in manifests written before it existed)."""
    extra: dict[str, Any] = Field(default_factory=dict)

    def listed(self) -> set[str]:
        """Every file the build recorded: ``files`` (full sha256) and ``data_files`` (large, sampled at open)."""
        return set(self.files) | set(self.data_files)

    @property
    def embedder_model(self) -> str:
        return self.embedder.model_name

    @property
    def embedder_dim(self) -> int:
        return self.embedder.dim

    # -- io ------------------------------------------------------------------
    def write(self, index_dir: Path) -> Path:
        path = Path(index_dir) / MANIFEST_NAME
        atomic_write_text(path, self.model_dump_json(indent=2) + "\n")
        return path

    @classmethod
    def read(cls, index_dir: Path) -> Manifest:
        index_dir = Path(index_dir)
        path = index_dir / MANIFEST_NAME
        if not path.is_file():
            where = "does not exist" if not index_dir.exists() else f"has no {MANIFEST_NAME}"
            raise IndexNotFoundError(
                f"no index at {index_dir} (the directory {where}) -- build one with `skb index` "
                f"(`skb index --dataset NAME --data PATH --index-dir {index_dir}`; `skb index --help` lists the datasets)"
            )
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise IndexCorruptError(f"{path} cannot be parsed ({exc}) -- {REBUILD_HINT}") from exc
        if not isinstance(raw, dict):
            raise IndexCorruptError(f"{path} is not a JSON object -- {REBUILD_HINT}")
        # Check the version before the schema: a future format may not validate against this one.
        version = raw.get("format_version")
        if version != FORMAT_VERSION:
            raise IndexMismatchError(_version_message(index_dir, version))
        try:
            return cls.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            loc = ".".join(str(p) for p in first["loc"])
            raise IndexCorruptError(f"{path} is invalid at {loc!r}: {first['msg']} -- {REBUILD_HINT}") from exc

    # -- checks ----------------------------------------------------------------
    def verify(
        self,
        index_dir: Path,
        *,
        expected_model: str | None = None,
        expected_dim: int | None = None,
        check_files: bool = True,
        full: bool = False,
    ) -> None:
        """Refuse an index this code cannot serve correctly; cheap checks first, checksums last.

        ``full`` also hashes the large data files completely (otherwise size + sampled digest): the
        large files (vectors, arrays, graph dump; see ``graphs.build.LARGE_FILE_BYTES``) are checked
        at every open by size and sampled digest, in full by ``skb verify``."""
        index_dir = Path(index_dir)
        if self.format_version != FORMAT_VERSION:
            raise IndexMismatchError(_version_message(index_dir, self.format_version))
        if expected_model is not None and expected_model != self.embedder.model_name:
            raise IndexMismatchError(
                f"index at {index_dir} was built with embedding model {self.embedder.model_name!r} but "
                f"{expected_model!r} is configured -- use the same model, or {REBUILD_HINT} --embedder ..."
            )
        if expected_dim is not None and expected_dim != self.embedder.dim:
            raise IndexMismatchError(
                f"index at {index_dir} holds {self.embedder.dim}-dimensional vectors but the configured "
                f"embedder produces {expected_dim} -- {REBUILD_HINT}"
            )
        if check_files:
            verify_checksums(index_dir, self.files, hint=rebuild_hint(index_dir))
            self.verify_graph(index_dir, full=full)
            if full:  # at open, the loaded index is compared with the record instead (graphs.bundle_load)
                self.verify_shards(index_dir)
                self.verify_lineage(index_dir)

    def verify_lineage(self, index_dir: Path) -> None:
        """A generation written by a change set (``graphs.update``) names its parent generation, which is not
        itself, and the change set's sha256, which is the newest of the applied digests it lists."""
        record = self.extra.get("update")
        if record is None:
            return
        history = self.extra.get("applied_changes")
        digest = record.get("changes_sha256") if isinstance(record, dict) else None
        parent = record.get("parent") if isinstance(record, dict) else None
        why = ("the update record is not an object" if not isinstance(record, dict) else
               f"the change set digest {digest!r} is not a sha256" if not _is_sha256(digest) else
               f"the parent generation {parent!r} is missing or the generation itself"
               if not isinstance(parent, str) or not parent or parent == self.generation else
               "the change set is not the newest of the applied digests"
               if not isinstance(history, list) or not history or history[-1] != digest else "")
        if why:
            raise IndexCorruptError(f"the manifest of {index_dir} has a malformed update lineage: {why} -- "
                                    f"{rebuild_hint(Path(index_dir))}")

    def verify_shards(self, index_dir: Path) -> None:
        """A sharded HNSW index (``extra["hnsw_shards"]``: row ranges) has the layout its id table names, its
        ranges cover every node once, and every shard's files are listed. A one-shard index records none."""
        recorded = self.extra.get("hnsw_shards")
        ids_path = Path(index_dir) / "hnsw" / "ids.json"
        try:
            table = json.loads(ids_path.read_text(encoding="utf-8")) if ids_path.is_file() else {}
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise IndexCorruptError(f"{ids_path} cannot be parsed ({exc}) -- {rebuild_hint(Path(index_dir))}") from exc
        found = table.get("shards") if isinstance(table, dict) else None
        if recorded is None and found is None:
            return
        try:
            want = [[int(a), int(b)] for a, b in recorded or []]
            have = [[int(e["start"]), int(e["end"])] for e in found or []]
            files = [f"hnsw/{e['global']}" for e in found or []]
            files += [f"hnsw/{rel}" for e in found or [] for rel in e["label_files"].values()]
        except (TypeError, ValueError, KeyError, AttributeError) as exc:
            raise IndexCorruptError(f"the HNSW shard layout of {index_dir} is malformed ({exc}) -- "
                                    f"{rebuild_hint(Path(index_dir))}") from exc
        nodes = sum(self.counts.nodes.values())
        covered = bool(want) and want[0][0] == 0 and want[-1][1] == nodes and all(
            a[1] == b[0] for a, b in itertools.pairwise(want))
        unlisted = [f for f in files if f not in self.listed()]
        if want != have or not covered or unlisted:
            why = (f"the manifest records HNSW shards {want} but hnsw/ids.json holds {have}" if want != have else
                   f"the HNSW shards {want} do not cover the {nodes} nodes once each" if not covered else
                   f"HNSW shard files {unlisted[:3]} are not listed in the manifest")
            raise IndexCorruptError(f"{why} -- {rebuild_hint(Path(index_dir))}")

    def verify_graph(self, index_dir: Path, *, full: bool = False) -> None:
        """The graph dump of an embedded-store index exists, is non-empty and matches its record.

        Manifests written before the dump was recorded still must have a non-empty dump: an
        index whose graph is gone would otherwise open and silently answer nothing.
        """
        verify_data_files(index_dir, self.data_files, full=full)
        if self.extra.get("store") != "falkordb" or GRAPH_FILE in self.data_files:
            return
        dump = Path(index_dir) / GRAPH_FILE
        if not dump.is_file() or dump.stat().st_size == 0:
            state = "missing" if not dump.is_file() else "empty"
            raise IndexCorruptError(
                f"the graph data {GRAPH_FILE!r} of {index_dir} is {state} -- {rebuild_hint(Path(index_dir))}"
            )


def _is_sha256(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def _version_message(index_dir: Path, found: object) -> str:
    return (
        f"index at {index_dir} has format version {found!r} but this skb-agent reads version "
        f"{FORMAT_VERSION} -- {REBUILD_HINT}"
    )


def read_verified(
    index_dir: Path,
    *,
    expected_model: str | None = None,
    expected_dim: int | None = None,
    check_files: bool = True,
) -> Manifest:
    """Read and verify in one call: what a loader does before trusting any file in ``index_dir``."""
    manifest = Manifest.read(index_dir)
    manifest.verify(index_dir, expected_model=expected_model, expected_dim=expected_dim, check_files=check_files)
    return manifest
