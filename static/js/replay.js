// Rollout replay viewer: a timeline over a rollout's steps, live or finished.
// Steps are fetched in windows (never all at once), so 10,000-step rollouts stay responsive;
// live steps arrive over the rollout's websocket and the viewer follows the head unless scrubbed back.
// The review screen swaps in its next item without a page load: the viewer then starts again on the new
// #replay (mount), and the previous one lets go of its socket, timers, chart and key handler (destroy).
(function () {
  let current = null;
  function mount() {
    const root = document.getElementById("replay");
    if (current && current.root === root) return;
    if (current) current.destroy();
    current = root ? start(root) : null;
  }
  document.addEventListener("htmx:afterSettle", mount);
  mount();

function start(root) {
  const WINDOW = 200;
  const listening = new AbortController();
  const $ = (id) => document.getElementById(id);
  const el = {
    status: $("replay-status"), live: $("replay-live"), prev: $("replay-prev"), next: $("replay-next"),
    play: $("replay-play"), speed: $("replay-speed"), scrub: $("replay-scrubber"), pos: $("replay-position"),
    follow: $("replay-follow"), action: $("replay-action"), obs: $("replay-observation"), info: $("replay-info"),
    reward: $("replay-reward"), cumulative: $("replay-cumulative"), elapsed: $("replay-elapsed"), flags: $("replay-flags"),
    changed: $("replay-changed"), artifact: $("replay-artifact"), images: $("replay-obs-images"), verdict: $("replay-verdict"),
    vReward: $("replay-verifier-reward"), vReason: $("replay-verifier-reason"), canvas: $("replay-chart"),
  };
  const state = {
    count: 0, pos: -1, cache: new Map(), pending: new Map(), rewards: [], cumulative: [], playing: false,
    timer: null, finished: false, initial: null, lastIndex: -1, socket: null, retry: 500,
  };

  // Objects read as "key: value" lines; multi-line strings (page text, board renderings) as blocks.
  function pretty(v) {
    if (v === null || v === undefined) return "—";
    if (typeof v === "string") return v;
    if (typeof v !== "object" || Array.isArray(v)) return JSON.stringify(v, null, 2);
    const lines = [];
    for (const [key, value] of Object.entries(v)) {
      if (typeof value === "string" && value.includes("\n")) {
        lines.push(`${key}:`);
        value.split("\n").forEach((line) => lines.push(`  ${line}`));
      } else {
        lines.push(`${key}: ${JSON.stringify(value, null, 2).replace(/\n/g, "\n  ")}`);
      }
    }
    return lines.join("\n");
  }
  // A discrete action by its name ("UP (2)") when the environment or its version names them.
  const actionNames = JSON.parse(root.dataset.actionNames || "{}");
  const actionText = (action) => (Number.isInteger(action) && actionNames[String(action)] !== undefined
    ? `${actionNames[String(action)]} (${action})` : pretty(action));
  const { forText } = window.StudioObservations;
  const showImages = (observation) => window.StudioObservations.showImages(el.images, observation);
  const fmt = (x) => (x === null || x === undefined) ? "—" : (Math.round(x * 1000) / 1000).toString();

  function fetchWindow(start) {
    const from = Math.max(0, Math.floor(start / WINDOW) * WINDOW);
    if (state.pending.has(from)) return state.pending.get(from);
    const p = fetch(`${root.dataset.stepsUrl}?offset=${from}&limit=${WINDOW}`, { credentials: "same-origin" })
      .then((r) => r.json())
      .then((data) => { data.steps.forEach((s) => state.cache.set(s.index, s)); })
      .finally(() => state.pending.delete(from));
    state.pending.set(from, p);
    return p;
  }

  async function stepAt(i) {
    if (i < 0) return null;
    if (!state.cache.has(i)) await fetchWindow(i);
    // Keep the cache bounded: drop windows far from where the user is.
    if (state.cache.size > WINDOW * 10) {
      for (const k of state.cache.keys()) if (Math.abs(k - i) > WINDOW * 4) state.cache.delete(k);
    }
    return state.cache.get(i) || null;
  }

  function highlightChanges(prevText, text) {
    // Lines not present in the previous observation are marked, so what changed stands out.
    // Built as text nodes: an observation is the environment's data, never markup.
    const before = new Map();
    (prevText || "").split("\n").forEach((l) => before.set(l, (before.get(l) || 0) + 1));
    let changed = 0;
    const nodes = [];
    text.split("\n").forEach((line, i) => {
      if (i) nodes.push("\n");
      const span = document.createElement("span");
      span.textContent = line;
      const n = before.get(line) || 0;
      if (n > 0) before.set(line, n - 1);
      else { changed += 1; span.className = "changed"; }
      nodes.push(span);
    });
    return { nodes, changed };
  }

  function badge(text, cls) {
    const span = document.createElement("span");
    span.className = cls ? `badge ${cls}` : "badge";
    span.textContent = text;
    return span;
  }

  let renderToken = 0;
  async function render() {
    const token = ++renderToken;
    const i = state.pos;
    el.scrub.max = Math.max(-1, state.count - 1);
    el.scrub.value = i;
    el.pos.textContent = i < 0 ? `start / ${state.count}` : `step ${i} / ${state.count - 1}`;
    el.prev.disabled = i <= -1;
    el.next.disabled = i >= state.count - 1;
    const [step, prev] = await Promise.all([stepAt(i), stepAt(i - 1)]);
    if (token !== renderToken) return; // a newer position was asked for meanwhile
    const prevObs = i <= 0 ? state.initial : (prev ? prev.observation : null);
    if (i < 0 || !step) {
      el.action.textContent = i < 0 ? "(initial observation, before any action)" : "loading…";
      el.obs.textContent = pretty(forText(state.initial));
      showImages(state.initial);
      el.reward.textContent = el.cumulative.textContent = el.elapsed.textContent = "—";
      el.info.textContent = "—"; el.flags.replaceChildren(); el.changed.textContent = "";
      el.artifact.hidden = true;
    } else {
      el.action.textContent = actionText(step.action);
      const diff = highlightChanges(pretty(forText(prevObs)), pretty(forText(step.observation)));
      showImages(step.observation);
      el.obs.replaceChildren(...diff.nodes);
      el.changed.textContent = diff.changed ? `${diff.changed} line${diff.changed === 1 ? "" : "s"} changed` : "unchanged";
      el.reward.textContent = fmt(step.reward);
      el.cumulative.textContent = fmt(state.cumulative[i]);
      el.elapsed.textContent = `${fmt(step.elapsed_ms)} ms`;
      el.info.textContent = pretty(step.info);
      el.flags.replaceChildren(...(step.terminated ? [badge("terminated"), " "] : []), ...(step.truncated ? [badge("truncated", "warn")] : []));
      if (step.artifact_url) { el.artifact.src = step.artifact_url; el.artifact.hidden = false; } else { el.artifact.hidden = true; }
    }
    chartCursor(i);
    root.dispatchEvent(new CustomEvent("replay:position", { detail: { index: i }, bubbles: true }));
    // Prefetch the next window while playing.
    if (state.playing && i + WINDOW / 2 < state.count) fetchWindow(i + WINDOW / 2);
  }

  function goTo(i, { user = true } = {}) {
    const clamped = Math.max(-1, Math.min(state.count - 1, i));
    if (user && el.follow) el.follow.checked = clamped >= state.count - 1 && !state.finished;
    state.pos = clamped;
    return render();
  }

  // Chart: reward per step and cumulative reward along the timeline (Chart.js, no animation).
  let chart = null;
  function buildChart() {
    if (!window.Chart || !el.canvas) return;
    chart = new Chart(el.canvas, {
      type: "line",
      data: { labels: [], datasets: [
        { label: "reward", data: [], borderColor: "#2f5bea", borderWidth: 1, pointRadius: 0, yAxisID: "y" },
        { label: "cumulative", data: [], borderColor: "#1f8a4c", borderWidth: 1.5, pointRadius: 0, yAxisID: "y1" },
      ] },
      options: {
        animation: false, responsive: true, maintainAspectRatio: false, parsing: false, normalized: true,
        interaction: { mode: "index", intersect: false },
        plugins: { legend: { display: true, position: "right" }, decimation: { enabled: true, algorithm: "lttb", samples: 500 } },
        scales: { x: { type: "linear", ticks: { maxTicksLimit: 10, precision: 0 } }, y: { position: "left" }, y1: { position: "right", grid: { drawOnChartArea: false } } },
        onClick: (evt) => {
          const x = chart.scales.x.getValueForPixel(evt.x);
          if (Number.isFinite(x)) goTo(Math.round(x));
        },
      },
      plugins: [{ id: "cursor", afterDraw: (c) => {
        if (state.pos < 0) return;
        const x = c.scales.x.getPixelForValue(state.pos);
        const ctx = c.ctx; ctx.save(); ctx.strokeStyle = "rgba(194,54,43,.7)"; ctx.beginPath();
        ctx.moveTo(x, c.chartArea.top); ctx.lineTo(x, c.chartArea.bottom); ctx.stroke(); ctx.restore();
      } }],
    });
  }
  function chartData() {
    if (!chart) return;
    chart.data.datasets[0].data = state.rewards.map((r, i) => ({ x: i, y: r }));
    chart.data.datasets[1].data = state.cumulative.map((r, i) => ({ x: i, y: r }));
    chart.options.scales.x.min = 0;
    chart.options.scales.x.max = Math.max(1, state.count - 1);
    chart.update("none");
  }
  let cursorFrame = null;
  function chartCursor() {
    if (!chart || cursorFrame) return;
    cursorFrame = requestAnimationFrame(() => { cursorFrame = null; chart.draw(); });
  }

  function addRewards(steps) {
    let changed = false;
    steps.forEach((s) => {
      if (s.index < state.rewards.length) return;
      while (state.rewards.length < s.index) { state.rewards.push(0); state.cumulative.push(state.cumulative.at(-1) || 0); }
      state.rewards.push(s.reward);
      state.cumulative.push((state.cumulative.at(-1) || 0) + s.reward);
      changed = true;
    });
    return changed;
  }

  let seenLive = false;
  function applyStatus(st) {
    if (!st) return;
    const wasLive = seenLive && !state.finished;
    el.status.textContent = st.status;
    el.status.className = `badge ${st.status}`;
    const finished = ["succeeded", "failed", "errored", "timed_out", "cancelled"].includes(st.status);
    state.finished = finished;
    el.live.hidden = finished;
    const followLabel = document.getElementById("replay-follow-label");
    if (followLabel) followLabel.hidden = finished;
    if (finished) {
      el.verdict.hidden = false;
      el.vReward.textContent = st.verifier_reward === null || st.verifier_reward === undefined ? "—" : st.verifier_reward;
      el.vReason.textContent = [st.verifier_reason, st.verifier_error, st.error].filter(Boolean).join(" · ");
      if (state.playing && state.pos >= state.count - 1) pause();
      // Watched to its end: the page's header, outcome, labels and reproduction record become what a
      // reload shows, from the same template.
      if (wasLive && window.studioRefresh) {
        window.studioRefresh(location.pathname, ["rollout-head", "rollout-error", "rollout-outcome", "rollout-reproduce"])
          .catch((err) => console.warn("could not refresh the rollout", err));
      }
    } else {
      seenLive = true;
    }
  }

  function onLiveSteps(steps) {
    const fresh = steps.filter((s) => s.index > state.lastIndex);
    if (!fresh.length) return;
    fresh.forEach((s) => { state.cache.set(s.index, s); });
    state.lastIndex = fresh.at(-1).index;
    state.count = Math.max(state.count, state.lastIndex + 1);
    if (addRewards(fresh)) chartData();
    if (el.follow.checked) { state.pos = state.count - 1; }
    render();
  }

  // "● live" while the socket follows the rollout; while it is down (the server lost its Redis, or the
  // network) the page says so and keeps reconnecting, then fills what it missed from the REST windows.
  function streamState(up) {
    el.live.hidden = state.finished;
    el.live.textContent = up ? "● live" : "○ live stream lost, reconnecting…";
    el.live.classList.toggle("stream-lost", !up);
  }

  function connect() {
    if (state.finished || state.destroyed || !window.WebSocket) return;
    const proto = location.protocol === "https:" ? "wss" : "ws";
    // Resume after the last step we have; the REST windows serve history, so skip the backlog.
    const ws = new WebSocket(`${proto}://${location.host}${root.dataset.wsPath}?after=${state.lastIndex}&backlog=0`);
    state.socket = ws;
    ws.onopen = () => { state.retry = 500; streamState(true); };
    ws.onmessage = (e) => {
      const msg = JSON.parse(e.data);
      if (msg.type === "steps") onLiveSteps(msg.steps);
      else if (msg.type === "stream") streamState(false);
      else if (msg.type === "status") {
        applyStatus(msg);
        if (msg.step_count > state.lastIndex + 1) catchUp(msg.step_count);
      }
    };
    ws.onclose = () => {
      if (state.finished || state.destroyed) return;
      streamState(false);
      setTimeout(async () => { await catchUp(); connect(); }, state.retry);
      state.retry = Math.min(state.retry * 2, 10000);
    };
  }

  async function catchUp(upTo) {
    // Fill any steps stored while we were not connected, from the REST windows.
    const target = upTo || Infinity;
    while (state.lastIndex + 1 < target) {
      const before = state.lastIndex;
      await fetchWindow(state.lastIndex + 1);
      const got = [];
      for (let i = state.lastIndex + 1; state.cache.has(i); i++) got.push(state.cache.get(i));
      if (!got.length) break;
      onLiveSteps(got);
      if (state.lastIndex === before) break;
    }
  }

  function play() {
    if (state.pos >= state.count - 1 && state.finished) state.pos = -1;
    state.playing = true;
    el.play.textContent = "❚❚ Pause";
    tick();
  }
  function pause() {
    state.playing = false;
    el.play.textContent = "▶ Play";
    clearTimeout(state.timer);
  }
  function tick() {
    if (!state.playing) return;
    if (state.pos < state.count - 1) goTo(state.pos + 1, { user: false });
    else if (state.finished) { pause(); return; }
    state.timer = setTimeout(tick, 500 / Number(el.speed.value));
  }

  el.prev.addEventListener("click", () => goTo(state.pos - 1));
  el.next.addEventListener("click", () => goTo(state.pos + 1));
  el.play.addEventListener("click", () => (state.playing ? pause() : play()));
  el.scrub.addEventListener("input", () => goTo(Number(el.scrub.value)));
  el.follow.addEventListener("change", () => { if (el.follow.checked) goTo(state.count - 1, { user: false }); });
  document.addEventListener("keydown", (e) => {
    if (e.target.closest("input:not([type=range]), textarea, select, [contenteditable]")) return;
    if (e.key === "ArrowRight") { e.preventDefault(); goTo(state.pos + 1); }
    else if (e.key === "ArrowLeft") { e.preventDefault(); goTo(state.pos - 1); }
    else if (e.key === " ") { e.preventDefault(); state.playing ? pause() : play(); }
    else if (e.key === "Home") { e.preventDefault(); goTo(-1); }
    else if (e.key === "End") { e.preventDefault(); goTo(state.count - 1); }
  }, { signal: listening.signal });

  async function init() {
    const t = await fetch(root.dataset.timelineUrl, { credentials: "same-origin" }).then((r) => r.json());
    state.initial = t.rollout.initial_observation;
    state.count = t.indexes.length;
    state.lastIndex = state.count - 1;
    state.rewards = t.rewards.slice();
    let acc = 0;
    state.cumulative = t.rewards.map((r) => (acc += r));
    applyStatus(t.rollout);
    buildChart();
    chartData();
    state.pos = state.finished ? (state.count ? 0 : -1) : state.count - 1;
    if (state.finished) el.follow.checked = false;
    root.classList.add("ready");
    await render();
    connect();
  }
  window.studioReplay = { goTo, state, play, pause };
  init();
  return {
    root,
    destroy() {
      state.destroyed = true;
      listening.abort();
      pause();
      if (state.socket) state.socket.close();
      if (chart) chart.destroy();
    },
  };
}
})();
