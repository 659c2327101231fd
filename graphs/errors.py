"""One root exception with typed subclasses.

Every error a user can cause carries a message that names *what* is wrong and
*what to do*, so the CLI can print it verbatim instead of a traceback.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Problems a message lists before it counts the rest.
SHOWN_PROBLEMS = 5


def first_problems(problems: Sequence[str], shown: int = SHOWN_PROBLEMS) -> str:
    """The first ``shown`` problems joined with "; ", then how many more there are: a message that names what is
    wrong without listing a million of it."""
    more = f"; and {len(problems) - shown} more" if len(problems) > shown else ""
    return "; ".join(problems[:shown]) + more


class SKBError(Exception):
    """Root of every error this project raises on purpose."""


class ConfigError(SKBError):
    """A setting, environment variable or argument is missing or invalid."""


class LoaderError(SKBError):
    """Input data cannot be loaded; names the file, the record and the fix."""

    def __init__(self, path: str, message: str, *, record: str | int | None = None, fix: str | None = None) -> None:
        where = f"{path}" + (f" (record {record})" if record is not None else "")
        text = f"{where}: {message}"
        if fix:
            text += f" -- fix: {fix}"
        super().__init__(text)
        self.path = path
        self.record = record
        self.fix = fix


class EngineError(SKBError):
    """A build stage run on a distributed engine (Ray) failed past its retries."""


class StoreError(SKBError):
    """The graph store failed to execute a request."""


class StoreUnavailableError(StoreError):
    """The graph store cannot be reached or started."""


class ReadOnlyViolationError(StoreError):
    """A query on a read path tried to write, or used a forbidden clause/procedure."""


class CypherValidationError(StoreError):
    """A Cypher query is malformed or names labels/relations/properties the schema lacks."""


class QueryTimeoutError(StoreError):
    """A query ran past its time limit."""


class TooManyRowsError(StoreError):
    """A query returned more rows than the cap allows."""


class IndexError_(SKBError):
    """Base for index problems (named with a trailing underscore to not shadow the builtin)."""


class IndexNotFoundError(IndexError_):
    """No index exists at the given directory."""


class IndexMismatchError(IndexError_):
    """The index was built with a different model, dimension or format version."""


class StageMissingError(IndexError_):
    """The index was built in stages and the part a request needs is not built yet."""


class IndexCorruptError(IndexError_):
    """An index file fails its checksum or cannot be parsed."""


# -- errors raised next to the code that detects them, gathered here so every public error is an SKBError --


class QueryTooComplexError(CypherValidationError):
    """A query would cost the server unbounded parse time or memory; refused before it is sent."""


class ParameterValueError(CypherValidationError):
    """A query parameter value cannot be sent to the graph server faithfully."""


class TraceNotFoundError(SKBError):
    """No run in the trace database matches the given id (or the prefix is ambiguous)."""


class NearJSONError(SKBError, ValueError):
    """The text holds no JSON value we could recover (a ValueError too: parsing code catches that)."""


class GuidedCallError(SKBError, ValueError):
    """The model's call names something the round did not offer; the message says what and what is valid.

    A ValueError too, as it was before it joined the root."""


class PlannerError(SKBError):
    """The planner (LLM or offline) failed in a way retries could not repair."""


# -- the agent's model calls (agent.llm, agent.planning) ------------------------------------------
class PlannerCallError(PlannerError):
    """The model call itself failed (unreachable, timed out, rate-limited, garbage reply) after the
    bounded retries -- as opposed to a reply that arrived but made no sense. The agent reacts by
    degrading to the offline planner (``AgentConfig.degrade_to_offline``)."""


class PlannerTimeoutError(PlannerCallError):
    """The model did not answer within the call's timeout. Not retried: the same prompt on the same
    model would take as long again (the issue's reproduction paid 4 x 60 s for it)."""


class BudgetSpentError(PlannerError):
    """A per-question budget (``max_llm_calls``, ``max_prompt_tokens``, ``max_wall_s``) does not allow
    another model call; ``budget`` names which."""

    def __init__(self, budget: str, message: str) -> None:
        super().__init__(message)
        self.budget = budget


class InvalidPlanError(PlannerError):
    """The model's plan stayed invalid after the repair rounds; ``report`` says what it tried."""

    def __init__(self, message: str, report: dict[str, Any]) -> None:
        super().__init__(message)
        self.report = report
