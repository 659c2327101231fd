"""Semantic chunking: sentence splitting, topic boundaries with the real model, Document/Chunk SKBs."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from graphs.errors import ConfigError, LoaderError
from graphs.loaders.chunking import (
    CHUNK,
    DOCUMENT,
    chunk_document,
    load_documents,
    semantic_boundaries,
    split_sentences,
)

CARDIO = [
    "The heart pumps blood through the arteries and veins of the body.",
    "A ventricular septal defect is a hole in the wall between the two lower chambers of the heart.",
    "Cardiologists listen for heart murmurs with a stethoscope.",
    "An echocardiogram uses ultrasound to show the heart valves and chambers.",
    "Congenital heart defects are the most common birth defects in newborns.",
]
BREAD = [
    "To bake bread, mix flour, water, salt and yeast into a dough.",
    "Knead the dough for ten minutes until it becomes smooth and elastic.",
    "Let the dough rise in a warm place until it doubles in size.",
    "Shape the loaf and bake it in a hot oven until the crust is golden brown.",
    "Sourdough bread uses a fermented starter instead of commercial yeast.",
]


@pytest.fixture(scope="module")
def minilm() -> object:
    from graphs.embedding.embedder import get_embedder

    return get_embedder("minilm")


def test_split_sentences_handles_abbreviations_numbers_and_markdown() -> None:
    text = (
        "# Patient notes\n\n"
        "Dr. Smith examined the patient, e.g. for seizures. Results were reported by Jones et al. in 2019. "
        "The dose was 2.5 mg per day! Was it effective? J. R. Tolkien is not a physician.\n"
        "- first item of a list\n"
        "- second item of a list\n\n"
        "A last paragraph without a final period"
    )
    assert split_sentences(text) == [
        "Patient notes",
        "Dr. Smith examined the patient, e.g. for seizures.",
        "Results were reported by Jones et al. in 2019.",
        "The dose was 2.5 mg per day!",
        "Was it effective?",
        "J. R. Tolkien is not a physician.",
        "first item of a list",
        "second item of a list",
        "A last paragraph without a final period",
    ]
    assert split_sentences("") == []
    # A paragraph broken across lines is one sentence.
    assert split_sentences("One sentence that\ncontinues here. Next one.") == [
        "One sentence that continues here.", "Next one."
    ]


@pytest.mark.integration
def test_chunk_boundary_falls_between_two_topics(minilm: object) -> None:
    sentences = CARDIO + BREAD
    cuts = semantic_boundaries(sentences, minilm, percentile=20)  # type: ignore[arg-type]
    assert 4 in cuts  # the chunk ends after the last heart sentence
    chunks = chunk_document(" ".join(sentences), minilm)  # type: ignore[arg-type]
    assert len(chunks) >= 2
    for ch in chunks:
        # No chunk mixes the topics.
        assert ch.last < 5 or ch.first >= 5, ch
    assert chunks[0].first == 0 and chunks[-1].last == len(sentences) - 1
    assert [c.index for c in chunks] == list(range(len(chunks)))


@pytest.mark.integration
def test_short_documents_and_bad_settings(minilm: object) -> None:
    # Fewer than 2 * min_chunk_sentences sentences: one chunk, no model call needed to decide.
    assert semantic_boundaries(CARDIO[:3], minilm) == []  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="percentile"):
        semantic_boundaries(CARDIO, minilm, percentile=120)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="min_chunk_sentences"):
        semantic_boundaries(CARDIO, minilm, min_chunk_sentences=0)  # type: ignore[arg-type]


@pytest.mark.integration
def test_max_chunk_sentences_splits_long_chunks(minilm: object) -> None:
    sentences = CARDIO + BREAD
    cuts = semantic_boundaries(sentences, minilm, percentile=0, min_chunk_sentences=2, max_chunk_sentences=4)  # type: ignore[arg-type]
    edges = [-1, *cuts, len(sentences) - 1]
    sizes = [b - a for a, b in itertools.pairwise(edges)]
    assert max(sizes) <= 4 and min(sizes) >= 2 and sum(sizes) == len(sentences)


@pytest.mark.integration
def test_load_documents_builds_documents_chunks_and_links(tmp_path: Path, minilm: object) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "heart.md").write_text("# Heart basics\n\n" + " ".join(CARDIO) + "\n\n" + " ".join(BREAD) + "\n")
    (tmp_path / "sub" / "bread.txt").write_text(" ".join(BREAD) + "\n")
    (tmp_path / "ignored.csv").write_text("a,b\n")
    (tmp_path / ".hidden").mkdir()
    (tmp_path / ".hidden" / "x.md").write_text("# Hidden\n")
    skb = load_documents(tmp_path, minilm, similarity_percentile=50, similarity_knn=3)  # type: ignore[arg-type]
    docs = {n.key: n for n in skb.nodes_of(DOCUMENT)}
    assert set(docs) == {"heart.md", "sub/bread.txt"}
    assert docs["heart.md"].name == "Heart basics"
    assert docs["sub/bread.txt"].name == "bread"  # first line is a long sentence: fall back to the file name
    chunks = skb.nodes_of(CHUNK)
    heart_chunks = sorted((n for n in chunks if n.props["doc"] == "heart.md"), key=lambda n: n.props["index"])
    assert [n.key for n in heart_chunks] == [f"heart.md#{i}" for i in range(len(heart_chunks))]
    assert len(heart_chunks) >= 2
    assert heart_chunks[0].props["text"].startswith("Heart basics")
    part_of = {(e.src, e.dst) for e in skb.edges if e.rel == "PART_OF"}
    assert part_of == {(n.key, n.props["doc"]) for n in chunks}
    nexts = [(e.src, e.dst) for e in skb.edges if e.rel == "NEXT" and e.src.startswith("heart.md")]
    assert nexts == [(a.key, b.key) for a, b in itertools.pairwise(heart_chunks)]
    similar = [e for e in skb.edges if e.rel == "IS_SIMILAR"]
    assert similar, "chunks about bread in both files should be linked"
    for e in similar:
        assert skb.nodes[e.src].label == CHUNK and skb.nodes[e.dst].label == CHUNK and e.src < e.dst
    skb.validate()


def test_load_documents_refuses_missing_or_empty_folders(tmp_path: Path) -> None:
    with pytest.raises(LoaderError, match="not a directory"):
        load_documents(tmp_path / "nope")
    with pytest.raises(LoaderError, match=r"no \.txt or \.md files"):
        load_documents(tmp_path)


def test_docs_loader_requires_a_folder() -> None:
    from graphs.loaders.docs import load_docs

    with pytest.raises(LoaderError, match="--data"):
        load_docs(None)
