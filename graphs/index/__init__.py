"""Search indexes over node texts: ``hnsw`` (dense, per label and global), ``bm25`` (sparse),
``phrases`` (one vector per name, synonym and definition sentence, for clause linking) and
``hybrid`` (score fusion: min-max, RRF, dice)."""
