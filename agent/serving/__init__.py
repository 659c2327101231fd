"""The agent for other programs: ``mcp`` (an MCP server over stdio or HTTP), ``langgraph_app`` (the
graph factory ``langgraph.json`` names) and ``toolkit`` (``SKBToolkit``: the tools plus ``ask`` as
LangChain tools for someone else's agent)."""
