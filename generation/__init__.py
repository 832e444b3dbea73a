"""The generation contract: what the web tier and the GPU workers agree a generation is.

What belongs here: a request's sampling parameters and their checks (``sampling``), structured outputs
(``structured_outputs``) and the named decoding constraints a request may choose (``constraint_spec``), what one
attempt produced (``result``), and the wire between web and workers: task names, how work is sent, cancel
signals, heartbeats and leases (``worker_contract``). Both sides import this package; neither imports the other.
The engine-side implementation of the constraints is ``inference_workers.engine.constraints``.

It sits just above :mod:`core` and below every app: it may import ``core`` (settings, Redis), never an app.
"""
