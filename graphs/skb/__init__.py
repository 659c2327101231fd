"""The semi-structured knowledge base itself: ``model`` (SKB, Node, Edge, GraphSchema), ``profile`` (the
domain profile and the shipped ``profiles/*.toml``), ``compact`` (the SKB as memory-mapped arrays) and
``state`` (records computed at index time, read back by code digest)."""
