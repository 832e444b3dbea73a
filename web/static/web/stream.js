// Follows one run's SSE stream (`GET /api/runs/{id}/stream`).
//
// Events: delta {text}, status {status, queue_position?, estimated_wait_s?}, reset (drop the partial text:
// generation restarted), retract {categories} (moderation withdrew the answer: drop its text), done {message_id, finish_reason, usage, status}, error {code, message}. Every
// event carries an integer `id:`. The browser's EventSource reconnects by itself after a dropped
// connection, sending Last-Event-ID; when it gives up (readyState CLOSED: the server answered an error
// status, or 204 because the stream is already complete) we reconnect ourselves with `?lastEventId=` and a
// growing delay, and tell the app ("retrying") so it can check the run's state. Events at or below the
// last id seen are ignored, so a replay never duplicates text.

import { Connection, STREAM_ERROR_EVENT, StreamEvent } from "./constants.js";

// The run's events other than `error`, which shares its name with EventSource's connection failure.
const EVENTS = [StreamEvent.DELTA, StreamEvent.STATUS, StreamEvent.RESET, StreamEvent.RETRACT, StreamEvent.DONE];

export class RunStream {
  constructor({ url, lastEventId = 0, onEvent, onConnection }) {
    this.url = url;
    this.lastEventId = lastEventId;
    this.onEvent = onEvent;
    this.onConnection = onConnection || (() => {});
    this.source = null;
    this.closed = false;
    this.retryDelayMs = 500;
    this.retryTimer = null;
  }

  start() {
    this.closed = false;
    this._connect();
    return this;
  }

  close() {
    this.closed = true;
    clearTimeout(this.retryTimer);
    if (this.source) this.source.close();
    this.source = null;
  }

  _connect() {
    if (this.closed) return;
    const url = new URL(this.url, window.location.href);
    if (this.lastEventId > 0) url.searchParams.set("lastEventId", String(this.lastEventId));
    const source = new EventSource(url.toString(), { withCredentials: true });
    this.source = source;
    source.addEventListener("open", () => {
      this.retryDelayMs = 500;
      this.onConnection(Connection.OPEN);
    });
    for (const name of EVENTS) source.addEventListener(name, (event) => this._handle(name, event));
    // "error" is both the server's `event: error` (a MessageEvent with data) and a connection failure.
    source.addEventListener(StreamEvent.ERROR, (event) => {
      if (event.data !== undefined && event.data !== null && event.data !== "") {
        this._handle(StreamEvent.ERROR, event);
        return;
      }
      if (this.closed || source !== this.source) return;
      if (source.readyState === EventSource.CLOSED) {
        this.onConnection(Connection.RETRYING);
        source.close();
        clearTimeout(this.retryTimer);
        this.retryTimer = setTimeout(() => this._connect(), this.retryDelayMs);
        this.retryDelayMs = Math.min(this.retryDelayMs * 2, 10000);
      } else {
        this.onConnection(Connection.RECONNECTING);
      }
    });
    // django-eventstream reports its own failures (bad channel, permissions) as `stream-error`.
    // The app falls back to polling the run when that happens.
    source.addEventListener(STREAM_ERROR_EVENT, (event) => this._handle(STREAM_ERROR_EVENT, event, { unnumbered: true }));
  }

  _handle(name, event, { unnumbered = false } = {}) {
    if (this.closed) return;
    const id = Number.parseInt(event.lastEventId, 10);
    if (!unnumbered && Number.isFinite(id)) {
      // A `status` built from Postgres has no id of its own (the browser repeats the previous one): never
      // drop it. Any other event at or below the last id is a replay we already applied.
      if (id > this.lastEventId) this.lastEventId = id;
      else if (name !== StreamEvent.STATUS) return;
    }
    let data = {};
    try {
      data = event.data ? JSON.parse(event.data) : {};
    } catch {
      data = {};
    }
    this.onEvent(name, data, this.lastEventId);
  }
}
