// Review screen: decide from the keyboard (a approve, r reject, o override, s skip, n next, t note),
// and attach notes to the step the replay viewer shows.
// A decision swaps the next item into the page (no page load): the handlers start again on the new
// form (mount) and the previous ones are removed (destroy).
(function () {
  let current = null;
  function mount() {
    const panel = document.getElementById("decision");
    if (current && current.panel === panel) return;
    if (current) current.destroy();
    current = panel ? start(panel) : null;
  }
  document.addEventListener("htmx:afterSettle", mount);
  mount();

function start(panel) {
  const listening = new AbortController();
  const signal = listening.signal;
  const form = document.getElementById("decision-form");
  const decision = document.getElementById("decision-value");
  const overrideFields = document.getElementById("override-fields");
  const stepInput = document.getElementById("annotation-step");
  const target = document.getElementById("annotation-target");

  function submit(kind) {
    if (!form) return;
    decision.value = kind;
    // The server checks the decision (an override needs a value and a rationale, an approval a reward)
    // and answers a refusal with the decision panel again, the reason beside its field and the typed
    // text kept (the new panel mounts again): one definition of the rules.
    form.requestSubmit ? form.requestSubmit() : htmx.trigger(form, "submit");
  }
  function toggleOverride(show) {
    if (!overrideFields) return;
    overrideFields.hidden = show === undefined ? !overrideFields.hidden : !show;
    if (!overrideFields.hidden) document.getElementById("override-value").focus();
  }
  if (form) {
    form.querySelectorAll("[data-decision]").forEach((b) => b.addEventListener("click", (e) => {
      e.preventDefault();
      submit(b.dataset.decision);
    }));
    document.getElementById("override-toggle").addEventListener("click", () => toggleOverride());
    const refused = form.querySelector("[aria-invalid=true]");  // a refusal came back: its field, to correct
    if (refused) refused.focus();
  }
  const noteForm = document.getElementById("annotation-form");
  if (noteForm) noteForm.addEventListener("htmx:afterRequest", (e) => {
    if (!e.detail.successful) return;
    const keep = stepInput.value;
    noteForm.reset();
    stepInput.value = keep;
  }, { signal });
  document.addEventListener("replay:position", (e) => {
    if (!stepInput) return;
    stepInput.value = e.detail.index;
    target.textContent = e.detail.index < 0 ? "the start" : `step ${e.detail.index}`;
  }, { signal });
  document.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey) && e.target.id === "override-rationale") {
      e.preventDefault();
      submit("overridden");
      return;
    }
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    const typing = e.target.closest("input, textarea, select, [contenteditable]");
    if (typing) {
      if (e.key === "Escape") e.target.blur();
      if (e.key === "Enter" && e.target.id === "override-value") { e.preventDefault(); document.getElementById("override-rationale").focus(); }
      return;
    }
    const go = (id) => { const a = document.getElementById(id); if (a) location.href = a.href; };
    switch (e.key) {
      case "a": e.preventDefault(); submit("approved"); break;
      case "r": e.preventDefault(); submit("rejected"); break;
      case "o": e.preventDefault(); toggleOverride(true); break;
      case "s": e.preventDefault(); go("skip-link"); break;
      case "n": e.preventDefault(); go("next-link"); break;
      case "t": { const t = document.getElementById("annotation-text"); if (t) { e.preventDefault(); t.focus(); } break; }
      default: break;
    }
  }, { signal });
  return { panel, destroy: () => listening.abort() };
}
})();
