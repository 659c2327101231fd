"""Clause-linking thresholds, shared by the linker, the definition table and ``AgentConfig``."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ClauseSettings:
    """Clause-linking thresholds; ``AgentConfig.clause_settings()`` fills them from its fields (the defaults
    live there; these mirror them for direct callers, and a test keeps the two equal)."""

    candidates: int = 5
    min_similarity: float = 0.45
    margin: float = 0.1
    min_tokens: int = 3
    max_exact_coverage: float = 0.75
    confidence_power: float = 2.0
    definition_match: bool = True
    definition_coverage: float = 0.75
    name_confidence: float = 0.6
    rescore_pool: int = 30
    lexical_weight: float = 0.4
    phrase_temperature: float = 0.05
