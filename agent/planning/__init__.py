"""Planning: what to look for and how to walk there.

``targets`` (answer type and relation paths from the question and schema), ``paths`` (scored relation
paths from a topic entity), ``topics`` (choosing the topic entity when the question does not mark it),
``offline`` (the deterministic planner: a chat model that emits tool calls), ``llm`` (the LLM planner:
prompts, plan-once and loop modes, budgets, repairs), ``structured`` (schema-checked LLM output)."""
