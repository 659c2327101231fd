"""Vectors and churn for the HNSW tests: unit vectors, the exact top k, a graph's rows and one round of 1 % churn."""

from __future__ import annotations

import numpy as np

DIM = 24


def unit(rng: np.random.Generator, n: int, dim: int = DIM) -> np.ndarray:
    v = rng.normal(size=(n, dim)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def exact_top(keys: list[str], vectors: np.ndarray, query: np.ndarray, k: int) -> list[str]:
    return [keys[i] for i in np.argsort(-(vectors @ query), kind="stable")[:k]]


def rows(rng: np.random.Generator, n: int, labels: tuple[str, str], every: int = 2,
         prefix: str = "k") -> tuple[list[str], list[str], np.ndarray]:
    """``n`` keys, each ``every``-th of the second label and the rest of the first, with unit vectors."""
    return ([f"{prefix}{i}" for i in range(n)], [labels[1] if i % every == 0 else labels[0] for i in range(n)],
            unit(rng, n))


def churn(rng: np.random.Generator, keys: list[str], labels: list[str], vectors: np.ndarray, fresh: int,
          added_labels: tuple[str, str]) -> tuple[list[str], list[str], np.ndarray, list[str]]:
    """One round of change: 6 rows deleted, 6 added (``n{fresh}`` on), 6 of the kept ones given new vectors.
    Returns (keys, labels, vectors, the deleted keys)."""
    position = {k: i for i, k in enumerate(keys)}
    dead = [str(k) for k in rng.choice(keys, 6, replace=False)]
    keep = [k for k in keys if k not in dead]
    vecs = np.concatenate([vectors[[position[k] for k in keep]], unit(rng, 6)])
    vecs[rng.choice(len(keep), 6, replace=False)] = unit(rng, 6)
    new = [f"n{fresh + i}" for i in range(6)]
    return keep + new, [labels[position[k]] for k in keep] + list(added_labels) * 3, vecs, dead
