"""SAGE: ``edges`` builds similarity edges (percentile-pruned kNN) at index time, ``expand`` widens the
seed answers with their best one-hop neighbours at query time, ``stats`` reports the similarity graph."""
