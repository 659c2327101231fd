"""Query-time SAGE expansion on the hpo_mini index (real BM25, HNSW, MiniLM, SKB edges)."""

from __future__ import annotations

from typing import Any

import pytest

from graphs.sage.expand import expand, neighbors

MARFAN_Q = "Which disease has arachnodactyly, dural ectasia and an aortic root aneurysm?"


def test_neighbors_are_one_hop_and_exclude_seeds(hpo_bundle: Any) -> None:
    skb = hpo_bundle.skb
    got = neighbors(hpo_bundle, ["OMIM:154700"], use_similarity_edges=False)
    one_hop = {e.dst for e in skb.out_edges("OMIM:154700")} | {e.src for e in skb.in_edges("OMIM:154700")}
    assert set(got) == one_hop
    assert "OMIM:154700" not in got


def test_expand_same_label_only_ranks_by_the_question(hpo_bundle: Any) -> None:
    # Seed a gene shared by Marfan-like diseases: its disease neighbours are Marfan and Loeys-Dietz...
    seeds = [("FBN1", 1.0), ("TGFBR1", 0.9)]
    out = expand(hpo_bundle, MARFAN_Q, seeds, k_prime=3, same_label_only=False, use_similarity_edges=False)
    keys = [k for k, _ in out]
    assert 0 < len(keys) <= 3
    assert not {"FBN1", "TGFBR1"} & set(keys)
    scores = [s for _, s in out]
    assert scores == sorted(scores, reverse=True)


def test_expand_keeps_the_seed_label_by_default(hpo_bundle: Any) -> None:
    skb = hpo_bundle.skb
    seeds = [("OMIM:154700", 1.0)]
    mixed = expand(hpo_bundle, MARFAN_Q, seeds, k_prime=20, same_label_only=False, use_similarity_edges=False)
    assert {skb.nodes[k].label for k, _ in mixed} - {"Disease"}  # phenotypes and genes are neighbours
    same = expand(hpo_bundle, MARFAN_Q, seeds, k_prime=20, use_similarity_edges=True)
    assert all(skb.nodes[k].label == "Disease" for k, _ in same)


def test_expand_prefers_the_neighbour_matching_the_question(hpo_bundle: Any) -> None:
    seeds = [("OMIM:154700", 1.0)]
    out = expand(
        hpo_bundle, "dural ectasia", seeds, k_prime=1, same_label_only=False, use_similarity_edges=False, weight=0.5
    )
    assert out[0][0] == "HP:0100775"


@pytest.mark.parametrize("weight", [0.0, 1.0])
def test_expand_pure_lexical_or_dense(hpo_bundle: Any, weight: float) -> None:
    out = expand(
        hpo_bundle, "aortic root aneurysm", [("OMIM:154700", 1.0)], 2, weight=weight, same_label_only=False,
        use_similarity_edges=False,
    )  # fmt: skip
    assert out and out[0][0] == "HP:0002616"


def test_expand_nothing_to_do(hpo_bundle: Any) -> None:
    assert expand(hpo_bundle, MARFAN_Q, [], 5) == []
    assert expand(hpo_bundle, MARFAN_Q, [("OMIM:154700", 1.0)], 0) == []
    assert expand(hpo_bundle, MARFAN_Q, [("not-a-node", 1.0)], 5) == []
