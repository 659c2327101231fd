"""A result fitted to its token budget keeps the same items whatever batches the tokenizer counts them in:
``tools.results._fit_json`` sizes its batches by a prediction, and the kept items, the cut and the note
must equal those of counting every item exactly one by one (the real tokenizer, no fakes)."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from graphs.tokens import count_tokens
from tools import results
from tools.results import _compact, _fit_json, _shrink


def reference_fit(head: dict[str, Any], field: str, items: list[Any], budget_tokens: int, hint: str) -> str:
    """The fitting rule written plainly: each item counted alone, kept while it fits, the whole checked."""
    budget = max(1, budget_tokens)
    head = _shrink(head, budget * results.CHARS_PER_TOKEN // 8)
    empty = _compact({**head, field: []})
    reserve = count_tokens(_compact({"omitted": len(items), "note": f"token budget {budget_tokens}: {hint}"})) + 2
    used = count_tokens(empty)
    kept: list[str] = []
    for item in items:
        text = _compact(item)
        tokens = count_tokens(text)
        if used + tokens + 1 > budget - reserve:
            break
        kept.append(text)
        used += tokens + 1

    def render(kept: list[str]) -> str:
        parts = [empty[:-2], ",".join(kept), "]"]
        if len(kept) < len(items):
            tail = {"omitted": len(items) - len(kept), "note": f"token budget {budget_tokens}: {hint}"}
            parts.append("," + _compact(tail)[1:-1])
        parts.append("}")
        return "".join(parts)

    text = render(kept)
    while kept and count_tokens(text) > budget:
        kept.pop()
        text = render(kept)
    return text


def random_items(rng: random.Random, n: int) -> list[dict[str, Any]]:
    words = ["abnormal", "Größe", "東京", "x\u0301y", "café", "1971", "HP:0001250", "q" * 130, "naïve", "\u00bd"]
    return [
        {
            "key": f"K:{rng.randrange(10**7):07d}",
            "label": rng.choice(["Widget", "Gadget", "Sprocket"]),
            "name": " ".join(rng.choice(words) for _ in range(rng.randint(1, 12))),
            "paths": rng.randint(1, 40),
            "score": round(rng.random(), 4),
        }
        for _ in range(n)
    ]


@pytest.mark.parametrize("seed", range(12))
def test_batches_keep_what_one_by_one_counting_keeps(seed: int) -> None:
    rng = random.Random(seed)
    items = random_items(rng, rng.choice([0, 1, 3, 20, 60, 200]))
    budget = rng.choice([1, 40, 200, 700, 1500, 5000])
    head = {"keys": ["K:1"], "truncated": True}
    found = _fit_json(head, "neighbors", items, budget, "narrow the call")
    assert found == reference_fit(head, "neighbors", items, budget, "narrow the call")
    assert json.loads(found)["neighbors"] == items[: len(json.loads(found)["neighbors"])]


def test_a_generator_of_items_is_read_only_as_far_as_needed() -> None:
    items = random_items(random.Random(7), 500)
    read: list[int] = []

    def gen() -> Any:
        for i, item in enumerate(items):
            read.append(i)
            yield item

    text = _fit_json({}, "rows", gen(), 300, "narrow", total=len(items))
    assert text == reference_fit({}, "rows", items, 300, "narrow")
    kept = len(json.loads(text)["rows"])
    assert kept < len(read) <= kept + results._FIT_BATCH
