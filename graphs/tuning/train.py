"""The fine-tuning loop: in-batch negatives plus one hard negative per pair (MultipleNegativesRankingLoss).

Why a hand-written loop over ``transformers`` rather than ``SentenceTransformer.fit``: the step budget,
the seed, the batch composition (no two pairs of one node in a batch: they would be each other's false
negatives) and the progress callback are the contract of this stage, and a 30-line loop states them
exactly; the loss is the one sentence-transformers' MultipleNegativesRankingLoss computes (cross-entropy
over scaled cosine similarities of each query against every name in the batch and every hard negative).

torch is imported here only: tuning is an optional build stage and the query path never needs it.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graphs.errors import ConfigError
from graphs.tuning.pairs import Pair

__all__ = ["TuneConfig", "TuneResult", "batches", "train_encoder"]

Progress = Callable[[int, int], None]


#: The recipe measured on HPO's 43k pairs (see the encoder-tuning guide): on a GPU, seven passes over the
#: pairs at 512 per step; on a CPU, where a step of 512 takes minutes, a budget of 200 steps of 64.
GPU_EPOCHS = 7.0
GPU_BATCH = 512
CPU_STEPS = 200
CPU_BATCH = 64
#: Peak learning rate per pair of the batch (linear scaling: 2e-4 at 512, 2.5e-5 at 64).
LR_PER_PAIR = 2e-4 / 512


@dataclass(frozen=True)
class TuneConfig:
    """What the tuning stage does; every field is recorded beside the model (``encoder.json``).

    ``steps``, ``batch_size`` and ``learning_rate`` left at ``None`` follow the device (:meth:`resolve`):
    a GPU runs ``epochs`` passes over the pairs at 512 per step, a CPU a budget of ``cpu_steps`` steps of
    64; the learning rate scales with the batch.
    """

    steps: int | None = None
    batch_size: int | None = None
    learning_rate: float | None = None
    epochs: float = GPU_EPOCHS
    """Passes over the pairs on a GPU when ``steps`` is not given."""
    cpu_steps: int = CPU_STEPS
    """The step budget on a CPU when ``steps`` is not given."""
    seed: int = 0
    max_seq_length: int = 64
    scale: float = 20.0
    """Inverse temperature of the softmax over cosine similarities (sentence-transformers' default)."""
    warmup: float = 0.1
    """Fraction of the steps over which the learning rate rises linearly from 0."""
    hard_negatives: bool = True
    kinds: tuple[str, ...] = ("synonym", "definition", "relation", "label")

    def check(self) -> None:
        if self.steps is not None and self.steps < 1:
            raise ConfigError(f"encoder tuning needs at least one step, got {self.steps}")
        if self.batch_size is not None and self.batch_size < 2:
            raise ConfigError(f"encoder tuning needs a batch of at least 2 pairs (in-batch negatives), got {self.batch_size}")
        if self.learning_rate is not None and not 0 < self.learning_rate < 1:
            raise ConfigError(f"learning rate {self.learning_rate} is out of range -- use e.g. 3e-5")
        if not 0 < self.epochs <= 1000:
            raise ConfigError(f"epochs must be in (0, 1000], got {self.epochs}")
        if self.cpu_steps < 1:
            raise ConfigError(f"the CPU step budget must be at least 1, got {self.cpu_steps}")
        if not 8 <= self.max_seq_length <= 512:
            raise ConfigError(f"max_seq_length must be in [8, 512], got {self.max_seq_length}")

    def resolve(self, device: str, n_pairs: int) -> TuneConfig:
        """The settings this run uses on ``device`` ("cuda" or "cpu") for ``n_pairs`` pairs: no ``None`` left."""
        self.check()
        gpu = device != "cpu"
        batch = self.batch_size or (GPU_BATCH if gpu else CPU_BATCH)
        batch = max(2, min(batch, n_pairs)) if self.batch_size is None else batch
        if self.steps is not None:
            steps = self.steps
        elif gpu:
            steps = max(1, math.ceil(self.epochs * n_pairs / batch))
        else:
            steps = self.cpu_steps
        rate = self.learning_rate if self.learning_rate is not None else LR_PER_PAIR * batch
        return dataclasses.replace(self, steps=steps, batch_size=batch, learning_rate=rate)


@dataclass
class TuneResult:
    """The trained weights (a torch state dict) and what it took."""

    state_dict: dict[str, Any]
    config: TuneConfig
    """The settings the run used (:meth:`TuneConfig.resolve`d for its device and pairs)."""
    steps: int
    seconds: float
    device: str
    losses: list[float] = field(default_factory=list)
    peak_rss_mb: float = 0.0
    peak_gpu_mb: float | None = None


def batches(pairs: Sequence[Pair], batch_size: int, seed: int) -> Iterator[list[Pair]]:
    """Endless batches of distinct groups and distinct names, epoch after epoch, each epoch reshuffled.

    A pair that would repeat a group or a name already in the batch waits for the next batch, so an
    epoch still uses every pair once; a batch is emitted when full (or at the end of an epoch when it
    holds at least two pairs).
    """
    if len(pairs) < 2:
        raise ConfigError(f"encoder tuning needs at least 2 training pairs, the graph gives {len(pairs)}")
    rng = random.Random(seed)
    order = list(range(len(pairs)))
    while True:
        rng.shuffle(order)
        batch: list[Pair] = []
        groups: set[str] = set()
        names: set[str] = set()
        queue = order
        while queue:
            rest: list[int] = []
            for i in queue:
                pair = pairs[i]
                if pair.group not in groups and pair.name.lower() not in names:
                    batch.append(pair)
                    groups.add(pair.group)
                    names.add(pair.name.lower())
                    if len(batch) == batch_size:
                        yield batch
                        batch, groups, names = [], set(), set()
                else:
                    rest.append(i)
            if len(rest) == len(queue):
                break  # the rest repeat one group or name: they come back next epoch, reshuffled
            queue = rest
        if len(batch) >= 2:
            yield batch


def _peak_rss_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def train_encoder(
    base_dir: Path,
    pairs: Sequence[Pair],
    config: TuneConfig,
    *,
    progress: Progress | None = None,
    on_checkpoint: Callable[[int, dict[str, Any]], None] | None = None,
    checkpoint_every: int = 0,
) -> TuneResult:
    """Fine-tune the BERT encoder in ``base_dir`` on ``pairs``; deterministic given the seed (on one device).

    On a GPU when torch sees one, else on the CPU; the steps, batch and learning rate left open in
    ``config`` follow the device (:meth:`TuneConfig.resolve`). ``on_checkpoint(step, state_dict)`` every
    ``checkpoint_every`` steps (0: never) lets a caller record a learning curve.
    """
    import numpy as np
    import torch
    from transformers import AutoModel, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    config = config.resolve(device, len(pairs))  # checks the settings first
    steps, batch_size, learning_rate = config.steps, config.batch_size, config.learning_rate
    assert steps is not None and batch_size is not None and learning_rate is not None  # resolve() sets them
    random.seed(config.seed)
    np.random.seed(config.seed)
    torch.manual_seed(config.seed)
    try:
        tokenizer = AutoTokenizer.from_pretrained(str(base_dir), local_files_only=True)
        model = AutoModel.from_pretrained(str(base_dir), local_files_only=True).to(device)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot load the encoder to tune from {base_dir}: {exc}") from exc
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate)
    warm = max(1, int(steps * config.warmup))

    def schedule(step: int) -> float:  # linear warm-up, then linear decay to 0 at the last step
        if step < warm:
            return (step + 1) / warm
        return max(0.0, (steps - step) / max(1, steps - warm))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)

    def encode(texts: list[str]) -> Any:
        tok = tokenizer(texts, padding=True, truncation=True, max_length=config.max_seq_length, return_tensors="pt")
        tok = {k: v.to(device) for k, v in tok.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        hidden = model(**tok).last_hidden_state
        mask = tok["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        return torch.nn.functional.normalize(pooled, dim=-1)

    losses: list[float] = []
    t0 = time.perf_counter()
    stream = batches(pairs, batch_size, config.seed)
    for step in range(steps):
        batch = next(stream)
        queries = encode([p.query for p in batch])
        names = [p.name for p in batch]
        if config.hard_negatives:
            names += [p.negative for p in batch if p.negative is not None]
        candidates = encode(names)
        scores = queries @ candidates.T * config.scale
        labels = torch.arange(len(batch), device=device)
        loss = torch.nn.functional.cross_entropy(scores, labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(float(loss.detach().cpu()))
        if progress is not None:
            progress(step + 1, steps)
        if on_checkpoint is not None and checkpoint_every and (step + 1) % checkpoint_every == 0 and step + 1 < steps:
            on_checkpoint(step + 1, _state(model))
    seconds = time.perf_counter() - t0
    gpu_mb = torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None
    return TuneResult(_state(model), config, steps, seconds, device, losses, _peak_rss_mb(), gpu_mb)


def _state(model: Any) -> dict[str, Any]:
    return {k: v.detach().cpu().clone().contiguous() for k, v in model.state_dict().items()}
