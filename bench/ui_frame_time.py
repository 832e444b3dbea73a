#!/usr/bin/env python3
"""Frame time of the browser UI while a 4,000-token answer streams into it, in headless Chromium.

Serves ``web/static`` and a one-list harness page (the UI's stylesheet, no Django) on a port the OS picks,
streams the answer into ``live_markdown.js`` a few tokens every few milliseconds (``bench.lib.ui_frames``), and
prints each repeat's figures: renders, render time (mean, p50, p95, max), the longest gap between frames and every
long animation frame (over 50 ms) and long task Chromium reported. Needs Debian's ``chromium``
(``scripts/browser.sh``) and Playwright for Python; nothing else.

    .venv/bin/python bench/ui_frame_time.py --tokens 4000 --repeats 3
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.lib.ui_frames import measure_stream  # noqa: E402

HARNESS = b"""<!doctype html><html lang="en"><head><meta charset="utf-8"><title>frame-time harness</title>
<link rel="stylesheet" href="/static/web/app.css"></head>
<body class="chat-app"><main class="main"><div class="messages" id="messages">
<ol id="message-list" class="message-list"></ol></div></main></body></html>"""


class Handler(SimpleHTTPRequestHandler):
    def do_GET(self) -> None:
        if self.path in ("/", "/index.html"):
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(HARNESS)
            return
        super().do_GET()

    def log_message(self, format: str, *args: object) -> None:
        pass


def summary(entries: list[tuple[float, float]]) -> str:
    """Their count and longest; each one as [ms since the stream started, duration ms] while there are few."""
    if not entries:
        return "0"
    longest = max(ms for _, ms in entries)
    listed = f" {[[round(at), round(ms)] for at, ms in entries]}" if len(entries) <= 8 else ""
    return f"{len(entries)} (longest {longest:.0f} ms){listed}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=4000)
    parser.add_argument("--per-delta", type=int, default=4, help="tokens per delta")
    parser.add_argument("--interval-ms", type=int, default=8, help="milliseconds between deltas")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chromium", default=os.environ.get("CHROMIUM_PATH", "/usr/bin/chromium"))
    args = parser.parse_args()

    from playwright.sync_api import sync_playwright

    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(ROOT / "web")))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    print(f"ui_frame_time: {args.tokens} tokens, {args.per_delta} per delta every {args.interval_ms} ms")
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(
                executable_path=args.chromium, args=["--headless", "--no-sandbox", "--disable-gpu"]
            )
            for repeat in range(1, args.repeats + 1):
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                page.goto(base + "/")
                f = measure_stream(page, tokens=args.tokens, per_delta=args.per_delta, interval_ms=args.interval_ms)
                page.close()
                print(
                    f"repeat {repeat}: {f.tokens} tokens ({f.chars} chars, {f.code_blocks} code blocks) in "
                    f"{f.stream_ms / 1000:.1f} s; {f.renders} renders, render mean {f.render_mean_ms:.2f} ms, "
                    f"p50 {f.render_p50_ms:.2f}, p95 {f.render_p95_ms:.2f}, max {f.render_max_ms:.2f} ms; "
                    f"final full render {f.finish_ms:.1f} ms; {f.frames} frames, longest gap "
                    f"{f.frame_gap_max_ms:.1f} ms; long animation frames (>50 ms): {summary(f.long_frames)}; "
                    f"long tasks: {summary(f.long_tasks)}; load average {os.getloadavg()[0]:.2f}"
                    + ("" if f.observes_long_frames else " (this Chromium has no long-animation-frame entries)")
                )
            browser.close()
    finally:
        server.shutdown()


if __name__ == "__main__":
    main()
