"""axe-core (vendored, ``web/static/web/vendor/axe.min.js``) on every page of the UI, in light and dark: no serious or
critical violation. And the theme: it follows ``prefers-color-scheme`` until the toggle picks one, which is
remembered across reloads (localStorage)."""

from __future__ import annotations

import re
from typing import Any, Literal

import pytest
from playwright.sync_api import Page, expect

from chats.models import MessageRole
from tests.factories import ChatFactory, MessageFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.live, pytest.mark.django_db(transaction=True)]

LIGHT_BG = "rgb(255, 255, 255)"
DARK_BG = "rgb(22, 24, 29)"


def axe_violations(page: Page) -> list[dict[str, Any]]:
    """The serious and critical violations axe finds on the page as it is now (the script is same-origin, so the
    page's CSP lets it in)."""
    page.add_script_tag(url="/static/web/vendor/axe.min.js")
    result = page.evaluate("() => axe.run(document, { resultTypes: ['violations'] })")
    return [
        {"id": v["id"], "impact": v["impact"], "nodes": [n["target"] for n in v["nodes"]][:5], "help": v["help"]}
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]


def _chat_with_answer(user: Any) -> Any:
    chat = ChatFactory.create(owner=user, title="accessible chat")
    MessageFactory.create(chat=chat, role=MessageRole.USER, content="Explain with code")
    MessageFactory.create(
        chat=chat,
        role=MessageRole.ASSISTANT,
        content="A **list**:\n\n- one\n- [link](https://example.com)\n\n| a | b |\n| - | - |\n| 1 | 2 |\n\n"
        "```python\nimport os  # comment\nprint('x', 42)\n```\n",
    )
    return chat


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_no_serious_axe_violations_on_any_page(page: Page, login, screenshot, scheme: Literal["light", "dark"]) -> None:
    page.emulate_media(color_scheme=scheme)
    page.goto("/login/")
    expect(page.get_by_role("button", name="Sign in")).to_be_visible()
    found = {"login": axe_violations(page)}

    user = UserFactory.create()
    chat = _chat_with_answer(user)
    login(user)
    page.goto(f"/c/{chat.pk}")
    expect(page.locator(".message-assistant .answer-bar")).to_be_visible()
    found["chat"] = axe_violations(page)
    page.get_by_role("button", name="Chat settings").click()
    expect(page.get_by_role("dialog")).to_be_visible()
    found["chat settings"] = axe_violations(page)
    page.keyboard.press("Escape")
    page.get_by_role("button", name="Memory", exact=True).click()
    expect(page.get_by_role("dialog", name="Memory").get_by_role("status")).to_have_text("No memories yet.")
    found["memory"] = axe_violations(page)
    screenshot(page, f"memory-{scheme}")
    page.keyboard.press("Escape")

    page.goto("/usage/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    found["usage"] = axe_violations(page)
    screenshot(page, f"usage-{scheme}")
    assert found == {name: [] for name in found}


def test_theme_follows_the_system_until_the_toggle_picks_one(page: Page, login, screenshot) -> None:
    login(UserFactory.create())
    page.emulate_media(color_scheme="dark")
    page.goto("/")
    body = page.locator("body")
    toggle = page.locator("#theme-toggle")

    def background() -> str:
        return str(body.evaluate("el => getComputedStyle(el).backgroundColor"))

    expect(toggle).to_have_text("Theme: system")
    assert background() == DARK_BG
    screenshot(page, "dark-system")
    toggle.click()
    expect(toggle).to_have_text("Theme: light")
    assert background() == LIGHT_BG
    page.reload()
    expect(page.locator("#theme-toggle")).to_have_text("Theme: light")
    assert background() == LIGHT_BG, "the choice is remembered"
    assert page.evaluate("localStorage.getItem('chat-ui:theme')") == "light"
    page.locator("#theme-toggle").click()
    expect(page.locator("html")).to_have_attribute("data-theme", "dark")
    page.emulate_media(color_scheme="light")
    assert background() == DARK_BG, "a picked theme wins over the system's"
    screenshot(page, "dark-picked")
    page.locator("#theme-toggle").click()
    expect(page.locator("#theme-toggle")).to_have_text("Theme: system")
    assert background() == LIGHT_BG
    assert page.evaluate("localStorage.getItem('chat-ui:theme')") is None
    expect(page.locator("html")).not_to_have_attribute("data-theme", re.compile(".+"))


def test_phone_layout_in_dark_keeps_the_drawer_and_the_actions(browser, live_stack, screenshot) -> None:  # type: ignore[no-untyped-def]
    from tests.ui.helpers import sign_in

    user = UserFactory.create()
    chat = _chat_with_answer(user)
    context = browser.new_context(
        base_url=live_stack.base_url, viewport={"width": 390, "height": 844}, color_scheme="dark"
    )
    try:
        sign_in(context, user, live_stack.base_url)
        page = context.new_page()
        page.goto(f"/c/{chat.pk}")
        expect(page.locator(".message-assistant .answer-bar")).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), "no sideways scroll"
        expect(page.get_by_role("button", name="Show chats")).to_be_visible()
        screenshot(page, "phone-dark")
    finally:
        context.close()
