"""Developer utilities (benchmarks and probes live in ``utils/performance``)."""
