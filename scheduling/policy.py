"""The scheduling policy: which queued run goes next.

Two levels, both charged in tokens (a run costs its input tokens plus its maximum output tokens):

* **Within a tier**: per-user queues served by a virtual token counter (VTC, the token-cost form of
  deficit round robin). Each user has a counter of the tokens dispatched for them (divided by their weight);
  the backlogged user with the lowest counter goes next. A user who becomes backlogged again after being
  idle has their counter lifted to the lowest counter among the users already waiting (or to the tier's
  virtual time when nobody waits), so idle time earns no credit and a flood cannot be "saved up".
* **Across tiers**: strict priority (lower ``priority`` first), except that a backlogged tier with a
  ``share_floor`` accrues credit ``floor x cost`` on every dispatch made while it waits; once that credit
  covers its next run, it is served ahead of the higher tiers. Its share of dispatched tokens while
  backlogged is thus at least its floor. Credit is dropped while a tier is not backlogged (no banking).

The policy object only holds counters; the queues are passed in as ``heads`` (each backlogged user's
first run per tier), so the same code runs over in-memory queues (tests, benchmarks) and Redis (the
dispatcher). Its state is a small JSON-able dict so the dispatcher can keep it in Redis.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TierSpec:
    """One tier as the policy sees it."""

    name: str
    priority: int
    """Lower is served first."""
    share_floor: float = 0.0
    """Fraction of dispatched tokens guaranteed to this tier while it is backlogged (0..1)."""


@dataclass(frozen=True)
class QueuedRun:
    run_id: int
    user_id: int
    tier: str
    cost: int
    """Tokens charged when dispatched: input tokens + max output tokens."""
    weight: float = 1.0
    """The user's fair-share weight within the tier (a per-user override; 1 by default)."""
    enqueued_at: float = 0.0
    engine_priority: int | None = None
    """vLLM's priority of the run (lower is served first), set by the dispatcher when it sends the run
    (:func:`scheduling.dispatcher.engine_priority`); None while queued."""
    deployment: str = ""
    """The ``name@version`` whose workers serve it: the dispatcher gates it on their load alone. Empty: any
    worker's (a run queued before deployments were versioned)."""


Heads = Mapping[str, Mapping[int, QueuedRun]]
"""tier name -> user id -> that user's first queued run (only backlogged users appear)."""


@dataclass
class _TierState:
    counters: dict[int, float] = field(default_factory=dict)
    active: set[int] = field(default_factory=set)
    """Users seen backlogged at the last sync: a user not in here who is backlogged now is returning."""
    vtime: float = 0.0
    """The lowest counter among the backlogged users when a run was last picked (never decreases)."""
    last_served: dict[int, int] = field(default_factory=dict)
    """Dispatch sequence number of each user's latest run: equal counters go to the least recently served."""


