// The strings the server and the browser agree on. They mirror the server's enums: RunStatus and
// FinishReason in runs/models.py, StreamEvent in runs/streaming/contract.py. Every other module compares against
// these names, never against the literal strings.

/** A run's status (runs.models.RunStatus). */
export const RunStatus = Object.freeze({
  QUEUED: "queued",
  STREAMING: "streaming",
  CANCELLING: "cancelling",
  DONE: "done",
  CANCELLED: "cancelled",
  FAILED: "failed",
});

/** Why a finished run stopped writing (runs.models.FinishReason). */
export const FinishReason = Object.freeze({
  STOP: "stop",
  LENGTH: "length",
  CANCELLED: "cancelled",
  ERROR: "error",
  CONTENT_FILTER: "content_filter",
});

/** What moderation did to a message (chats.models.Moderation). */
export const Moderation = Object.freeze({
  REFUSED: "refused",
  RETRACTED: "retracted",
});

/** The events of a run's SSE stream (runs.streaming.contract.StreamEvent). */
export const StreamEvent = Object.freeze({
  DELTA: "delta",
  STATUS: "status",
  RESET: "reset",
  RETRACT: "retract",
  DONE: "done",
  ERROR: "error",
});

/** django-eventstream's own failure event (bad channel, permissions): not one of the run's events. */
export const STREAM_ERROR_EVENT = "stream-error";

/** What RunStream reports about its connection (stream.js). */
export const Connection = Object.freeze({
  OPEN: "open",
  RECONNECTING: "reconnecting", // the browser's EventSource reconnects by itself
  RETRYING: "retrying", // EventSource gave up; RunStream reconnects after a delay
});

const TERMINAL_STATUSES = new Set([RunStatus.DONE, RunStatus.CANCELLED, RunStatus.FAILED]);
// tests/deployments/test_active_statuses.py checks this set against runs.models.ACTIVE_STATUSES.
const ACTIVE_STATUSES = new Set([RunStatus.QUEUED, RunStatus.STREAMING, RunStatus.CANCELLING]);

/** True for done, cancelled and failed (runs.models.TERMINAL_STATUSES). */
export function isTerminal(status) {
  return TERMINAL_STATUSES.has(status);
}

/** True for queued, streaming and cancelling (runs.models.ACTIVE_STATUSES). */
export function isActive(status) {
  return ACTIVE_STATUSES.has(status);
}
