"""Every evaluated method behind the ``Retriever`` protocol, built by name.

Names: ``bm25``, ``vss``, ``hybrid`` (index search baselines; ``hybrid-rrf`` and ``hybrid-dice``
fuse with reciprocal ranks or Dice overlap of passages and triples instead of min-max), ``hybrid+sage``
(hybrid seeds + query-time SAGE expansion), ``agent`` (the LangGraph agent with
SAGE off: policy ``never``), ``agent+sage`` (the agent as shipped: AgentConfig's
default policy) and ``agent+sage:<policy>`` (policy always |
skip-when-explicit-edges | never); ``agent+constraints`` (the AF-Retriever constraint stage) and
``agent+rerank:<mode>`` (LLM reranking: pointwise | listwise | pairwise; needs an LLM planner).

The index bundle, SAGE and the agent are owned by other modules; they are
imported inside the builders so that the harness (and its tests with fake
retrievers) works before and without them.

Baselines retrieve ``k=100`` by default so that Recall@k curves reach k=100.
``hybrid+sage`` keeps the first ``seed_k`` hybrid hits, then the ``k_prime`` SAGE
neighbours, then the remaining hybrid hits: with the defaults (10 + 10) its top 20
spends the same budget as hybrid's top 20, which makes Hit@20 / Recall@20
comparable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from evals.protocol import Retrieval, Retriever
from graphs.errors import ConfigError

SAGE_POLICIES = ("always", "skip-when-explicit-edges", "never")
RERANK_MODES = ("pointwise", "listwise", "pairwise")
SEARCH_MODES = ("bm25", "vss", "hybrid")
DEFAULT_AGENT_SAGE_POLICY: str | None = None  # None: AgentConfig's own default (the shipped behaviour)

Builder = Callable[..., Retriever]


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000.0


def _check_overrides(name: str, overrides: dict[str, Any], allowed: Iterable[str]) -> None:
    allowed_set = set(allowed)
    unknown = sorted(set(overrides) - allowed_set)
    if unknown:
        raise ConfigError(
            f"method {name!r} does not accept setting(s) {', '.join(unknown)}; "
            f"it accepts: {', '.join(sorted(allowed_set)) or '(none)'}"
        )


class SearchMethod:
    """One call to ``bundle.search`` in a fixed mode (the STaRK-style baselines)."""

    OPTIONS = ("k", "label")
    HYBRID_OPTIONS = ("k", "label", "weight", "fusion")

    def __init__(
        self, name: str, bundle: Any, mode: str, *, k: int = 100, label: str | None = None,
        weight: float | None = None, fusion: str | None = None,
    ) -> None:
        if k < 1:
            raise ConfigError(f"method {name!r}: k must be >= 1, got {k}")
        self.name = name
        self.bundle = bundle
        self.mode = mode
        self.k = int(k)
        self.label = label
        self.extra: dict[str, Any] = {}
        if mode == "hybrid":
            self.extra["weight"] = 0.5 if weight is None else float(weight)
            if fusion not in (None, "minmax", "rrf", "dice"):
                raise ConfigError(f"method {name!r}: unknown fusion {fusion!r}; use minmax, rrf or dice")
            if fusion not in (None, "minmax"):
                self.extra["fusion"] = fusion  # minmax is bundle.search's own default: configs stay as they were
        self.config: dict[str, Any] = {"method": name, "kind": "search", "mode": mode, "k": self.k, "label": label,
                                       **self.extra}

    def retrieve(self, question: str) -> Retrieval:
        start = time.perf_counter()
        hits = self.bundle.search(question, mode=self.mode, k=self.k, label=self.label, **self.extra)
        return Retrieval(ranked=[(str(h.key), float(h.score)) for h in hits], timings_ms={"search": _ms(start)})


class HybridSageMethod:
    """Hybrid seeds followed by their query-time SAGE neighbours (``graphs.sage.expand.expand``)."""

    OPTIONS = ("k", "label", "seed_k", "k_prime", "weight", "use_similarity_edges", "same_label_only")

    def __init__(
        self,
        name: str,
        bundle: Any,
        *,
        k: int = 100,
        label: str | None = None,
        seed_k: int = 10,
        k_prime: int = 10,
        weight: float = 0.5,
        use_similarity_edges: bool = True,
        same_label_only: bool = True,
    ) -> None:
        if seed_k < 1 or k_prime < 0 or k < 1:
            raise ConfigError(f"method {name!r}: need k >= 1, seed_k >= 1 and k_prime >= 0")
        self.name = name
        self.bundle = bundle
        self.k = max(int(k), int(seed_k))
        self.label = label
        self.seed_k = int(seed_k)
        self.k_prime = int(k_prime)
        self.weight = float(weight)
        self.use_similarity_edges = bool(use_similarity_edges)
        self.same_label_only = bool(same_label_only)
        self.config: dict[str, Any] = {
            "method": name, "kind": "search+sage", "mode": "hybrid", "k": self.k, "label": label,
            "seed_k": self.seed_k, "k_prime": self.k_prime, "weight": self.weight,
            "use_similarity_edges": self.use_similarity_edges, "same_label_only": self.same_label_only,
            "order": "seeds, sage neighbours, rest of hybrid",
        }

    def retrieve(self, question: str) -> Retrieval:
        from graphs.sage.expand import expand

        start = time.perf_counter()
        hits = self.bundle.search(question, mode="hybrid", k=self.k, label=self.label)
        ranked_all = [(str(h.key), float(h.score)) for h in hits]
        search_ms = _ms(start)
        seeds = ranked_all[: self.seed_k]
        start = time.perf_counter()
        expanded = expand(self.bundle, question, seeds, k_prime=self.k_prime, weight=self.weight,
                          use_similarity_edges=self.use_similarity_edges,
                          same_label_only=self.same_label_only) if self.k_prime else []
        sage_ms = _ms(start)
        ranked: list[tuple[str, float]] = []
        seen: set[str] = set()
        for key, score in [*seeds, *((str(k), float(s)) for k, s in expanded), *ranked_all[self.seed_k:]]:
            if key not in seen:
                seen.add(key)
                ranked.append((key, score))
        return Retrieval(ranked=ranked, timings_ms={"search": search_ms, "sage": sage_ms})


def _agent_options() -> tuple[str, ...]:
    from agent.config import AgentConfig

    return tuple(f for f in AgentConfig.model_fields if f != "policy")  # the method name fixes the policy


class AgentMethod:
    """The agent through ``agent.api.ask``; its context, in rank order, is the ranking."""

    def __init__(self, name: str, bundle: Any, *, sage_policy: str | None, **overrides: Any) -> None:
        from agent.config import AgentConfig

        policy = sage_policy
        if policy is None:
            policy = str(AgentConfig.model_fields["policy"].default)
            if policy == "never":
                policy = "always"
        if "policy" in overrides and overrides["policy"] != policy:
            raise ConfigError(f"method {name!r} fixes policy={policy!r}; choose the policy with the method name "
                              f"(agent+sage:<policy>) instead of a 'policy' setting")
        overrides.pop("policy", None)
        _check_overrides(name, overrides, AgentConfig.model_fields)
        self.name = name
        self.bundle = bundle
        self.agent_config = AgentConfig(**{**overrides, "policy": policy})
        self.config: dict[str, Any] = {"method": name, "kind": "agent",
                                       "agent_config": self.agent_config.model_dump(mode="json")}

    def retrieve(self, question: str) -> Retrieval:
        from agent.api import ask

        start = time.perf_counter()
        result = ask(question, bundle=self.bundle, config=self.agent_config)
        total = _ms(start)
        context = sorted(result.context, key=lambda item: item.rank)
        timings = {str(k): float(v) for k, v in result.timings_ms.items()}
        timings.setdefault("total", total)
        return Retrieval(
            ranked=[(str(item.key), float(item.score)) for item in context],
            timings_ms=timings,
            llm_calls=int(result.llm_calls),
            prompt_tokens=int(result.prompt_tokens),
            completion_tokens=int(result.completion_tokens),
            tool_calls=int(result.tool_calls),
            tool_output_tokens=int(result.tool_output_tokens),
        )


def _search_builder(mode: str) -> Builder:
    def build(name: str, bundle: Any, **overrides: Any) -> Retriever:
        _check_overrides(name, overrides, SearchMethod.HYBRID_OPTIONS if mode == "hybrid" else SearchMethod.OPTIONS)
        return SearchMethod(name, bundle, mode, **overrides)

    return build


def _fused_builder(fusion: str) -> Builder:
    """``hybrid-<fusion>``: hybrid search with a fixed fusion method (``hybrid-dice``: Dice overlap fusion)."""

    def build(name: str, bundle: Any, **overrides: Any) -> Retriever:
        _check_overrides(name, overrides, ("k", "label", "weight"))
        return SearchMethod(name, bundle, "hybrid", fusion=fusion, **overrides)

    return build


def _hybrid_sage(name: str, bundle: Any, **overrides: Any) -> Retriever:
    _check_overrides(name, overrides, HybridSageMethod.OPTIONS)
    return HybridSageMethod(name, bundle, **overrides)


def _agent_builder(policy: str | None) -> Builder:
    def build(name: str, bundle: Any, **overrides: Any) -> Retriever:
        return AgentMethod(name, bundle, sage_policy=policy, **overrides)

    return build


def _agent_stage_builder(**fixed: Any) -> Builder:
    """The agent (SAGE off, like ``agent``) with a stage switched on by the method name:
    ``agent+constraints`` (constraints=True), ``agent+rerank:<mode>`` (rerank=<mode>; needs an LLM
    planner, e.g. ``--set planner=openai``)."""

    def build(name: str, bundle: Any, **overrides: Any) -> Retriever:
        for key, value in fixed.items():
            if key in overrides and overrides[key] != value:
                raise ConfigError(f"method {name!r} fixes {key}={value!r}; drop the {key!r} setting or pick "
                                  "another method")
        return AgentMethod(name, bundle, sage_policy="never", **{**overrides, **fixed})

    return build


_REGISTRY: dict[str, tuple[Builder, Callable[[], Iterable[str]]]] = {
    "bm25": (_search_builder("bm25"), lambda: SearchMethod.OPTIONS),
    "vss": (_search_builder("vss"), lambda: SearchMethod.OPTIONS),
    "hybrid": (_search_builder("hybrid"), lambda: SearchMethod.HYBRID_OPTIONS),
    "hybrid-rrf": (_fused_builder("rrf"), lambda: ("k", "label", "weight")),
    "hybrid-dice": (_fused_builder("dice"), lambda: ("k", "label", "weight")),
    "hybrid+sage": (_hybrid_sage, lambda: HybridSageMethod.OPTIONS),
    "agent": (_agent_builder("never"), _agent_options),
    "agent+sage": (_agent_builder(DEFAULT_AGENT_SAGE_POLICY), _agent_options),
}
for _policy in SAGE_POLICIES:
    _REGISTRY[f"agent+sage:{_policy}"] = (_agent_builder(_policy), _agent_options)
_REGISTRY["agent+constraints"] = (_agent_stage_builder(constraints=True), _agent_options)
for _mode in RERANK_MODES:
    _REGISTRY[f"agent+rerank:{_mode}"] = (_agent_stage_builder(rerank=_mode), _agent_options)


def _plan_once(name: str, bundle: Any, **overrides: Any) -> Retriever:
    """``agent-plan-once``: the LLM planner in SPARK single-call mode (one call plans, the offline executor
    walks the plan); needs OPENAI_API_KEY (and OPENAI_BASE_URL for a local server), model via ``--set model=``."""
    if overrides.get("planner_mode", "plan-once") != "plan-once":
        raise ConfigError(f"method {name!r} fixes planner_mode='plan-once'; use method 'agent' for the loop mode")
    return AgentMethod(name, bundle, sage_policy="never", **{"planner": "openai", **overrides, "planner_mode": "plan-once"})


_REGISTRY["agent-plan-once"] = (_plan_once, _agent_options)


def _guided(name: str, bundle: Any, **overrides: Any) -> Retriever:
    """``agent-guided``: the LLM planner in guided loop mode (each round: enums of what exists, the offline
    planner's next actions as a menu, a bounded state block); needs OPENAI_API_KEY, model via ``--set model=``."""
    if overrides.get("planner_mode", "guided") != "guided":
        raise ConfigError(f"method {name!r} fixes planner_mode='guided'; use method 'agent' for the loop mode")
    return AgentMethod(name, bundle, sage_policy="never", **{"planner": "openai", **overrides, "planner_mode": "guided"})


_REGISTRY["agent-guided"] = (_guided, _agent_options)


def method_names() -> list[str]:
    """Every name ``make_method`` accepts (including registered extras)."""
    return list(_REGISTRY)


def register_method(name: str, builder: Builder, options: Iterable[str] = ()) -> None:
    """Add a method (plugins, tests); ``builder(name, bundle, **overrides) -> Retriever``."""
    frozen = tuple(options)
    _REGISTRY[name] = (builder, lambda: frozen)


def unregister_method(name: str) -> None:
    _REGISTRY.pop(name, None)


def _lookup(name: str) -> tuple[Builder, Callable[[], Iterable[str]]]:
    entry = _REGISTRY.get(name)
    if entry is None:
        hint = ""
        if name.startswith("agent+sage:"):
            hint = f" (policies: {', '.join(SAGE_POLICIES)})"
        raise ConfigError(f"unknown method {name!r}{hint}; choose from: {', '.join(method_names())}")
    return entry


def method_options(name: str) -> list[str]:
    """The override keys a method accepts (for routing ``--set key=value``)."""
    return sorted(_lookup(name)[1]())


def make_method(name: str, bundle: Any, **overrides: Any) -> Retriever:
    """Build a method by name; unknown names and settings raise ConfigError listing the valid ones."""
    builder, _ = _lookup(name)
    return builder(name, bundle, **overrides)
