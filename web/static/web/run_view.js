// One run's answer as it is written: its state (status, text so far, last stream event id, connection)
// and every transition of it (status changes, deltas, reset, the terminal event), fed by the run's SSE
// stream with polling as the fallback, and the assistant bubble that shows it.
//
// Nothing outside this class changes a run's state: the page starts a view, asks it to cancel, to
// reconnect or to let go (detach), and hears back once through `onFinished`.

import { api } from "./api.js";
import { Connection, FinishReason, Moderation, RunStatus, STREAM_ERROR_EVENT, StreamEvent, isTerminal } from "./constants.js";
import { formatSeconds } from "./dom.js";
import { markModerated } from "./messages.js";
import { LiveMarkdown } from "./live_markdown.js";
import { clearProgress, loadProgress, saveProgress } from "./progress.js";
import { RunStream } from "./stream.js";

const POLL_MS = 4000;
const LOST_AFTER_MS = 2000;
const WRITING_CLASS = "streaming"; // app.css: the blinking caret while the answer is being written

/** The meta line for an unfinished run ("" when the live text says it all). */
function describeStatus(status, data = {}) {
  if (status === RunStatus.QUEUED) {
    const parts = ["Queued"];
    if (Number.isFinite(data.queue_position)) parts.push(`position ${data.queue_position}`);
    if (Number.isFinite(data.estimated_wait_s)) parts.push(`about ${formatSeconds(data.estimated_wait_s)} to wait`);
    return parts.join(" · ");
  }
  if (status === RunStatus.STREAMING) return "Writing…";
  if (status === RunStatus.CANCELLING) return "Stopping…";
  return "";
}

/** How a finished run record (GET /api/runs/{id}, POST .../cancel) ends the view. */
function outcomeOf(run) {
  return {
    status: run.status,
    finishReason: run.finish_reason,
    messageId: run.assistant_message ? run.assistant_message.id : null,
    text: run.assistant_message ? run.assistant_message.content : undefined,
    error: run.error,
  };
}

export class RunView {
  #id;
  #chatId;
  #streamUrl;
  #initial; // the run as read when the view started (its queue position is shown at once)
  #status;
  #text;
  #lastEventId;
  #bubble;
  #body;
  #meta;
  #stream = null;
  #pollTimer = null;
  #polling = false;
  #lastActivity = Date.now();
  #finished = false;
  #view; // the LiveMarkdown of the bubble
  #connectionLost = false;
  #lostTimer = null;
  #stick = true;
  #prefix; // a continued answer's text before this run: a reset goes back to it
  #messages;
  #statusLine;
  #onFinished;

  /**
   * `run`: the API's run (id, chat, status, stream_url, queue fields). `bubble`: the empty assistant
   * message it writes into. `messages`: the MessageList (scrolling). `statusLine`: the page's live region.
   * `onFinished(view, { announcement, error })`: once, when the run ends (not when detached).
   */
  constructor(run, { bubble, prefix = "", messages, statusLine, onFinished }) {
    bubble.classList.add(WRITING_CLASS);
    bubble.dataset.runId = String(run.id);
    const body = bubble.querySelector(".message-body");
    body.setAttribute("aria-busy", "true");
    const saved = loadProgress(run.id);
    this.#id = run.id;
    this.#chatId = run.chat;
    this.#streamUrl = run.stream_url;
    this.#initial = run;
    this.#status = run.status;
    this.#prefix = prefix;
    this.#text = saved ? saved.text : prefix;
    this.#lastEventId = saved ? saved.lastEventId : 0;
    this.#bubble = bubble;
    this.#body = body;
    this.#meta = bubble.querySelector(".message-meta");
    this.#messages = messages;
    this.#statusLine = statusLine;
    this.#onFinished = onFinished;
    this.#view = new LiveMarkdown(body, { onRender: () => this.#rendered() });
    this.#stick = messages.nearBottom();
    if (this.#text) {
      this.#view.set(this.#text);
      this.#view.flush(); // the partial answer shows at once after a reload
    }
  }

