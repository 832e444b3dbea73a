"""Red-black rollouts between the versions of a model name, their health judgement, and retiring idle versions.

What belongs here: moving a name's traffic between its deployments step by step (``services``, every write prefixed
``rollout_``), judging each step from the runs it saw (``health``), what a draining version still has in flight
(``selectors``), retiring the versions nobody uses (``retirement``), and their commands. The deployments and their
``Rollout`` rows are :mod:`deployments`' models; the runs the judgement reads are :mod:`runs`'. This app sits above
both.
"""
