/* The web inbox's enhancements; every page reads without them: copy buttons, the
   countdown, the mailbox's live list over its event stream, a link check's progress. */
(function () {
  "use strict";

  // A copy button says "Copied" a moment, and the page's status region says it to a screen
  // reader (a button's changed label is not announced). Without script the buttons stay
  // hidden and the values are text to select.
  function announce(text) {
    var status = document.getElementById("copy-status");
    if (!status) { return; }
    status.textContent = "";
    setTimeout(function () { status.textContent = text; }, 50);
  }

  function enableCopy(root) {
    root.querySelectorAll("button.copy[data-copy]").forEach(function (button) {
      if (!navigator.clipboard) { return; }
      button.hidden = false;
      if (button.dataset.ready) { return; }
      button.dataset.ready = "1";
      var label = button.innerHTML;
      button.addEventListener("click", function () {
        navigator.clipboard.writeText(button.dataset.copy).then(function () {
          var copied = document.body.dataset.copied || "Copied";
          button.textContent = copied;
          announce(copied);
          setTimeout(function () { button.innerHTML = label; }, 1500);
        });
      });
    });
  }

  function countdown() {
    var clock = document.getElementById("countdown");
    if (!clock) { return; }
    var ends = Date.now() + Number(clock.dataset.seconds) * 1000;
    function tick() {
      var left = Math.max(0, Math.round((ends - Date.now()) / 1000));
      if (left === 0) { clock.textContent = clock.dataset.ended; return; }
      var h = Math.floor(left / 3600), m = Math.floor(left % 3600 / 60), s = left % 60;
      clock.textContent = clock.dataset.ends + " " + (h ? h + ":" + String(m).padStart(2, "0") : m) + ":" + String(s).padStart(2, "0");
      setTimeout(tick, 1000);
    }
    tick();
  }

  // Each `message` event carries its row as the server drew it (the template
  // inbox/templates/inbox/rows.html escapes every value from the mail): no request of its
  // own per mail. A reconnection resumes after the last row received (Last-Event-ID).
  function liveList() {
    var list = document.getElementById("messages");
    if (!list || !list.dataset.events || !window.EventSource) { return; }
    var first = list.querySelector("li[data-id]");
    var stream = new EventSource(list.dataset.events + "?after=" + (first ? first.dataset.id : "0"));
    stream.addEventListener("message", function (event) {
      var message = JSON.parse(event.data);
      if (list.querySelector('li[data-id="' + Number(message.id) + '"]')) { return; }
      var holder = document.createElement("template");
      holder.innerHTML = message.row;
      enableCopy(holder.content);
      list.insertBefore(holder.content, list.firstChild);
      var empty = document.getElementById("empty");
      if (empty) { empty.remove(); }
    });
    stream.addEventListener("expired", function () { stream.close(); window.location.reload(); });
  }

  // A section of the Checks tab fetched on its own: spamd's answer once the page is shown
  // (data-load), a link check every two seconds until it is done (data-refresh). A failed
  // fetch leaves the section as it was, with its link to the whole page.
  function replaceSection(section, url) {
    return fetch(url, {credentials: "same-origin"})
      .then(function (response) {
        // A redirect (to sign in again) or an error page is not the section: keep this one.
        return response.ok && !response.redirected ? response.text() : Promise.reject(response.status);
      })
      .then(function (html) {
        var holder = document.createElement("div");
        holder.innerHTML = html;
        var fresh = holder.firstElementChild;
        if (!fresh || fresh.tagName !== "SECTION") { return Promise.reject("not a section"); }
        section.replaceWith(fresh);
        return fresh;
      });
  }

  function loadSections() {
    document.querySelectorAll("section[data-load]").forEach(function (section) {
      replaceSection(section, section.dataset.load).catch(function () {});
    });
    var running = document.querySelector("section[data-refresh]");
    // Ten failed looks in a row (the network gone, the session ended): stop; the section's
    // link still reads the whole page again.
    function refresh(section, failures) {
      if (failures >= 10) { return; }
      setTimeout(function () {
        replaceSection(section, section.dataset.refresh)
          .then(function (fresh) { if (fresh.dataset.refresh) { refresh(fresh, 0); } })
          .catch(function () { refresh(section, failures + 1); });
      }, 2000);
    }
    if (running) { refresh(running, 0); }
  }

  document.addEventListener("DOMContentLoaded", function () {
    enableCopy(document);
    countdown();
    liveList();
    loadSections();
  });
  // A tab drawn in place (message.js) brings copy buttons and sections to fetch of its own.
  document.addEventListener("relay:swapped", function (event) {
    enableCopy(event.target);
    loadSections();
  });
}());
