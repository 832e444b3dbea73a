"""Browser tests of the streaming answer against the real stack: uvicorn + a Celery worker running the
simulated engine (slowed so the text grows for a few seconds), both on the test database."""

from __future__ import annotations

import time
from typing import Any

import pytest
from playwright.sync_api import Locator, Page, expect

from chats.models import Message
from runs.models import Run, RunStatus
from tests.factories import UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("needs_worker")]

TERMINAL = ("done", "cancelled", "failed")


def words(text: str) -> str:
    return " ".join(text.split())


def send(page: Page, text: str) -> Locator:
    prompt = page.get_by_role("textbox", name="Message")
    prompt.fill(text)
    prompt.press("Enter")
    bubble = page.locator("#message-list .message-assistant[data-run-id]").last
    expect(bubble).to_be_attached()
    return bubble


def body_text(bubble: Locator) -> str:
    return str(bubble.locator(".message-body").inner_text())


def wait_for_words(bubble: Locator, count: int, timeout_s: float = 30) -> str:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = body_text(bubble)
        if len(text.split()) >= count:
            return text
        assert bubble.get_attribute("data-status") not in TERMINAL, "the answer ended before it could be observed"
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} words after {timeout_s} s")


def wait_terminal(bubble: Locator, timeout_s: float = 40) -> str:
    expect(bubble).to_have_attribute("data-status", _terminal_pattern(), timeout=timeout_s * 1000)
    return str(bubble.get_attribute("data-status"))


def _terminal_pattern() -> Any:
    import re

    return re.compile("^(done|cancelled|failed)$")


def run_of(user: Any) -> Run:
    return Run.objects.select_related("assistant_message").filter(user=user).latest("created_at")


def test_answer_grows_token_by_token_and_ends_equal_to_the_stored_message(page: Page, login, screenshot) -> None:
    user = UserFactory.create()
    login(user)
    page.goto("/")
    bubble = send(page, "Tell me about streaming")
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_visible()

    lengths: list[int] = []
    deadline = time.monotonic() + 40
    shot = False
    while time.monotonic() < deadline:
        status = bubble.get_attribute("data-status")
        lengths.append(len(body_text(bubble)))
        if status in TERMINAL:
            break
        if not shot and lengths[-1] > 20:
            screenshot(page, "streaming")
            shot = True
        time.sleep(0.1)
    assert bubble.get_attribute("data-status") == "done"
    assert lengths == sorted(lengths), "the text must only grow"
    assert len({n for n in lengths if n > 0}) >= 4, f"the text should grow in several steps, saw {lengths}"

    run = run_of(user)
    assert run.status == RunStatus.DONE
    assert run.assistant_message is not None
    assert words(body_text(bubble)) == words(run.assistant_message.content)
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_visible()
    expect(bubble.locator(".message-body")).to_have_attribute("aria-busy", "false")
    screenshot(page, "done")

    # After a reload the chat is in the sidebar and its history holds both turns.
    page.reload()
    expect(page.locator("#chat-list .chat-link").first).to_have_text("Tell me about streaming")
    expect(page.locator("#chat-list .chat-link").first).to_have_attribute("aria-current", "page")
    expect(page.locator("#message-list .message-body")).to_have_count(2)
    stored = page.locator("#message-list .message-assistant .message-body")
    assert words(str(stored.inner_text())) == words(run.assistant_message.content)


def test_reload_mid_answer_shows_the_partial_text_at_once_and_loses_nothing(page: Page, login, screenshot) -> None:
    user = UserFactory.create()
    login(user)
    page.goto("/")
    bubble = send(page, "A long answer, please")
    partial = wait_for_words(bubble, 6)

    stream_requests: list[str] = []
    page.on("request", lambda req: stream_requests.append(req.url) if "/stream" in req.url else None)
    page.reload()
    resumed = page.locator("#message-list .message-assistant[data-run-id]").last
    # The partial answer is there at once (from the page's saved progress), before any new token.
    page.wait_for_function(
        "(partial) => {"
        " const b = document.querySelector('#message-list .message-assistant[data-run-id] .message-body');"
        " return b && b.innerText.replace(/\\s+/g, ' ').trim().startsWith(partial); }",
        arg=words(partial),
        timeout=3000,
    )
    screenshot(page, "resumed")
    assert any("lastEventId=" in url for url in stream_requests), f"no resume with the last event id: {stream_requests}"

    assert wait_terminal(resumed) == "done"
    run = run_of(user)
    assert run.assistant_message is not None
    final = words(body_text(resumed))
    assert final == words(run.assistant_message.content)
    assert final.startswith(words(partial))
    assert Message.objects.filter(chat=run.chat, role="assistant").count() == 1


def test_network_drop_mid_answer_reconnects_and_loses_nothing(page: Page, context, login) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory.create()
    login(user)
    page.goto("/")
    bubble = send(page, "Keep going through a network drop")
    wait_for_words(bubble, 4)
    resumes: list[str] = []

    def on_request(req: Any) -> None:
        if "/stream" in req.url:
            resumes.append(req.headers.get("last-event-id") or req.url.partition("lastEventId=")[2])

    page.on("request", on_request)
    context.set_offline(True)
    page.wait_for_timeout(1500)
    context.set_offline(False)
    assert wait_terminal(bubble) == "done"
    assert any(r and int(r) > 0 for r in resumes), f"the stream was not resumed after the drop: {resumes}"
    run = run_of(user)
    assert run.assistant_message is not None
    assert words(body_text(bubble)) == words(run.assistant_message.content)


def test_stop_ends_the_run_cancelled_and_keeps_the_partial_text(page: Page, login, screenshot) -> None:
    user = UserFactory.create()
    login(user)
    page.goto("/")
    bubble = send(page, "Say a lot, I will stop you")
    wait_for_words(bubble, 3)
    page.get_by_role("button", name="Stop", exact=True).click()
    assert wait_terminal(bubble, timeout_s=15) == "cancelled"
    expect(bubble.locator(".message-meta")).to_have_text("Stopped")
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_visible()
    screenshot(page, "stopped")

    run = run_of(user)
    assert run.status == RunStatus.CANCELLED
    shown = words(body_text(bubble))
    assert shown, "the partial answer stays on screen"
    if run.assistant_message is not None:
        assert shown == words(run.assistant_message.content)
    # The chat takes a new prompt right away.
    next_bubble = send(page, "And now something short")
    expect(next_bubble).not_to_have_attribute("data-run-id", str(run.pk))
    assert Run.objects.filter(chat=run.chat).count() == 2


def test_switching_chats_mid_answer_and_back_picks_the_answer_up_again(page: Page, login) -> None:
    user = UserFactory.create()
    login(user)
    page.goto("/")
    bubble = send(page, "First chat keeps talking")
    partial = wait_for_words(bubble, 4)
    page.get_by_role("button", name="+ New chat").click()
    expect(page.locator("#chat-title")).to_have_text("New chat")
    expect(page.locator("#message-list .message")).to_have_count(0)
    page.locator("#chat-list .chat-link", has_text="First chat keeps talking").click()
    resumed = page.locator("#message-list .message-assistant[data-run-id]").last
    expect(resumed.locator(".message-body")).to_contain_text(words(partial).split()[0])
    assert wait_terminal(resumed) == "done"
    run = run_of(user)
    assert run.assistant_message is not None
    assert words(body_text(resumed)) == words(run.assistant_message.content)
    assert words(body_text(resumed)).startswith(words(partial))
