"""The manifest refuses indexes that are damaged, incomplete, from another format, or from another model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from graphs import manifest as manifest_mod
from graphs.errors import IndexCorruptError, IndexMismatchError, IndexNotFoundError
from graphs.manifest import (
    FORMAT_VERSION,
    Counts,
    EmbedderInfo,
    HNSWParams,
    Manifest,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    checksum_tree,
    read_verified,
    sha256_file,
)


def make_index(root: Path) -> Manifest:
    (root / "hnsw").mkdir(parents=True)
    (root / "bm25").mkdir()
    (root / "hnsw" / "global.bin").write_bytes(b"\x00\x01hnsw-bytes" * 100)
    (root / "hnsw" / "ids.json").write_text('{"keys": ["HP:1"]}')
    (root / "bm25" / "vocab.index.json").write_text('{"seizur": 0}')
    files = {f"{sub}/{rel}": digest for sub in ("hnsw", "bm25") for rel, digest in checksum_tree(root / sub).items()}
    manifest = Manifest(
        dataset="hpo",
        embedder=EmbedderInfo(model_name="all-MiniLM-L6-v2", dim=384),
        hnsw=HNSWParams(M=16),
        counts=Counts(nodes={"Phenotype": 1}, edges={"IS_A": 0}),
        files=files,
    )
    manifest.write(root)
    return manifest


def test_round_trip_and_recorded_versions(tmp_path: Path) -> None:
    written = make_index(tmp_path)
    read = Manifest.read(tmp_path)
    assert read == written
    assert read.format_version == FORMAT_VERSION == 1
    assert set(read.files) == {"hnsw/global.bin", "hnsw/ids.json", "bm25/vocab.index.json"}
    assert read.packages["hnswlib"] and read.packages["bm25s"] and read.packages["torch"]
    assert "sentence-transformers" in read.packages and "falkordb" in read.packages
    assert read.python_version.count(".") == 2 and read.created_at
    assert read.embedder_model == "all-MiniLM-L6-v2" and read.embedder_dim == 384 and read.hnsw.M == 16
    read.verify(tmp_path, expected_model="all-MiniLM-L6-v2", expected_dim=384)
    assert read_verified(tmp_path) == read


def test_tampered_file_is_refused_by_name(tmp_path: Path) -> None:
    manifest = make_index(tmp_path)
    (tmp_path / "bm25" / "vocab.index.json").write_text('{"seizor": 0}')
    with pytest.raises(IndexCorruptError, match=r"'bm25/vocab.index.json'.*fails its checksum.*skb index"):
        manifest.verify(tmp_path)
    manifest.verify(tmp_path, check_files=False)  # the cheap path skips checksums on purpose


def test_missing_file_is_refused_by_name(tmp_path: Path) -> None:
    manifest = make_index(tmp_path)
    (tmp_path / "hnsw" / "global.bin").unlink()
    with pytest.raises(IndexCorruptError, match=r"'hnsw/global.bin' is missing.*skb index"):
        manifest.verify(tmp_path)


def test_wrong_model_or_dim_is_a_mismatch(tmp_path: Path) -> None:
    manifest = make_index(tmp_path)
    with pytest.raises(IndexMismatchError, match=r"'all-MiniLM-L6-v2'.*'text-embedding-3-small'.*skb index"):
        manifest.verify(tmp_path, expected_model="text-embedding-3-small")
    with pytest.raises(IndexMismatchError, match=r"384-dimensional.*produces 1536"):
        manifest.verify(tmp_path, expected_dim=1536)


def test_wrong_format_version_is_a_mismatch(tmp_path: Path) -> None:
    manifest = make_index(tmp_path)
    raw = json.loads((tmp_path / "manifest.json").read_text())
    raw["format_version"] = 2
    raw["some_future_field"] = {"x": 1}
    (tmp_path / "manifest.json").write_text(json.dumps(raw))
    with pytest.raises(IndexMismatchError, match=r"format version 2 .* reads version 1.*skb index"):
        Manifest.read(tmp_path)
    old = manifest.model_copy(update={"format_version": 0})
    with pytest.raises(IndexMismatchError, match="format version 0"):
        old.verify(tmp_path)


def test_missing_manifest_says_how_to_build(tmp_path: Path) -> None:
    with pytest.raises(IndexNotFoundError, match=r"does not exist.*skb index"):
        Manifest.read(tmp_path / "nowhere")
    with pytest.raises(IndexNotFoundError, match=r"has no manifest.json.*skb index"):
        Manifest.read(tmp_path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "cannot be parsed"),
        ("[1, 2]", "not a JSON object"),
        (json.dumps({"format_version": 1, "dataset": "hpo"}), "invalid at 'embedder'"),
        (
            json.dumps({"format_version": 1, "dataset": "hpo", "embedder": {"model_name": "m", "dim": 0}}),
            "embedder.dim",
        ),
    ],
)
def test_unparseable_manifest_is_corrupt(tmp_path: Path, content: str, message: str) -> None:
    (tmp_path / "manifest.json").write_text(content)
    with pytest.raises(IndexCorruptError, match=message):
        Manifest.read(tmp_path)


@pytest.mark.parametrize("bad_path", ["../outside.txt", "/etc/passwd", "hnsw/../../x"])
def test_paths_escaping_the_index_are_refused(tmp_path: Path, bad_path: str) -> None:
    manifest = make_index(tmp_path / "idx")
    (tmp_path / "outside.txt").write_text("x")
    evil = manifest.model_copy(update={"files": {bad_path: sha256_file(tmp_path / "outside.txt")}})
    with pytest.raises(IndexCorruptError, match="invalid file path"):
        evil.verify(tmp_path / "idx")


def test_atomic_writes(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "f.json"
    atomic_write_json(target, {"a": [1, 2]})
    assert json.loads(target.read_text()) == {"a": [1, 2]}
    atomic_write_text(target, "héllo")
    assert target.read_text(encoding="utf-8") == "héllo"
    atomic_write_bytes(target, b"\x00bytes")
    assert target.read_bytes() == b"\x00bytes"
    assert sorted(p.name for p in target.parent.iterdir()) == ["f.json"]


def test_failed_write_keeps_the_old_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "f.txt"
    target.write_text("old")

    def broken_replace(src: object, dst: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(manifest_mod.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(target, "new")
    monkeypatch.undo()
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["f.txt"]  # the temp file was removed


def test_sha256_file_matches_hashlib(tmp_path: Path) -> None:
    import hashlib

    data = os.urandom(3 * (1 << 20) + 17)  # spans several read chunks
    (tmp_path / "blob").write_bytes(data)
    assert sha256_file(tmp_path / "blob") == hashlib.sha256(data).hexdigest()
