"""Loader input at the edges: a byte-order mark, names no graph store can hold, keys over the store's limit --
each loads exactly or is refused where it is read, naming the file, the line and the fix.

The graph is the one of ``test_faults_at_the_edges`` (labels ``Widget``/``Maker``/``Part``, relations
``made_by``/``has_part``: no dataset words), indexed for real where a test builds it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli.main import app
from graphs.errors import LoaderError
from tests.agent.test_faults_at_the_edges import PROFILE, write_graph

pytestmark = pytest.mark.integration

runner = CliRunner()


# -- a byte-order mark never becomes part of a key -----------------------------------

def test_bom_at_the_start_of_a_triples_file_is_not_part_of_the_first_key(tmp_path: Path) -> None:
    import gzip

    from graphs.build import IndexConfig, build_index
    from graphs.bundle import IndexBundle
    from graphs.loaders.triples import load_triples

    kb, profile = write_graph(tmp_path / "data", bom=True)
    skb = load_triples(kb, profile)
    assert "Sprocket 0" in skb.nodes
    assert not any(key.startswith("\ufeff") for key in skb.nodes)
    gz = tmp_path / "data" / "kb.txt.gz"
    gz.write_bytes(gzip.compress(kb.read_bytes()))
    assert "Sprocket 0" in load_triples(gz, profile).nodes
    build_index(skb, tmp_path / "idx", IndexConfig(dataset="triples"))
    with IndexBundle.open(tmp_path / "idx") as bundle:
        assert bundle.node("Sprocket 0") is not None
        rows = bundle.store.query("MATCH (w {key: $k})-[:made_by]->(m) RETURN m.key", {"k": "Sprocket 0"}).rows
        assert [r[0] for r in rows] == ["Maker 0"]


# -- names no store can hold are refused at load time, with file, line and field -----

@pytest.mark.parametrize("rel", ["made`by", "made\x00by"])
def test_relation_with_a_backtick_or_nul_in_a_triples_file_names_file_and_line(
    tmp_path: Path, rel: str
) -> None:
    from graphs.loaders.triples import load_triples

    kb, _ = write_graph(tmp_path, f"Sprocket 1|{rel}|Maker 2\n")
    with pytest.raises(LoaderError) as info:
        load_triples(kb)
    msg = str(info.value)
    assert str(kb) in msg and "line 27" in msg and "relation" in msg and "fix:" in msg
    assert "backtick" in msg or "NUL" in msg


@pytest.mark.parametrize(
    ("patch", "field", "needle"),
    [
        ('default_label = "Ent`ity"\n', "default_label", "Ent`ity"),
        ('default_label = "Ent\\u0000ity"\n', "default_label", "Ent\\u0000ity"),
        ('literal_labels = ["Year`"]\n', "literal_labels", "Year`"),
        ('[relations."made`by"]\nsignature = "Widget -> Maker"\n', "relations", 'made`by'),
        ('[labels."Wid`get"]\ndescription = "x"\n', "labels", "Wid`get"),
    ],
)
def test_profile_names_with_a_backtick_or_nul_name_file_line_and_field(
    tmp_path: Path, patch: str, field: str, needle: str
) -> None:
    from graphs.skb.profile import load_profile

    top, _, tables = PROFILE.partition("[relations.made_by]")
    text = (patch + top + "[relations.made_by]" + tables) if not patch.startswith("[") else PROFILE + patch
    path = tmp_path / "p.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(LoaderError) as info:
        load_profile(path)
    msg = str(info.value)
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if needle in ln)
    assert str(path) in msg and f"line {line}" in msg and field in msg and "fix:" in msg, msg


def test_jsonl_label_or_relation_with_a_backtick_is_refused_before_embedding(tmp_path: Path) -> None:
    data = tmp_path / "data"
    data.mkdir()
    (data / "nodes.jsonl").write_text(
        '{"key": "a", "label": "Widget", "name": "A"}\n{"key": "b", "label": "Ma`ker", "name": "B"}\n')
    (data / "edges.jsonl").write_text('{"src": "a", "rel": "made_by", "dst": "a"}\n')
    result = runner.invoke(app, ["index", "--dataset", "jsonl", "--data", str(data), "--index-dir",
                                 str(tmp_path / "idx"), "-q"])
    assert result.exit_code == 2, result.output
    flat = " ".join(result.stderr.split())
    assert "nodes.jsonl (record line 2)" in flat and "Ma`ker" in flat and "backtick" in flat
    (data / "nodes.jsonl").write_text('{"key": "a", "label": "Widget", "name": "A"}\n')
    (data / "edges.jsonl").write_text('{"src": "a", "rel": "made_by", "dst": "a"}\n'
                                      '{"src": "a", "rel": "made\\u0000by", "dst": "a"}\n')
    result = runner.invoke(app, ["index", "--dataset", "jsonl", "--data", str(data), "--index-dir",
                                 str(tmp_path / "idx"), "-q"])
    assert result.exit_code == 2, result.output
    flat = " ".join(result.stderr.split())
    assert "edges.jsonl (record line 2)" in flat and "NUL" in flat
    assert not (tmp_path / "idx").exists()


# -- an over-long key is refused where it is read, with the right diagnosis ------------

def test_key_over_4096_bytes_is_refused_at_load_with_file_and_line(tmp_path: Path) -> None:
    from graphs.loaders.triples import load_triples

    long_name = "Sprocket " + "é" * 2100  # 4,209 bytes in UTF-8, 2,109 characters
    kb, profile = write_graph(tmp_path, f"{long_name}|made_by|Maker 0\n")
    result = runner.invoke(app, ["index", "--dataset", "triples", "--data", str(kb), "--profile", str(profile),
                                 "--index-dir", str(tmp_path / "idx"), "-q"])
    assert result.exit_code == 2, result.output
    flat = " ".join(result.stderr.split())
    assert f"{kb} (record line 27)" in flat and "4,096" in flat and "skb.validate" not in flat
    with pytest.raises(LoaderError, match="line 27"):
        load_triples(kb, profile)


def test_jsonl_key_at_the_limit_loads_and_over_it_names_the_line(tmp_path: Path) -> None:
    from graphs.build import IndexConfig, build_index
    from graphs.bundle import IndexBundle
    from graphs.loaders.jsonl import load_jsonl

    data = tmp_path / "data"
    data.mkdir()
    at_limit, over = "k" * 4096, "k" * 4097
    nodes = [{"key": "w", "label": "Widget", "name": "w"}, {"key": at_limit, "label": "Maker", "name": "m"}]
    (data / "nodes.jsonl").write_text("\n".join(json.dumps(n) for n in nodes) + "\n")
    (data / "edges.jsonl").write_text(json.dumps({"src": "w", "rel": "made_by", "dst": at_limit}) + "\n")
    build_index(load_jsonl(data), tmp_path / "idx", IndexConfig(dataset="jsonl"))  # real FalkorDB matches it
    with IndexBundle.open(tmp_path / "idx") as bundle:
        rows = bundle.store.query("MATCH (:Widget {key: 'w'})-[:made_by]->(m) RETURN m.name", {}).rows
        assert rows == [["m"]]
    nodes.append({"key": over, "label": "Maker", "name": "o"})
    (data / "nodes.jsonl").write_text("\n".join(json.dumps(n) for n in nodes) + "\n")
    with pytest.raises(LoaderError, match=r"nodes.jsonl \(record line 3\).*4,097 bytes"):
        load_jsonl(data)
