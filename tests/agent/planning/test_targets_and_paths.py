"""Target-type prediction and relation-path search over schemas (HPO fixture and a products/papers schema)."""

from __future__ import annotations

from typing import Any

import pytest

from agent.planning.targets import PathStep, label_vocabulary, predict_target_type, relation_paths
from graphs.skb.model import GraphSchema, LabelInfo, RelationInfo


@pytest.fixture(scope="module")
def hpo_schema(hpo_mini_skb: Any) -> GraphSchema:
    return hpo_mini_skb.schema()


def _schema(labels: list[str], rels: list[tuple[str, str, str, int]]) -> GraphSchema:
    return GraphSchema(
        labels=[LabelInfo(label=lab, count=1) for lab in labels],
        relations=[RelationInfo(rel=r, src_label=s, dst_label=d, count=c) for r, s, d, c in rels],
    )


STARK_LIKE = _schema(
    ["Product", "Brand", "Category", "Paper", "Author", "Drug"],
    [
        ("HAS_BRAND", "Product", "Brand", 10),
        ("IN_CATEGORY", "Product", "Category", 10),
        ("ALSO_BOUGHT", "Product", "Product", 5),
        ("WROTE", "Author", "Paper", 7),
        ("CITES", "Paper", "Paper", 9),
    ],
)


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Which rare disease is characterized by proptosis and hypertelorism?", "Disease"),
        ("Which gene is most likely implicated in a patient with proptosis?", "Gene"),
        ("Variants in which gene could cause arachnodactyly and dural ectasia?", "Gene"),
        ("Find the disorder whose clinical features include proptosis.", "Disease"),
        ("A patient presents with proptosis and hypertelorism. Which disease is the most likely diagnosis?", "Disease"),
        ("What condition could explain proptosis in a patient?", "Disease"),
        ("Which phenotypes are seen in Marfan syndrome?", "Phenotype"),
        ("List the symptoms of Marfan syndrome", "Phenotype"),
        ("Which genes are linked to Marfan syndrome?", "Gene"),
        ("Tell me about the weather", None),
    ],
)
def test_predict_target_type_hpo(hpo_schema: GraphSchema, question: str, expected: str | None) -> None:
    assert predict_target_type(question, hpo_schema) == expected


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("Which product from Acme is a waterproof hiking boot?", "Product"),
        ("Recommend an item for camping under 50 dollars", "Product"),
        ("Which paper by Smith studies graph neural networks?", "Paper"),
        ("Find articles citing the BERT paper", "Paper"),
        ("Who is the author that wrote about transformers? Which author?", "Author"),
        ("What medication treats migraine?", "Drug"),
    ],
)
def test_predict_target_type_other_schemas(question: str, expected: str) -> None:
    assert predict_target_type(question, STARK_LIKE) == expected


def test_target_type_needs_the_label_in_the_schema() -> None:
    assert predict_target_type("Which gene causes it?", STARK_LIKE) is None


def test_label_vocabulary_splits_compound_names() -> None:
    vocab = label_vocabulary("GeneProtein")
    assert {"gene", "genes", "protein", "proteins", "geneprotein"} <= vocab


def test_relation_paths_hpo_shortest_and_best_populated_first(hpo_schema: GraphSchema) -> None:
    paths = relation_paths(hpo_schema, ["Phenotype"], "Disease")
    assert paths[0] == [PathStep(rel="HAS_PHENOTYPE", direction="in", to_label="Disease")]
    assert [len(p) for p in paths] == sorted(len(p) for p in paths)
    assert all(p[-1].to_label == "Disease" for p in paths)
    gene = relation_paths(hpo_schema, ["Phenotype"], "Gene")
    assert gene[0] == [PathStep(rel="ASSOCIATED_WITH", direction="in", to_label="Gene")]
    assert [PathStep(rel="HAS_PHENOTYPE", direction="in", to_label="Disease"),
            PathStep(rel="ASSOCIATED_WITH", direction="in", to_label="Gene")] in gene  # fmt: skip


def test_relation_paths_respect_max_hops_and_direction() -> None:
    one = relation_paths(STARK_LIKE, ["Brand"], "Category", max_hops=1)
    assert one == []
    two = relation_paths(STARK_LIKE, ["Brand"], "Category", max_hops=2)
    assert two == [
        [PathStep(rel="HAS_BRAND", direction="in", to_label="Product"),
         PathStep(rel="IN_CATEGORY", direction="out", to_label="Category")]
    ]  # fmt: skip


def test_relation_paths_self_relation_when_source_is_target() -> None:
    paths = relation_paths(STARK_LIKE, ["Paper"], "Paper", max_hops=1)
    assert {(p[0].rel, p[0].direction) for p in paths} == {("CITES", "out"), ("CITES", "in")}


def test_relation_paths_unknown_labels_give_nothing() -> None:
    assert relation_paths(STARK_LIKE, ["Nope"], "Product") == []
