"""Ranking targets by the evidence they share with the question: ``ontology`` (information content
over a term hierarchy, annotation models) and ``stored`` (the models ``skb index`` stores, read back
or built once per SKB: ``model_for``, ``find_hierarchy``, ``link_matrix``)."""
