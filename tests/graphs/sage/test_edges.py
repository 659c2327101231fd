"""SAGE similarity edges: percentile pruning, OR/AND combination, persistence, real-model behaviour."""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from graphs.build import SimilarityConfig
from graphs.errors import ConfigError, IndexNotFoundError
from graphs.sage.edges import (
    EDGES_FILE,
    REL,
    STATS_FILE,
    SimilarityGraph,
    add_similarity_edges,
    build_similarity_edges,
    compute_candidates,
    default_fields,
    field_text,
)
from graphs.skb.model import SKB, Edge, Node, NodeType


class AngleEmbedder:
    """Deterministic 2-D unit vectors from texts of the form '<field> <angle in degrees>'.

    Only for the percentile arithmetic: it makes every pairwise cosine known in advance.
    """

    model_name = "angles"
    dim = 2

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        angles = np.radians([float(t.split()[-1]) for t in texts])
        return np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)

    def embed_query(self, text: str) -> np.ndarray:
        return self.embed([text])[0]


NAME_ANGLES = [0.0, 7.0, 19.0, 40.0, 72.0]
# Closest definition pairs: (n3, n4) 3 degrees, (n1, n2) 5 degrees; every other pair >= 50.
DEF_ANGLES = [0.0, 50.0, 55.0, 120.0, 123.0]


def _skb(names: Sequence[float], definitions: Sequence[float | None] = ()) -> SKB:
    skb = SKB("angles", [NodeType(label="Item", text_fields=["name", "definition"])])
    for i, angle in enumerate(names):
        props: dict[str, object] = {"name": f"name {angle}"}
        if i < len(definitions) and definitions[i] is not None:
            props["definition"] = f"definition {definitions[i]}"
        skb.add_node(Node(key=f"n{i}", label="Item", props=props))
    return skb


def _pairs(sim: SimilarityGraph) -> set[tuple[str, str]]:
    return {(e.src, e.dst) for e in sim.edges}


def _cos(deg: float) -> float:
    return math.cos(math.radians(deg))


def test_percentile_threshold_is_taken_over_candidate_pairs_and_edges_exceed_it() -> None:
    skb = _skb(NAME_ANGLES)
    config = SimilarityConfig(percentile=80, knn=10)
    sim = build_similarity_edges(skb, None, AngleEmbedder(), config, fields={"Item": ["name"]})
    # 5 nodes, knn >= 4: all 10 pairs are candidates. Angle differences sorted ascending:
    # 7 (n0,n1), 12 (n1,n2), 19, 21, 32, 33, 40, 53, 65, 72. The 80th percentile of the 10
    # cosines sits at rank 7.2 (0-based, ascending): between cos(19) and cos(12).
    expected = _cos(19) + 0.2 * (_cos(12) - _cos(19))
    assert sim.thresholds["Item.name"] == pytest.approx(expected, abs=1e-6)
    assert sim.candidate_pairs == {"Item": 10, "Item.name": 10}
    assert _pairs(sim) == {("n0", "n1"), ("n1", "n2")}
    assert sim.count == 2
    by_pair = {(e.src, e.dst): e for e in sim.edges}
    assert by_pair[("n0", "n1")].score == pytest.approx(_cos(7), abs=1e-6)
    assert by_pair[("n0", "n1")].fields == ["name"]

    # 95th percentile: rank 8.55 lies between cos(12) and cos(7): only the closest pair survives.
    strict = build_similarity_edges(skb, None, AngleEmbedder(), SimilarityConfig(percentile=95, knn=10),
                                    fields={"Item": ["name"]})
    assert _pairs(strict) == {("n0", "n1")}


def test_knn_limits_candidate_pairs() -> None:
    skb = _skb(NAME_ANGLES)
    cands = compute_candidates(skb, None, AngleEmbedder(), knn=1, fields={"Item": ["name"]})
    item = cands.labels["Item"]
    got = {(item.keys[int(a)], item.keys[int(b)]) for a, b in zip(item.a, item.b, strict=True)}
    # Nearest neighbours: n0->n1, n1->n0, n2->n1, n3->n2, n4->n3.
    assert got == {("n0", "n1"), ("n1", "n2"), ("n2", "n3"), ("n3", "n4")}
    # Percentile 0 keeps every candidate above the minimum, never a non-candidate pair.
    sim = cands.select(0, "or")
    assert _pairs(sim) == {("n0", "n1"), ("n1", "n2"), ("n2", "n3")}


