"""Benchmarks: each module runs as ``python -m bench.<name>`` and prints its figure (see README)."""