class FairPolicy:
    """Virtual token counters per user within a tier; strict priority with floor shares across tiers."""

    def __init__(self, tiers: Iterable[TierSpec]) -> None:
        self.tiers = sorted(tiers, key=lambda t: (t.priority, t.name))
        self._by_name = {t.name: t for t in self.tiers}
        self._state: dict[str, _TierState] = {t.name: _TierState() for t in self.tiers}
        self.floor_credit: dict[str, float] = {t.name: 0.0 for t in self.tiers}
        self._seq = 0

    # -- state --------------------------------------------------------------------------------------

    def tier(self, name: str) -> TierSpec:
        return self._by_name[name]

    def counter_spread(self) -> dict[str, float]:
        """Per tier, the largest minus the smallest virtual counter among the users backlogged at the last sync:
        VTC's service difference between backlogged users (tokens per unit weight, after refunds), which its
        analysis bounds by twice the largest request cost. 0 with fewer than two backlogged users."""
        spread: dict[str, float] = {}
        for name, st in self._state.items():
            counters = [st.counters.get(u, 0.0) for u in st.active]
            spread[name] = max(counters) - min(counters) if len(counters) > 1 else 0.0
        return spread

    def counter(self, tier: str, user_id: int) -> float:
        return self._state[tier].counters.get(user_id, 0.0)

    def sync(self, heads: Heads) -> None:
        """Brings the counters up to date with who is backlogged now (call before ``choose``).

        Returning users are lifted (no credit for idle time); users who left are forgotten as active,
        and a counter at or below the tier's virtual time is dropped (a lift would restore it anyway).
        """
        for spec in self.tiers:
            st = self._state[spec.name]
            backlogged = set(heads.get(spec.name, {}))
            staying = backlogged & st.active
            if staying:
                floor_counter = min(st.counters.get(u, 0.0) for u in staying)
            else:
                floor_counter = st.vtime
            for user in sorted(backlogged - st.active):
                st.counters[user] = max(st.counters.get(user, 0.0), floor_counter)
            for user in st.active - backlogged:
                if st.counters.get(user, 0.0) <= st.vtime:
                    st.counters.pop(user, None)
                    st.last_served.pop(user, None)
            st.active = backlogged
            if not backlogged:
                self.floor_credit[spec.name] = 0.0

    def choose(self, heads: Heads, admits: Callable[[str, QueuedRun], bool]) -> QueuedRun | None:
        """The next run to dispatch, or None.

        ``admits(tier, run)`` says whether the engines have room for ``run`` under ``tier``'s gate. The gate
        keeps its headroom slots for users below their share of the slots, so within a tier the first admissible
        user in counter order goes, even one ahead on tokens: a user returning from idle is lifted to the lowest
        waiting counter and is ahead of a flood by its own last run until one of the flood's runs ends and the
        flood is dispatched again, which on a slow engine is a whole run's length. Passing is bounded: only a
        user below its slot share gets past a refused one, and only while the users ahead hold their share.
        A tier whose floor credit is due may also use the room of the highest backlogged tier: its floor would
        mean nothing if its own (stricter) gate kept it out while a higher tier dispatches.
        """
        backlogged = [t for t in self.tiers if heads.get(t.name)]
        if not backlogged:
            return None
        top = backlogged[0].name
        for spec in backlogged:
            if spec.share_floor <= 0:
                continue
            ordered = self._users_in_order(spec.name, heads[spec.name])
            if self.floor_credit[spec.name] < ordered[0].cost:
                continue
            for run in ordered:
                if admits(spec.name, run) or admits(top, run):
                    return run
        for spec in backlogged:
            for run in self._users_in_order(spec.name, heads[spec.name]):
                if admits(spec.name, run):
                    return run
        return None

    def charge(self, run: QueuedRun, heads: Heads) -> None:
        """Accounts for ``run`` having been dispatched; ``heads`` is the backlog it was chosen from."""
        st = self._state[run.tier]
        waiting = [st.counters.get(u, 0.0) for u in heads.get(run.tier, {})]
        if waiting:
            st.vtime = max(st.vtime, min(waiting))
        st.counters[run.user_id] = st.counters.get(run.user_id, 0.0) + run.cost / max(run.weight, 1e-6)
        self._seq += 1
        st.last_served[run.user_id] = self._seq
        for spec in self.tiers:
            if spec.share_floor > 0 and heads.get(spec.name):
                self.floor_credit[spec.name] += spec.share_floor * run.cost
        self.floor_credit[run.tier] = max(0.0, self.floor_credit[run.tier] - run.cost)

    def refund(self, tier: str, user_id: int, amount: float) -> None:
        """A dispatched run ended using fewer tokens than charged (``amount`` in counter units: tokens / weight).

        Counters then track the tokens actually served, as in the VTC paper; a user with no counter left (idle
        and at or below the tier's virtual time) has nothing to correct."""
        st = self._state.get(tier)
        if st is not None and user_id in st.counters and amount > 0:
            st.counters[user_id] -= amount

    def _users_in_order(self, tier: str, users: Mapping[int, QueuedRun]) -> list[QueuedRun]:
        """The users' head runs, lowest counter first (ties: least recently served, then oldest run)."""
        st = self._state[tier]
        order = sorted(
            users, key=lambda u: (st.counters.get(u, 0.0), st.last_served.get(u, -1), users[u].enqueued_at, u)
        )
        return [users[u] for u in order]

    # -- persistence ---------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "tiers": {
                name: {
                    "counters": {str(u): c for u, c in st.counters.items()},
                    "active": sorted(st.active),
                    "vtime": st.vtime,
                    "last_served": {str(u): n for u, n in st.last_served.items()},
                }
                for name, st in self._state.items()
            },
            "floor_credit": dict(self.floor_credit),
            "seq": self._seq,
        }

    def load_dict(self, data: Mapping[str, Any]) -> None:
        for name, raw in data.get("tiers", {}).items():
            if name not in self._state:
                continue
            self._state[name] = _TierState(
                counters={int(u): float(c) for u, c in raw.get("counters", {}).items()},
                active={int(u) for u in raw.get("active", [])},
                vtime=float(raw.get("vtime", 0.0)),
                last_served={int(u): int(n) for u, n in raw.get("last_served", {}).items()},
            )
        self._seq = int(data.get("seq", self._seq))
        for name, credit in data.get("floor_credit", {}).items():
            if name in self.floor_credit:
                self.floor_credit[name] = float(credit)


