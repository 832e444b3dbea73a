"""Browser tests of the chat page that need no inference worker: login, sidebar, history, safety, layout."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone
from playwright.sync_api import Page, Route, expect

from accounts.models import UserLimitOverride
from chats.models import Chat, Message, MessageRole
from tests.factories import ChatFactory, MessageFactory, UserFactory
from tests.ui.helpers import sign_in

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

XSS_SCRIPT = '<script>alert("xss-script")</script>'
XSS_IMG = "<img src=x onerror=\"alert('xss-img')\">"


def test_login_wrong_password_then_right_one_then_logout(page: Page, live_stack, screenshot) -> None:
    user = UserFactory.create(username="alice")
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login/\?next=/$"))
    page.get_by_label("Username").fill("alice")
    page.get_by_label("Password").fill("wrong")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("did not match")
    screenshot(page, "login-error")

    page.get_by_label("Password").fill("pw")
    page.get_by_label("Password").press("Enter")
    expect(page).to_have_url(live_stack.url("/"))
    expect(page.locator("#account-name")).to_have_text("alice")
    expect(page.locator("#account-tier")).to_have_text(f"{user.tier.name} tier")
    expect(page.get_by_role("textbox", name="Message")).to_be_focused()
    screenshot(page, "signed-in")

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/login/$"))
    page.goto("/")
    expect(page).to_have_url(re.compile(r"/login/"))


def test_sidebar_pages_through_all_chats_most_recent_first(page: Page, login, screenshot) -> None:
    user = UserFactory.create()
    now = timezone.now()
    for i in range(45):
        chat = ChatFactory.create(owner=user, title=f"Topic {i:02d}")
        Chat.objects.filter(pk=chat.pk).update(updated_at=now - timedelta(minutes=i))
    ChatFactory.create(title="someone else's chat")
    login(user)
    page.goto("/")
    links = page.locator("#chat-list .chat-link")
    expect(links.first).to_have_text("Topic 00")
    # The first page is 20; scrolling the list to its end loads the rest through next_cursor.
    for _ in range(10):
        if links.count() == 45:
            break
        page.locator("#chat-list-sentinel").scroll_into_view_if_needed()
        page.wait_for_timeout(300)
    expect(links).to_have_count(45)
    assert links.all_inner_texts() == [f"Topic {i:02d}" for i in range(45)]
    screenshot(page, "sidebar")


def test_rename_and_delete_chat_from_the_sidebar(page: Page, login) -> None:
    user = UserFactory.create()
    keep = ChatFactory.create(owner=user, title="keep me")
    doomed = ChatFactory.create(owner=user, title="delete me")
    login(user)
    page.goto("/")

    page.get_by_role("button", name="Rename chat “keep me”").click()
    title_box = page.get_by_role("textbox", name=re.compile("New chat title"))
    title_box.fill("renamed <b>chat</b>")
    title_box.press("Enter")
    expect(page.locator("#chat-list .chat-link", has_text="renamed")).to_have_text("renamed <b>chat</b>")
    keep.refresh_from_db()
    assert keep.title == "renamed <b>chat</b>"

    page.get_by_role("button", name="Delete chat “delete me”").click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_contain_text("delete me")
    dialog.get_by_role("button", name="Delete").click()
    expect(page.locator("#chat-list .chat-link", has_text="delete me")).to_have_count(0)
    assert not Chat.objects.filter(pk=doomed.pk).exists()
    assert Chat.objects.filter(pk=keep.pk).exists()


def test_history_loads_older_messages_when_scrolled_up(page: Page, login, screenshot) -> None:
    user = UserFactory.create()
    chat = ChatFactory.create(owner=user, title="long chat")
    start = timezone.now() - timedelta(hours=1)
    for i in range(70):
        msg = MessageFactory.create(
            chat=chat, role=MessageRole.USER if i % 2 == 0 else MessageRole.ASSISTANT, content=f"line {i:02d}"
        )
        Message.objects.filter(pk=msg.pk).update(created_at=start + timedelta(seconds=i))
    login(user)
    page.goto(f"/c/{chat.pk}")
    bodies = page.locator("#message-list .message-body")
    expect(bodies.last).to_have_text("line 69")
    assert bodies.count() < 70, "the whole history should not come in one page"
    screenshot(page, "history-bottom")
    for _ in range(10):
        if bodies.count() == 70:
            break
        page.locator("#messages").evaluate("box => { box.scrollTop = 0; }")
        page.wait_for_timeout(300)
    expect(bodies).to_have_count(70)
    assert bodies.all_inner_texts() == [f"line {i:02d}" for i in range(70)]
    expect(page.locator("#messages-status")).to_have_text("Start of the conversation")


def test_html_in_prompts_and_answers_is_shown_as_text(page: Page, login, screenshot) -> None:
    """Nothing from users or the model runs: tags are shown literally, Markdown still renders."""
    user = UserFactory.create()
    chat = ChatFactory.create(owner=user, title="safety")
    MessageFactory.create(chat=chat, role=MessageRole.USER, content="show me html")
    answer = (
        f"**bold** and `code`\n\n{XSS_IMG}\n\n[click](javascript:alert('xss-link')) [docs](https://example.com/x)"
        f"\n\n- one\n- two\n\n```html\n{XSS_SCRIPT}\n```"
    )
    MessageFactory.create(chat=chat, role=MessageRole.ASSISTANT, content=answer)
    login(user)
    page.goto(f"/c/{chat.pk}")

    assistant = page.locator(".message-assistant .message-body").last
    expect(assistant.locator("strong")).to_have_text("bold")
    expect(assistant.locator("pre code")).to_have_text(XSS_SCRIPT)
    expect(assistant).to_contain_text(XSS_IMG)
    expect(assistant).to_contain_text("[click](javascript:alert('xss-link'))")
    assert assistant.locator("img, script, a[href^='javascript']").count() == 0
    link = assistant.locator("a")
    expect(link).to_have_count(1)
    expect(link).to_have_attribute("href", "https://example.com/x")
    expect(link).to_have_attribute("rel", "noopener noreferrer nofollow")
    expect(assistant.locator("ul > li")).to_have_text(["one", "two"])

    # Through the prompt box: the text reaches the server and comes back literally.
    prompt = page.get_by_role("textbox", name="Message")
    prompt.fill(f"{XSS_SCRIPT} {XSS_IMG}")
    prompt.press("Enter")
    user_bubble = page.locator(".message-user .message-body").last
    expect(user_bubble).to_have_text(f"{XSS_SCRIPT} {XSS_IMG}")
    page.reload()
    expect(page.locator(".message-user .message-body").last).to_have_text(f"{XSS_SCRIPT} {XSS_IMG}")
    assert page.locator("#message-list img, #message-list script").count() == 0
    page.wait_for_timeout(500)
    assert page.dialogs == []  # type: ignore[attr-defined]
    assert page.js_errors == []  # type: ignore[attr-defined]
    assert Message.objects.filter(chat=chat, content=f"{XSS_SCRIPT} {XSS_IMG}").count() == 1
    screenshot(page, "inert-html")


def test_enter_sends_shift_enter_breaks_line(page: Page, login) -> None:
    user = UserFactory.create()
    login(user)
    page.goto("/")
    prompt = page.get_by_role("textbox", name="Message")
    prompt.type("first line")
    prompt.press("Shift+Enter")
    prompt.type("second line")
    expect(prompt).to_have_value("first line\nsecond line")
    prompt.press("Enter")
    expect(prompt).to_have_value("")
    expect(page.locator(".message-user .message-body")).to_have_text("first line\nsecond line")
    chat = Chat.objects.get(owner=user)
    assert chat.title == "first line"
    expect(page).to_have_url(re.compile(rf"/c/{chat.pk}$"))
    expect(page.locator("#chat-list .chat-link").first).to_have_text("first line")
    # One answer at a time per chat: the Stop button replaces Send while the run is unfinished.
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_visible()


def test_busy_answer_shows_retry_countdown_and_retry_works(page: Page, login, api_for, screenshot) -> None:
    """A real 429 from admission (token budget spent): the prompt stays, the wait shows, Retry sends it."""
    user = UserFactory.create()
    UserLimitOverride.objects.create(user=user, bucket_capacity_tokens=300, bucket_refill_per_s=80)
    first = ChatFactory.create(owner=user, title="first")
    second = ChatFactory.create(owner=user, title="second")
    # The first prompt reserves most of the bucket (input + 256 max output tokens).
    assert api_for(user).post(f"/api/chats/{first.pk}/messages", {"content": "hi"}, format="json").status_code == 202
    login(user)
    page.goto(f"/c/{second.pk}")
    expect(page.locator("#account-budget")).to_contain_text("tokens left")
    prompt = page.get_by_role("textbox", name="Message")
    prompt.fill("hello when you can")
    prompt.press("Enter")
    alert = page.locator("#alert")
    expect(alert).to_contain_text("Token budget exhausted")
    expect(alert).to_contain_text(re.compile(r"Retry in \d+ s"))
    retry = page.locator("#alert-retry")
    expect(retry).to_be_disabled()
    expect(prompt).to_have_value("hello when you can")
    assert not Message.objects.filter(chat=second).exists()
    screenshot(page, "busy")
    expect(retry).to_be_enabled(timeout=10_000)
    retry.click()
    expect(page.locator(".message-user .message-body")).to_have_text("hello when you can")
    expect(alert).to_be_hidden()
    assert Message.objects.filter(chat=second, content="hello when you can").count() == 1


def test_phone_layout_sidebar_is_a_drawer(browser, live_stack, login, screenshot) -> None:  # type: ignore[no-untyped-def]
    user = UserFactory.create()
    ChatFactory.create(owner=user, title="on the phone")
    context = browser.new_context(
        base_url=live_stack.base_url, viewport={"width": 390, "height": 844}, reduced_motion="reduce"
    )
    try:
        sign_in(context, user, live_stack.base_url)
        page = context.new_page()
        page.goto("/")
        chat_link = page.locator("#chat-list .chat-link", has_text="on the phone")
        expect(chat_link).to_be_hidden()
        toggle = page.get_by_role("button", name="Show chats")
        expect(toggle).to_have_attribute("aria-expanded", "false")
        screenshot(page, "phone-closed")
        toggle.click()
        expect(chat_link).to_be_visible()
        expect(page.get_by_role("button", name="+ New chat")).to_be_focused()
        expect(toggle).to_have_attribute("aria-expanded", "true")
        screenshot(page, "phone-open")
        page.keyboard.press("Escape")
        expect(chat_link).to_be_hidden()
        toggle.click()
        chat_link.click()
        expect(chat_link).to_be_hidden()
        expect(page.locator("#chat-title")).to_have_text("on the phone")
    finally:
        context.close()


def test_a_prompt_sent_while_the_history_loads_is_shown_once(page: Page, login) -> None:
    """The history's read is answered after the prompt sent meanwhile was stored, so the page holds the prompt too:
    its bubble is not added a second time (a keyboard user who opened a chat and sent at once saw it twice)."""
    user = UserFactory.create()
    chat = ChatFactory.create(owner=user, title="earlier")
    MessageFactory.create(chat=chat, role=MessageRole.USER, content="an earlier prompt")
    login(user)
    held: list[Route] = []
    history = re.compile(rf".*/api/chats/{chat.pk}/messages\?.*")  # the GET alone: the POST has no query

    def hold(route: Route) -> None:
        held.append(route)

    page.route(history, hold)
    page.goto(f"/c/{chat.pk}")
    page.wait_for_function("() => document.querySelector('#chat-title')?.textContent === 'earlier'")
    expect(page.get_by_role("textbox", name="Message")).to_be_editable()
    page.get_by_role("textbox", name="Message").fill("sent at once")
    page.keyboard.press("Enter")
    expect(page.get_by_text("sent at once")).to_have_count(1)  # the accepted prompt, appended
    assert Message.objects.filter(chat=chat, content="sent at once").exists()
    assert held, "the history's read was not held"
    for route in held:
        route.continue_()  # answered now: its page holds the new prompt
    page.unroute(history, hold)
    expect(page.locator(".message-user .message-body")).to_have_text(["an earlier prompt", "sent at once"])


def _fake_stream(page: Page, body: str) -> None:
    """Answers the run's SSE stream with fixed events (the real stream has its own tests in tests/runs)."""
    page.route(
        re.compile(r".*/api/runs/\d+/stream.*"),
        lambda route: route.fulfill(status=200, headers={"Content-Type": "text/event-stream"}, body=body),
    )


