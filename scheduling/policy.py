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

import bisect
import copy
import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
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
    last_worker: str = ""
    """The worker that served its chat's previous turn (``Chat.last_worker`` when it was queued; empty: none):
    chat affinity routes the run there while that worker has room, without a database read at dispatch."""


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

    def choose(
        self, heads: Heads, admits: Callable[[str, QueuedRun], bool], ordered: OrderedHeads | None = None
    ) -> QueuedRun | None:
        """The next run to dispatch, or None.

        ``admits(tier, run)`` says whether the engines have room for ``run`` under ``tier``'s gate. The gate
        keeps its headroom slots for users below their share of the slots, so within a tier the first admissible
        user in counter order goes, even one ahead on tokens: a user returning from idle is lifted to the lowest
        waiting counter and is ahead of a flood by its own last run until one of the flood's runs ends and the
        flood is dispatched again, which on a slow engine is a whole run's length. Passing is bounded: only a
        user below its slot share gets past a refused one, and only while the users ahead hold their share.
        A tier whose floor credit is due may also use the room of the highest backlogged tier: its floor would
        mean nothing if its own (stricter) gate kept it out while a higher tier dispatches.

        ``ordered``: ``heads`` with each tier's users already in this order (the dispatcher's tick and the position
        forecast keep one across decisions); None: sort them now.
        """
        backlogged = [t for t in self.tiers if heads.get(t.name)]
        if not backlogged:
            return None

        def in_order(tier: str) -> Iterator[QueuedRun]:
            if ordered is not None:
                return ordered.in_order(tier)
            return iter(self._users_in_order(tier, heads[tier]))

        top = backlogged[0].name
        for spec in backlogged:
            if spec.share_floor <= 0:
                continue
            runs = in_order(spec.name)
            first = next(runs)
            if self.floor_credit[spec.name] < first.cost:
                continue
            for run in itertools.chain([first], runs):
                if admits(spec.name, run) or admits(top, run):
                    return run
        for spec in backlogged:
            for run in in_order(spec.name):
                if admits(spec.name, run):
                    return run
        return None

    def charge(self, run: QueuedRun, heads: Heads, ordered: OrderedHeads | None = None) -> None:
        """Accounts for ``run`` having been dispatched; ``heads`` is the backlog it was chosen from (``ordered``:
        the same, kept in order, which knows the tier's lowest counter without a pass over its users)."""
        st = self._state[run.tier]
        if heads.get(run.tier):
            lowest = (
                ordered.lowest_counter(run.tier)
                if ordered is not None
                else min(st.counters.get(u, 0.0) for u in heads[run.tier])
            )
            st.vtime = max(st.vtime, lowest)
        st.counters[run.user_id] = st.counters.get(run.user_id, 0.0) + unit_cost(run)
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

    def order_key(self, run: QueuedRun) -> tuple[float, int, float, int]:
        """Where the head run ``run`` of its user stands in its tier: lowest counter first, then least recently
        served, then oldest run (the user id last, so no two users tie)."""
        st = self._state[run.tier]
        return (st.counters.get(run.user_id, 0.0), st.last_served.get(run.user_id, -1), run.enqueued_at, run.user_id)

    def _users_in_order(self, tier: str, users: Mapping[int, QueuedRun]) -> list[QueuedRun]:
        """The users' head runs in :meth:`order_key` order."""
        return sorted(users.values(), key=self.order_key)

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

    def runs(self) -> list[QueuedRun]:
        """Every queued run, tier by tier, user by user, each user's in their order."""
        return [run for users in self._queues.values() for queue in users.values() for run in queue]

    def head_of(self, tier: str, user_id: int) -> QueuedRun | None:
        queue = self._queues.get(tier, {}).get(user_id)
        return queue[0] if queue else None

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
    """The order the queued runs would be dispatched in if nothing new arrived (for queue positions): what
    :func:`dispatch_one` would give, decision after decision, with the users kept in order across decisions
    (:class:`OrderedHeads`) instead of sorted for each."""
    policy = copy.deepcopy(policy)
    queues = copy.deepcopy(queues)
    heads = queues.heads()
    policy.sync(heads)
    ordered = OrderedHeads(policy, heads)
    order: list[QueuedRun] = []
    while len(order) < limit:
        run = policy.choose(heads, lambda _tier, _run: True, ordered=ordered)
        if run is None:
            break
        policy.charge(run, heads, ordered=ordered)
        queues.remove(run)
        following = queues.head_of(run.tier, run.user_id)
        ordered.dispatched(run, following)
        if following is None:
            policy.sync(heads)  # its user left the backlog
        order.append(run)
    return order


