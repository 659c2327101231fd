"""One agent configuration, overridable per call through LangGraph's ``configurable``.

Why one model: the CLI, the eval harness and library callers all tune the same knobs;
a single validated model means a typo in an override is an error, not a silent default.

Settings come in sections (``AgentConfig.sections()``): ``clause``, ``constraint``, ``rerank``, ``guided``,
``llm`` and ``scoring`` group the fields that share a prefix (``clause.candidates`` is the field
``clause_candidates``; ``rerank.mode`` is ``rerank`` and ``constraint.enabled`` is ``constraints``).
Overrides name a setting flat (``clause_candidates``), dotted (``clause.candidates``) or as a section
(``{"clause": {"candidates": 3}}``); ``skb ask --set clause.candidates=3`` does the same.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent.linking.settings import ClauseSettings
from graphs.errors import ConfigError
from graphs.skb.names import name_problem

ExpandPolicy = Literal["always", "skip-when-explicit-edges", "never"]
PlannerKind = Literal["offline", "openai"]
PlannerMode = Literal["loop", "plan-once", "guided"]
StructuredOutput = Literal["tool", "text"]
SemanticNet = Literal["always", "as-needed", "never"]

#: Operator setting: hosts (``host`` or ``host:port``, comma-separated) a run may name in ``base_url`` besides the
#: operator's own endpoint (OPENAI_BASE_URL, or the OpenAI API when it is unset, and the served config's base_url).
ALLOWED_HOSTS_ENV = "SKB_LLM_ALLOWED_HOSTS"
#: Where the OpenAI client sends requests when no base_url is configured.
DEFAULT_ENDPOINT = "https://api.openai.com/v1"


#: The longest per-query Cypher timeout the managed graph server accepts (its TIMEOUT_MAX,
#: ``graphs.store.falkordb_server.TIMEOUT_MAX_MS``; not imported: an offline ask loads no store client).
CYPHER_TIMEOUT_MAX_MS = 600_000


class AgentConfig(BaseModel):
    """Knobs of the retrieval agent. Field names double as ``configurable`` keys."""

    # No float setting may be infinite or NaN (an infinite timeout overflowed every LLM call); every int has
    # an upper bound (a 400-digit number is a mistake, not a setting).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    k: int = Field(default=20, ge=1, le=1000, description="seed context size (top-k from planning/acting)")
    k_prime: int = Field(default=10, ge=0, le=1000, description="SAGE expansion size (k')")
    max_rounds: int = Field(default=4, ge=1, le=50, description="T: planner rounds (LLM turns with tool calls)")
    per_call_k: int = Field(
        default=20, ge=1, le=5000,
        description="K: results per tool call (per expanded key for search_nodes); 20 = 50 on the HPO and MetaQA dev sets in quality, at two thirds of the latency",
    )
    policy: ExpandPolicy = "skip-when-explicit-edges"
    hybrid_weight: float = Field(default=0.5, ge=0.0, le=1.0, description="dense weight in BM25+dense fusion")
    sage_weight: float = Field(default=0.5, ge=0.0, le=1.0, description="dense weight when SAGE ranks neighbors")
    use_similarity_edges: bool = True
    fallback_fill: bool = Field(
        default=False, description="also top up a short seed list with hybrid hits (not only an empty one)"
    )
    fallback_fusion: Literal["minmax", "rrf", "dice"] = Field(
        default="minmax",
        description="how the fallback fuses its search: minmax / rrf (BM25+dense) or dice (Dice word overlap of "
        "passages and one-hop triples, blended with dense; graphs.index.hybrid.dice_fuse)",
    )
    constraints: bool = Field(
        default=False,
        description="AF-Retriever stage: extract triplet constraints (entity, relation, attribute conditions) from "
        "the question, ground the entities with the linker, join the node sets in read-only Cypher and relax the "
        "least confident constraint while fewer than k candidates survive (without an LLM: from the plan -- linked "
        "entities one hop from the planner's answer type that one of its seeds satisfies, at least two)",
    )
    constraint_anchors: int = Field(
        default=5, ge=1, le=100, description="linked nodes kept per constraint entity (its anchor set)"
    )
    constraint_prompt_tokens: int = Field(
        default=2000, ge=200, le=100_000, description="token budget (real tokens, graphs.tokens) of the constraint-extraction prompt"
    )
    constraint_min_share: float = Field(
        default=0.5,
        ge=0.0,
        le=1.0,
        description="a join candidate goes before the planner's seeds when it satisfies at least this share of the "
        "constraints; candidates of deeper relaxations (weaker evidence) follow the planner's seeds",
    )
    rerank: Literal["none", "pointwise", "listwise", "pairwise"] = Field(
        default="none",
        description="LLM reranking of the top seeds: pointwise (one score per candidate, one call each), listwise "
        "(one call orders all), pairwise (adjacent comparisons, bottom-up passes); needs an LLM planner",
    )
    rerank_top: int = Field(default=10, ge=2, le=50, description="seeds the reranker reorders (the rest keep rank)")
    rerank_prompt_tokens: int = Field(
        default=2000, ge=200, le=100_000, description="token budget (real tokens, graphs.tokens) of one rerank prompt"
    )
    rerank_passes: int = Field(
        default=1, ge=1, le=10, description="pairwise: bottom-up comparison passes (each rerank_top - 1 calls)"
    )
    planner: PlannerKind = "offline"
    stage_llm: Literal["planner", "openai"] = Field(
        default="planner",
        description="the model the optional stages (constraints, rerank) ask: planner -- the planner's (none with the "
        "offline planner); openai -- the configured OpenAI-compatible model (model, base_url) even when the planner is "
        "offline: a deterministic plan and the LLM only to refine it (one call fewer per question than plan-once)",
    )
    model: str = Field(
        default_factory=lambda: os.environ.get("SKB_OPENAI_MODEL", "gpt-4o-mini"), min_length=1, max_length=200
    )
    base_url: str | None = Field(
        default_factory=lambda: os.environ.get("OPENAI_BASE_URL") or None,
        max_length=2000,
        description="the OpenAI-compatible endpoint (default: OPENAI_BASE_URL); the server's OPENAI_API_KEY goes "
        f"there, so a run's configurable may only name the operator's endpoint or a host listed in {ALLOWED_HOSTS_ENV}",
    )
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    max_repairs: int = Field(default=2, ge=0, le=10, description="invalid tool-call rounds fed back to the model")
    llm_timeout_s: float = Field(default=60.0, gt=0, le=3600.0)
    llm_attempts: int = Field(default=4, ge=1, le=10, description="tries per LLM call on transient API errors")
    llm_backoff_initial_s: float = Field(
        default=1.0, gt=0, le=600.0, description="first retry wait; doubles per attempt"
    )
    llm_backoff_max_s: float = Field(default=20.0, gt=0, le=3600.0)
    degrade_to_offline: bool = Field(
        default=True,
        description="when the LLM planner keeps failing (down, slow, rate-limited, garbage replies), finish the run "
        "with the offline planner and note it in AgentResult.degraded instead of raising PlannerError",
    )
    planner_mode: PlannerMode = Field(
        default="loop",
        description="loop: the LLM plans, then chooses tool calls every round (strong models); plan-once (SPARK): one "
        "LLM call returns the plan and the tool arguments, the deterministic executor walks it (small/slow models); "
        "guided: loop mode a small model can drive -- each round offers tool schemas whose arguments are enums of what "
        "exists, the offline planner's next actions as a numbered menu, and a bounded state block instead of the history",
    )
    guided_state_tokens: int = Field(
        default=900, ge=100, le=20_000,
        description="guided mode: token budget (real tokens) of a round's state block (question, plan, steps, candidates, menu)",
    )
    guided_tools: Literal["menu", "all"] = Field(
        default="menu",
        description="guided mode: menu -- while the offline planner has next actions, the round offers `pick` and "
        "`finish` only (a small model chooses; measured: given all tools, a 1.5B model wrote its own one-hop calls and "
        "never picked); all -- `search_nodes` and `semantic_search` with their enums as well",
    )
    guided_repairs: int = Field(
        default=1, ge=0, le=3, description="guided mode: repair turns for a call that names something not offered"
    )
    guided_llm_plan: bool = Field(
        default=False,
        description="guided mode: ask the model for the plan first (one more, longer call); default: the heuristic plan, "
        "which the menu's options follow",
    )
    structured_output: StructuredOutput = Field(
        default="tool",
        description="how the model returns data (plans): a forced tool call (JSON schema) or JSON in the reply text "
        "(endpoints without tool support)",
    )
    plan_repairs: int = Field(default=1, ge=0, le=3, description="repair rounds for an invalid plan (error quoted)")
    plan_prompt_tokens: int = Field(
        default=3000, ge=300, le=100_000, description="token budget (real tokens, graphs.tokens) of the plan prompt, tool schema included"
    )
    max_llm_calls: int | None = Field(
        default=None, ge=1, le=100_000, description="LLM calls per question (None: no limit)"
    )
    max_prompt_tokens: int | None = Field(
        default=None, ge=1, le=10**9, description="prompt tokens per question, all LLM calls together (None: no limit)"
    )
    max_wall_s: float | None = Field(
        default=None, gt=0, le=86_400.0, description="wall time per question in seconds; LLM calls stop when it is spent"
    )
    max_question_chars: int = Field(
        default=20_000, ge=1, le=10_000_000,
        description="longest question accepted; longer ones are a ConfigError, not a slow run",
    )
    cypher_timeout_ms: int = Field(
        default=5000, ge=1, le=CYPHER_TIMEOUT_MAX_MS, description="per-query timeout of Cypher calls (the graph server's cap)"
    )
    cypher_max_rows: int = Field(default=200, ge=1, le=10000)
    tool_output_tokens: int = Field(
        default=1500,
        ge=50,
        le=100_000,
        description="token budget (real tokens, graphs.tokens) of one tool result's model-facing text; the full result "
        "stays the artifact",
    )
    edge_weight_property: str | None = Field(
        default=None, min_length=1, max_length=200,
        description="numeric edge property search_nodes sums per neighbour (None: no weight); a property name "
        "without backticks or control characters",
    )
    max_parallel_tools: int = Field(
        default=8, ge=1, le=64, description="tool calls of one planner round run at once (they are independent)"
    )
    semantic_net: SemanticNet = Field(
        default="as-needed",
        description="the offline planner's semantic_search beside structural expansion: always (first round, "
        "embedding the question), as-needed (only when the first round reached fewer than k candidates of the "
        "target type, or expanded nothing) or never",
    )
    max_entities: int = Field(default=20, ge=0, le=200, description="linked entities passed to the planner")
    max_hops: int = Field(
        default=2, ge=1, le=4,
        description="longest relation path an LLM plan may walk; unset, a graph whose profile plans relation "
        "paths uses the profile's planner.max_hops",
    )
    clause_linking: bool = Field(
        default=True,
        description="match question clauses that describe a vocabulary term (several content words, no name) "
        "against the index's name/synonym/definition phrase vectors, keeping several weighted candidates "
        "(needs the phrases/ artifact of skb index and a profile naming linking.vocabulary_labels)",
    )
    clause_candidates: int = Field(default=5, ge=1, le=20, description="candidates kept per described clause")
    clause_min_similarity: float = Field(
        default=0.45, ge=0.0, le=1.0, description="cosine below which a clause candidate is dropped"
    )
    clause_margin: float = Field(
        default=0.1, ge=0.0, le=1.0, description="candidates kept within this cosine of the clause's best one"
    )
    clause_min_tokens: int = Field(
        default=3, ge=1, le=50, description="content words a clause needs to count as a description"
    )
    clause_max_exact_coverage: float = Field(
        default=0.75, ge=0.0, le=1.0,
        description="a clause whose content words are named exactly above this share is a list of names, not a description",
    )
    clause_definition_match: bool = Field(
        default=True,
        description="a described clause that quotes a term's definition (whole, or cut short) links to that term "
        "exactly, without embedding; off: every described clause goes to the phrase vectors",
    )
    clause_definition_coverage: float = Field(
        default=0.75, ge=0.0, le=1.0,
        description="share of a clause's content words a quoted definition must cover (the rest is the question's own)",
    )
    clause_name_confidence: float = Field(
        default=0.6, ge=0.0, le=1.0,
        description="a described clause's exact names give way to its paraphrase candidates only when one of them "
        "reaches this cosine (or they include the names); weaker candidates mean the clause is question wording",
    )
    clause_rescore_pool: int = Field(
        default=30, ge=0, le=200,
        description="nearest terms of a described clause re-scored jointly over all their phrases and the words "
        "they share with the clause before the candidates are chosen (agent.linking.rescoring); 0: the nearest "
        "single phrase decides, as before",
    )
    clause_lexical_weight: float = Field(
        default=0.4, ge=0.0, le=10.0,
        description="weight of the share of a clause's content words (by root) found in a candidate's names, "
        "synonyms and definitions, beside its phrase similarity, in re-scoring",
    )
    clause_phrase_temperature: float = Field(
        default=0.05, ge=0.0, le=1.0,
        description="soft maximum over a candidate's phrase similarities in re-scoring (0: its best phrase)",
    )
    frequency_mix: float | None = Field(
        default=None, ge=0.0, le=1.0,
        description="share of annotation-frequency-weighted matches in ontology scoring; None: the domain "
        "profile's scoring.frequency_mix",
    )
    size_penalty: float | None = Field(
        default=None, ge=0.0, le=10.0,
        description="penalty per log annotation count of a target (annotation-set size calibration); None: the "
        "profile's scoring.size_penalty",
    )
    direct_weight: float | None = Field(
        default=None, ge=0.0, le=10.0,
        description="weight of a target's own annotations beside the evidence through finer-annotated "
        "intermediates (a gene's diseases); None: the profile's scoring.direct_weight",
    )
    intermediate_temperature: float | None = Field(
        default=None, ge=0.0, le=100.0,
        description="soft maximum over a target's intermediates (a gene's diseases): 0 = the best one; None: the "
        "profile's scoring.intermediate_temperature",
    )
    partial_credit_power: float | None = Field(
        default=None, ge=1.0, le=10.0,
        description="how steeply a feature's credit falls when a target matches it only through a broader term "
        "(IC(q) x (IC(shared) / IC(q)) ** power; 1 = Resnik); None: the profile's scoring.partial_credit_power",
    )
    link_confidence_power: float = Field(
        default=2.0, ge=0.0, le=10.0,
        description="ranking weight of a clause candidate = clause confidence x (cosine / best cosine) ** power, "
        "and of a fuzzy or embedding link = its score ** power; 0 ignores link confidence (every link counts fully)",
    )

    @field_validator("edge_weight_property")
    @classmethod
    def _property_name(cls, value: str | None) -> str | None:
        problem = None if value is None else name_problem(value)
        if problem is not None:
            raise ValueError(f"a property name that {problem} cannot be quoted in a query")
        return value

    def scoring_overrides(self) -> dict[str, float]:
        """The ontology-scoring weights set here (the rest come from the domain profile)."""
        values = {"frequency_mix": self.frequency_mix, "size_penalty": self.size_penalty,
                  "direct_weight": self.direct_weight, "intermediate_temperature": self.intermediate_temperature,
                  "partial_credit_power": self.partial_credit_power}
        return {k: float(v) for k, v in values.items() if v is not None}

    def clause_settings(self) -> ClauseSettings | None:
        """The clause-linking thresholds, or None when clause linking is off."""
        if not self.clause_linking:
            return None
        return ClauseSettings(
            candidates=self.clause_candidates,
            min_similarity=self.clause_min_similarity,
            margin=self.clause_margin,
            min_tokens=self.clause_min_tokens,
            max_exact_coverage=self.clause_max_exact_coverage,
            confidence_power=self.link_confidence_power,
            definition_match=self.clause_definition_match,
            definition_coverage=self.clause_definition_coverage,
            name_confidence=self.clause_name_confidence,
            rescore_pool=self.clause_rescore_pool,
            lexical_weight=self.clause_lexical_weight,
            phrase_temperature=self.clause_phrase_temperature,
        )

    @classmethod
    def sections(cls) -> dict[str, dict[str, str]]:
        """The settings by section: section -> {key in the section: field name}."""
        return {name: dict(keys) for name, keys in _sections(tuple(cls.model_fields)).items()}

    @classmethod
    def setting_names(cls) -> list[str]:
        """Every name an override may use: the fields and their dotted section names."""
        dotted = [f"{section}.{key}" for section, keys in cls.sections().items() for key in keys]
        return sorted([*cls.model_fields, *dotted])

    def with_overrides(
        self, overrides: Mapping[str, Any] | None, *, runtime_keys: bool = True, trusted: bool = False
    ) -> AgentConfig:
        """This config with ``overrides`` applied: field names, dotted section names (``clause.candidates``)
        or sections (``{"clause": {"candidates": 3}}``). A name that is none of these is a ConfigError
        listing the valid ones (a typo must not silently keep the default), except the entries LangGraph
        and LangChain keep in ``configurable`` beside ours (``thread_id``, ``checkpoint_*``, ``langgraph_*``,
        ``__...``) and the retriever's call settings (``CALLER_KEYS``), skipped unless ``runtime_keys`` is
        False (the CLI's ``--set``: there every name must be a setting).

        ``trusted``: the overrides are the operator's (``skb ask --set``, a constructor), who may point the
        model anywhere. Otherwise they come from a run (a client's ``configurable``) and a ``base_url`` that
        changes where the server's API key goes is refused unless the operator allowed its host
        (``check_run_endpoint``). Out-of-range values are a ConfigError naming the setting and its range."""
        if not overrides:
            return self
        known = _flat_overrides(type(self), overrides, runtime_keys)
        if not known:
            return self
        try:
            updated = type(self).model_validate({**self.model_dump(), **known})
        except ValidationError as exc:
            raise ConfigError(f"invalid agent setting(s): {describe_errors(exc)}") from exc
        if not trusted and updated.base_url != self.base_url:
            check_run_endpoint(updated.base_url, self.base_url)
        return updated


#: Prefixes of field names that form a section (``clause_candidates`` -> ``clause.candidates``).
SECTION_PREFIXES = ("clause", "constraint", "rerank", "guided", "llm")
#: Sections and keys that are not a prefix of their field's name.
EXTRA_SECTION_KEYS = {
    "constraint": {"enabled": "constraints"},
    "rerank": {"mode": "rerank"},
    "scoring": {name: name for name in ("frequency_mix", "size_penalty", "direct_weight", "intermediate_temperature",
                                        "partial_credit_power")},
}
#: ``configurable`` entries that LangGraph and LangChain keep beside ours (checkpointing, the server's
#: run and auth data) and the LangChain retriever's call settings (``agent.serving.retriever.CALL_FIELDS``:
#: LangChain hands a parent run's ``configurable`` to every child run, so they reach the graph too).
RUNTIME_KEYS = frozenset({"thread_id", "checkpoint_id", "checkpoint_ns", "checkpoint_map", "run_id", "assistant_id",
                          "graph_id", "user_id"})
RUNTIME_PREFIXES = ("__", "langgraph_", "langsmith", "checkpoint_", "x-")
CALLER_KEYS = frozenset({"mode", "label", "fusion"})


def is_runtime_key(key: str) -> bool:
    """An entry LangGraph or LangChain keeps in ``configurable`` beside the settings (not one of ours)."""
    return key in RUNTIME_KEYS or key.startswith(RUNTIME_PREFIXES)


@functools.lru_cache(maxsize=8)
def _sections(fields: tuple[str, ...]) -> dict[str, dict[str, str]]:
    """Read-only by convention (cached: every node of every run resolves its overrides through it)."""
    out: dict[str, dict[str, str]] = {}
    for prefix in SECTION_PREFIXES:
        out[prefix] = {f[len(prefix) + 1 :]: f for f in fields if f.startswith(prefix + "_")}
    for section, keys in EXTRA_SECTION_KEYS.items():
        out.setdefault(section, {}).update({k: f for k, f in keys.items() if f in fields})
    return out


def _flat_overrides(cls: type[AgentConfig], overrides: Mapping[str, Any], runtime_keys: bool) -> dict[str, Any]:
    """``overrides`` with every setting under its field name; unknown names raise ConfigError."""
    fields = cls.model_fields
    sections = _sections(tuple(fields))
    known: dict[str, Any] = {}
    unknown: list[str] = []
    for key, value in overrides.items():
        key = str(key)
        if key in sections and isinstance(value, Mapping):  # before fields: ``rerank`` is both
            for sub, sub_value in value.items():
                field = sections[key].get(str(sub))
                if field is None:
                    unknown.append(f"{key}.{sub}")
                else:
                    known[field] = sub_value
        elif key in fields:
            known[key] = value
        elif "." in key and key.split(".", 1)[0] in sections:
            section, sub = key.split(".", 1)
            field = sections[section].get(sub)
            if field is None:
                unknown.append(key)
            else:
                known[field] = value
        elif runtime_keys and (key in CALLER_KEYS or is_runtime_key(key)):
            continue
        else:
            unknown.append(key)
    if unknown:
        raise ConfigError(
            f"unknown agent setting(s) {sorted(unknown)}; valid names: {', '.join(cls.setting_names())} "
            "(fields, or section.key)"
        )
    return known


def describe_errors(exc: ValidationError) -> str:
    """A ValidationError as ``setting: what is allowed (got <value, cut short>)``, one per bad setting."""
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error.get("loc", ())) or "(settings)"
        value = error.get("input")
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 200:
            got = f"a number of about {int(value.bit_length() * 0.30103)} digits"  # repr() refuses past 4300
        else:
            text = repr(value)
            got = text if len(text) <= 60 else text[:40] + f"... ({len(text)} characters)"
        parts.append(f"{where}: {error.get('msg', 'invalid')} (got {got})")
    return "; ".join(parts)


# -- where the API key may go -------------------------------------------------------------------------------


@functools.lru_cache(maxsize=64)  # every node of every run validates the config again
def endpoint_origin(url: str) -> tuple[str, int]:
    """``(host, port)`` of an http(s) endpoint URL (the default port of its scheme when none is written);
    ValueError naming what is wrong otherwise."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ValueError(f"not an endpoint URL ({exc})") from exc
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host (e.g. https://api.openai.com/v1)")
    return parts.hostname.lower().rstrip("."), port if port is not None else (443 if parts.scheme == "https" else 80)


def _allowed_entries() -> list[str]:
    return [e.strip().lower() for e in os.environ.get(ALLOWED_HOSTS_ENV, "").split(",") if e.strip()]


def check_run_endpoint(url: str | None, served: str | None) -> None:
    """Refuse a run's ``base_url`` unless it is the operator's endpoint (``served``, the config the graph was
    built with; OPENAI_BASE_URL; the OpenAI API when that is unset) or its host is listed in ALLOWED_HOSTS_ENV.

    Why: the client sends the server's OPENAI_API_KEY as a bearer token to whatever base_url says; a client
    that could set it would receive the key."""
    if url is None:
        return  # the operator's environment decides (OPENAI_BASE_URL or the OpenAI API)
    try:
        host, port = endpoint_origin(url)
    except ValueError as exc:
        raise ConfigError(f"base_url {url[:80]!r} {exc}") from exc
    operator = set()
    for configured in (served, os.environ.get("OPENAI_BASE_URL") or DEFAULT_ENDPOINT):
        try:
            operator.add(endpoint_origin(configured or ""))
        except ValueError:
            continue  # not an endpoint at all: the operator's client fails on it, and a run matches nothing
    if (host, port) in operator:
        return
    for entry in _allowed_entries():
        name, _, entry_port = entry.rpartition(":") if entry.rsplit(":", 1)[-1].isdigit() else (entry, "", "")
        if name.strip("[]") == host and (not entry_port or int(entry_port) == port):
            return
    raise ConfigError(
        f"base_url {host}:{port} is not an endpoint the operator configured: a run may not send the server's API "
        f"key to another host. The operator can allow it by listing the host (host or host:port) in "
        f"{ALLOWED_HOSTS_ENV}, or set OPENAI_BASE_URL"
    )