def test_queued_run_shows_position_and_estimated_wait(page: Page, login, screenshot) -> None:
    user = UserFactory.create()
    login(user)
    _fake_stream(
        page,
        'event: status\ndata: {"status": "queued", "queue_position": 3, "estimated_wait_s": 12}\n\n',
    )
    page.goto("/")
    prompt = page.get_by_role("textbox", name="Message")
    prompt.fill("wait your turn")
    prompt.press("Enter")
    bubble = page.locator("#message-list .message-assistant[data-run-id]").last
    expect(bubble.locator(".message-meta")).to_have_text("Queued · position 3 · about 12 s to wait")
    expect(page.locator("#run-status")).to_have_text("Queued · position 3 · about 12 s to wait")
    expect(page.get_by_role("button", name="Stop", exact=True)).to_be_visible()
    screenshot(page, "queued")


def test_stream_error_is_shown_plainly(page: Page, login) -> None:
    user = UserFactory.create()
    login(user)
    _fake_stream(
        page,
        'id: 1\nevent: delta\ndata: {"text": "Half an ans"}\n\n'
        'id: 2\nevent: error\ndata: {"code": "generation_failed", "message": "The engine stopped."}\n\n',
    )
    page.goto("/")
    prompt = page.get_by_role("textbox", name="Message")
    prompt.fill("this one fails")
    prompt.press("Enter")
    bubble = page.locator("#message-list .message-assistant[data-run-id]").last
    expect(bubble).to_have_attribute("data-status", "failed")
    expect(bubble.locator(".message-body")).to_have_text("Half an ans")
    expect(page.get_by_role("alert")).to_have_text("Failed: The engine stopped.")
    expect(page.get_by_role("button", name="Send", exact=True)).to_be_visible()


