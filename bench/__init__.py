"""Benchmarks: one script per measurement (``bench/README.md`` lists them, with their commands and figures).

What the scripts share is the library :mod:`bench.lib`; the fairness bench is the package :mod:`bench.fairness`.
"""
