// The colour theme: the system's (prefers-color-scheme) unless the user picked light or dark with the
// toggle, which is remembered in localStorage. A classic script loaded in <head>, so the page is painted
// in the right theme from the start; app.css does the rest with light-dark() and `color-scheme`.
(function () {
  "use strict";
  var KEY = "chat-ui:theme";
  var ORDER = ["system", "light", "dark"];
  var LABELS = { system: "Theme: system", light: "Theme: light", dark: "Theme: dark" };

  function stored() {
    try {
      var value = localStorage.getItem(KEY);
      return ORDER.indexOf(value) >= 0 ? value : "system";
    } catch (e) {
      return "system";
    }
  }

  function apply(theme) {
    if (theme === "system") document.documentElement.removeAttribute("data-theme");
    else document.documentElement.setAttribute("data-theme", theme);
  }

  function paint(button, theme) {
    button.textContent = LABELS[theme];
    button.setAttribute("aria-label", LABELS[theme] + " (press to change)");
    button.dataset.theme = theme;
  }

  var current = stored();
  apply(current);
  document.addEventListener("DOMContentLoaded", function () {
    var button = document.getElementById("theme-toggle");
    if (!button) return;
    paint(button, current);
    button.addEventListener("click", function () {
      var next = ORDER[(ORDER.indexOf(current) + 1) % ORDER.length];
      current = next;
      try {
        if (next === "system") localStorage.removeItem(KEY);
        else localStorage.setItem(KEY, next);
      } catch (e) {
        // Storage disabled: the choice holds for this page only.
      }
      apply(next);
      paint(button, next);
    });
  });
})();
