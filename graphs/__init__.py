"""The knowledge side: SKB model, loaders, graph stores, embedder, indexes, SAGE graph."""
