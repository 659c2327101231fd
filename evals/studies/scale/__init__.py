"""Scale runs: a generator of graphs with STaRK's shape and the harness that measures build and query cost by size."""
