// Play mode: send the action form as one JSON action, then show what came back: a browser page's
// screenshot and text view, or any other environment's observation (its image-like arrays as images).
(function () {
  const root = document.getElementById("play");
  if (!root) return;
  const $ = (id) => document.getElementById(id);
  const form = $("play-action");
  const csrf = (document.cookie.match(/csrftoken=([^;]+)/) || [])[1] || "";
  const browser = root.dataset.kind === "browser";
  const observations = window.StudioObservations;

  function showObservation(observation) {
    observations.showImages($("play-obs-images"), observation);
    const text = observations.forText(observation);
    $("play-observation").textContent = typeof text === "string" ? text : JSON.stringify(text, null, 2);
  }
  // A small discrete space's actions: buttons with their names, and keys that play them (the version's
  // [actions] keys, else digits and arrows; runs/action_names.py decides, this only listens).
  const keys = $("play-keys") ? JSON.parse($("play-keys").textContent) : {};
  const names = {};
  ($("play-names") ? JSON.parse($("play-names").textContent) : []).forEach((b) => { if (b.name) names[b.value] = b.name; });
  const named = (action) => (names[action] !== undefined ? `${names[action]} (${action})` : JSON.stringify(action));
  let busy = false;
  function play(value) {
    if (busy) return;  // one action at a time: a held key does not queue a burst of steps
    form.elements.json.value = String(value);
    form.requestSubmit();
  }
  if (!browser) {
    showObservation(JSON.parse($("play-initial").textContent));
    form.querySelectorAll("button[data-action]").forEach((button) => button.addEventListener("click", () => play(button.dataset.action)));
    document.addEventListener("keydown", (event) => {
      if (event.ctrlKey || event.metaKey || event.altKey || event.target.closest("input, textarea, select")) return;
      if (!Object.prototype.hasOwnProperty.call(keys, event.key)) return;
      event.preventDefault();
      play(keys[event.key]);
    });
  }

  async function send(action) {
    const response = await fetch(root.dataset.actUrl, {
      method: "POST", headers: { "Content-Type": "application/json", "X-CSRFToken": csrf },
      body: JSON.stringify(action), credentials: "same-origin",
    });
    return [response, await response.json()];
  }

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
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    busy = true;
    $("play-status").dataset.state = "acting";
    $("play-status").textContent = "acting…";
    try {
      let action;
      if (browser) action = actionFrom(new FormData(form));
      else {
        try { action = JSON.parse(form.elements.json.value); }
        catch (error) { $("play-status").textContent = `the action is not JSON: ${error.message}`; return; }
      }
      const [response, step] = await send(action);
      if (!response.ok) { $("play-status").textContent = step.error || "failed"; return; }
      if (browser) {
        const obs = step.observation || {};
        if (step.artifact_url) $("play-screenshot").src = step.artifact_url;
        $("play-url").textContent = obs.url || "";
        $("play-title").textContent = obs.title || "";
        $("play-text").textContent = obs.text || "";
        $("play-error").textContent = obs.error || "";
      } else {
        showObservation(step.observation);
      }
      const info = Object.assign({}, step.info); delete info.action_error;
      $("play-info").textContent = Object.keys(info).length ? JSON.stringify(info, null, 1) : "";
      $("play-status").dataset.state = step.done ? "over" : "playing";
      $("play-status").textContent = `step ${step.index}` + (browser ? "" : ` · ${named(action)} · reward ${step.reward}`)
        + (step.done ? " · episode over: finish to verify" : "");
    } catch (error) {
      $("play-status").textContent = String(error);
    } finally {
      button.disabled = false;
      busy = false;
    }
  });
})();
