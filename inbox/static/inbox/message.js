/* A message's page: its tabs drawn in place (the links still load the page without script;
   the address bar follows, so back and reload keep the tab), the mail's frame sized to an
   estimate of its mail, and a desktop or mobile width for it. */
(function () {
  "use strict";

  // --- the mail's frame ---------------------------------------------------------------------
  // The frame runs no script and shares no origin with the page, so nothing can measure the
  // mail (docs/inbox.md, "Mail's HTML"): the server counts its visible characters, blocks and
  // image heights, and this turns them into a height for the width the frame has now. The
  // frame scrolls when the guess falls short, and its corner drags it taller.
  var LINE = 22, CHARACTER = 7.5, MARGIN = 48, LEAST = 160;

  function sizeFrame() {
    var holder = document.getElementById("mail-frame");
    if (!holder) { return; }
    var frame = holder.querySelector("iframe");
    var width = Math.max(200, frame.clientWidth - 32);
    var hint = holder.dataset;
    var lines = Number(hint.blocks) + Math.ceil(Number(hint.chars) * CHARACTER / width);
    var height = Math.max(LEAST, lines * LINE + Number(hint.images) + MARGIN);
    holder.style.height = Math.min(height, Math.max(window.innerHeight * 4, 2400)) + "px";
  }

  function widths() {
    var group = document.querySelector(".widths");
    var holder = document.getElementById("mail-frame");
    if (!group || !holder) { return; }
    group.hidden = false;
    group.querySelectorAll("button[data-width]").forEach(function (button) {
      button.addEventListener("click", function () {
        group.querySelectorAll("button[data-width]").forEach(function (other) {
          other.setAttribute("aria-pressed", other === button ? "true" : "false");
        });
        holder.classList.toggle("narrow", button.dataset.width !== "");
        sizeFrame();
      });
    });
  }

  function frame() {
    sizeFrame();
    widths();
  }

  // --- tabs in place ------------------------------------------------------------------------
  var tabs = document.getElementById("tabs");
  var drawn = window.location.search;  // the query whose tab is on the page

  function mark(name) {
    tabs.querySelectorAll("a[data-tab]").forEach(function (link) {
      if (link.dataset.tab === name) {
        link.setAttribute("aria-current", "page");
        link.scrollIntoView({block: "nearest", inline: "nearest"});
      } else {
        link.removeAttribute("aria-current");
      }
    });
  }

  // Draws the tab of `url` (this page with another ?tab=) from the page the server renders
  // for it; a failure loads that page instead, as the link would have.
  function show(url, push) {
    var shown = document.querySelector("section.tab");
    shown.setAttribute("aria-busy", "true");
    drawn = url.search;
    return fetch(url.pathname + url.search, {credentials: "same-origin"})
      .then(function (response) {
        return response.ok && !response.redirected ? response.text() : Promise.reject(response.status);
      })
      .then(function (html) {
        var page = new DOMParser().parseFromString(html, "text/html");
        var fresh = page.querySelector("section.tab");
        var named = page.querySelector("#tabs a[aria-current]");
        if (!fresh) { return Promise.reject("no tab"); }
        fresh = document.importNode(fresh, true);
        shown.replaceWith(fresh);
        if (push) { history.pushState(null, "", url.pathname + url.search); }
        mark(named ? named.dataset.tab : "");
        fresh.dispatchEvent(new CustomEvent("relay:swapped", {bubbles: true}));
        frame();
      })
      .catch(function () { window.location.href = url.href; });
  }

  function tabsInPlace() {
    if (!tabs || !window.fetch || !window.history.pushState || !window.DOMParser) { return; }
    tabs.addEventListener("click", function (event) {
      var link = event.target.closest("a[data-tab]");
      if (!link || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) { return; }
      event.preventDefault();
      if (link.getAttribute("aria-current") !== "page") { show(new URL(link.href), true); }
    });
    // Back and forward between tabs (a fragment's change, the skip link's, keeps the tab).
    window.addEventListener("popstate", function () {
      if (window.location.search !== drawn) { show(new URL(window.location.href), false); }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    frame();
    tabsInPlace();
    window.addEventListener("resize", sizeFrame);
  });
}());
