"""The output moderation pass on the worker's stream (``inference_workers.output_moderation``), on the simulated
engine with the real local classifier: ``retract`` writes and checks behind, ``holdback`` checks each window before
it is written; a hit ends the run ``content_filter`` with a retracted message, and the stored message, the live
stream and a stream rebuilt from Postgres agree.

The simulated engine writes words from a fixed, clean list, so a hit is made by the tier's own knob: a threshold of
0 flags any text (every score is above it), as an admin's strictest setting would.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from chats.models import Moderation
from inference_workers.runtime import WorkerRuntime
from inference_workers.services import generate_run
from moderation.models import ModerationPolicy, Violation
from moderation.selectors import forget_cached_policies
from runs.models import FinishReason, Run, RunStatus
from runs.streaming.contract import StreamEvent
from runs.streaming.follow import final_state_entries
from tests.factories import RunFactory
from tests.inference_workers.conftest import stream_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def fresh_policies() -> Iterator[None]:
    forget_cached_policies()
    yield
    forget_cached_policies()


def set_policy(run: Run, **fields: object) -> None:
    ModerationPolicy.objects.update_or_create(tier=run.tier, defaults=fields)
    forget_cached_policies()


def output_record(run: Run) -> dict[str, object]:
    (record,) = [p for p in run.passes if p["pass"] == "moderate_output"]
    return record


def test_a_clean_answer_is_checked_behind_and_recorded(sim_runtime: WorkerRuntime) -> None:
    run = RunFactory.create(max_tokens=64)
    set_policy(run, output_mode="retract", holdback_tokens=4)

    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.DONE

    run.refresh_from_db()
    assert run.finish_reason == FinishReason.STOP
    record = output_record(run)
    assert record["decision"] == "allowed" and record["mode"] == "retract"
    # A check once a flush brings a window of new tokens (4), and one at the end for what is left: every token read.
    assert 1 <= int(str(record["checks"])) <= 12 // 4 + 1


def test_retract_mode_withdraws_a_flagged_answer_everywhere(sim_runtime: WorkerRuntime) -> None:
    run = RunFactory.create(max_tokens=64)
    set_policy(run, output_mode="retract", holdback_tokens=4, threshold=0.0)

    assert generate_run(run_id=run.pk, runtime=sim_runtime) == RunStatus.DONE

    run.refresh_from_db()
    assert run.finish_reason == FinishReason.CONTENT_FILTER
    message = run.assistant_message
    assert message is not None and (message.content, message.moderation) == ("", Moderation.RETRACTED)
    events = [e.event for e in stream_of(run)]
    assert StreamEvent.DELTA in events  # flushed at once, checked behind
    assert events[-2:] == [StreamEvent.RETRACT, StreamEvent.DONE]
    assert stream_of(run)[-1].data["finish_reason"] == "content_filter"
    rebuilt = final_state_entries(Run.objects.select_related("assistant_message").get(pk=run.pk), after_seq=3)
    assert [e.event for e in rebuilt] == [StreamEvent.RETRACT, StreamEvent.DONE]  # a resumed stream: the same
    assert output_record(run)["decision"] == "retracted"
    violation = Violation.objects.get(user=run.user)
    assert (violation.direction, violation.message_id) == ("output", message.pk)


def test_holdback_mode_never_writes_a_flagged_window(sim_runtime: WorkerRuntime) -> None:
    run = RunFactory.create(max_tokens=64)
    set_policy(run, output_mode="holdback", holdback_tokens=4, threshold=0.0)

    generate_run(run_id=run.pk, runtime=sim_runtime)

    run.refresh_from_db()
    assert (run.status, run.finish_reason) == (RunStatus.DONE, FinishReason.CONTENT_FILTER)
    events = [e.event for e in stream_of(run)]
    assert StreamEvent.DELTA not in events  # the first window was checked before it could be written
    assert events[-2:] == [StreamEvent.RETRACT, StreamEvent.DONE]
    assert output_record(run)["mode"] == "holdback"


def test_holdback_mode_writes_a_clean_answer_in_windows(sim_runtime: WorkerRuntime) -> None:
    run = RunFactory.create(max_tokens=64)
    set_policy(run, output_mode="holdback", holdback_tokens=5)

    generate_run(run_id=run.pk, runtime=sim_runtime)

    run.refresh_from_db()
    assert run.finish_reason == FinishReason.STOP
    deltas = [e.data for e in stream_of(run) if e.event == StreamEvent.DELTA]
    assert "".join(d["text"] for d in deltas) == run.assistant_message.content  # type: ignore[union-attr]
    assert all(d["tokens"] >= 5 for d in deltas[:-1])  # never less than a window, but the answer's last part
