"""``graphs.tokens.token_bound`` never undercounts the real tokenizer: every code point alone (the whole
Basic Multilingual Plane, the astral planes sampled), runs of neighbouring code points as one word, and
mixed text (keys, digits, punctuation, accents, CJK, Hangul). A bound below the count would let a tool
result over its token budget pass unchecked."""

from __future__ import annotations

import random

import pytest

from graphs.tokens import count_tokens, count_tokens_many, token_bound


def code_points() -> list[str]:
    bmp = [chr(c) for c in range(0x20, 0x10000) if not 0xD800 <= c <= 0xDFFF]
    astral = [chr(c) for c in range(0x10000, 0x110000, 61)]
    return bmp + astral


def test_every_code_point_alone_is_bounded() -> None:
    chars = code_points()
    counts = count_tokens_many(chars)
    over = [(hex(ord(c)), n, token_bound(c)) for c, n in zip(chars, counts, strict=True) if n > token_bound(c)]
    assert over == []


@pytest.mark.parametrize("width", [2, 7, 40])
def test_runs_of_code_points_are_bounded(width: int) -> None:
    chars = code_points()[::3]
    texts = ["".join(chars[i : i + width]) for i in range(0, len(chars), width)]
    texts += [" ".join(chars[i : i + width]) for i in range(0, len(chars), width * 5)]
    counts = count_tokens_many(texts)
    assert [t for t, n in zip(texts, counts, strict=True) if n > token_bound(t)] == []


def test_mixed_text_is_bounded_and_not_absurdly_loose() -> None:
    rng = random.Random(3)
    pieces = ["HP:0001250", '{"key":"K:1","paths":3}', "Größe", "東京都", "한국어", "x\u0301", "İstanbul", "½",
              "ﬁne", "1971-2024", "\u00a0", "\t", "naïve café", "Ω≈ç√", "\U0001f600", "\ud800", "[]{}:,\""]
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 30)))
        assert count_tokens(text) <= token_bound(text), text
    json_line = '{"key":"HP:0001250","label":"Phenotype","name":"Seizure","paths":2,"score":0.8123}'
    assert token_bound(json_line) <= 4 * count_tokens(json_line)  # a bound that still admits small results
