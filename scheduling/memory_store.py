"""The scheduler's queues in this process's memory: a ``QueueStore`` with the Redis store's semantics, no Redis.

It lets the real ``Dispatcher`` run in tests and in the virtual-time benchmark (``bench/fairness_bench.py``),
where the clock is a fake one and nothing else may sleep. Each operation holds one lock, which gives it the
atomicity of the Redis store's Lua scripts, so two dispatcher threads still cannot claim the same run.

Differences that follow from living in one process: the leader lock's time to live is read on ``clock`` (the
same clock the caller passes as ``now``), and ``wait_for_work`` never blocks (there is no other process to wait
for): it reports and clears a pending wake-up, else returns False at once. Drive it with ``Dispatcher.tick()``;
``run_forever`` over it would spin instead of idling.
"""

from __future__ import annotations

import bisect
import threading
import time
import uuid
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from scheduling.policy import QueuedRun, UserQueues
from scheduling.store import InFlight, InFlightRun, Position, TickStart


class MemoryQueueStore:
    """The queue state of one process (a ``QueueStore``): per-user FIFO queues per tier and an in-flight set."""

    def __init__(self, *, tiers: list[str], clock: Callable[[], float] = time.time) -> None:
        self.tiers = list(tiers)
        self.clock = clock
        """Enqueue and dispatch time when the caller gives none; the leader lock's expiry; the rate's."""
        self._lock = threading.RLock()
        self._queues: dict[str, dict[int, deque[int]]] = {}
        """tier -> user -> queued run ids, oldest first (a user appears only while their queue is not empty)."""
        self._meta: dict[int, QueuedRun] = {}
        """The queued runs, as pushed (with the enqueue time filled in)."""
        self._queued: dict[str, dict[int, float]] = {}
        """tier -> queued run id -> enqueue time (the queue depth)."""
        self._dispatched_at: dict[int, float] = {}
        """The runs in flight -> dispatch time."""
        self._by_time: list[tuple[float, int]] = []
        """``(dispatch time, run id)`` of the runs in flight, sorted: the benchmark's ungated runs keep thousands in
        flight and every tick reads the set, so the reclaim and the ``recent`` count are bisections, not scans."""
        self._in_flight_user: dict[int, int] = {}
        self._in_flight_deployment: dict[int, str] = {}
        self._in_flight_tier: dict[int, str] = {}
        self._per_deployment: dict[str, int] = {}
        self._per_user: dict[int, int] = {}
        """user -> runs in flight (kept with the set rather than counted on every read, for the same reason)."""
        self._positions: dict[int, Position] = {}
        self._policy: dict[str, Any] = {}
        """The policy state as saved: kept, not copied (``QueueStore.save_policy``: the caller gives it up). The
        dispatcher saves a new dict every tick, and a JSON round trip there was most of the benchmark's time."""
        self._refunds: dict[tuple[str, int], float] = {}
        self._rate: tuple[float, float] | None = None
        """``(dispatches per second, expiry)``."""
        self._leader: tuple[str, float] | None = None
        """``(token, expiry)`` of the leader lock."""
        self._wake = False

    # -- web side ----------------------------------------------------------------------------------

    def push(self, run: QueuedRun, *, front: bool = False) -> bool:
        """Queues ``run`` behind its user's other runs in its tier (ahead of them with ``front``); False if it is
        already queued."""
        with self._lock:
            queued = self._queued.setdefault(run.tier, {})
            if run.run_id in queued:
                return False
            enqueued_at = run.enqueued_at or self.clock()
            ids = self._queues.setdefault(run.tier, {}).setdefault(run.user_id, deque())
            if front:
                ids.appendleft(run.run_id)
            else:
                ids.append(run.run_id)
            self._meta[run.run_id] = QueuedRun(
                run_id=run.run_id,
                user_id=run.user_id,
                tier=run.tier,
                cost=int(run.cost),
                weight=float(run.weight),
                enqueued_at=float(enqueued_at),
                deployment=run.deployment,
                last_worker=run.last_worker,
            )
            queued[run.run_id] = enqueued_at
            self._end_flight(run.run_id)
            self._wake = True
            return True

    def remove(self, run_id: int) -> int:
        """Takes the run out of the queue (1) or out of the in-flight set (2); 0 when it was in neither."""
        with self._lock:
            removed = 0
            meta = self._meta.pop(run_id, None)
            if meta is not None:
                users = self._queues.get(meta.tier, {})
                ids = users.get(meta.user_id)
                if ids is not None:
                    while run_id in ids:
                        ids.remove(run_id)
                    if not ids:
                        del users[meta.user_id]
                self._queued.get(meta.tier, {}).pop(run_id, None)
                removed = 1
            if self._end_flight(run_id) and removed == 0:
                removed = 2
                self._wake = True  # a slot freed up: queued runs may fit now
            self._positions.pop(run_id, None)
            return removed

    def is_queued_or_in_flight(self, run_id: int, tier: str) -> bool:
        with self._lock:
            return run_id in self._queued.get(tier, {}) or run_id in self._dispatched_at

    def queue_depth(self, tier: str) -> int:
        with self._lock:
            return len(self._queued.get(tier, {}))

    def position(self, run_id: int) -> Position | None:
        with self._lock:
            return self._positions.get(run_id)

    def positions(self, run_ids: list[int]) -> dict[int, Position]:
        with self._lock:
            return {rid: self._positions[rid] for rid in run_ids if rid in self._positions}

    def add_refund(self, *, tier: str, user_id: int, amount: float) -> None:
        if amount > 0:
            with self._lock:
                key = (tier, user_id)
                self._refunds[key] = self._refunds.get(key, 0.0) + amount

    # -- dispatcher side ---------------------------------------------------------------------------

    def wait_for_work(self, timeout_s: float) -> bool:
        """True (once) if a run was queued or left the in-flight set since the last call; never blocks."""
        with self._lock:
            woken, self._wake = self._wake, False
            return woken

    def heads(self) -> dict[str, dict[int, QueuedRun]]:
        with self._lock:
            heads: dict[str, dict[int, QueuedRun]] = {}
            for tier in self.tiers:
                for user, ids in self._queues.get(tier, {}).items():
                    heads.setdefault(tier, {})[user] = self._meta[ids[0]]
            return heads

    def all_queued(self) -> UserQueues:
        with self._lock:
            queues = UserQueues()
            for tier in self.tiers:
                for ids in self._queues.get(tier, {}).values():
                    for run_id in ids:
                        queues.push(self._meta[run_id])
            return queues

    def claim(self, run: QueuedRun, *, now: float | None = None) -> bool:
        """Takes ``run`` off the head of its user's queue and marks it in flight; True for exactly one caller."""
        with self._lock:
            users = self._queues.get(run.tier, {})
            ids = users.get(run.user_id)
            if not ids or ids[0] != run.run_id:
                return False
            ids.popleft()
            if not ids:
                del users[run.user_id]
            self._meta.pop(run.run_id, None)
            self._queued.get(run.tier, {}).pop(run.run_id, None)
            self._end_flight(run.run_id)
            at = now if now is not None else self.clock()
            self._dispatched_at[run.run_id] = at
            bisect.insort(self._by_time, (at, run.run_id))
            self._in_flight_user[run.run_id] = run.user_id
            self._in_flight_deployment[run.run_id] = run.deployment
            self._in_flight_tier[run.run_id] = run.tier
            self._per_deployment[run.deployment] = self._per_deployment.get(run.deployment, 0) + 1
            self._per_user[run.user_id] = self._per_user.get(run.user_id, 0) + 1
            self._positions.pop(run.run_id, None)
            return True

    def claim_and_peek(self, run: QueuedRun, *, now: float | None = None) -> tuple[bool, QueuedRun | None]:
        with self._lock:
            if not self.claim(run, now=now):
                return False, None
            ids = self._queues.get(run.tier, {}).get(run.user_id)
            return True, (self._meta[ids[0]] if ids else None)

    def begin_tick(self, token: str | None, *, ttl_ms: int, now: float, in_flight_ttl_s: float) -> TickStart | None:
        """The five reads in turn (this process's memory: nothing else changes it between them); the runs in flight
        are counted when the dispatcher asks, for its ``since``."""
        if token is not None and not self.acquire_or_renew_leadership(token, ttl_ms=ttl_ms):
            return None
        policy, refunds = self.load_policy(), self.take_refunds()

        def in_flight(since: float | None) -> InFlight:
            return self.in_flight(now=now, ttl_s=in_flight_ttl_s, since=since)

        in_flight(None)  # reclaimed now, as the one read does
        return TickStart(policy=policy, refunds=refunds, in_flight=in_flight, heads=self.heads())

    def in_flight(self, *, now: float, ttl_s: float, since: float | None = None) -> InFlight:
        with self._lock:
            expired = bisect.bisect_left(self._by_time, (now - ttl_s,))
            for _, run_id in self._by_time[:expired]:
                self._end_flight(run_id)
            first_recent = bisect.bisect_left(self._by_time, (since,)) if since is not None else len(self._by_time)
            recent_per_deployment = Counter(self._in_flight_deployment[rid] for _, rid in self._by_time[first_recent:])
            return InFlight(
                total=len(self._by_time),
                recent=len(self._by_time) - first_recent,
                per_user=dict(self._per_user),
                per_deployment=dict(self._per_deployment),
                recent_per_deployment=dict(recent_per_deployment),
            )

    def in_flight_runs(self) -> list[InFlightRun]:
        with self._lock:
            return [
                InFlightRun(
                    run_id=run_id,
                    user_id=self._in_flight_user[run_id],
                    tier=self._in_flight_tier.get(run_id, ""),
                    deployment=self._in_flight_deployment.get(run_id, ""),
                    sent_at=at,
                )
                for at, run_id in self._by_time
            ]

    def write_positions(self, positions: dict[int, Position]) -> None:
        with self._lock:
            self._positions = dict(positions)

    def take_refunds(self) -> list[tuple[str, int, float]]:
        with self._lock:
            refunds, self._refunds = self._refunds, {}
        return [(tier, user, amount) for (tier, user), amount in refunds.items()]

    def write_rate(self, per_s: float, *, ttl_s: int = 120) -> None:
        with self._lock:
            self._rate = (float(f"{per_s:.6f}"), self.clock() + ttl_s)

    def rate(self) -> float | None:
        """The dispatch rate last written, None once it expired (tests read it here; over Redis, the token bucket's
        script reads it)."""
        with self._lock:
            if self._rate is None or self._rate[1] <= self.clock():
                return None
            return self._rate[0]

    def load_policy(self) -> dict[str, Any]:
        with self._lock:
            return self._policy

    def save_policy(self, state: dict[str, Any]) -> None:
        with self._lock:
            self._policy = state

    # -- leadership --------------------------------------------------------------------------------

    def new_lock_token(self) -> str:
        return uuid.uuid4().hex

    def acquire_or_renew_leadership(self, token: str, *, ttl_ms: int) -> bool:
        with self._lock:
            now = self.clock()
            if self._leader is not None and self._leader[1] > now and self._leader[0] != token:
                return False
            self._leader = (token, now + ttl_ms / 1000)
            return True

    def release_leadership(self, token: str) -> None:
        with self._lock:
            if self._leader is not None and self._leader[0] == token:
                self._leader = None

    # -- helpers -----------------------------------------------------------------------------------

    def _end_flight(self, run_id: int) -> bool:
        """Takes ``run_id`` out of the in-flight set; whether it was in it. Call with the lock held."""
        at = self._dispatched_at.pop(run_id, None)
        if at is None:
            return False
        i = bisect.bisect_left(self._by_time, (at, run_id))
        del self._by_time[i]
        user = self._in_flight_user.pop(run_id)
        deployment = self._in_flight_deployment.pop(run_id, "")
        self._in_flight_tier.pop(run_id, None)
        remaining = self._per_deployment.get(deployment, 1) - 1
        if remaining > 0:
            self._per_deployment[deployment] = remaining
        else:
            self._per_deployment.pop(deployment, None)
        left = self._per_user[user] - 1
        if left:
            self._per_user[user] = left
        else:
            del self._per_user[user]
        return True
