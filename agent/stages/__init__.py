"""Optional stages after the planner: ``constraints`` (extract and check the question's conditions),
``rerank`` (pointwise, listwise, pairwise LLM rerank) and ``refine`` (which of them runs next)."""
