"""Developer utilities: benchmarks and probes in ``utils/performance``, the GPU acceptance run in
``utils/gpu``, speech fixtures' generator in ``utils/fixtures``."""
