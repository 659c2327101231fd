"""The ``skb`` command line, apart from the library: ``main`` (the app, ``ask``, forwarders), ``index``
(``index``, ``verify``, ``search``), ``graph_stats`` (``graph stats``), ``trace`` (``trace list|show|html``).
``skb eval`` comes from ``evals`` through the ``skb_agent.commands`` entry point."""

from agent.cli.main import app

__all__ = ["app"]