def unit_cost(run: QueuedRun) -> float:
    """What dispatching ``run`` adds to its user's counter: its tokens over the user's weight."""
    return run.cost / max(run.weight, 1e-6)


class OrderedHeads:
    """``heads`` with each tier's users kept in :meth:`FairPolicy.order_key` order while decisions are made: one
    sort per tier when built, then one re-insertion per decision (``bisect``), instead of a sort of every
    backlogged user for every decision (the dispatcher's CPU a decision grew with the users waiting:
    bench/dispatcher_ceiling.py).

    Exact while the only changes to the policy's counters and to ``heads`` between its construction and each use
    are the ones reported to :meth:`dispatched`: within one dispatcher tick, refunds and a reload of the counters
    come before it is built, ``sync`` lifts no one once the heads stop changing, and a charge moves only the
    dispatched user. It also keeps each tier's lowest counter and largest run cost, which the gate's headroom
    rule reads for every decision."""

    def __init__(self, policy: FairPolicy, heads: dict[str, dict[int, QueuedRun]]) -> None:
        self.policy = policy
        self.heads = heads
        """The backlog it orders (each tier's users' head runs); :meth:`dispatched` updates it in place."""
        self._keys: dict[str, dict[int, tuple[float, int, float, int]]] = {}
        self._order: dict[str, list[tuple[float, int, float, int]]] = {}
        self._costs: dict[str, list[float]] = {}
        for tier, users in heads.items():
            keys = {user: policy.order_key(run) for user, run in users.items()}
            self._keys[tier] = keys
            self._order[tier] = sorted(keys.values())
            self._costs[tier] = sorted(unit_cost(run) for run in users.values())

    def in_order(self, tier: str) -> Iterator[QueuedRun]:
        users = self.heads.get(tier, {})
        return (users[key[3]] for key in self._order.get(tier, []))

    def lowest_counter(self, tier: str) -> float:
        """The lowest counter among the tier's backlogged users (0 with none)."""
        order = self._order.get(tier)
        return order[0][0] if order else 0.0

    def largest_cost(self, tier: str) -> float:
        """The largest :func:`unit_cost` among the tier's head runs (0 with none)."""
        costs = self._costs.get(tier)
        return costs[-1] if costs else 0.0

    def dispatched(self, run: QueuedRun, following: QueuedRun | None) -> None:
        """``run`` (its user's head) was dispatched and charged; ``following`` is its user's next run (None: the
        user has nothing else queued in the tier and leaves the backlog)."""
        tier, user = run.tier, run.user_id
        users = self.heads.setdefault(tier, {})
        order = self._order.setdefault(tier, [])
        costs = self._costs.setdefault(tier, [])
        keys = self._keys.setdefault(tier, {})
        old_key = keys.pop(user, None)
        if old_key is not None:
            del order[bisect.bisect_left(order, old_key)]
            del costs[bisect.bisect_left(costs, unit_cost(users[user]))]
        if following is None:
            users.pop(user, None)
            if not users:
                self.heads.pop(tier, None)
            return
        users[user] = following
        keys[user] = key = self.policy.order_key(following)
        bisect.insort(order, key)
        bisect.insort(costs, unit_cost(following))
