// Small behaviours shared by every page: team switcher, confirmations, copy buttons.
document.addEventListener("change", (e) => {
  if (e.target.matches("[data-switch-team]")) window.location = e.target.value;
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
// htmx: show the error and conflict panels that come with 400/409 answers instead of dropping them.
document.addEventListener("htmx:beforeSwap", (e) => {
  const status = e.detail.xhr.status;
  if (status === 400 || status === 409) { e.detail.shouldSwap = true; e.detail.isError = false; }
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
