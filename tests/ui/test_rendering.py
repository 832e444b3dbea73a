"""Browser tests of how answers are rendered: Markdown through markdown-it, highlight.js and DOMPurify (the
vendored libraries), model output that tries to run script stays inert, a 4,000-token answer streams without a
long frame, and the light/dark theme. They need no inference worker: answers are stored rows or a fixed stream."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import Page, expect

from bench.lib.ui_frames import markdown_answer, measure_stream
from chats.models import MessageRole
from tests.factories import ChatFactory, MessageFactory, UserFactory

pytestmark = [pytest.mark.browser, pytest.mark.live, pytest.mark.django_db(transaction=True)]

# Each tries to run script (alert) or to leave an attribute that could.
XSS_PAYLOADS = [
    '<script>alert("xss-script")</script>',
    "<img src=x onerror=\"alert('xss-img')\">",
    '<svg onload="alert(\'xss-svg\')"><circle r="4"/></svg>',
    "<a href=\"javascript:alert('xss-a')\" onclick=\"alert('xss-click')\">click me</a>",
    "<iframe src=\"javascript:alert('xss-iframe')\"></iframe>",
    "[markdown link](javascript:alert('xss-md-link'))",
    "![markdown image](javascript:alert('xss-md-img'))",
    "<javascript:alert('xss-autolink')>",
    '<p onmouseover="alert(\'xss-hover\')" style="position:fixed;inset:0">hover</p>',
    "[data link](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
]
XSS_ANSWER = "Here you go:\n\n" + "\n\n".join(XSS_PAYLOADS) + "\n\n```html\n<script>alert('in-code')</script>\n```\n"

# Every element under `root` with an event attribute, a script-bearing URL, or a tag that has no place there.
UNSAFE_JS = """
(root) => {
  const bad = [];
  for (const el of root.querySelectorAll("*")) {
    for (const attr of el.attributes) {
      if (/^on/i.test(attr.name)) bad.push(`${el.tagName} ${attr.name}`);
      if (/^(href|src|action|formaction|xlink:href)$/i.test(attr.name) && !/^(https?:|mailto:|#)/i.test(attr.value)) {
        bad.push(`${el.tagName} ${attr.name}=${attr.value}`);
      }
      if (attr.name === "style") bad.push(`${el.tagName} style`);
    }
    if (/^(SCRIPT|IMG|SVG|IFRAME|OBJECT|EMBED|FORM|STYLE)$/i.test(el.tagName)) bad.push(el.tagName);
  }
  return bad;
}
"""


def _assert_inert(page: Page, selector: str) -> None:
    page.wait_for_timeout(500)  # a handler that was going to fire would have by now
    assert page.locator(selector).evaluate(UNSAFE_JS) == []
    assert page.dialogs == []  # type: ignore[attr-defined]
    assert page.js_errors == []  # type: ignore[attr-defined]


def test_markdown_renders_with_highlighted_code_tables_and_safe_links(page: Page, login, screenshot) -> None:
    user = UserFactory.create()
    chat = ChatFactory.create(owner=user, title="markdown")
    MessageFactory.create(chat=chat, role=MessageRole.USER, content="show me")
    answer = (
        "# Title\n\nSome **bold**, *italic*, ~~gone~~ and `code`, see https://example.com/auto.\n\n"
        "| a | b |\n| --- | --- |\n| 1 | 2 |\n\n1. one\n2. two\n\n> quoted\n\n"
        "```python\ndef f(x):\n    return x + 1  # add\n```\n"
    )
    MessageFactory.create(chat=chat, role=MessageRole.ASSISTANT, content=answer)
    login(user)
    page.goto(f"/c/{chat.pk}")
    body = page.locator(".message-assistant .message-body").last
    expect(body.locator("h3")).to_have_text("Title")  # the page owns h1 and h2
    expect(body.locator("strong")).to_have_text("bold")
    expect(body.locator("em")).to_have_text("italic")
    expect(body.locator("s")).to_have_text("gone")
    expect(body.locator("table td")).to_have_text(["1", "2"])
    expect(body.locator("ol > li")).to_have_text(["one", "two"])
    expect(body.locator("blockquote")).to_contain_text("quoted")
    autolink = body.locator("a", has_text="https://example.com/auto")
    expect(autolink).to_have_attribute("href", "https://example.com/auto")
    expect(autolink).to_have_attribute("rel", "noopener noreferrer nofollow")
    code = body.locator(".code-block pre code.language-python")
    expect(code).to_have_text("def f(x):\n    return x + 1  # add")
    expect(code.locator(".hljs-keyword").first).to_have_text("def")
    expect(code.locator(".hljs-comment")).to_have_text("# add")
    expect(body.locator(".code-block .code-lang")).to_have_text("python")
    screenshot(page, "markdown")


def test_xss_in_a_stored_answer_is_inert(page: Page, login, screenshot) -> None:
    user = UserFactory.create()
    chat = ChatFactory.create(owner=user, title="xss")
    MessageFactory.create(chat=chat, role=MessageRole.USER, content="be evil")
    MessageFactory.create(chat=chat, role=MessageRole.ASSISTANT, content=XSS_ANSWER)
    login(user)
    page.goto(f"/c/{chat.pk}")
    body = page.locator(".message-assistant .message-body").last
    expect(body).to_contain_text("Here you go")
    # Raw HTML stays literal text (markdown-it's html: false); the code block keeps it as code.
    expect(body).to_contain_text('<script>alert("xss-script")</script>')
    expect(body).to_contain_text("<img src=x onerror=")
    expect(body.locator("pre code")).to_have_text("<script>alert('in-code')</script>")
    hrefs = body.locator("a").evaluate_all("links => links.map((a) => a.getAttribute('href'))")
    assert all(re.match(r"^(https?:|mailto:|#)", h or "#") for h in hrefs), hrefs
    body.locator("p", has_text="hover").first.hover()
    _assert_inert(page, "#message-list")
    screenshot(page, "xss-inert")


def test_xss_in_a_streamed_answer_is_inert(page: Page, login) -> None:
    """The same payloads arriving as deltas go through the incremental renderer."""
    user = UserFactory.create()
    login(user)
    pieces = re.findall(r"[\s\S]{1,7}", XSS_ANSWER)
    body = (
        "".join(f"id: {i}\nevent: delta\ndata: {json.dumps({'text': piece})}\n\n" for i, piece in enumerate(pieces, 1))
        + f'id: {len(pieces) + 1}\nevent: done\ndata: {{"status": "done", "finish_reason": "stop"}}\n\n'
    )
    page.route(
        re.compile(r".*/api/runs/\d+/stream.*"),
        lambda route: route.fulfill(status=200, headers={"Content-Type": "text/event-stream"}, body=body),
    )
    page.goto("/")
    prompt = page.get_by_role("textbox", name="Message")
    prompt.fill("be evil, slowly")
    prompt.press("Enter")
    bubble = page.locator("#message-list .message-assistant[data-run-id]").last
    expect(bubble).to_have_attribute("data-status", "done")
    expect(bubble.locator(".message-body")).to_contain_text("<svg onload=")
    _assert_inert(page, "#message-list")


def test_the_sanitizer_strips_what_html_could_carry(page: Page, login) -> None:
    """DOMPurify as configured (markdown.js), fed raw HTML directly: what markdown-it would never emit."""
    login(UserFactory.create())
    page.goto("/")
    html = "".join(
        [
            '<p onclick="alert(1)" style="color:red">kept</p>',
            '<img src="x" onerror="alert(2)">',
            '<svg onload="alert(3)"><a xlink:href="javascript:alert(4)">s</a></svg>',
            '<a href="javascript:alert(5)">js</a><a href="https://example.com/">ok</a>',
            '<script>alert(6)</script><iframe src="https://example.com"></iframe>',
            '<form action="https://example.com"><input name="q"></form><details open ontoggle="alert(7)">d</details>',
        ]
    )
    result = page.evaluate(
        """async (html) => {
          const { sanitize } = await import("/static/web/markdown.js");
          const box = document.createElement("div");
          box.append(sanitize(html));
          return box.innerHTML;
        }""",
        html,
    )
    assert "kept" in result and "https://example.com/" in result
    for needle in ("onclick", "onerror", "onload", "ontoggle", "javascript:", "<script", "<img", "<svg", "<iframe"):
        assert needle not in result, (needle, result)
    assert "style=" not in result and "<form" not in result and "<input" not in result
    page.wait_for_timeout(300)
    assert page.dialogs == []  # type: ignore[attr-defined]


def test_a_4000_token_answer_streams_without_a_long_frame(page: Page, login, screenshot) -> None:
    """No animation frame over 50 ms while 4,000 tokens of Markdown stream in (PerformanceObserver's
    long-animation-frame entries). This machine is shared: a frame can also be long because the CPU was taken
    away, so the stream is tried up to three times; a page that makes frames long does so every time."""
    login(UserFactory.create())
    page.goto("/")
    expect(page.locator("body")).to_have_attribute("data-ready", "true")
    attempts = []
    for _ in range(3):
        figures = measure_stream(page, tokens=4000, per_delta=20, interval_ms=50)
        assert figures.observes_long_frames, "this Chromium reports no long-animation-frame entries"
        assert figures.tokens == 4000 and figures.code_blocks > 10 and figures.highlighted_keywords > 10
        attempts.append(figures)
        if not figures.long_frames:
            break
        page.reload()
        expect(page.locator("body")).to_have_attribute("data-ready", "true")
    screenshot(page, "long-answer")
    last = attempts[-1]
    print(
        f"4,000 tokens: {last.renders} renders, render p50 {last.render_p50_ms:.1f} ms, p95 {last.render_p95_ms:.1f},"
        f" max {last.render_max_ms:.1f}; long frames per attempt: {[a.long_frames for a in attempts]}"
    )
    assert last.long_frames == [], f"long animation frames (start ms, duration ms) in every attempt: {attempts}"


TRICKY = (
    "Intro paragraph\nstill the same paragraph\n\nA setext heading\n===\n\n- item one\n\n- item two, loose now\n\n"
    "    indented code inside item two\n\n1. one\n1. two\n\n"
    "```js\nconst open = true;\n\n// a blank line inside\n```\n\n"
    "> quote\ncontinued lazily\n\n| a | b |\n| - | - |\n| 1 | 2 |\n\nlast words with `code` and **bold**"
)


def test_incremental_rendering_matches_a_full_render_at_every_step(page: Page, login) -> None:
    """The streaming view, fed the text piece by piece, shows exactly what rendering the same text whole shows."""
    login(UserFactory.create())
    page.goto("/")
    pieces = [*re.findall(r"[\s\S]{1,3}", TRICKY), *markdown_answer(600)]
    mismatches = page.evaluate(
        """async (pieces) => {
          const { LiveMarkdown } = await import("/static/web/live_markdown.js");
          const { renderMarkdown } = await import("/static/web/markdown.js");
          const live = document.createElement("div");
          const whole = document.createElement("div");
          const view = new LiveMarkdown(live);
          const bad = [];
          let text = "";
          for (const piece of pieces) {
            text += piece;
            view.set(text);
            view.flush();
            renderMarkdown(whole, text);
            if (live.innerHTML !== whole.innerHTML) bad.push(text.length);
          }
          return bad;
        }""",
        pieces,
    )
    assert mismatches == [], f"the incremental view differs from a full render at lengths {mismatches[:10]}"
