"""Red-black rollouts on the live stack: web, dispatcher and two Celery workers (simulated engine), one serving
``name@v1`` and one ``name@v2``, while several users keep posting prompts (``model: name``, unpinned) and
following each run's SSE stream to its end.

``rollout_execute`` runs in the test process on the same database and Redis as the stack. A rollout that passes
moves every new run to v2 with no run lost, failed or garbled and leaves v1 drained; a v2 whose runs fail
(``SIM_FAIL_RATE=1``) is rolled back at its first step, and the users' next runs go to v1 and succeed. With
feedback-gated steps, users who rate every answer (``PUT /api/runs/{id}/feedback``) roll back a v2 whose answers
they rate down, and let through one they rate as they rate v1's.

Each test starts its own stack (a transactional test flushes every table at its end, the deployments included).
"""

from __future__ import annotations

import contextlib
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import httpx
import pytest
from rest_framework.authtoken.models import Token

from deployments.models import DeploymentStatus, ModelDeployment, Rollout, RolloutStatus
from generation.worker_contract import WorkerHeartbeat, WorkerState, worker_heartbeats
from rollouts.health import RolloutThresholds
from rollouts.selectors import deployment_drain_status
from rollouts.services import rollout_execute
from runs.models import ACTIVE_STATUSES, Run, RunStatus
from runs.services import run_cancel
from runs.streaming.contract import StreamEvent
from tests.deployment_helpers import add_version, ensure_default_deployment, no_ready_worker
from tests.factories import ChatFactory, UserFactory
from tests.live_stack import SIMULATED_ENGINE_ENV, LiveStack, run_live_stack
from tests.runs.stream_helpers import SseEvent, read_events, reassemble

pytestmark = [pytest.mark.live, pytest.mark.django_db(transaction=True)]

FAST_ENGINE_ENV = {
    **SIMULATED_ENGINE_ENV,
    # Answers of 24 tokens in about half a second: many runs per step without a long test.
    "SIM_STEP_BASE_S": "0.02",
    "SIM_OUTPUT_TOKENS": "24",
    "STREAM_FLUSH_MAX_TOKENS": "4",
}
WORKER_ENV = {
    # A drained deployment shows in the workers' heartbeats within a second.
    "DEPLOYMENT_STATUS_CHECK_S": "0.5",
}
USERS = 4
ROUTING_LAG = timedelta(seconds=1.5)
"""How long after a weight change a run may still be routed on the old weights: the web's deployment cache
(``DEPLOYMENT_CACHE_S=0.2`` on the live stack), the request in flight, and clock reads on a busy machine."""
THRESHOLDS = RolloutThresholds(
    min_runs=2,
    step_wait_s=3.0,
    step_timeout_s=30.0,
    # The two CPUs are shared with other processes: one slow first token must not decide a rollout that is
    # about moving traffic, so only a large TTFT regression counts.
    max_ttft_p99_ratio=10.0,
)


@dataclass
class Versions:
    old: ModelDeployment
    new: ModelDeployment

    @property
    def name(self) -> str:
        return self.old.name


@dataclass
class TwoVersionStack:
    stack: LiveStack
    versions: Versions


def _two_version_stack(django_db_blocker: object, *, v2_env: dict[str, str]) -> Iterator[TwoVersionStack]:
    """The default deployment (v1, all of the traffic) and ``v2`` (weight 0) committed, then the stack with a
    worker for each; ``v2_env`` goes to v2's worker only."""
    old = ensure_default_deployment(mark_worker=False)
    new = add_version("v2", weight=0, worker=False)
    assert old.traffic_weight == 100 and old.version == "v1"
    for key in (old.key, new.key):  # only the workers this stack starts list themselves ready
        no_ready_worker(key)
    workers = {
        "v1": {**WORKER_ENV, "WORKER_DEPLOYMENT": old.key},
        "v2": {**WORKER_ENV, "WORKER_DEPLOYMENT": new.key, **v2_env},
    }
    with contextlib.closing(run_live_stack(django_db_blocker, engine_env=FAST_ENGINE_ENV, workers=workers)) as stacks:
        stack = next(stacks)  # closing the generator stops the stack's processes
        try:
            yield TwoVersionStack(stack=stack, versions=Versions(old=old, new=new))
        finally:
            _settle()


def _settle() -> None:
    """Cancels what is still running and waits for the workers to let go of it, before the stack stops and the
    tables are flushed."""
    for run in Run.objects.filter(status__in=ACTIVE_STATUSES):
        run_cancel(run=run)
    deadline = time.monotonic() + 15
    while Run.objects.filter(status__in=ACTIVE_STATUSES).exists() and time.monotonic() < deadline:
        time.sleep(0.2)


