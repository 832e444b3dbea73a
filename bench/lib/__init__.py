"""What the benches share, and only that: a bench script imports helpers from here, never from another bench.

- :mod:`bench.lib.processes`: start, wait for and stop our own processes (uvicorn, Celery workers, the
  dispatcher) and the environment they run in; the tests use it too (a bench never imports ``tests``);
- :mod:`bench.lib.stack`: a bench's own stack set-up: its database created and migrated, its Redis databases
  flushed, the ``ENGINE_*`` environment of the vLLM engine both sides build, a user no limit stops;
- :mod:`bench.lib.serve_client` (vLLM's own benchmark client against a ``/v1`` server) and
  :mod:`bench.lib.native_client` (our native POST + SSE path), which report the same ``LevelResult``;
- :mod:`bench.lib.certificates`: throwaway TLS certificates (the TLS tests, the hosts test's ``--secure``);
- meters: :mod:`bench.lib.proc_cpu` (CPU seconds per process from ``/proc``) and :mod:`bench.lib.pyspy_profile`
  (py-spy sampling profiles and their top functions).

A helper one bench alone uses stays in that bench.
"""