def test_keyboard_only_skip_link_rename_and_send(page: Page, login) -> None:
    user = UserFactory.create()
    ChatFactory.create(owner=user, title="by keyboard")
    login(user)
    page.goto("/")
    expect(page.locator("#chat-list .chat-link")).to_have_count(1)
    skip = page.get_by_role("link", name="Skip to the message box")
    first_tabbable = "document.querySelector('a[href], button, input, textarea, select, [tabindex]')"
    assert page.evaluate(f"{first_tabbable} === document.querySelector('.skip-link')")
    skip.focus()
    expect(skip).to_be_in_viewport()
    assert skip.evaluate("el => getComputedStyle(el).outlineStyle") != "none", "focus must be visible"
    page.keyboard.press("Enter")
    expect(page.get_by_role("textbox", name="Message")).to_be_focused()

    rename = page.get_by_role("button", name="Rename chat “by keyboard”")
    rename.focus()
    page.keyboard.press("Enter")
    title_box = page.get_by_role("textbox", name=re.compile("New chat title"))
    expect(title_box).to_be_focused()
    page.keyboard.press("Escape")
    expect(page.locator("#chat-list .chat-link")).to_have_text("by keyboard")

    page.locator("#chat-list .chat-link").focus()
    page.keyboard.press("Enter")
    expect(page.locator("#chat-title")).to_have_text("by keyboard")
    page.get_by_role("textbox", name="Message").focus()
    page.keyboard.type("typed only")
    page.keyboard.press("Enter")
    expect(page.locator(".message-user .message-body")).to_have_text("typed only")
