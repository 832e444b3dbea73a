// JSON API calls with the session cookie and Django's CSRF token; errors become ApiError with the
// server's `{error: {code, message}}` text, the HTTP status and Retry-After (seconds) where given.

export class ApiError extends Error {
  constructor({ status, code, message, retryAfter = null, details = {} }) {
    super(message);
    this.status = status;
    this.code = code;
    this.retryAfter = retryAfter;
    this.details = details; // the error's other fields (a refused prompt's message_id and moderation)
  }
}

function csrfToken() {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

function parseRetryAfter(value) {
  if (!value) return null;
  const seconds = Number(value);
  if (Number.isFinite(seconds)) return Math.max(0, Math.ceil(seconds));
  const date = Date.parse(value);
  return Number.isNaN(date) ? null : Math.max(0, Math.ceil((date - Date.now()) / 1000));
}

export async function api(method, url, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET") headers["X-CSRFToken"] = csrfToken();
  let response;
  try {
    response = await fetch(url, {
      method,
      headers,
      credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch {
    throw new ApiError({ status: 0, code: "network", message: "Cannot reach the server. Check your connection and try again." });
  }
  if (response.status === 401) {
    // The session ended (logged out elsewhere, expired): back to the login page, then here again.
    window.location.assign(`/login/?next=${encodeURIComponent(window.location.pathname)}`);
    throw new ApiError({ status: 401, code: "not_authenticated", message: "Please sign in again." });
  }
  if (response.status === 204) return null;
  let data = null;
  try {
    data = await response.json();
  } catch {
    data = null;
  }
  if (!response.ok) {
    const error = (data && data.error) || {};
    let message = error.message || `The server answered ${response.status} ${response.statusText}.`;
    if (response.status >= 500 && !error.message) message = "Something went wrong on the server. Please try again.";
    throw new ApiError({
      status: response.status,
      code: error.code || `http_${response.status}`,
      message,
      retryAfter: parseRetryAfter(response.headers.get("Retry-After")),
      details: error,
    });
  }
  return data;
}
