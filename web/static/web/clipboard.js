// Copying to the clipboard: the asynchronous Clipboard API where the page may use it (a secure context:
// https or localhost), else a hidden textarea and execCommand("copy").

export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    try {
      await navigator.clipboard.writeText(text);
      return true;
    } catch {
      // Permission refused: try the old way.
    }
  }
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.className = "visually-hidden";
  document.body.append(area);
  area.select();
  let copied = false;
  try {
    copied = document.execCommand("copy");
  } catch {
    copied = false;
  }
  area.remove();
  return copied;
}

/** The text a reader sees in `element` (rendered Markdown), without the page's own controls in it. */
export function visibleText(element) {
  const clone = element.cloneNode(true);
  for (const control of clone.querySelectorAll(".code-header, button")) control.remove();
  // innerText needs layout: measure the clone off screen.
  const holder = document.createElement("div");
  holder.className = "visually-hidden";
  holder.append(clone);
  document.body.append(holder);
  const text = clone.innerText.replace(/\n{3,}/g, "\n\n").trim();
  holder.remove();
  return text;
}

/** Says "Copied" on `button` for a moment (and to screen readers through `announce`). */
export function flashCopied(button, ok, announce) {
  if (!button.dataset.label) button.dataset.label = button.textContent;
  button.textContent = ok ? "Copied" : "Copy failed";
  announce(ok ? "Copied to the clipboard." : "Could not copy: the browser refused.");
  clearTimeout(button.copiedTimer);
  button.copiedTimer = setTimeout(() => {
    button.textContent = button.dataset.label;
  }, 1500);
}
