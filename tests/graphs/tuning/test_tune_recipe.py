"""The tuning recipe follows the device: seven passes at 512 per step on a GPU, a 200-step budget of 64 on a
CPU, the learning rate scaled with the batch; whatever the caller sets is kept. Profile texts that only
restate a name are no training pairs, and a graph with nothing else is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from graphs.errors import ConfigError
from graphs.loaders import load_dataset
from graphs.tuning.pairs import mine_pairs, restates
from graphs.tuning.train import LR_PER_PAIR, TuneConfig

CASES = [
    # (config, device, pairs) -> (steps, batch, learning rate)
    (TuneConfig(), "cuda", 43_071, (589, 512, 2e-4)),
    (TuneConfig(), "cpu", 43_071, (200, 64, 2.5e-5)),
    (TuneConfig(epochs=1.0), "cuda", 1_024, (2, 512, 2e-4)),
    (TuneConfig(), "cuda", 40, (7, 40, LR_PER_PAIR * 40)),  # a small graph: one batch holds every pair
    (TuneConfig(cpu_steps=5), "cpu", 43_071, (5, 64, 2.5e-5)),
    (TuneConfig(steps=30, batch_size=8, learning_rate=1e-4), "cuda", 43_071, (30, 8, 1e-4)),
    (TuneConfig(steps=30, batch_size=8, learning_rate=1e-4), "cpu", 43_071, (30, 8, 1e-4)),
    (TuneConfig(batch_size=256), "cuda", 43_071, (1178, 256, 1e-4)),
]


@pytest.mark.parametrize(("config", "device", "pairs", "expected"), CASES)
def test_resolve_fills_what_the_caller_left_open(
    config: TuneConfig, device: str, pairs: int, expected: tuple[int, int, float]
) -> None:
    resolved = config.resolve(device, pairs)
    assert (resolved.steps, resolved.batch_size) == expected[:2]
    assert resolved.learning_rate == pytest.approx(expected[2])
    assert (resolved.seed, resolved.kinds, resolved.epochs) == (config.seed, config.kinds, config.epochs)


@pytest.mark.parametrize(
    "config",
    [TuneConfig(steps=0), TuneConfig(batch_size=1), TuneConfig(learning_rate=2.0), TuneConfig(epochs=0),
     TuneConfig(cpu_steps=0), TuneConfig(max_seq_length=4)],
)
def test_out_of_range_settings_are_refused_with_the_value(config: TuneConfig) -> None:
    with pytest.raises(ConfigError, match=r"\d"):
        config.resolve("cpu", 100)


@pytest.mark.parametrize(
    ("text", "name", "ends", "restated"),
    [
        ("directed", "directed by", (), True),  # an inflection of the name's own word
        ("the genre of genre", "has genre", ("genre",), True),  # a template filled with the end's label word
        ("what has maker item", "has maker", ("item",), True),
        ("numbers", "number", (), True),  # a plural whose word is also a verb
        ("dates", "date", (), True),
        ("filmmaker", "directed by", (), False),  # a word the name does not have
        ("a store sells this implement", "stocks", ("store", "implement"), False),
        ("co-directors", "directed by", (), False),
    ],
)
def test_a_text_that_only_restates_the_name_is_recognised(
    text: str, name: str, ends: tuple[str, ...], restated: bool
) -> None:
    assert restates(text, name, ends) is restated


def test_a_graph_whose_texts_only_restate_its_names_is_refused(tmp_path: Path) -> None:
    """Bare triples: the relation templates read from the names say nothing the names do not, and tuning on
    them alone lowered the answers (the docstring of ``restates``); refused with what to add instead."""
    data = tmp_path / "kb.txt"
    rows = [f"Widget {i}|made_by|Maker {i % 3}" for i in range(12)] + [f"Widget {i}|hasColour|Colour {i % 4}" for i in range(12)]
    data.write_text("\n".join(rows) + "\n", encoding="utf-8")
    skb = load_dataset("triples", data, None)
    with pytest.raises(ConfigError, match="says more than the names themselves"):
        mine_pairs(skb)
