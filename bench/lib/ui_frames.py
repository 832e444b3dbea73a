"""A long answer streaming into the browser UI's Markdown view, with every long frame recorded.

A page of the UI (the chat page, or the bench's static harness) imports ``/static/web/live_markdown.js``, and a
timer feeds it a 4,000-token Markdown answer (headings, paragraphs, lists, tables, highlighted code) a few tokens
every interval, the way deltas arrive from the stream. Chromium's ``PerformanceObserver`` reports every
``long-animation-frame`` (a frame whose work took over 50 ms) and ``longtask`` meanwhile; the view's own
``renderStats`` give each render's time. ``bench/ui_frame_time.py`` prints the figures, ``tests/ui`` asserts no long
frame.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

CODE_PY = '''```python
def fibonacci(n: int) -> list[int]:
    """The first n Fibonacci numbers."""
    values = [0, 1]
    while len(values) < n:
        values.append(values[-1] + values[-2])
    return values[:n]
```'''
CODE_JS = """```javascript
export function debounce(fn, ms = 100) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}
```"""
TABLE = """| setting | default | meaning |
| --- | --- | --- |
| `max_tokens` | 256 | the longest answer |
| `temperature` | 0.7 | how adventurous sampling is |"""


def markdown_answer(tokens: int = 4000) -> list[str]:
    """A Markdown answer cut into ``tokens`` pieces of up to four characters (about a BPE token each)."""
    sections = []
    for i in range(1, 60):
        sections.append(
            f"## Part {i}: streaming without jank\n\n"
            f"Rendering a **long** answer while it is written needs care: each *frame* may only re-render what "
            f"changed, with `requestAnimationFrame` as the clock, and [the docs](https://example.com/{i}) say why.\n\n"
            f"- parse the whole text (cheap)\n- render and sanitize the last block\n- keep the others in place\n\n"
            f"1. first step {i}\n2. second step\n3. third step\n\n"
            f"> A quote to break the rhythm, number {i}.\n\n"
            f"{CODE_PY if i % 2 else CODE_JS}\n\n{TABLE if i % 3 == 0 else ''}\n\n"
        )
    pieces = re.findall(r"\s*\S{1,4}", "".join(sections))
    if len(pieces) < tokens:
        raise ValueError(f"the sample answer has only {len(pieces)} pieces")
    return pieces[:tokens]


# Runs in the page: feeds the pieces to a LiveMarkdown in a fresh assistant bubble and resolves to the figures.
MEASURE_JS = """
async ({ pieces, perDelta, intervalMs, listSelector }) => {
  const { LiveMarkdown, renderStats } = await import("/static/web/live_markdown.js");
  const list = document.querySelector(listSelector);
  const li = document.createElement("li");
  li.className = "message message-assistant streaming";
  const body = document.createElement("div");
  body.className = "message-body markdown";
  li.append(body);
  list.append(li);
  const box = list.closest(".messages") || document.scrollingElement;
  const view = new LiveMarkdown(body, { onRender: () => { box.scrollTop = box.scrollHeight; } });
  const longFrames = [];
  const longTasks = [];
  const supported = PerformanceObserver.supportedEntryTypes;
  const observers = [];
  if (supported.includes("long-animation-frame")) {
    const o = new PerformanceObserver((list) => {
      for (const e of list.getEntries()) longFrames.push([e.startTime - started, e.duration]);
    });
    o.observe({ type: "long-animation-frame" });
    observers.push(o);
  }
  if (supported.includes("longtask")) {
    const o = new PerformanceObserver((list) => {
      for (const e of list.getEntries()) longTasks.push([e.startTime - started, e.duration]);
    });
    o.observe({ type: "longtask" });
    observers.push(o);
  }
  let started = performance.now();
  Object.assign(renderStats, { renders: 0, totalMs: 0, maxMs: 0, samples: [] });
  const frameGaps = [];
  let last = performance.now();
  let counting = true;
  const tick = (now) => { frameGaps.push(now - last); last = now; if (counting) requestAnimationFrame(tick); };
  requestAnimationFrame(tick);
  started = performance.now();
  await new Promise((resolve) => {
    let i = 0;
    let text = "";
    const timer = setInterval(() => {
      text += pieces.slice(i, i + perDelta).join("");
      i += perDelta;
      view.set(text);
      if (i >= pieces.length) { clearInterval(timer); resolve(); }
    }, intervalMs);
  });
  await new Promise((resolve) => requestAnimationFrame(() => requestAnimationFrame(resolve)));
  const streamMs = performance.now() - started;
  const finishStarted = performance.now();
  view.finish();
  const finishMs = performance.now() - finishStarted;
  await new Promise((resolve) => setTimeout(resolve, 200)); // the observers report a little later
  counting = false;
  observers.forEach((o) => o.disconnect());
  const samples = renderStats.samples.slice().sort((a, b) => a - b);
  renderStats.samples = null;
  const pct = (p) => samples.length ? samples[Math.min(samples.length - 1, Math.floor(p * samples.length))] : 0;
  return {
    supported: {
      longAnimationFrame: supported.includes("long-animation-frame"), longTask: supported.includes("longtask"),
    },
    tokens: pieces.length, chars: body.textContent.length, streamMs, finishMs,
    renders: renderStats.renders, renderMeanMs: renderStats.totalMs / Math.max(1, renderStats.renders),
    renderP50Ms: pct(0.5), renderP95Ms: pct(0.95), renderMaxMs: renderStats.maxMs,
    frames: frameGaps.length, frameGapMaxMs: Math.max(...frameGaps), longFrames, longTasks,
    codeBlocks: body.querySelectorAll(".code-block").length, highlighted: body.querySelectorAll(".hljs-keyword").length,
  };
}
"""


@dataclass(frozen=True)
class FrameFigures:
    tokens: int
    chars: int
    stream_ms: float
    finish_ms: float
    renders: int
    render_mean_ms: float
    render_p50_ms: float
    render_p95_ms: float
    render_max_ms: float
    frames: int
    frame_gap_max_ms: float
    long_frames: list[tuple[float, float]]
    """(milliseconds since the stream started, duration) of each long animation frame."""
    long_tasks: list[tuple[float, float]]
    observes_long_frames: bool
    code_blocks: int
    highlighted_keywords: int


def measure_stream(
    page: Any, *, tokens: int = 4000, per_delta: int = 4, interval_ms: int = 8, list_selector: str = "#message-list"
) -> FrameFigures:
    """Streams a ``tokens``-token answer into ``page`` (``per_delta`` tokens every ``interval_ms``)."""
    raw = page.evaluate(
        MEASURE_JS,
        {
            "pieces": markdown_answer(tokens),
            "perDelta": per_delta,
            "intervalMs": interval_ms,
            "listSelector": list_selector,
        },
    )
    return FrameFigures(
        tokens=raw["tokens"],
        chars=raw["chars"],
        stream_ms=raw["streamMs"],
        finish_ms=raw["finishMs"],
        renders=raw["renders"],
        render_mean_ms=raw["renderMeanMs"],
        render_p50_ms=raw["renderP50Ms"],
        render_p95_ms=raw["renderP95Ms"],
        render_max_ms=raw["renderMaxMs"],
        frames=raw["frames"],
        frame_gap_max_ms=raw["frameGapMaxMs"],
        long_frames=[(at, ms) for at, ms in raw["longFrames"]],
        long_tasks=[(at, ms) for at, ms in raw["longTasks"]],
        observes_long_frames=raw["supported"]["longAnimationFrame"],
        code_blocks=raw["codeBlocks"],
        highlighted_keywords=raw["highlighted"],
    )
