"""Entity linking: which nodes a question names or describes.

``lexicon`` (normalisation, frame words, the name lexicon), ``definitions`` (definition sentences a
clause may quote), ``clauses`` (cutting a question into clauses and weighing their candidates),
``stored`` (the tables ``skb index`` stores, read back or built once per SKB), ``entities``
(``EntityLinker``: exact, fuzzy, then embedding). ``settings`` holds the clause thresholds."""