def test_or_keeps_any_field_and_keeps_all_fields() -> None:
    skb = _skb(NAME_ANGLES, DEF_ANGLES)
    fields = {"Item": ["name", "definition"]}
    emb = AngleEmbedder()
    or_sim = build_similarity_edges(skb, None, emb, SimilarityConfig(percentile=80, knn=10, logic="or"), fields=fields)
    and_sim = build_similarity_edges(skb, None, emb, SimilarityConfig(percentile=80, knn=10, logic="and"),
                                     fields=fields)
    # name passes (n0,n1), (n1,n2); definition passes (n3,n4), (n1,n2).
    assert _pairs(or_sim) == {("n0", "n1"), ("n1", "n2"), ("n3", "n4")}
    assert _pairs(and_sim) == {("n1", "n2")}
    edge = next(e for e in or_sim.edges if (e.src, e.dst) == ("n1", "n2"))
    assert edge.fields == ["name", "definition"]
    assert edge.score == pytest.approx(max(_cos(12), _cos(5)), abs=1e-6)
    assert set(or_sim.thresholds) == {"Item.name", "Item.definition"}


def test_and_ignores_fields_missing_on_either_node() -> None:
    # n5 has a name 1.5 degrees from n0 and no definition.
    skb = _skb([*NAME_ANGLES, 1.5], [*DEF_ANGLES, None])
    fields = {"Item": ["name", "definition"]}
    emb = AngleEmbedder()
    # 15 name pairs: the 80th percentile (rank 11.2) keeps the 3 closest: (n0,n5) 1.5, (n1,n5) 5.5, (n0,n1) 7.
    and_sim = build_similarity_edges(skb, None, emb, SimilarityConfig(percentile=80, knn=10, logic="and"),
                                     fields=fields)
    or_sim = build_similarity_edges(skb, None, emb, SimilarityConfig(percentile=80, knn=10, logic="or"),
                                    fields=fields)
    assert _pairs(and_sim) == {("n0", "n5"), ("n1", "n5")}
    assert _pairs(or_sim) == {("n0", "n5"), ("n1", "n5"), ("n0", "n1"), ("n1", "n2"), ("n3", "n4")}
    assert or_sim.candidate_pairs["Item.definition"] == 10


def test_save_load_round_trip_is_deterministic_and_readable_by_the_bundle(tmp_path: Path) -> None:
    from graphs.bundle import _load_similarity

    skb = _skb(NAME_ANGLES, DEF_ANGLES)
    sim = build_similarity_edges(skb, None, AngleEmbedder(), SimilarityConfig(percentile=80, knn=10),
                                 fields={"Item": ["name", "definition"]})
    files = sim.save(tmp_path / "a")
    again = sim.save(tmp_path / "b")
    assert set(files) == {EDGES_FILE, STATS_FILE}
    assert files[EDGES_FILE] == again[EDGES_FILE]
    from graphs.manifest import sha256_file

    assert files[EDGES_FILE] == sha256_file(tmp_path / "a" / EDGES_FILE)
    with gzip.open(tmp_path / "a" / EDGES_FILE, "rt") as fh:
        records = [json.loads(line) for line in fh]
    assert [(r["src"], r["dst"]) for r in records] == sorted(_pairs(sim))
    assert all(r["src"] < r["dst"] and r["rel"] == REL and r["percentile"] == 80 for r in records)

    loaded = SimilarityGraph.load(tmp_path / "a")
    assert _pairs(loaded) == _pairs(sim)
    assert loaded.thresholds == pytest.approx(sim.thresholds)
    assert loaded.candidate_pairs == sim.candidate_pairs
    table = _load_similarity(tmp_path / "a")
    assert {k for k, _ in table["n1"]} == {"n0", "n2"}

    with pytest.raises(IndexNotFoundError, match="similarity-percentile"):
        SimilarityGraph.load(tmp_path / "missing")


def test_add_similarity_edges_leaves_schema_edges_and_does_not_duplicate() -> None:
    skb = _skb(NAME_ANGLES)
    skb.add_edge(Edge(src="n0", rel="IS_A", dst="n4"))
    sim = build_similarity_edges(skb, None, AngleEmbedder(), SimilarityConfig(percentile=80, knn=10),
                                 fields={"Item": ["name"]})
    assert add_similarity_edges(skb, sim) == 2
    assert add_similarity_edges(skb, sim) == 0
    assert [(e.src, e.rel, e.dst) for e in skb.edges] == [
        ("n0", "IS_A", "n4"), ("n0", REL, "n1"), ("n1", REL, "n2")
    ]
    skb.validate()


def test_bad_settings_are_refused_with_a_fix() -> None:
    skb = _skb(NAME_ANGLES)
    with pytest.raises(ConfigError, match=r"\[0, 100\]"):
        build_similarity_edges(skb, None, AngleEmbedder(), SimilarityConfig(percentile=None))
    with pytest.raises(ConfigError, match="unknown node type"):
        compute_candidates(skb, None, AngleEmbedder(), labels=["Nope"])
    with pytest.raises(ConfigError, match="needs the main HNSW index"):
        compute_candidates(skb, None, AngleEmbedder(), fields={"Item": ["@text"]})


