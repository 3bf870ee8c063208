// The draft editor: CodeMirror over the textarea, Ctrl+S saves through htmx, revisions follow saves,
// and a conflict keeps the user's text in the editor while offering theirs.
(function () {
  function init() {
    const area = document.getElementById("code");
    if (!area || !window.CodeMirror) return;
    const readOnly = area.dataset.readonly === "1";
    const cm = CodeMirror.fromTextArea(area, {
      mode: area.dataset.mode, lineNumbers: true, indentUnit: 4, tabSize: 4, indentWithTabs: false,
      matchBrackets: true, autoCloseBrackets: !readOnly, styleActiveLine: true, readOnly: readOnly,
      extraKeys: { Tab: (c) => c.replaceSelection("    "), "Ctrl-S": save, "Cmd-S": save },
    });
    window.studioEditor = cm;
    const form = document.getElementById("save-form");
    const dirtyFlag = document.getElementById("dirty-flag");
    let clean = cm.changeGeneration();
    const isDirty = () => !cm.isClean(clean);
    cm.on("change", () => { if (dirtyFlag) dirtyFlag.hidden = !isDirty(); });
    function save() { if (form && !readOnly) { cm.save(); htmx.trigger(form, "submit"); } }
    if (form) {
      form.addEventListener("htmx:configRequest", () => { cm.save(); });
      form.addEventListener("submit", () => cm.save());
    }
    document.body.addEventListener("htmx:afterSwap", (e) => {
      const saved = e.detail.target.querySelector("[data-saved-revision]");
      if (saved) {
        setRevision(saved.dataset.savedRevision);
        clean = cm.changeGeneration();
        if (dirtyFlag) dirtyFlag.hidden = true;
      }
    });
    document.body.addEventListener("click", (e) => {
      const take = e.target.closest("[data-conflict-take]");
      if (!take) return;
      const box = take.closest("[data-conflict-revision]");
      setRevision(box.dataset.conflictRevision);
      if (take.dataset.conflictTake === "theirs") {
        cm.setValue(document.getElementById("conflict-theirs").value);
        clean = cm.changeGeneration();
        if (dirtyFlag) dirtyFlag.hidden = true;
        box.remove();
      } else {
        box.remove();
        save();
      }
    });
    function setRevision(rev) {
      document.querySelectorAll(".draft-revision").forEach((el) => { el.value = rev; });
      const label = document.getElementById("revision-label");
      if (label) label.textContent = rev;
    }
    window.addEventListener("beforeunload", (e) => { if (!readOnly && isDirty()) { e.preventDefault(); e.returnValue = ""; } });
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init); else init();
})();
