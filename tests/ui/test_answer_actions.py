"""Browser tests of the actions under an answer: copy (as Markdown, as plain text, one code block), rating with a
reason, regenerate (the earlier answer kept as version 1/2) and continue (a stopped answer goes on), and the line
with the deployment, tokens and time. Regenerate and continue run on the stack's worker (the simulated engine)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from chats.models import MessageRole
from tests.factories import ChatFactory, MessageFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.live, pytest.mark.django_db(transaction=True)]

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