  get id() {
    return this.#id;
  }

  get chatId() {
    return this.#chatId;
  }

  /** The assistant bubble it writes into. */
  get bubble() {
    return this.#bubble;
  }

  /** Ended, or detached: the view no longer changes. */
  get finished() {
    return this.#finished;
  }

  /** Shows the run's state and follows it: its stream, and a poll when the stream goes quiet. */
  start() {
    this.#show(this.#initial.status, this.#initial);
    this.#connect();
    this.#pollTimer = setInterval(() => this.#poll(), POLL_MS);
  }

  /** Opens the stream again from the last event seen (the browser is back online). */
  reconnect() {
    if (!this.#finished) this.#connect();
  }

  /** Asks the server to stop the run. Throws the ApiError when it refuses. */
  async cancel() {
    if (this.#finished) return;
    this.#show(RunStatus.CANCELLING);
    const run = await api("POST", `/api/runs/${this.#id}/cancel`);
    if (isTerminal(run.status)) this.#finish(outcomeOf(run));
    // Otherwise it is cancelling: the worker aborts within a step and the stream's `done` ends the view.
  }

  /**
   * Stops following the run (another chat opened); the run goes on and can be resumed later from the
   * saved progress. `keepProgress: false` forgets that progress (the run's chat was deleted).
   */
  detach({ keepProgress = true } = {}) {
    if (this.#stream) this.#stream.close();
    clearInterval(this.#pollTimer);
    clearTimeout(this.#lostTimer);
    if (keepProgress) this.#save();
    else clearProgress(this.#id);
    this.#finished = true;
  }

  #save() {
    saveProgress(this.#id, { lastEventId: this.#lastEventId, text: this.#text });
  }

  #show(status, data = {}) {
    const text = describeStatus(status, data);
    this.#status = status;
    this.#bubble.dataset.status = status;
    if (this.#connectionLost) return;
    this.#meta.textContent = text;
    // Announce queue and stop states; "Writing…" would only repeat what the live text already says.
    this.#statusLine.set(status === RunStatus.STREAMING ? "" : text);
  }

  /** After each render: keep the reader at the bottom if they were there, and save the progress. */
  #rendered() {
    if (this.#stick) this.#messages.scrollToBottom();
    if (!this.#finished) this.#save();
  }

  #scheduleRender() {
    // Whether to follow the text is decided before it grows (after, the new text is below the fold).
    this.#stick = this.#messages.nearBottom();
    this.#view.set(this.#text);
  }

  #connect() {
    if (this.#stream) this.#stream.close();
    this.#stream = new RunStream({
      url: this.#streamUrl,
      lastEventId: this.#lastEventId,
      onEvent: (name, data, lastEventId) => this.#onEvent(name, data, lastEventId),
      onConnection: (connection) => this.#onConnection(connection),
    }).start();
  }

  #onConnection(connection) {
    if (this.#finished) return;
    if (connection === Connection.OPEN) {
      clearTimeout(this.#lostTimer);
      this.#lostTimer = null;
      if (this.#connectionLost) {
        this.#connectionLost = false;
        this.#show(this.#status);
        this.#statusLine.set("Reconnected.");
      }
      return;
    }
    // The stream gave up (an error status, or 204: nothing more to send): the run may be over already.
    if (connection === Connection.RETRYING) this.#poll({ force: true });
    // A connection the server closed is usually back within a moment: say so only if it stays down.
    if (this.#connectionLost || this.#lostTimer) return;
    this.#lostTimer = setTimeout(() => {
      this.#lostTimer = null;
      if (this.#finished || this.#connectionLost) return;
      const stream = this.#stream;
      const open = stream && stream.source && stream.source.readyState === EventSource.OPEN;
      if (open) return;
      this.#connectionLost = true;
      this.#meta.textContent = "Connection lost: reconnecting…";
      this.#statusLine.set("Connection lost: reconnecting…");
    }, LOST_AFTER_MS);
  }

  #onEvent(name, data, lastEventId) {
    if (this.#finished) return;
    this.#lastActivity = Date.now();
    if (name !== STREAM_ERROR_EVENT) this.#lastEventId = lastEventId;
    if (this.#connectionLost || this.#lostTimer) this.#onConnection(Connection.OPEN);
    switch (name) {
      case StreamEvent.DELTA:
        this.#text += typeof data.text === "string" ? data.text : "";
        if (this.#status !== RunStatus.STREAMING && this.#status !== RunStatus.CANCELLING) {
          this.#show(RunStatus.STREAMING);
        }
        this.#scheduleRender();
        break;
      case StreamEvent.RESET:
        this.#text = this.#prefix;
        this.#scheduleRender();
        break;
      case StreamEvent.RETRACT:
        // The output moderation pass withdrew the answer: its text goes, the `done` (content_filter) follows.
        this.#text = "";
        this.#view.set("");
        this.#view.flush();
        break;
      case StreamEvent.STATUS:
        this.#show(data.status, data);
        break;
      case StreamEvent.DONE:
        this.#finish({
          status: data.status || RunStatus.DONE,
          finishReason: data.finish_reason,
          messageId: data.message_id,
        });
        break;
      case StreamEvent.ERROR:
        this.#finish({ status: RunStatus.FAILED, error: data.message || "The answer could not be generated." });
        break;
      case STREAM_ERROR_EVENT:
        // The stream endpoint cannot serve this run: follow it by polling instead.
        this.#stream.close();
        this.#poll({ force: true });
        break;
      default:
        break;
    }
  }

  async #poll({ force = false } = {}) {
    if (this.#finished || this.#polling) return;
    if (!force && Date.now() - this.#lastActivity < POLL_MS) return;
    this.#polling = true;
    try {
      const run = await api("GET", `/api/runs/${this.#id}`);
      if (this.#finished) return;
      if (isTerminal(run.status)) {
        // The stream went quiet and the run is over: show what Postgres holds.
        this.#finish(outcomeOf(run));
      } else if (
        run.status !== this.#status
        && !(this.#status === RunStatus.STREAMING && run.status === RunStatus.QUEUED)
      ) {
        this.#show(run.status, run);
      } else if (run.status === RunStatus.QUEUED && Number.isFinite(run.queue_position)) {
        this.#show(run.status, run);
      }
    } catch (error) {
      if (error.status === 404) {
        this.#finish({ status: RunStatus.FAILED, error: "This answer is gone: the chat was deleted." });
      }
    } finally {
      this.#polling = false;
    }
  }

  #finish({ status, finishReason, messageId, text, error }) {
    if (this.#finished) return;
    this.#finished = true;
    if (this.#stream) this.#stream.close();
    clearInterval(this.#pollTimer);
    clearTimeout(this.#lostTimer);
    if (typeof text === "string") this.#text = text;
    const retracted = finishReason === FinishReason.CONTENT_FILTER;
    if (retracted) this.#text = "";
    this.#stick = this.#messages.nearBottom();
    this.#view.finish(this.#text);
    this.#body.setAttribute("aria-busy", "false");
    this.#bubble.classList.remove(WRITING_CLASS);
    this.#bubble.dataset.status = status;
    this.#bubble.classList.add(`run-${status}`);
    if (messageId) this.#bubble.dataset.messageId = String(messageId);
    let note = "";
    if (status === RunStatus.CANCELLED) note = this.#text ? "Stopped" : "Stopped before any text was written";
    else if (status === RunStatus.FAILED) note = `Failed: ${error || "the answer could not be generated."}`;
    else if (finishReason === FinishReason.LENGTH) note = "Cut off at the length limit";
    this.#meta.textContent = note;
    if (retracted) markModerated(this.#bubble, Moderation.RETRACTED);
    clearProgress(this.#id);
    const failed = status === RunStatus.FAILED;
    this.#onFinished(this, {
      announcement: status === RunStatus.CANCELLED ? "Answer stopped." : failed ? note : "Answer complete.",
      error: failed ? note : null,
    });
  }
}
