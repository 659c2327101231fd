"""The mapped lemma table answers exactly as lemminflect for every word, leaves the word roots unchanged, is made
again when damaged, and a process that finds it never loads lemminflect's dictionaries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from lemminflect import getAllLemmas

from graphs.skb import language, lemmas
from graphs.skb.lemmas import _dictionary_words, open_table, table_paths, write_table

OUT_OF_DICTIONARY = ["xyzzy", "b", "a" * 40, "screenwriters", "directorship", "purée"]


def as_lemminflect(word: str) -> dict[str, tuple[str, ...]]:
    return {upos: tuple(forms) for upos, forms in getAllLemmas(word).items()}


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("SKB_MODEL_CACHE", str(tmp_path))
    monkeypatch.setattr(lemmas, "_TABLE", [])
    return tmp_path


def test_the_table_answers_as_lemminflect_for_every_word(cache: Path) -> None:
    assert write_table(cache)
    table = open_table(cache)
    assert table is not None and len(table) > 50_000
    words = _dictionary_words()
    assert words is not None
    for word in [*words, *OUT_OF_DICTIONARY]:
        assert table.get(word) == as_lemminflect(word), word


def test_word_roots_are_the_same_through_the_table(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    words = (_dictionary_words() or [])[::13] + OUT_OF_DICTIONARY
    words += [w + suffix for w in words[::5] for suffix in ("er", "or", "s")]
    assert lemmas._table() is not None
    mapped = [(language.root.__wrapped__(w), language.singular.__wrapped__(w)) for w in words]
    monkeypatch.setattr(lemmas, "_TABLE", [None])  # lemminflect answers
    assert [(language.root.__wrapped__(w), language.singular.__wrapped__(w)) for w in words] == mapped


def test_a_damaged_table_is_made_again_and_an_unwritable_cache_asks_lemminflect(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert write_table(cache)
    words_path = table_paths(cache)[0]
    words_path.write_bytes(words_path.read_bytes()[:-7] + b"damaged")
    assert open_table(cache) is None
    assert lemmas.lemmas_of("directors") == {"NOUN": ("director",)}  # made again on first use
    assert open_table(cache) is not None

    def refuse(*args: object) -> None:
        raise OSError(30, "Read-only file system")

    for path in table_paths(cache):
        path.unlink()
    monkeypatch.setattr(lemmas, "_TABLE", [])
    monkeypatch.setattr(lemmas, "atomic_write_bytes", refuse)
    assert lemmas.lemmas_of("wrote") == {"VERB": ("write",)} and lemmas._TABLE == [None]


def test_a_process_that_finds_the_table_never_loads_lemminflect(cache: Path) -> None:
    assert write_table(cache)
    code = ("import sys; from graphs.skb.language import root, singular; "
            "print(root('directors'), root('screenwriter'), singular('genres'), 'lemminflect' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"SKB_MODEL_CACHE": str(cache), "PATH": "/usr/bin:/bin"},
                         cwd=Path(__file__).resolve().parents[3])
    assert out.stdout.split() == ["direct", "write", "genre", "False"]
