"""Fine-tuning the shipped sentence encoder on the user's own graph (self-alignment).

Why: a question describes a term in words the graph's names do not use; the graph itself
holds many such descriptions (synonyms, definitions, relation descriptions), each tied to
the name it describes. Pulling each description towards its name and away from the other
names in the batch (in-batch negatives) and from a confusable neighbour (a sibling, a node
sharing a word) adapts a general encoder to the graph's vocabulary without any question,
any label or any download (SapBERT's recipe: Liu et al., NAACL 2021).

Parts: :mod:`.pairs` (mining the pairs and their hard negatives from nodes and the profile),
:mod:`.train` (the torch loop; imported only when tuning), :mod:`.export` (safetensors + the
ONNX int8 graph the index uses, with a sidecar naming their hashes), :mod:`.stage` (all three, for
``skb tune`` and ``skb index --tune-encoder``). The embedder that runs a tuned model sits with the other
embedders, in :mod:`graphs.embedding.tuned` (no torch).
"""
