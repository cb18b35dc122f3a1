"""Benchmarks and evaluation tools; each prints results measured side by side in one run."""