@pytest.fixture
def healthy_v2(transactional_db: None, django_db_blocker: object) -> Iterator[TwoVersionStack]:
    yield from _two_version_stack(django_db_blocker, v2_env={})


@pytest.fixture
def failing_v2(transactional_db: None, django_db_blocker: object) -> Iterator[TwoVersionStack]:
    yield from _two_version_stack(django_db_blocker, v2_env={"SIM_FAIL_RATE": "1.0"})


# -- users posting prompts and following their streams ---------------------------------------------------------


@dataclass(frozen=True)
class Turn:
    """One prompt as its user saw it: the run, the text its SSE stream reassembles to, how the stream ended."""

    run_id: int
    text: str
    terminal: str
    delta_tokens: int
    """Tokens of the deltas after the stream's last ``reset`` (what the user's text is made of)."""


def _delta_tokens(events: list[SseEvent]) -> int:
    resets = [i for i, e in enumerate(events) if e.event == StreamEvent.RESET]
    after = events[resets[-1] + 1 :] if resets else events
    return sum(int(e.data.get("tokens", 0)) for e in after if e.event == StreamEvent.DELTA)


@dataclass
class Users:
    """``USERS`` users, each in a thread of its own posting a prompt to its chat, reading the run's stream to the
    end, and posting the next, until :meth:`stop`. Only HTTP in the threads: the test reads Postgres itself."""

    stack: LiveStack
    model: str
    rate: Callable[[str], str] | None = None
    """A rater: the rating (``up``/``down``) a user gives an answer served by that ``name@version``; None: none."""
    turns: list[Turn] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def start(self) -> None:
        for n in range(USERS):
            user = UserFactory.with_tier("pro", username=f"rollout-user-{n}")
            chat = ChatFactory.create(owner=user)
            headers = {"Authorization": f"Token {Token.objects.create(user=user).key}"}
            thread = threading.Thread(target=self._converse, args=(n, chat.pk, headers), name=f"user-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=40)
        assert not any(t.is_alive() for t in self._threads), "a user's stream did not end"

    def count(self) -> int:
        with self._lock:
            return len(self.turns)

    def _converse(self, n: int, chat_id: int, headers: dict[str, str]) -> None:
        with httpx.Client(timeout=30) as client:
            for turn in itertools.count(1):
                if self._stop.is_set():
                    return
                try:
                    self._one_turn(client, chat_id, headers, f"User {n}, question {turn}: what happens next?")
                except Exception as exc:  # noqa: BLE001 - recorded for the test to report; the user goes on
                    with self._lock:
                        self.errors.append(f"user {n} turn {turn}: {type(exc).__name__}: {exc}")
                    time.sleep(0.2)

    def _one_turn(self, client: httpx.Client, chat_id: int, headers: dict[str, str], content: str) -> None:
        response = client.post(
            self.stack.url(f"/api/chats/{chat_id}/messages"),
            json={"content": content, "model": self.model, "max_tokens": 64},
            headers=headers,
        )
        if response.status_code != 202:
            raise RuntimeError(f"POST answered {response.status_code}: {response.text[:300]}")
        body = response.json()
        status, events = read_events(self.stack.url(body["stream_url"]), headers=headers, timeout=30)
        if status != 200 or not events:
            raise RuntimeError(f"run {body['run']['id']}: stream answered {status} with {len(events)} events")
        if self.rate is not None and events[-1].event == StreamEvent.DONE:
            self._rate(client, body["run"]["id"], headers)
        turn = Turn(
            run_id=body["run"]["id"],
            text=reassemble(events),
            terminal=events[-1].event,
            delta_tokens=_delta_tokens(events),
        )
        with self._lock:
            self.turns.append(turn)

    def _rate(self, client: httpx.Client, run_id: int, headers: dict[str, str]) -> None:
        assert self.rate is not None
        run = client.get(self.stack.url(f"/api/runs/{run_id}"), headers=headers).json()
        rating = self.rate(run["deployment"])
        rated = client.put(self.stack.url(f"/api/runs/{run_id}/feedback"), json={"rating": rating}, headers=headers)
        if rated.status_code != 200:
            raise RuntimeError(f"run {run_id}: feedback answered {rated.status_code}: {rated.text[:300]}")


@pytest.fixture
def users_of() -> Iterator[list[Users]]:
    """Stops every group of users a test started, whatever the test's outcome."""
    started: list[Users] = []
    yield started
    for users in started:
        users.stop()


def _start_users(
    users_of: list[Users], stack: LiveStack, model: str, rate: Callable[[str], str] | None = None
) -> Users:
    users = Users(stack=stack, model=model, rate=rate)
    users_of.append(users)
    users.start()
    return users


def _wait_for_turns(users: Users, more: int, *, timeout_s: float = 30) -> None:
    target = users.count() + more
    deadline = time.monotonic() + timeout_s
    while users.count() < target:
        assert time.monotonic() < deadline, (
            f"only {users.count()} of {target} turns after {timeout_s} s: {users.errors}"
        )
        time.sleep(0.1)


# -- what the test reads back ----------------------------------------------------------------------------------


def _version(run: Run) -> str:
    return run.deployment.version if run.deployment is not None else ""


def _runs_by_version(runs: list[Run], *, since: datetime | None = None, until: datetime | None = None) -> set[str]:
    return {
        _version(run)
        for run in runs
        if (since is None or run.created_at >= since) and (until is None or run.created_at < until)
    }


def _assert_streams_are_the_stored_answers(turns: list[Turn]) -> None:
    """Each done run's stream reassembles to exactly its stored answer, from exactly its output tokens."""
    runs = Run.objects.select_related("assistant_message").in_bulk([t.run_id for t in turns])
    for turn in turns:
        run = runs[turn.run_id]
        if run.status != RunStatus.DONE:
            continue
        assert turn.terminal == StreamEvent.DONE, f"run {run.pk} is done but its stream ended {turn.terminal}"
        assert run.assistant_message is not None
        assert turn.text == run.assistant_message.content != "", f"run {run.pk}: stream and stored answer differ"
        assert turn.delta_tokens == run.output_tokens, f"run {run.pk}: tokens lost or duplicated in the stream"


def _heartbeats_of(key: str) -> list[WorkerHeartbeat]:
    return [beat for beat in worker_heartbeats() if beat.deployment == key]


def _wait_drained(key: str, *, timeout_s: float = 10) -> list[WorkerHeartbeat]:
    deadline = time.monotonic() + timeout_s
    while True:
        beats = _heartbeats_of(key)
        if beats and all(b.state == WorkerState.DRAINED and b.active_runs == 0 for b in beats):
            return beats
        assert time.monotonic() < deadline, f"{key}'s workers did not report drained: {beats}"
        time.sleep(0.2)


# -- the tests -------------------------------------------------------------------------------------------------


def test_a_rollout_moves_every_user_to_v2_with_no_run_lost_and_drains_v1(
    healthy_v2: TwoVersionStack, users_of: list[Users]
) -> None:
    versions = healthy_v2.versions
    users = _start_users(users_of, healthy_v2.stack, versions.name)
    _wait_for_turns(users, USERS * 2)  # some runs before the rollout
    lines: list[str] = []

    rollout = rollout_execute(
        name=versions.name, to_version="v2", steps=(25, 50, 100), thresholds=THRESHOLDS, report=lines.append, poll_s=0.5
    )

    finished_at = rollout.finished_at
    assert finished_at is not None
    _wait_for_turns(users, USERS * 3)  # and some after it
    users.stop()

    rollout = Rollout.objects.get(pk=rollout.pk)
    report = "\n".join(lines)
    assert rollout.status == RolloutStatus.SUCCEEDED, report
    assert [step["weight"] for step in rollout.history] == [25, 50, 100], report
    assert all(step["ok"] for step in rollout.history), report
    assert users.errors == []
    runs = list(Run.objects.select_related("deployment").order_by("created_at"))
    turns = list(users.turns)
    assert {t.run_id for t in turns} <= {r.pk for r in runs}
    assert [r.pk for r in runs if r.status == RunStatus.FAILED] == []
    assert {t.terminal for t in turns} == {StreamEvent.DONE}
    _assert_streams_are_the_stored_answers(turns)

    user_runs = [r for r in runs if r.pk in {t.run_id for t in turns}]
    last_step_at = datetime.fromisoformat(rollout.history[-1]["started_at"])
    assert _runs_by_version(user_runs, until=rollout.started_at) == {"v1"}
    assert _runs_by_version(user_runs, since=rollout.started_at, until=finished_at) == {"v1", "v2"}
    after = [r for r in user_runs if r.created_at >= last_step_at + ROUTING_LAG]
    assert after and {_version(r) for r in after} == {"v2"}

    old = ModelDeployment.objects.get(pk=versions.old.pk)
    new = ModelDeployment.objects.get(pk=versions.new.pk)
    assert (old.status, old.traffic_weight, old.is_default) == (DeploymentStatus.DRAINING, 0, False)
    assert (new.status, new.traffic_weight, new.is_default) == (DeploymentStatus.READY, 100, True)
    beats = _wait_drained(old.key)
    assert len(beats) == 1
    assert deployment_drain_status(old) == (0, {WorkerState.DRAINED: 1})
    assert [b.state for b in _heartbeats_of(new.key)] == [WorkerState.READY]


def test_a_v2_whose_runs_fail_is_rolled_back_and_users_go_on_with_v1(
    failing_v2: TwoVersionStack, users_of: list[Users]
) -> None:
    versions = failing_v2.versions
    users = _start_users(users_of, failing_v2.stack, versions.name)
    _wait_for_turns(users, USERS * 2)
    lines: list[str] = []

    rollout = rollout_execute(
        name=versions.name, to_version="v2", steps=(25, 50, 100), thresholds=THRESHOLDS, report=lines.append, poll_s=0.5
    )

    report = "\n".join(lines)
    assert rollout.status == RolloutStatus.ROLLED_BACK, report
    assert rollout.reason.startswith("step 1 (25%): failed rate 100.0%"), rollout.reason
    assert len(rollout.history) == 1 and rollout.history[0]["ok"] is False
    assert rollout.finished_at is not None
    weights = dict(ModelDeployment.objects.filter(name=versions.name).values_list("version", "traffic_weight"))
    assert weights == {"v1": 100, "v2": 0}
    assert {d.status for d in ModelDeployment.objects.filter(name=versions.name)} == {DeploymentStatus.READY}
    assert ModelDeployment.objects.get(is_default=True).pk == versions.old.pk

    _wait_for_turns(users, USERS * 3)  # the users' runs after the rollback
    users.stop()
    assert users.errors == []
    turns = list(users.turns)
    runs = list(Run.objects.select_related("deployment").filter(pk__in=[t.run_id for t in turns]))
    on_v2 = [r for r in runs if _version(r) == "v2"]
    assert on_v2 and {r.status for r in on_v2} == {RunStatus.FAILED}  # the forced failure, seen by the check
    assert all("SIM_FAIL_RATE" in r.error for r in on_v2)
    after = [r for r in runs if r.created_at >= rollout.finished_at + ROUTING_LAG]
    assert after and {(_version(r), r.status) for r in after} == {("v1", RunStatus.DONE)}
    failed_ids = {r.pk for r in on_v2}
    assert {t.terminal for t in turns if t.run_id in failed_ids} == {StreamEvent.ERROR}
    _assert_streams_are_the_stored_answers(turns)


FEEDBACK_GATED = replace(THRESHOLDS, max_negative_feedback_delta=0.2, min_feedback_ratings=4)


def test_a_v2_its_users_rate_down_is_rolled_back_on_feedback(
    healthy_v2: TwoVersionStack, users_of: list[Users]
) -> None:
    versions = healthy_v2.versions
    new_key = versions.new.key
    users = _start_users(users_of, healthy_v2.stack, versions.name, rate=lambda key: "down" if key == new_key else "up")
    _wait_for_turns(users, USERS * 2)
    lines: list[str] = []

    rollout = rollout_execute(
        name=versions.name, to_version="v2", steps=(50, 100), thresholds=FEEDBACK_GATED, report=lines.append, poll_s=0.5
    )
    users.stop()

    report = "\n".join(lines)
    assert rollout.status == RolloutStatus.ROLLED_BACK, report
    assert rollout.reason.startswith("step 1 (50%): negative feedback 100.0%"), rollout.reason
    assert "vs 0.0%" in rollout.reason and "worse than the margin of 20.0%" in rollout.reason
    assert Rollout.objects.get(pk=rollout.pk).reason == rollout.reason  # recorded on the row
    step = rollout.history[0]["health"]
    assert step["target"]["feedback"]["down"] >= 4 and step["baseline"]["feedback"]["up"] >= 4
    weights = dict(ModelDeployment.objects.filter(name=versions.name).values_list("version", "traffic_weight"))
    assert weights == {"v1": 100, "v2": 0}
    assert users.errors == []


def test_a_v2_rated_like_v1_goes_through_the_feedback_gate(healthy_v2: TwoVersionStack, users_of: list[Users]) -> None:
    versions = healthy_v2.versions
    users = _start_users(users_of, healthy_v2.stack, versions.name, rate=lambda key: "up")
    _wait_for_turns(users, USERS * 2)
    lines: list[str] = []

    rollout = rollout_execute(
        name=versions.name, to_version="v2", steps=(50, 100), thresholds=FEEDBACK_GATED, report=lines.append, poll_s=0.5
    )
    users.stop()

    report = "\n".join(lines)
    assert rollout.status == RolloutStatus.SUCCEEDED, report
    assert all("within the margin of 20.0%" in step["verdict"] for step in rollout.history[:1]), report
    assert users.errors == []
