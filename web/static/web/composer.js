// The prompt box: Enter sends (Shift+Enter breaks the line), it grows with its text, and Send gives way
// to Stop while an answer is being written.

export class Composer {
  constructor({ composer, prompt, send, stop }, { onSend, onStop }) {
    this.prompt = prompt;
    this.sendButton = send;
    this.stopButton = stop;
    composer.addEventListener("submit", (event) => {
      event.preventDefault();
      onSend();
    });
    prompt.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing && !event.altKey && !event.ctrlKey && !event.metaKey) {
        event.preventDefault();
        onSend();
      }
    });
    prompt.addEventListener("input", () => this.autosize());
    stop.addEventListener("click", () => onStop());
  }

  get value() {
    return this.prompt.value;
  }

  /** Empties the box once its prompt was accepted. */
  clear() {
    this.prompt.value = "";
    this.autosize();
  }

  focus() {
    this.prompt.focus();
  }

  autosize() {
    this.prompt.style.height = "auto";
    this.prompt.style.height = `${Math.min(this.prompt.scrollHeight, 240)}px`;
  }

  /** Stop instead of Send while an answer is being written. */
  setRunning(running) {
    this.sendButton.hidden = running;
    this.stopButton.hidden = !running;
    this.stopButton.disabled = false;
  }

  /** Send is disabled while a prompt is on its way. */
  setSending(sending) {
    this.sendButton.disabled = sending;
  }

  /** Stop is disabled while the server is asked to cancel. */
  setStopping(stopping) {
    this.stopButton.disabled = stopping;
  }
}
