"""Local traces of agent runs: ``tracer`` (LangSmith-style run rows in SQLite, written by one thread)
and ``html`` (one self-contained, escaped page per run)."""
