/* Every page's small comforts, each optional (the page reads without them): times in the
   reader's own zone and words, keyboard shortcuts with their `?` list, and notifications of
   new mail while the page is hidden, once the person asked for them. */
(function () {
  "use strict";

  var language = document.documentElement.lang || undefined;

  // --- times: "3 min ago", the local date and time as the title -----------------------------
  var UNITS = [["year", 31536000], ["month", 2592000], ["day", 86400], ["hour", 3600], ["minute", 60]];
  var relative = window.Intl && Intl.RelativeTimeFormat ?
    new Intl.RelativeTimeFormat(language, {numeric: "auto", style: "short"}) : null;
  var absolute = window.Intl ? new Intl.DateTimeFormat(language, {dateStyle: "medium", timeStyle: "medium"}) : null;

  function saying(seconds) {
    for (var i = 0; i < UNITS.length; i++) {
      if (Math.abs(seconds) >= UNITS[i][1]) {
        return relative.format(Math.round(seconds / UNITS[i][1]), UNITS[i][0]);
      }
    }
    return relative.format(0, "second");
  }

  // The server writes UTC; a time marked data-absolute (the mailbox's end, beside its
  // countdown) becomes the local date and time, every other one words relative to now.
  function localTimes(root) {
    if (!relative || !absolute) { return; }
    root.querySelectorAll("time[datetime]").forEach(function (time) {
      var when = new Date(time.getAttribute("datetime"));
      if (isNaN(when)) { return; }
      var local = absolute.format(when);
      if (time.hasAttribute("data-absolute")) {
        time.textContent = local;
        return;
      }
      time.title = local;
      time.textContent = saying((when.getTime() - Date.now()) / 1000);
    });
  }

  // --- keyboard shortcuts -------------------------------------------------------------------
  function typing(target) {
    return target.closest("input, textarea, select, [contenteditable]") !== null;
  }

  function shortcutsDialog() {
    var dialog = document.getElementById("shortcuts");
    var opener = document.getElementById("show-shortcuts");
    if (!dialog || !dialog.showModal) { return null; }
    var returnTo = null;
    function open() {
      if (dialog.open) { return; }
      returnTo = document.activeElement;
      dialog.showModal();
      dialog.querySelector("[data-close]").focus();
    }
    dialog.querySelector("[data-close]").addEventListener("click", function () { dialog.close(); });
    // A modal dialog keeps focus inside the page's part of it; Tab from its last control
    // goes back to its first rather than out to the browser's own controls.
    dialog.addEventListener("keydown", function (event) {
      if (event.key !== "Tab") { return; }
      var controls = dialog.querySelectorAll("button, [href], [tabindex]:not([tabindex='-1'])");
      var first = controls[0], last = controls[controls.length - 1];
      if (event.shiftKey && document.activeElement === first) { last.focus(); event.preventDefault(); }
      else if (!event.shiftKey && document.activeElement === last) { first.focus(); event.preventDefault(); }
    });
    dialog.addEventListener("close", function () {
      if (returnTo && document.contains(returnTo)) { returnTo.focus(); }
    });
    if (opener) {
      opener.hidden = false;
      opener.addEventListener("click", open);
    }
    return open;
  }

  // j and k: on a message, its older and newer neighbours; on a mailbox, the next and
  // previous row (Enter opens it).
  function step(forward) {
    var link = document.querySelector(forward ? "a[rel='next']" : "a[rel='prev']");
    if (link) { window.location.href = link.href; return; }
    var rows = Array.prototype.slice.call(document.querySelectorAll("#messages li a.open"));
    if (!rows.length) { return; }
    var at = rows.indexOf(document.activeElement);
    var next = at === -1 ? 0 : Math.min(rows.length - 1, Math.max(0, at + (forward ? 1 : -1)));
    rows[next].focus();
  }

  // c: the code of the focused row, else the page's first code.
  function copyCode() {
    var row = document.activeElement && document.activeElement.closest("li[data-id]");
    var button = (row && row.querySelector(".chip button.copy")) || document.querySelector(".chip button.copy");
    if (button && !button.hidden) { button.click(); }
  }

  function shortcuts() {
    var openHelp = shortcutsDialog();
    document.addEventListener("keydown", function (event) {
      if (event.ctrlKey || event.metaKey || event.altKey || event.defaultPrevented || typing(event.target)) { return; }
      if (document.querySelector("dialog[open]")) { return; }
      var actions = {"j": function () { step(true); }, "k": function () { step(false); }, "c": copyCode,
                     "?": openHelp};
      var action = actions[event.key];
      if (action) {
        event.preventDefault();
        action();
      }
    });
  }

  // --- notifications of new mail ------------------------------------------------------------
  // Asked for with the mailbox's button, never on load; kept on for this mailbox in this
  // browser; shown only while the page is hidden (the list shows the rest).
  // What a sighted reader sees of `element` (not the "Unread:" said to screen readers).
  function shownText(element) {
    if (!element) { return ""; }
    var copy = element.cloneNode(true);
    copy.querySelectorAll(".visually-hidden").forEach(function (hidden) { hidden.remove(); });
    return copy.textContent.trim();
  }

  function notifications() {
    var button = document.getElementById("notify");
    var list = document.getElementById("messages");
    if (!button || !list || !window.Notification || !window.localStorage) { return; }
    var key = "relay-notify:" + window.location.pathname;
    var status = document.getElementById("notify-status");
    function on() { return Notification.permission === "granted" && localStorage.getItem(key) === "1"; }
    function show() {
      button.setAttribute("aria-pressed", on() ? "true" : "false");
      status.textContent = Notification.permission === "denied" ? button.dataset.blocked : "";
    }
    button.hidden = false;
    show();
    button.addEventListener("click", function () {
      if (on()) { localStorage.removeItem(key); show(); return; }
      Notification.requestPermission().then(function (answer) {
        if (answer === "granted") { localStorage.setItem(key, "1"); }
        show();
      });
    });
    new MutationObserver(function (changes) {
      if (!document.hidden || !on()) { return; }
      changes.forEach(function (change) {
        change.addedNodes.forEach(function (row) {
          if (row.nodeType !== 1 || !row.matches("li[data-id]")) { return; }
          var link = row.querySelector("a[href]");
          var note = new Notification(shownText(row.querySelector(".subject") || row), {
            body: shownText(row.querySelector(".from")), tag: "relay-" + row.dataset.id});
          note.addEventListener("click", function () {
            window.focus();
            if (link) { window.location.href = link.href; }
          });
        });
      });
    }).observe(list, {childList: true});
  }

  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    // Rows the live list adds and tabs drawn in place bring times of their own.
    new MutationObserver(function (changes) {
      changes.forEach(function (change) {
        change.addedNodes.forEach(function (node) { if (node.nodeType === 1) { localTimes(node.parentNode); } });
      });
    }).observe(document.querySelector("main") || document.body, {childList: true, subtree: true});
    setInterval(function () { localTimes(document); }, 30000);
    shortcuts();
    notifications();
  });
}());
