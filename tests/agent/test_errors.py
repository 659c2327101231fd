"""One errors module: every error the agent raises on purpose is an SKBError, exported from ``agent``."""

from __future__ import annotations

import inspect

import pytest

import agent
from graphs import errors


def _error_classes() -> list[type[BaseException]]:
    return [c for _, c in inspect.getmembers(errors, inspect.isclass) if issubclass(c, BaseException)]


def test_every_error_in_the_errors_module_is_under_the_root_and_exported_from_agent() -> None:
    classes = _error_classes()
    assert {c.__name__ for c in classes} >= {
        "PlannerCallError", "PlannerTimeoutError", "BudgetSpentError", "InvalidPlanError", "NearJSONError", "GuidedCallError",
    }
    for cls in classes:
        assert issubclass(cls, errors.SKBError), cls
        assert getattr(agent, cls.__name__) is cls
    for name in agent.__all__:
        assert getattr(agent, name) is not None


def test_errors_that_were_value_errors_still_are_and_unknown_names_are_not_exports() -> None:
    assert issubclass(errors.NearJSONError, ValueError) and issubclass(errors.GuidedCallError, ValueError)
    assert errors.BudgetSpentError("llm_calls", "spent").budget == "llm_calls"
    with pytest.raises(AttributeError, match="no attribute 'NoSuchError'"):
        agent.NoSuchError  # noqa: B018 - the attribute access is the test
    with pytest.raises(AttributeError):
        agent.ValueError  # noqa: B018 - a builtin error is not an export
