"""STaRK loader on the committed PrimeKG-shaped fixture, MAG/Amazon variants, and broken inputs."""

from __future__ import annotations

import pickle
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from graphs.errors import LoaderError
from graphs.loaders import load_dataset
from graphs.loaders.jsonl import load_jsonl, write_jsonl
from graphs.loaders.stark import load_stark
from tests.paths import FIXTURES

FIXTURE = FIXTURES / "stark" / "prime_mini" / "processed"


def _cases(rows: list[tuple[Any, ...]]) -> list[Any]:
    """Table rows as pytest params named by their first column."""
    return [pytest.param(*row, id=row[0]) for row in rows]


def _copy(tmp_path: Path) -> Path:
    d = tmp_path / "prime" / "processed"
    shutil.copytree(FIXTURE, d)
    return d


def _pkl(path: Path, value: Any) -> None:
    with path.open("wb") as fh:
        pickle.dump(value, fh)


def _pkl_load(path: Path) -> Any:
    with path.open("rb") as fh:
        return pickle.load(fh)


def test_prime_fixture() -> None:
    skb = load_stark(FIXTURE)
    assert skb.name == "prime_mini"
    assert skb.stats() == {
        "nodes": {"Disease": 3, "GeneProtein": 4, "Drug": 3},
        "edges": {"ASSOCIATED_WITH": 10, "PPI": 4, "INDICATION": 2, "CONTRAINDICATION": 1},
    }
    assert list(skb.nodes) == [str(i) for i in range(10)]  # answer_ids map by str(id)
    apert = skb.nodes["0"]
    assert apert.label == "Disease" and apert.name == "Apert syndrome"
    assert apert.props["source_id"] == "9431" and apert.props["source"] == "MONDO"
    assert apert.props["mayo_symptoms"].startswith("Early fusion of skull bones")
    assert "umls_description" not in apert.props  # NaN dropped
    assert "type" not in apert.props and "details" not in apert.props
    fgfr2 = skb.nodes["3"]
    assert fgfr2.props["alias"] == ["BEK", "KGFR", "CEK3", "CD332"]
    assert fgfr2.props["source_id"] == "2263"  # ints and strs unified
    assert "genomic_pos" not in fgfr2.props and "interpro" not in fgfr2.props  # nested: skipped
    assert skb.nodes["7"].props["molecular_weight"] == pytest.approx(422.91)
    assert ("9", "CONTRAINDICATION", "0") in {(e.src, e.rel, e.dst) for e in skb.edges}
    assert [(e.src, e.dst) for e in skb.out_edges("0")] == [("0", "3")]
    skb.validate()


def test_prime_text_fields() -> None:
    skb = load_stark(FIXTURE)
    disease = skb.node_types["Disease"]
    assert disease.description == "STaRK node type 'disease'"
    assert disease.text_fields[0] == "name"
    assert {"mondo_definition", "mayo_symptoms"} <= set(disease.text_fields)
    assert not {"source", "source_id", "mondo_name", "mondo_id"} & set(disease.text_fields)
    assert skb.node_types["GeneProtein"].description == "STaRK node type 'gene/protein'"
    text = skb.node_text("3")
    assert text.startswith("GeneProtein: FGFR2.") and "KGFR" in text and "Apert" in text


def test_round_trip_through_jsonl(tmp_path: Path) -> None:
    skb = load_stark(FIXTURE)
    write_jsonl(skb, tmp_path)
    back = load_jsonl(tmp_path)
    assert back.stats() == skb.stats() and back.node_types == skb.node_types
    assert {k: n.props for k, n in back.nodes.items()} == {k: n.props for k, n in skb.nodes.items()}


