"""Benchmarks: tokens per forward, loop overhead, and (later) HumanEval pass@1 and speed tables."""
