// Small behaviours shared by every page: team switcher, confirmations, copy buttons.
document.addEventListener("change", (e) => {
  if (e.target.matches("[data-switch-team]")) window.location = e.target.value;
  // Selects that submit their form when changed (no inline handlers: the CSP refuses them).
  if (e.target.matches("select[data-autosubmit]") && e.target.form) e.target.form.requestSubmit();
  // Selects whose choice changes the rest of the page (New run's version: its tasks, its own agent):
  // the page loads again with the choice in its query, keeping nothing typed yet.
  if (e.target.matches("select[data-reload-query]")) {
    const url = new URL(window.location.href);
    url.searchParams.set(e.target.dataset.reloadQuery, e.target.value);
    window.location = url.toString();
  }
});
document.addEventListener("submit", (e) => {
  const msg = e.target.getAttribute("data-confirm");
  if (msg && !window.confirm(msg)) e.preventDefault();
});
document.addEventListener("click", (e) => {
  const btn = e.target.closest("[data-copy]");
  if (!btn) return;
  const el = document.querySelector(btn.getAttribute("data-copy"));
  if (el && navigator.clipboard) navigator.clipboard.writeText(el.textContent.trim()).then(() => { btn.textContent = "Copied"; });
});
// htmx: show the error and conflict panels that come with 400/409 answers (and quota refusals, 413/429) instead of dropping them.
document.addEventListener("htmx:beforeSwap", (e) => {
  const status = e.detail.xhr.status;
  if ([400, 409, 413, 429].includes(status)) { e.detail.shouldSwap = true; e.detail.isError = false; }
});
// Forms with a kind selector show only the fields of the chosen kind ([data-kind] on the inputs).
function showKindFields(select) {
  const form = select.form;
  form.querySelectorAll("[data-kind]").forEach((input) => {
    const label = input.closest("label") || input;
    label.hidden = input.dataset.kind !== select.value;
    const cm = label.querySelector(".CodeMirror");
    if (!label.hidden && cm && cm.CodeMirror) cm.CodeMirror.refresh();
  });
}
document.addEventListener("change", (e) => { if (e.target.matches("[data-agent-kind]")) showKindFields(e.target); });
document.addEventListener("DOMContentLoaded", () => document.querySelectorAll("[data-agent-kind]").forEach(showKindFields));
// Live pages replace parts of themselves with server-rendered HTML (the templates a reload uses),
// never with HTML built here from data: parse the server's markup, then swap the elements by id.
window.studioParse = function (html) {
  return new DOMParser().parseFromString(`<!doctype html><body>${html}</body>`, "text/html").body;
};
window.studioSwapFrom = function (source, ids) {
  ids.forEach((id) => {
    const fresh = source.querySelector(`#${CSS.escape(id)}`);
    const old = document.getElementById(id);
    if (fresh && old) old.replaceWith(document.importNode(fresh, true));
  });
};
// Fetch `url` as an htmx request would and swap the elements `ids` from its answer; returns the parsed body.
window.studioRefresh = async function (url, ids) {
  const r = await fetch(url, { credentials: "same-origin", headers: { "HX-Request": "true" } });
  if (!r.ok) throw new Error(`${url}: ${r.status}`);
  const body = window.studioParse(await r.text());
  window.studioSwapFrom(body, ids);
  return body;
};
// "?" shows the page's keyboard shortcuts (base.html's dialog, filled by the page's shortcuts block);
// pages without shortcuts of their own have no "?" button and the key does nothing.
(function () {
  const dialog = document.getElementById("shortcuts");
  const hasShortcuts = () => dialog && dialog.querySelectorAll("dt").length > 1;
  const toggle = () => { if (dialog.open) dialog.close(); else dialog.showModal(); };
  document.addEventListener("DOMContentLoaded", () => {
    const button = document.querySelector("[data-shortcuts-open]");
    if (button && hasShortcuts()) { button.hidden = false; button.addEventListener("click", toggle); }
  });
  document.addEventListener("keydown", (e) => {
    if (e.key !== "?" || e.ctrlKey || e.metaKey || e.altKey || !hasShortcuts()) return;
    if (e.target.closest && e.target.closest("input, textarea, select, [contenteditable], .CodeMirror")) return;
    e.preventDefault();
    toggle();
  });
})();
