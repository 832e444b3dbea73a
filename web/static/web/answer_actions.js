// The actions under a finished answer: its versions ("‹ 1/2 ›" after a regenerate or a continue), copy as
// Markdown or as plain text, thumbs up / down with an optional reason, regenerate and continue (the
// chat's last answer only), and a quiet line with the deployment that answered, its tokens and time.
// One listener on the message list handles every answer's buttons (and each code block's Copy).

import { api } from "./api.js";
import { copyText, flashCopied, visibleText } from "./clipboard.js";
import { FinishReason } from "./constants.js";
import { renderMarkdown } from "./markdown.js";

const CONTINUABLE = new Set([FinishReason.CANCELLED, FinishReason.LENGTH]);
const MAX_REASON = 1000;

function button(className, text, label) {
  const b = document.createElement("button");
  b.type = "button";
  b.className = `ghost small-button ${className}`;
  b.textContent = text;
  if (label) b.setAttribute("aria-label", label);
  return b;
}

function formatDuration(run) {
  const start = Date.parse(run.started_at || run.created_at);
  const end = Date.parse(run.finished_at);
  if (!Number.isFinite(start) || !Number.isFinite(end) || end < start) return "";
  const s = (end - start) / 1000;
  return s < 10 ? `${s.toFixed(1)} s` : `${Math.round(s)} s`;
}

/** The quiet line under an answer: "smollm2@v1 · 57 tokens · 2.3 s". */
export function describeRun(run) {
  const parts = [run.deployment || run.model || "default model"];
  if (Number.isFinite(run.output_tokens)) parts.push(`${run.output_tokens.toLocaleString()} tokens`);
  const took = formatDuration(run);
  if (took) parts.push(took);
  return parts.join(" · ");
}

export class AnswerActions {
  #runs = new Map(); // run id -> the run's JSON (its info line), or its pending read
  #seen;
  #announce;
  #onRegenerate;
  #onContinue;
  #onError;
  #busy = false;

  /**
   * `list`: the message list. `announce(text)`: the page's status line. `onRegenerate(li)`, `onContinue(li)`:
   * the user asked for a new version of the last answer `li`. `onError(message)`.
   */
  constructor(list, { announce, onRegenerate, onContinue, onError }) {
    this.list = list;
    this.#announce = announce;
    this.#onRegenerate = onRegenerate;
    this.#onContinue = onContinue;
    this.#onError = onError;
    list.addEventListener("click", (event) => this.#click(event));
    list.addEventListener("submit", (event) => this.#submitReason(event));
    // An answer's info line is read when the answer scrolls into view (one GET /api/runs/{id} each).
    this.#seen = new IntersectionObserver((entries) => {
      for (const entry of entries) {
        if (entry.isIntersecting) {
          this.#seen.unobserve(entry.target);
          this.#loadInfo(entry.target);
        }
      }
    });
  }

  /**
   * Adds the actions to the assistant bubble `li` of a stored answer: `answer` is the message-list item
   * (`id`, `content`, `run`, `finish_reason`, `feedback`, `versions`: the earlier ones, oldest first).
   */
  attach(li, answer) {
    const current = {
      message: answer.id,
      run: answer.run,
      content: answer.content || "",
      finish_reason: answer.finish_reason,
      feedback: answer.feedback || null,
    };
    li.answer = { versions: [...(answer.versions || []), current], index: (answer.versions || []).length };
    li.querySelector(".answer-bar")?.remove();
    li.querySelector(".answer-info")?.remove();
    const bar = document.createElement("div");
    bar.className = "answer-bar";
    bar.setAttribute("role", "group");
    bar.setAttribute("aria-label", "Answer actions");
    const versions = document.createElement("span");
    versions.className = "versions";
    const label = document.createElement("span");
    label.className = "version-label";
    versions.append(button("version-prev", "‹", "Previous version"), label, button("version-next", "›", "Next version"));
    bar.append(
      versions,
      button("copy-markdown", "Copy", "Copy as Markdown"),
      button("copy-text", "Copy as text"),
      button("rate-up", "👍", "Good answer"),
      button("rate-down", "👎", "Bad answer"),
      button("regenerate", "Regenerate", "Regenerate this answer"),
      button("continue", "Continue", "Continue this answer"),
    );
    const info = document.createElement("div");
    info.className = "answer-info";
    li.append(bar, info);
    this.#show(li, { render: false }); // buildMessage rendered it
    this.#seen.observe(li);
  }

  /** Regenerate and Continue are offered on the last answer only, and not while another is written. */
  refreshLast() {
    const answers = this.list.querySelectorAll(".message-assistant");
    const last = answers[answers.length - 1];
    for (const li of answers) {
      const isLast = li === last && Boolean(li.answer);
      li.classList.toggle("last-answer", isLast);
      const state = li.answer;
      const shown = state ? state.versions[state.index] : null;
      const regenerate = li.querySelector(".regenerate");
      const cont = li.querySelector(".continue");
      if (regenerate) regenerate.hidden = !isLast || this.#busy;
      if (cont) cont.hidden = !isLast || this.#busy || !shown || !CONTINUABLE.has(shown.finish_reason);
    }
  }

  /** An answer is being written: no regenerate or continue meanwhile. */
  setBusy(busy) {
    this.#busy = busy;
    this.refreshLast();
  }

  /** The version shown of `li`'s answer (what Continue continues, what a rating rates). */
  shownVersion(li) {
    return li.answer ? li.answer.versions[li.answer.index] : null;
  }

