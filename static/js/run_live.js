// Live run dashboard. Everything shown comes from the server's templates: rollout rows arrive rendered
// in each status event, summaries with their rendered parts; on every (re)connect the page re-reads
// itself (reconcile), so no rollout can finish unseen. Nothing here builds HTML from data.
(function () {
  const body = document.getElementById("run-body");
  if (!body) return;
  const rolloutUrl = body.dataset.rolloutUrl;
  // The page embeds the chart's points packed, one list per field (runs/figures.py points_packed).
  const unpack = (d) => d.id.map((id, i) => ({ id, status: d.status[i], total_reward: d.total_reward[i], verifier_reward: d.verifier_reward[i], task_id: d.task_id[i], seed: d.seed[i], n: d.n + i }));
  let points = unpack(JSON.parse(document.getElementById("run-points").textContent));
  const RETURN_STATUSES = ["succeeded", "failed"];
  const COLORS = { succeeded: "#1f8a4c", failed: "#c2362b" };
  // Running now: rollout id -> {step} (the latest step seen; null before the first) for exactly the
  // running rollouts, as the server listed them (#running-now) and status messages change them.
  const latest = new Map();
  const ended = new Set(); // rollouts seen to end: late step batches must not bring them back
  const RUNNING_SHOWN = 12;
  function readRunning(doc) {
    const data = doc.querySelector("#running-now");
    if (!data) return;
    latest.clear();
    for (const { rollout_id, step } of JSON.parse(data.textContent)) latest.set(rollout_id, { step });
    scheduleLatest();
  }
  let chart = null;

  const fmt = (x, d = 3) => (x === null || x === undefined) ? "—" : Number(x).toFixed(d);
  const short = (v, n = 140) => { const t = typeof v === "string" ? v : JSON.stringify(v); return t.length > n ? t.slice(0, n) + "…" : t; };
  const el = (tag, attrs = {}, ...children) => {
    const node = document.createElement(tag);
    Object.entries(attrs).forEach(([k, v]) => { if (k === "text") node.textContent = v; else node.setAttribute(k, v); });
    children.forEach((c) => node.append(c));
    return node;
  };

  function buildChart() {
    const canvas = document.getElementById("run-chart");
    if (!window.Chart || !canvas) return;
    const dataset = (label, style) => ({ label, data: [], pointRadius: 3, pointStyle: style, pointBackgroundColor: [], showLine: false });
    chart = new Chart(canvas, {
      type: "scatter",
      data: { datasets: [dataset("return", "circle"), dataset("verifier", "triangle")] },
      options: {
        animation: false, maintainAspectRatio: false, parsing: false,
        plugins: { legend: { display: true, position: "bottom" }, tooltip: { callbacks: { label: (c) => {
          const p = c.raw.p; return `#${p.id} ${p.task_id} seed ${p.seed}: ${c.dataset.label} ${fmt(c.raw.y)} (${p.status})`;
        } } } },
        scales: { x: { title: { display: true, text: "done rollouts with a reward, in finishing order" }, ticks: { precision: 0 } }, y: { title: { display: true, text: "reward" } } },
        onClick: (evt, els) => { if (els.length) location.href = rolloutUrl + chart.data.datasets[els[0].datasetIndex].data[els[0].index].p.id + "/"; },
      },
    });
    redraw();
  }
  function redraw() {
    if (!chart) return;
    const [ret, ver] = chart.data.datasets;
    ret.data = points.map((p) => ({ x: p.n, y: p.total_reward, p }));
    ver.data = points.map((p) => ({ x: p.n, y: p.verifier_reward, p })).filter((d) => d.y !== null && d.y !== undefined);
    ret.pointBackgroundColor = ret.data.map((d) => COLORS[d.p.status]);
    ver.pointBackgroundColor = ver.data.map((d) => COLORS[d.p.status]);
    chart.update("none");
  }

  // Analytics: return histogram, success by task and by difficulty (figures from runs/figures.py).
  let analytics = JSON.parse(document.getElementById("run-analytics").textContent);
  const bars = {};
  function barChart(id, horizontal) {
    const canvas = document.getElementById(id);
    if (!window.Chart || !canvas) return null;
    return new Chart(canvas, {
      type: "bar",
      data: { labels: [], datasets: [{ data: [], backgroundColor: "#2f5bea" }] },
      options: {
        animation: false, maintainAspectRatio: false, indexAxis: horizontal ? "y" : "x",
        plugins: { legend: { display: false }, tooltip: { callbacks: { label: (c) => c.chart.$label(c) } } },
        scales: horizontal ? { x: { min: 0, max: 100, ticks: { callback: (v) => `${v}%` } } } : { y: { beginAtZero: true, ticks: { precision: 0 } } },
      },
    });
  }
  function successBars(chart, groups, name) {
    if (!chart) return;
    const keys = Object.keys(groups || {});
    chart.data.labels = keys.map((k) => (k === "none" ? "—" : `${name} ${k}`));
    chart.data.datasets[0].data = keys.map((k) => (groups[k].success_rate === null ? 0 : Math.round(100 * groups[k].success_rate)));
    chart.$label = (c) => { const g = groups[keys[c.dataIndex]]; return `${g.success_rate === null ? "—" : Math.round(100 * g.success_rate) + "%"} (${g.succeeded}/${g.done} done)`; };
    chart.update("none");
  }
  function histogramBars(chart, h) {
    if (!chart || !h) return;
    chart.data.labels = h.counts.map((_, i) => `${fmt(h.edges[i], 2)}–${fmt(h.edges[i + 1], 2)}`);
    chart.data.datasets[0].data = h.counts;
    chart.$label = (c) => `${c.raw} rollout${c.raw === 1 ? "" : "s"} with a return in ${c.label}`;
    chart.update("none");
  }
  function drawAnalytics() {
    histogramBars(bars.histogram, analytics.histogram);
    successBars(bars.task, analytics.by_task, "task");
    successBars(bars.difficulty, analytics.by_difficulty, "difficulty");
  }
  function buildAnalytics() {
    bars.histogram = barChart("chart-histogram", false);
    bars.task = barChart("chart-by-task", true);
    bars.difficulty = barChart("chart-by-difficulty", true);
    drawAnalytics();
  }

  function applySummary(m) {
    // The same bounded chart data the page embeds (runs/figures.py run_analytics).
    analytics = m.analytics || analytics;
    drawAnalytics();
    window.studioSwapFrom(window.studioParse(Object.values(m.html || {}).join("")), Object.keys(m.html || {}));
    setRunStatus(m.summary.status, m.summary.pending);
  }

  // A run that ended loses its controls at once; the page stays live until no rollout is pending
  // (a cancelled run's running rollouts stop a moment later).
  function setRunStatus(status, pending) {
    if (!status) return;
    const badge = document.getElementById("run-status");
    if (badge) { badge.textContent = status; badge.className = `badge ${status}`; }
    if (["queued", "running"].includes(status)) return;
    document.querySelectorAll("[data-live-only], #messages .flash.run-queued").forEach((node) => node.remove());
    if (!Number(pending)) finish();
    // Ended with rollouts still stopping: the stream brings their ends, and a re-read every few
    // seconds makes sure the page comes to rest on what a reload shows even if a message is lost.
    else if (!settling) settling = setInterval(() => { if (done) { clearInterval(settling); settling = null; } else reconcile(); }, 3000);
  }
  let settling = null;

  function applyStatus(m) {
    const row = document.getElementById(`rollout-${m.rollout_id}`);
    if (row && m.row) {
      const fresh = window.studioParse(`<table><tbody>${m.row}</tbody></table>`).querySelector("tr");
      if (fresh) {
        row.replaceWith(fresh);
        fresh.classList.add("flash-row");
        setTimeout(() => fresh.classList.remove("flash-row"), 800);
      }
    }
    if (m.status === "running" && !latest.has(m.rollout_id) && !ended.has(m.rollout_id)) {
      latest.set(m.rollout_id, { step: null });
      scheduleLatest();
    }
    if (!["queued", "running"].includes(m.status)) {
      ended.add(m.rollout_id);
      if (latest.delete(m.rollout_id)) scheduleLatest();
      if (RETURN_STATUSES.includes(m.status) && !points.some((p) => p.id === m.rollout_id)) {
        const n = points.length ? points[points.length - 1].n + 1 : 1;
        points.push({ id: m.rollout_id, status: m.status, total_reward: m.total_reward, verifier_reward: m.verifier_reward, task_id: m.task_id, seed: m.seed, n });
        // As the server does: only the latest points are shown (runs/figures.py POINTS_SHOWN).
        const shown = Number(document.getElementById("run-chart")?.dataset.shown || 400);
        if (points.length > shown) points.splice(0, points.length - shown);
        redraw();
      }
    }
  }

  function applySteps(m) {
    const last = m.steps[m.steps.length - 1];
    if (!last) return;
    if (!ended.has(m.rollout_id)) latest.set(m.rollout_id, { step: last });
    const cell = document.querySelector(`#rollout-${m.rollout_id} [data-k="steps"]`);
    if (cell) cell.textContent = String(last.index + 1);
    scheduleLatest();
  }

  // The first image-like stored array of an observation ({"__ndarray__": {dtype: "uint8", url: "….png"}}).
  function firstImage(v) {
    if (!v || typeof v !== "object") return null;
    const a = v.__ndarray__;
    if (a && typeof a === "object" && a.dtype === "uint8" && typeof a.url === "string" && a.url.endsWith(".png")) return a;
    for (const x of Array.isArray(v) ? v : Object.values(v)) { const found = firstImage(x); if (found) return found; }
    return null;
  }

  let latestFrame = null;
  function scheduleLatest() { if (!latestFrame) latestFrame = setTimeout(() => { latestFrame = null; renderLatest(); }, 150); }
  function renderLatest() {
    const list = document.getElementById("live-steps-list");
    if (!list) return;
    const running = [...latest.entries()].sort((a, b) => a[0] - b[0]);
    if (!running.length) { list.replaceChildren(el("p", { class: "muted small", text: "No rollout is running right now." })); return; }
    const items = running.slice(0, RUNNING_SHOWN).map(([id, { step }]) => {
      if (!step) return el("a", { class: "live-item", href: `${rolloutUrl}${id}/` }, el("div", {}, el("strong", { text: `#${id}` }), " ", el("span", { class: "muted small", text: "started, no step yet" })));
      const item = el("a", { class: "live-item", href: `${rolloutUrl}${id}/` },
        el("div", {}, el("strong", { text: `#${id}` }), " ", el("span", { class: "muted small", text: `step ${step.index} · reward ${fmt(step.reward)}` })),
        el("div", { class: "small" }, el("span", { class: "muted", text: "action" }), " ", el("code", { text: short(step.action, 80) })),
        el("div", { class: "small" }, el("span", { class: "muted", text: "obs" }), " ", el("code", { text: short(step.observation) })));
      if (step.artifact_url) item.append(el("img", { class: "live-shot", src: step.artifact_url, alt: `screenshot of step ${step.index}` }));
      const frame = firstImage(step.observation);
      if (frame) item.append(el("img", { class: "live-shot pixelated", src: frame.url, alt: `observation of step ${step.index}` }));
      return item;
    });
    if (running.length > RUNNING_SHOWN) items.push(el("p", { class: "muted small", text: `and ${running.length - RUNNING_SHOWN} more running` }));
    list.replaceChildren(...items);
  }

  // Reconcile: re-read the page's live parts from the server; events that arrive meanwhile are
  // applied after the swap (they are newer than or as new as what the read saw).
  let reconciling = null;
  const held = [];
  async function reconcile() {
    if (reconciling) return reconciling;
    reconciling = (async () => {
      const url = new URL(location.href);
      url.searchParams.set("partial", "body");
      try {
        const fresh = await window.studioRefresh(url.toString(), ["summary-stats", "by-difficulty", "rollout-rows", "agreement"]);
        readRunning(fresh);
        const data = fresh.querySelector("#run-points");
        if (data) { points = unpack(JSON.parse(data.textContent)); redraw(); }
        const more = fresh.querySelector("#run-analytics");
        if (more) { analytics = JSON.parse(more.textContent); drawAnalytics(); }
        const stats = fresh.querySelector("#summary-stats");
        if (stats) setRunStatus(stats.dataset.status, stats.dataset.pending);
      } catch (err) {
        console.warn("reconcile failed", err);
      } finally {
        reconciling = null;
        held.splice(0).forEach(handle);
      }
    })();
    return reconciling;
  }

  function handle(m) {
    if (reconciling) { held.push(m); return; }
    if (m.type === "run") applySummary(m);
    else if (m.type === "status") applyStatus(m);
    else if (m.type === "steps") applySteps(m);
  }

  let socket = null, retry = 500, done = body.dataset.live !== "1", poller = null;
  function finish() {
    if (done) return;
    done = true;
    streamState(true);
    if (socket) socket.close();
    if (poller) { clearInterval(poller); poller = null; }
    if (settling) { clearInterval(settling); settling = null; }
    const panel = document.getElementById("live-steps");
    if (panel) panel.hidden = true;
    reconcile();
  }
  // While the socket is down (the server lost its Redis, or the network) the page says so, re-reads
  // itself every few seconds and keeps reconnecting.
  function streamState(up) {
    const note = document.getElementById("run-stream");
    if (note) note.hidden = up || done;
  }
  function connect() {
    if (done) return;
    const proto = location.protocol === "https:" ? "wss" : "ws";
    // batch=1: events that arrive together come as one message (cheaper for the server with many viewers).
    socket = new WebSocket(`${proto}://${location.host}${body.dataset.wsPath}?batch=1`);
    socket.onopen = () => {
      retry = 500;
      streamState(true);
      if (poller) { clearInterval(poller); poller = null; }
      reconcile();
    };
    socket.onmessage = (e) => {
      const m = JSON.parse(e.data);
      if (m.type === "stream") streamState(false);
      else if (m.type === "batch") m.messages.forEach(handle);
      else handle(m);
    };
    socket.onclose = () => {
      if (done) return;
      streamState(false);
      // While the socket is down, re-read the page every few seconds, and keep trying to reconnect.
      if (!poller) poller = setInterval(reconcile, 3000);
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 10000);
    };
  }
  buildChart();
  buildAnalytics();
  readRunning(document);
  connect();
})();
