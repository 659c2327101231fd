"""The tuning recipe follows the device: seven passes at 512 per step on a GPU, a 200-step budget of 64 on a
CPU, the learning rate scaled with the batch; whatever the caller sets is kept."""

from __future__ import annotations

import pytest

from graphs.errors import ConfigError
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
