// PinLater dashboard: auto-refresh of the live parts of a page (elements with data-live and an
// id), without reloading: the page is fetched again and only those elements are replaced, so
// scroll position, the job page being browsed and any form being filled in stay as they are.
// The checkbox #auto-refresh turns it off (remembered in localStorage). No other script runs.
(function () {
  "use strict";
  var seconds = Number(document.body.getAttribute("data-refresh-seconds")) || 0;
  var box = document.getElementById("auto-refresh");
  if (!seconds || !box) { return; }
  var KEY = "pinlater.autoRefresh";
  try { box.checked = window.localStorage.getItem(KEY) !== "off"; } catch (e) { /* private mode */ }
  box.addEventListener("change", function () {
    try { window.localStorage.setItem(KEY, box.checked ? "on" : "off"); } catch (e) { /* ignore */ }
  });
  var busy = false;
  function refresh() {
    if (busy || !box.checked || document.hidden) { return; }
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { "X-Refresh": "1" },
                                  redirect: "manual" })
      .then(function (response) {
        if (response.type === "opaqueredirect" || response.status !== 200) {
          throw new Error("refresh answered " + response.status);
        }
        return response.text();
      })
      .then(function (text) {
        var fresh = new DOMParser().parseFromString(text, "text/html");
        document.querySelectorAll("[data-live][id]").forEach(function (old) {
          var updated = fresh.getElementById(old.id);
          if (updated) { old.replaceChildren.apply(old, Array.from(updated.childNodes)); }
        });
      })
      .catch(function () {
        var state = document.getElementById("refresh-state");
        if (state) { state.textContent = "auto-refresh stopped: reload the page (logged out?)"; }
        box.checked = false;
      })
      .then(function () { busy = false; });
  }
  window.setInterval(refresh, seconds * 1000);
}());
