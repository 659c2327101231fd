"""The speed guard's parts: the generated workload, the baseline checkout, the lock-step measurement and its report."""