class UserQueues:
    """The queued runs as plain per-tier, per-user FIFO queues that the policy drains (``dispatch_one``): the
    position forecast's copy of the backlog (``QueueStore.all_queued``), tests and benchmarks. Not a queue store:
    ``scheduling.memory_store.MemoryQueueStore`` is the in-memory implementation of that."""

    def __init__(self) -> None:
        self._queues: dict[str, dict[int, deque[QueuedRun]]] = {}

    def push(self, run: QueuedRun) -> None:
        self._queues.setdefault(run.tier, {}).setdefault(run.user_id, deque()).append(run)

    def remove(self, run: QueuedRun) -> bool:
        queue = self._queues.get(run.tier, {}).get(run.user_id)
        if not queue or run not in queue:
            return False
        queue.remove(run)
        if not queue:
            del self._queues[run.tier][run.user_id]
        return True

    def heads(self) -> dict[str, dict[int, QueuedRun]]:
        return {tier: {u: q[0] for u, q in users.items() if q} for tier, users in self._queues.items()}

    def __len__(self) -> int:
        return sum(len(q) for users in self._queues.values() for q in users.values())

    def backlog(self) -> dict[str, tuple[int, int]]:
        """Deployment (``name@version``; ``""`` for runs queued without one) -> (queued runs, their tokens: input
        plus max output, what dispatching them will charge). What an autoscaler sizes a deployment's workers on."""
        out: dict[str, tuple[int, int]] = {}
        for users in self._queues.values():
            for queue in users.values():
                for run in queue:
                    runs, tokens = out.get(run.deployment, (0, 0))
                    out[run.deployment] = (runs + 1, tokens + run.cost)
        return out


def dispatch_one(policy: FairPolicy, queues: UserQueues, admits: Callable[[str, QueuedRun], bool]) -> QueuedRun | None:
    """One scheduling decision over in-memory queues: sync, choose, charge, pop."""
    heads = queues.heads()
    policy.sync(heads)
    run = policy.choose(heads, admits)
    if run is None:
        return None
    policy.charge(run, heads)
    queues.remove(run)
    return run


def forecast_order(policy: FairPolicy, queues: UserQueues, limit: int) -> list[QueuedRun]:
    """The order the queued runs would be dispatched in if nothing new arrived (for queue positions)."""
    policy = copy.deepcopy(policy)
    queues = copy.deepcopy(queues)
    order: list[QueuedRun] = []
    while len(order) < limit:
        run = dispatch_one(policy, queues, lambda _tier, _run: True)
        if run is None:
            break
        order.append(run)
    return order
