// The alert bar above the prompt box: errors, and 429 "busy" with a Retry-After countdown.

import { formatSeconds } from "./dom.js";

export class AlertBar {
  constructor({ alert, alertText, alertRetry, alertClose }) {
    this.box = alert;
    this.text = alertText;
    this.retryButton = alertRetry;
    this.retryTimer = null;
    alertClose.addEventListener("click", () => this.clear());
  }

  clear() {
    clearInterval(this.retryTimer);
    this.retryTimer = null;
    this.box.hidden = true;
    this.box.classList.remove("busy");
    this.text.textContent = "";
    this.retryButton.hidden = true;
    this.retryButton.onclick = null;
  }

  error(message) {
    this.clear();
    this.text.textContent = message;
    this.box.hidden = false;
  }

  /** 429: say why, count down Retry-After on the button, then let the user retry with one press. */
  busy(error, retry) {
    this.clear();
    let left = error.retryAfter ?? 5;
    this.box.classList.add("busy");
    const saysWhen = /retry in/i.test(error.message);
    this.text.textContent = `Busy: ${error.message}${saysWhen ? "" : ` Retry in ${formatSeconds(left)}.`}`;
    this.box.hidden = false;
    this.retryButton.hidden = false;
    this.retryButton.onclick = () => {
      this.clear();
      retry();
    };
    const tick = () => {
      if (left > 0) {
        this.retryButton.disabled = true;
        this.retryButton.textContent = `Retry in ${formatSeconds(left)}`;
        left -= 1;
      } else {
        clearInterval(this.retryTimer);
        this.retryButton.disabled = false;
        this.retryButton.textContent = "Retry now";
      }
    };
    tick();
    this.retryTimer = setInterval(tick, 1000);
  }
}
