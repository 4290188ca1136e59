"""Benchmarks: durafact against hand-written Temporal workflows (see README.md)."""