def test_type_dicts_as_pt_and_load_dataset(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    for stem in ("node_type_dict", "edge_type_dict"):
        torch.save(_pkl_load(d / f"{stem}.pkl"), d / f"{stem}.pt")
        (d / f"{stem}.pkl").unlink()
    skb = load_dataset("stark", d)
    assert skb.name == "prime"
    assert skb.stats() == load_stark(FIXTURE).stats()


def test_mag_layout(tmp_path: Path) -> None:
    """MAG: titles/DisplayName instead of name, no type dicts on disk, a___rel___b edge names."""
    d = tmp_path / "mag" / "processed"
    d.mkdir(parents=True)
    info = {
        0: {"type": "paper", "title": "Graph retrieval", "abstract": "We retrieve.", "mag_id": 11, "Date": "2019"},
        1: {"type": "paper", "title": "Trees", "abstract": "We grow trees.", "mag_id": 12},
        2: {"type": "author", "DisplayName": "Ada Lovelace", "PaperCount": 3, "mag_id": 13},
        3: {"type": "field_of_study", "DisplayName": "Information retrieval"},
    }
    _pkl(d / "node_info.pkl", info)
    torch.save(torch.LongTensor([3, 3, 0, 2]), d / "node_types.pt")
    torch.save(torch.LongTensor([[0, 2, 0], [1, 0, 3]]), d / "edge_index.pt")
    torch.save(torch.LongTensor([1, 3, 2]), d / "edge_types.pt")
    with pytest.raises(LoaderError, match=r"edge_type_dict\.pkl\|\.pt: file not found"):
        load_stark(d)
    edge_types = {
        0: "author___affiliated_with___institution",
        1: "paper___cites___paper",
        2: "paper___has_topic___field_of_study",
        3: "author___writes___paper",
    }
    skb = load_stark(d, edge_type_dict=edge_types)
    assert skb.name == "mag"
    assert {k: (n.label, n.name) for k, n in skb.nodes.items()} == {
        "0": ("Paper", "Graph retrieval"),
        "1": ("Paper", "Trees"),
        "2": ("Author", "Ada Lovelace"),
        "3": ("FieldOfStudy", "Information retrieval"),
    }
    assert [(e.src, e.rel, e.dst) for e in skb.edges] == [
        ("0", "CITES", "1"),
        ("2", "WRITES", "0"),
        ("0", "HAS_TOPIC", "3"),
    ]
    paper = skb.node_types["Paper"]
    assert "abstract" in paper.text_fields and "title" not in paper.text_fields  # title is the name
    assert "Date" in paper.text_fields and "mag_id" not in paper.text_fields
    assert skb.node_text("0").startswith("Paper: Graph retrieval. abstract: We retrieve.")


def test_amazon_layout_name_fields_and_float_types(tmp_path: Path) -> None:
    d = tmp_path / "cache" / "brand-category-color"
    d.mkdir(parents=True)
    info = {
        0: {"asin": "B01", "title": "Trail shoe", "feature": ["Grippy", "Light"], "review": [{"summary": "ok"}]},
        1: {"brand_name": "Acme"},
        2: {"color_name": "Red"},
    }
    _pkl(d / "node_info.pkl", info)
    _pkl(d / "node_type_dict.pkl", {0: "product", 1: "brand", 2: "color"})
    _pkl(d / "edge_type_dict.pkl", {0: "also_buy", 1: "has_brand", 2: "has_color"})
    torch.save(torch.tensor([0.0, 1.0, 2.0]), d / "node_types.pt")
    torch.save(torch.LongTensor([[0, 0], [1, 2]]), d / "edge_index.pt")
    torch.save(torch.LongTensor([1, 2]), d / "edge_types.pt")
    skb = load_stark(d)
    assert skb.name == "brand-category-color"
    assert [(n.label, n.name) for n in skb.nodes.values()] == [
        ("Product", "Trail shoe"),
        ("Brand", "Acme"),
        ("Color", "Red"),
    ]
    assert skb.nodes["0"].props["feature"] == ["Grippy", "Light"] and "review" not in skb.nodes["0"].props
    assert [e.rel for e in skb.edges] == ["HAS_BRAND", "HAS_COLOR"]


Mutation = Callable[[Path], None]


def _drop(name: str) -> Mutation:
    return lambda d: (d / name).unlink()


def _put_pt(name: str, value: Any) -> Mutation:
    return lambda d: torch.save(value, d / name)


def _put_pkl(name: str, value: Any) -> Mutation:
    return lambda d: _pkl(d / name, value)


def _info_without_node_9(d: Path) -> None:
    info = _pkl_load(d / "node_info.pkl")
    del info[9]
    _pkl(d / "node_info.pkl", info)


@pytest.mark.parametrize(
    ("case", "mutate", "file", "needles"),
    _cases(
        [
            ("missing node_info", _drop("node_info.pkl"), "node_info.pkl", ["file not found"]),
            ("missing node_types", _drop("node_types.pt"), "node_types.pkl|.pt", ["file not found"]),
            ("missing edge_index", _drop("edge_index.pt"), "edge_index.pkl|.pt", ["file not found"]),
            ("length mismatch", _info_without_node_9, "node_info.pkl", ["9 nodes in node_info but 10"]),
            (
                "edge out of range",
                _put_pt("edge_index.pt", torch.LongTensor([[0] * 16 + [10], [3] * 17])),
                "edge_index.pt",
                ["record 16", "edge 16 (10 -> 3)", "outside 0..9"],
            ),
            (
                "edge count mismatch",
                _put_pt("edge_types.pt", torch.LongTensor([0, 1])),
                "edge_types.pt",
                ["2 edge types but 17 edges"],
            ),
            (
                "unknown node type",
                _put_pt("node_types.pt", torch.LongTensor([0, 0, 0, 1, 1, 1, 1, 2, 2, 7])),
                "node_types.pt",
                ["record 9", "type id 7"],
            ),
            (
                "unknown edge type",
                _put_pt("edge_types.pt", torch.LongTensor([0] * 16 + [9])),
                "edge_types.pt",
                ["record 16", "type id 9"],
            ),
            ("edge_index 1-d", _put_pt("edge_index.pt", torch.LongTensor([0, 1])), "edge_index.pt", ["2 dimension"]),
            ("node_info not dict", _put_pkl("node_info.pkl", [1, 2]), "node_info.pkl", ["expected a dict"]),
            (
                "node id out of range",
                _put_pkl("node_info.pkl", {i + 1: {"name": str(i)} for i in range(10)}),
                "node_info.pkl",
                ["record 10", "outside 0..9"],
            ),
            ("corrupt tensor", lambda d: (d / "edge_types.pt").write_bytes(b"junk"), "edge_types.pt", ["cannot read"]),
            ("bad type dict", _put_pkl("node_type_dict.pkl", ["disease"]), "node_type_dict.pkl", ["expected a dict"]),
        ]
    ),
)
def test_bad_input(tmp_path: Path, case: str, mutate: Mutation, file: str, needles: list[str]) -> None:
    d = _copy(tmp_path)
    mutate(d)
    with pytest.raises(LoaderError) as info:
        load_stark(d)
    message = str(info.value)
    assert file in message, (case, message)
    assert "fix:" in message, (case, message)
    for needle in needles:
        assert needle in message, (case, message)


def test_pickled_tensor_is_refused_by_weights_only(tmp_path: Path) -> None:
    """A .pt holding an arbitrary object is not unpickled: torch.load(weights_only=True)."""
    d = _copy(tmp_path)
    torch.save({"x": Path("/")}, d / "edge_types.pt")
    with pytest.raises(LoaderError, match=r"edge_types.pt: cannot read"):
        load_stark(d)


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(LoaderError, match="directory not found"):
        load_stark(tmp_path / "nope")


# -- issue 15 item 13: pickles run code only with an explicit trust flag ----------------------------------
class _Planted:
    """Unpickling this calls open(path, "w"): a stand-in for any code a hostile pickle could run."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return (open, (str(self.path), "w"))


def test_a_pickle_that_would_run_code_is_refused_without_trust_pickle(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    marker = tmp_path / "ran"
    _pkl(d / "node_info.pkl", {0: {"name": _Planted(marker)}})
    with pytest.raises(LoaderError) as info:
        load_stark(d)
    assert not marker.exists(), "unpickling ran code"
    message = str(info.value)
    assert "node_info.pkl" in message and "--trust-pickle" in message and "io.open" in message


def test_a_pt_file_is_preferred_over_a_pkl_of_the_same_name(tmp_path: Path) -> None:
    d = _copy(tmp_path)
    marker = tmp_path / "ran"
    torch.save(_pkl_load(d / "node_type_dict.pkl"), d / "node_type_dict.pt")
    _pkl(d / "node_type_dict.pkl", _Planted(marker))
    skb = load_stark(d, trust_pickle=True)  # even when pickles are trusted, the .pt is read
    assert not marker.exists()
    assert skb.stats() == load_stark(FIXTURE).stats()


def test_a_pickle_needing_imports_loads_only_with_trust_pickle(tmp_path: Path) -> None:
    import numpy as np

    d = _copy(tmp_path)
    info = _pkl_load(d / "node_info.pkl")
    info[7]["molecular_weight"] = np.float64(422.91)  # numpy scalars are pickled through numpy's reconstructors
    _pkl(d / "node_info.pkl", info)
    with pytest.raises(LoaderError, match=r"--trust-pickle"):
        load_stark(d)
    assert load_stark(d, trust_pickle=True).nodes["7"].props["molecular_weight"] == pytest.approx(422.91)


@pytest.mark.integration
def test_skb_index_refuses_untrusted_pickles_and_accepts_the_flag(tmp_path: Path) -> None:
    import numpy as np
    from typer.testing import CliRunner

    from agent.cli.main import app

    d = _copy(tmp_path)
    info = _pkl_load(d / "node_info.pkl")
    info[7]["molecular_weight"] = np.float64(422.91)
    _pkl(d / "node_info.pkl", info)
    args = ["index", "--dataset", "stark", "--data", str(d), "--index-dir", str(tmp_path / "index"), "--store", "none"]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and "--trust-pickle" in " ".join(refused.stderr.split())
    assert not (tmp_path / "index").exists()
    accepted = CliRunner().invoke(app, [*args, "--trust-pickle"])
    assert accepted.exit_code == 0, accepted.stderr
    assert (tmp_path / "index" / "manifest.json").is_file()
