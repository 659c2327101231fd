"""Text embedders: ``embedder`` (the ``Embedder`` protocol, MiniLM and OpenAI-compatible backends, the
content-hash cache, ``embed_all``) and ``onnx_runtime`` (MiniLM on ONNX Runtime, fp32 or int8)."""