  #show(li, { render = true } = {}) {
    const { versions, index } = li.answer;
    const shown = versions[index];
    if (render) renderMarkdown(li.querySelector(".message-body"), shown.content);
    li.dataset.messageId = String(shown.message);
    if (shown.run) li.dataset.runId = String(shown.run);
    const switcher = li.querySelector(".versions");
    switcher.hidden = versions.length < 2;
    li.querySelector(".version-label").textContent = `${index + 1}/${versions.length}`;
    li.querySelector(".version-prev").disabled = index === 0;
    li.querySelector(".version-next").disabled = index === versions.length - 1;
    const rating = shown.feedback ? shown.feedback.rating : null;
    for (const [cls, value] of [["rate-up", "up"], ["rate-down", "down"]]) {
      const b = li.querySelector(`.${cls}`);
      b.setAttribute("aria-pressed", String(rating === value));
      b.hidden = !shown.run;
    }
    li.querySelector(".feedback-form")?.remove();
    const info = li.querySelector(".answer-info");
    const run = shown.run ? this.#runs.get(shown.run) : null;
    info.textContent = run && !(run instanceof Promise) ? describeRun(run) : "";
    if (shown.run && !this.#runs.has(shown.run) && info.isConnected && li.dataset.seen) this.#loadInfo(li);
    this.refreshLast();
  }

  async #loadInfo(li) {
    li.dataset.seen = "true";
    const shown = this.shownVersion(li);
    if (!shown || !shown.run) return;
    const id = shown.run;
    if (!this.#runs.has(id)) {
      const pending = api("GET", `/api/runs/${id}`).catch(() => null);
      this.#runs.set(id, pending);
      const run = await pending;
      if (run) this.#runs.set(id, run);
      else this.#runs.delete(id);
    }
    const run = await this.#runs.get(id);
    if (run && this.shownVersion(li)?.run === id) li.querySelector(".answer-info").textContent = describeRun(run);
  }

  async #click(event) {
    const target = event.target.closest("button");
    if (!target || !this.list.contains(target)) return;
    if (target.classList.contains("copy-code")) {
      const code = target.closest(".code-block")?.querySelector("pre code");
      if (code) flashCopied(target, await copyText(code.textContent.replace(/\n$/, "")), this.#announce);
      return;
    }
    const li = target.closest(".message-assistant");
    if (!li || !li.answer) return;
    const shown = this.shownVersion(li);
    if (target.classList.contains("copy-markdown")) {
      flashCopied(target, await copyText(shown.content), this.#announce);
    } else if (target.classList.contains("copy-text")) {
      flashCopied(target, await copyText(visibleText(li.querySelector(".message-body"))), this.#announce);
    } else if (target.classList.contains("version-prev") || target.classList.contains("version-next")) {
      const step = target.classList.contains("version-prev") ? -1 : 1;
      li.answer.index = Math.min(li.answer.versions.length - 1, Math.max(0, li.answer.index + step));
      this.#show(li);
      this.#announce(`Version ${li.answer.index + 1} of ${li.answer.versions.length}`);
    } else if (target.classList.contains("rate-up") || target.classList.contains("rate-down")) {
      await this.#rate(li, target.classList.contains("rate-up") ? "up" : "down");
    } else if (target.classList.contains("feedback-skip")) {
      li.querySelector(".feedback-form")?.remove();
    } else if (target.classList.contains("regenerate")) {
      this.#onRegenerate(li);
    } else if (target.classList.contains("continue")) {
      this.#onContinue(li);
    }
  }

  /** Thumbs: the same one again takes the rating back; otherwise it is saved and a reason may follow. */
  async #rate(li, rating) {
    const shown = this.shownVersion(li);
    const url = `/api/runs/${shown.run}/feedback`;
    try {
      if (shown.feedback && shown.feedback.rating === rating) {
        await api("DELETE", url);
        shown.feedback = null;
        this.#show(li);
        this.#announce("Rating removed.");
        return;
      }
      const saved = await api("PUT", url, { rating, reason: "" });
      shown.feedback = (saved && saved.feedback) || { rating, reason: "" };
      this.#show(li);
      this.#askReason(li, rating);
    } catch (error) {
      this.#onError(`Could not save the rating: ${error.message}`);
    }
  }

  #askReason(li, rating) {
    const form = document.createElement("form");
    form.className = "feedback-form";
    const label = document.createElement("label");
    label.textContent = rating === "up" ? "Thanks! What was good? (optional)" : "What was wrong? (optional)";
    const input = document.createElement("input");
    input.type = "text";
    input.name = "reason";
    input.maxLength = MAX_REASON;
    label.append(input);
    const send = document.createElement("button");
    send.type = "submit";
    send.className = "small-button";
    send.textContent = "Send";
    const skip = button("feedback-skip", "Skip");
    form.append(label, send, skip);
    li.querySelector(".answer-bar").after(form);
    input.focus();
  }

  async #submitReason(event) {
    const form = event.target.closest(".feedback-form");
    if (!form) return;
    event.preventDefault();
    const li = form.closest(".message-assistant");
    const shown = this.shownVersion(li);
    const reason = form.elements.reason.value.trim();
    if (!shown.feedback) return;
    try {
      const saved = await api("PUT", `/api/runs/${shown.run}/feedback`, { rating: shown.feedback.rating, reason });
      shown.feedback = (saved && saved.feedback) || { rating: shown.feedback.rating, reason };
      form.remove();
      this.#announce("Thanks for the feedback.");
      li.querySelector(`.rate-${shown.feedback.rating}`).focus();
    } catch (error) {
      this.#onError(`Could not save the reason: ${error.message}`);
    }
  }
}
