"""One-off measurements behind the numbers in the README and ``evals/reports/``.

Why apart from the harness: each study answered one question once (an embedder's recall, a ranking ceiling, a
server's memory under a flood, latency at a million nodes) and is kept so the number can be reproduced, not
reused. They run from a checkout (``python -m evals.studies.NAME``); the wheel ships the harness only
(``pyproject.toml`` excludes this package and the reports). The harness never imports a study.
"""