def test_default_fields_pick_text_rich_types_and_present_fields() -> None:
    skb = SKB("t", [
        NodeType(label="Phenotype", synonym_field="synonyms", text_fields=["name", "synonyms", "definition"]),
        NodeType(label="Gene", text_fields=["name"]),
    ])
    skb.add_node(Node("HP:1", "Phenotype", {"name": "Seizure", "synonyms": ["Fits", "Epileptic seizure"]}))
    skb.add_node(Node("HP:2", "Phenotype", {"name": "Focal seizure", "synonyms": []}))
    skb.add_node(Node("FGFR2", "Gene", {"name": "FGFR2"}))
    skb.add_node(Node("FGFR3", "Gene", {"name": "FGFR3"}))
    # Gene symbols are one word each: not text-rich. 'definition' is on no phenotype.
    assert default_fields(skb) == {"Phenotype": ["name", "synonyms"]}
    assert field_text(skb.nodes["HP:1"], "synonyms") == "Fits; Epileptic seizure"
    assert field_text(skb.nodes["HP:2"], "synonyms") is None


# -- real model ---------------------------------------------------------------------------------
# Real HPO phenotype names and synonyms, in four clinical groups.
PHENOTYPES: dict[str, tuple[str, str, list[str]]] = {
    "HP:0001250": ("seizure", "Seizure", ["Epileptic seizure", "Seizures", "Fits"]),
    "HP:0002069": (
        "seizure", "Bilateral tonic-clonic seizure", ["Generalized tonic-clonic seizures", "Grand mal seizures"]
    ),
    "HP:0007359": ("seizure", "Focal-onset seizure", ["Focal seizures", "Partial seizures"]),
    "HP:0001629": ("heart", "Ventricular septal defect", ["Hole in heart wall separating two lower heart chambers"]),
    "HP:0001631": ("heart", "Atrial septal defect", ["Hole in heart wall separating two upper heart chambers"]),
    "HP:0001643": ("heart", "Patent ductus arteriosus", ["Patent ductus arteriosus after birth"]),
    "HP:0000107": ("kidney", "Renal cyst", ["Kidney cyst", "Cyst of the kidney"]),
    "HP:0000113": ("kidney", "Polycystic kidney dysplasia", ["Polycystic kidneys", "Multiple kidney cysts"]),
    "HP:0000083": ("kidney", "Renal insufficiency", ["Kidney failure", "Renal failure"]),
    "HP:0000365": ("hearing", "Hearing impairment", ["Deafness", "Hearing loss", "Hearing defect"]),
    "HP:0000407": ("hearing", "Sensorineural hearing impairment", ["Sensorineural deafness", "Nerve deafness"]),
    "HP:0000405": ("hearing", "Conductive hearing impairment", ["Conductive deafness", "Conductive hearing loss"]),
}


@pytest.fixture(scope="module")
def minilm() -> object:
    from graphs.embedding.embedder import get_embedder

    return get_embedder("minilm")


@pytest.mark.integration
def test_real_model_edges_join_phenotypes_of_the_same_group(minilm: object) -> None:
    skb = SKB("hpo-mini", [NodeType(label="Phenotype", synonym_field="synonyms", text_fields=["name", "synonyms"])])
    for key, (_, name, syns) in PHENOTYPES.items():
        skb.add_node(Node(key, "Phenotype", {"name": name, "synonyms": syns}))
    skb.add_node(Node("FGFR2", "Gene", {"name": "FGFR2"}))
    sim = build_similarity_edges(skb, None, minilm, SimilarityConfig(percentile=80, knn=4, logic="or"))  # type: ignore[arg-type]
    assert sim.fields == {"Phenotype": ["name", "synonyms"]}
    assert sim.count >= 3
    for e in sim.edges:
        assert PHENOTYPES[e.src][0] == PHENOTYPES[e.dst][0], (e.src, e.dst, e.fields, e.score)
        assert e.score > min(sim.thresholds[f"Phenotype.{f}"] for f in e.fields)
    # AND is stricter than OR on the same candidates.
    strict = build_similarity_edges(skb, None, minilm, SimilarityConfig(percentile=80, knn=4, logic="and"))  # type: ignore[arg-type]
    assert _pairs(strict) <= _pairs(sim)
    assert strict.count < sim.count


def test_hnsw_candidates_match_exact_knn_on_a_larger_set() -> None:
    from graphs.sage.edges import _knn_pairs

    rng = np.random.default_rng(7)
    centres = rng.normal(size=(12, 32))
    vecs = centres[rng.integers(0, 12, size=800)] + 0.3 * rng.normal(size=(800, 32))
    vecs = (vecs / np.linalg.norm(vecs, axis=1, keepdims=True)).astype(np.float32)
    src, dst = _knn_pairs(vecs, 10)  # 800 >= the exact-scan cut-off: hnswlib path
    assert len(src) == 800 * 10 and not np.any(src == dst)
    sims = vecs @ vecs.T
    np.fill_diagonal(sims, -np.inf)
    exact = np.argsort(-sims, axis=1)[:, :10]
    want = {(i, int(j)) for i in range(800) for j in exact[i]}
    got = set(zip(src.tolist(), dst.tolist(), strict=True))
    assert len(got & want) / len(want) > 0.97
