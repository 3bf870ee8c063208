// Play mode: send the action form as one JSON action, then show the new screenshot and text view.
(function () {
  const root = document.getElementById("play");
  if (!root) return;
  const $ = (id) => document.getElementById(id);
  const form = $("play-action");
  const csrf = (document.cookie.match(/csrftoken=([^;]+)/) || [])[1] || "";

  function actionFrom(data) {
    const kind = data.get("action");
    const action = { action: kind };
    const id = data.get("id").trim(), selector = data.get("selector").trim(), value = data.get("value");
    if (id) action.id = Number(id); else if (selector) action.selector = selector;
    if (kind === "fill" || kind === "select") action.value = value;
    if (kind === "goto") action.url = value || "/";
    if (kind === "press") action.key = value || "Enter";
    if (kind === "scroll") action.dy = Number(value) || 400;
    if (kind === "wait") action.ms = Number(value) || 500;
    if (kind === "done") action.answer = value;
    return action;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = form.querySelector("button");
    button.disabled = true;
    $("play-status").textContent = "acting…";
    try {
      const response = await fetch(root.dataset.actUrl, {
        method: "POST", headers: { "Content-Type": "application/json", "X-CSRFToken": csrf },
        body: JSON.stringify(actionFrom(new FormData(form))), credentials: "same-origin",
      });
      const step = await response.json();
      if (!response.ok) { $("play-status").textContent = step.error || "failed"; return; }
      const obs = step.observation || {};
      if (step.artifact_url) $("play-screenshot").src = step.artifact_url;
      $("play-url").textContent = obs.url || "";
      $("play-title").textContent = obs.title || "";
      $("play-text").textContent = obs.text || "";
      $("play-error").textContent = obs.error || "";
      const info = Object.assign({}, step.info); delete info.action_error;
      $("play-info").textContent = Object.keys(info).length ? JSON.stringify(info, null, 1) : "";
      $("play-status").textContent = `step ${step.index}` + (step.done ? " · episode over: finish to verify" : "");
    } catch (error) {
      $("play-status").textContent = String(error);
    } finally {
      button.disabled = false;
    }
  });
})();
