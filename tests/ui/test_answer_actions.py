"""Browser tests of the actions under an answer: copy (as Markdown, as plain text, one code block), rating with a
reason, regenerate (the earlier answer kept as version 1/2) and continue (a stopped answer goes on), and the line
with the deployment, tokens and time. Regenerate and continue run on the stack's worker (the simulated engine)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Locator, Page, expect
from rest_framework.test import APIClient

from chats.models import MessageRole
from runs.models import Run
from tests.factories import ChatFactory, MessageFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.live, pytest.mark.django_db(transaction=True)]


def words(text: str) -> str:
    return " ".join(text.split())


ANSWER = "Here is **bold** and a list:\n\n- one\n- two\n\n```python\nprint('hi')\n```\n"


def clipboard(page: Page) -> str:
    return str(page.evaluate("navigator.clipboard.readText()"))


def test_copy_as_markdown_as_text_and_one_code_block(page: Page, context, login, screenshot) -> None:  # type: ignore[no-untyped-def]
    context.grant_permissions(["clipboard-read", "clipboard-write"])
    user = UserFactory.create()
    chat = ChatFactory.create(owner=user, title="copy me")
    MessageFactory.create(chat=chat, role=MessageRole.USER, content="give me something to copy")
    MessageFactory.create(chat=chat, role=MessageRole.ASSISTANT, content=ANSWER)
    login(user)
    page.goto(f"/c/{chat.pk}")
    answer = page.locator(".message-assistant").last

    answer.get_by_role("button", name="Copy as Markdown").click()
    expect(answer.get_by_role("button", name="Copy as Markdown")).to_have_text("Copied")
    assert clipboard(page) == ANSWER
    expect(page.locator("#run-status")).to_have_text("Copied to the clipboard.")

    answer.get_by_role("button", name="Copy as text").click()
    text = clipboard(page)
    assert "**" not in text and "```" not in text and "Copy code" not in text
    assert "Here is bold and a list:" in text and "one" in text and "print('hi')" in text

    answer.get_by_role("button", name="Copy code").click()
    assert clipboard(page) == "print('hi')"
    screenshot(page, "copied")


def _send_and_finish(page: Page, text: str) -> Locator:
    prompt = page.get_by_role("textbox", name="Message")
    prompt.fill(text)
    prompt.press("Enter")
    bubble = page.locator("#message-list .message-assistant").last
    expect(bubble).to_have_attribute("data-status", "done", timeout=40_000)
    expect(bubble.locator(".answer-bar")).to_be_visible()
    return bubble


@pytest.mark.usefixtures("needs_worker")
def test_regenerate_keeps_the_first_answer_as_version_one(page: Page, login, screenshot) -> None:
    user = UserFactory.create()
    login(user)
    page.goto("/")
    first = _send_and_finish(page, "Answer me twice")
    run1 = Run.objects.select_related("assistant_message").get(user=user)
    assert run1.assistant_message is not None
    first_text = words(first.locator(".message-body").inner_text())
    assert first_text == words(run1.assistant_message.content)

    first.get_by_role("button", name="Regenerate this answer").click()
    # The new run's bubble takes the old one's place (its run id tells them apart).
    new_run = page.locator(f'#message-list .message-assistant:not([data-run-id="{run1.pk}"])')
    expect(new_run).to_have_attribute("data-status", "done", timeout=40_000)
    second = page.locator("#message-list .message-assistant").last
    expect(second.locator(".version-label")).to_have_text("2/2")
    run2 = Run.objects.select_related("assistant_message").filter(user=user).latest("created_at")
    assert run2.pk != run1.pk and run2.revision == "regenerate"
    assert run2.assistant_message is not None
    expect(page.locator("#message-list .message-assistant")).to_have_count(1)
    assert words(second.locator(".message-body").inner_text()) == words(run2.assistant_message.content)
    screenshot(page, "regenerated")

    second.get_by_role("button", name="Previous version").click()
    expect(second.locator(".version-label")).to_have_text("1/2")
    assert words(second.locator(".message-body").inner_text()) == first_text
    expect(second.get_by_role("button", name="Previous version")).to_be_disabled()
    screenshot(page, "version-1")
    page.reload()
    answer = page.locator("#message-list .message-assistant").last
    expect(answer.locator(".version-label")).to_have_text("2/2")
    answer.get_by_role("button", name="Previous version").click()
    assert words(answer.locator(".message-body").inner_text()) == first_text


@pytest.mark.usefixtures("needs_worker")
def test_a_stopped_answer_can_be_continued(page: Page, login, screenshot) -> None:
    user = UserFactory.create()
    login(user)
    page.goto("/")
    prompt = page.get_by_role("textbox", name="Message")
    prompt.fill("Say a lot, I will stop you and then let you go on")
    prompt.press("Enter")
    bubble = page.locator("#message-list .message-assistant[data-run-id]").last
    # Two words streamed before Stop (a bare " " would match the empty body: Playwright trims the expected text).
    expect(bubble.locator(".message-body")).to_have_text(re.compile(r"\w+\W+\w+"), timeout=20_000)
    page.get_by_role("button", name="Stop", exact=True).click()
    expect(bubble).to_have_attribute("data-status", "cancelled", timeout=15_000)
    stopped = page.locator("#message-list .message-assistant").last
    cont = stopped.get_by_role("button", name="Continue this answer")
    expect(cont).to_be_visible()
    stopped_text = words(stopped.locator(".message-body").inner_text())
    assert stopped_text
    cont.click()
    final = page.locator("#message-list .message-assistant").last
    expect(final).to_have_attribute("data-status", "done", timeout=40_000)
    run = Run.objects.select_related("assistant_message").filter(user=user).latest("created_at")
    assert run.revision == "continue" and run.assistant_message is not None
    shown = words(final.locator(".message-body").inner_text())
    assert shown == words(run.assistant_message.content)
    assert shown.startswith(stopped_text) and len(shown) > len(stopped_text)
    expect(final.get_by_role("button", name="Continue this answer")).to_be_hidden()
    screenshot(page, "continued")


@pytest.mark.usefixtures("needs_worker")
def test_rating_with_a_reason_and_the_run_line(page: Page, login, live_stack) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory.create()
    login(user)
    page.goto("/")
    answer = _send_and_finish(page, "Rate me")
    run = Run.objects.select_related("deployment").get(user=user)
    info = answer.locator(".answer-info")
    expect(info).to_contain_text(run.deployment.key if run.deployment else run.model)
    expect(info).to_contain_text(re.compile(rf"{run.output_tokens} tokens · [\d.]+ s"))

    down = answer.get_by_role("button", name="Bad answer")
    down.click()
    expect(down).to_have_attribute("aria-pressed", "true")
    reason = answer.get_by_role("textbox", name=re.compile("What was wrong"))
    expect(reason).to_be_focused()
    reason.fill("too vague")
    reason.press("Enter")
    expect(page.locator("#run-status")).to_have_text("Thanks for the feedback.")
    assert _feedback(run) == ("down", "too vague")
    page.reload()
    answer = page.locator("#message-list .message-assistant").last
    expect(answer.get_by_role("button", name="Bad answer")).to_have_attribute("aria-pressed", "true")
    answer.get_by_role("button", name="Good answer").click()
    expect(answer.get_by_role("button", name="Good answer")).to_have_attribute("aria-pressed", "true")
    expect(answer.get_by_role("button", name="Bad answer")).to_have_attribute("aria-pressed", "false")
    answer.get_by_role("button", name="Skip").click()
    assert _feedback(run) == ("up", "")
    answer.get_by_role("button", name="Good answer").click()
    expect(answer.get_by_role("button", name="Good answer")).to_have_attribute("aria-pressed", "false")
    assert _feedback(run) is None


def _feedback(run: Run) -> tuple[str, str] | None:
    data = APIClient()
    data.force_authenticate(run.user)
    body = data.get(f"/api/runs/{run.pk}").json()
    feedback = body.get("feedback")
    return (feedback["rating"], feedback["reason"]) if feedback else None
