// A streaming answer's progress (its text so far and the last stream event id), kept in sessionStorage
// so that a reload shows the partial answer at once and resumes the stream after that event.

const SAVED_PREFIX = "chat-ui:run:";

/** The saved `{ lastEventId, text }` of a run, or null (none, or unreadable). */
export function loadProgress(runId) {
  try {
    const saved = JSON.parse(sessionStorage.getItem(SAVED_PREFIX + runId) || "null");
    if (saved && typeof saved.text === "string" && Number.isInteger(saved.lastEventId)) return saved;
  } catch {
    // Unreadable: start from the beginning of the stream.
  }
  return null;
}

export function saveProgress(runId, { lastEventId, text }) {
  try {
    sessionStorage.setItem(SAVED_PREFIX + runId, JSON.stringify({ lastEventId, text }));
  } catch {
    // Storage full or disabled: a reload then replays the stream from its start.
  }
}

export function clearProgress(runId) {
  try {
    sessionStorage.removeItem(SAVED_PREFIX + runId);
  } catch {
    // ignore
  }
}
