"""A random backlog with history, for the tests that compare a fast path of the policy with deciding one run at a
time (``scheduling.policy.dispatch_one``)."""

from __future__ import annotations

import random

from scheduling.policy import FairPolicy, QueuedRun, TierSpec, UserQueues, dispatch_one

TIERS = [
    TierSpec("pro", 0),
    TierSpec("plus", 1, share_floor=0.2),
    TierSpec("free", 2, share_floor=0.1),
    TierSpec("batch", 3),
]


def random_backlog(seed: int, *, users: int, runs: int) -> tuple[FairPolicy, UserQueues]:
    """A policy with history (counters, refunds, floor credit) and a backlog of ``runs // 2`` runs over ``users``
    users of mixed tiers (not ``batch``, which a gate holds), costs and weights; run ids and enqueue times grow."""
    rng = random.Random(seed)
    policy, queues = FairPolicy(TIERS), UserQueues()
    weights = {user: rng.choice([0.5, 1.0, 1.0, 2.0]) for user in range(users)}
    ids = iter(range(1, runs + 1))

    def some_run(user: int) -> QueuedRun:
        rid = next(ids)
        return QueuedRun(
            run_id=rid,
            user_id=user,
            tier=rng.choice(["pro", "plus", "free", "free"]),
            cost=rng.choice([40, 100, 400, 900]),
            weight=weights[user],
            enqueued_at=float(rid),
        )

    for _ in range(runs // 2):  # history: dispatched earlier, some of it refunded
        queues.push(some_run(rng.randrange(users)))
    for _ in range(runs // 4):
        served = dispatch_one(policy, queues, lambda _tier, _run: True)
        if served is not None and rng.random() < 0.3:
            policy.refund(served.tier, served.user_id, rng.uniform(0, served.cost))
    for left in queues.runs():  # (what was not dispatched is not the backlog: the history only set the counters)
        queues.remove(left)
    for _ in range(runs // 2):
        queues.push(some_run(rng.randrange(users)))
    return policy, queues
