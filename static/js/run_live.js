// Live run dashboard: the run's websocket pushes rollout status changes, steps and summaries;
// the page updates in place (summary, chart, rollouts table, latest steps) without reloading.
(function () {
  const body = document.getElementById("run-body");
  if (!body) return;
  const rolloutUrl = body.dataset.rolloutUrl;
  const points = JSON.parse(document.getElementById("run-points").textContent);
  const FINISHED = ["succeeded", "failed", "errored", "timed_out", "cancelled"];
  const COLORS = { succeeded: "#1f8a4c", failed: "#c2362b", errored: "#b7791f", timed_out: "#b7791f", cancelled: "#6b7385" };
  const seen = new Set(points.map((p) => p.id));
  const latest = new Map(); // rollout id -> {step, at}
  let chart = null;

  const fmt = (x, d = 3) => (x === null || x === undefined) ? "—" : Number(x).toFixed(d).replace(/\.?0+$/, "") || "0";
  const esc = (s) => String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const short = (v, n = 140) => { const t = typeof v === "string" ? v : JSON.stringify(v); return t.length > n ? t.slice(0, n) + "…" : t; };
  const rewardOf = (p) => (p.verifier_reward !== null && p.verifier_reward !== undefined ? p.verifier_reward : p.total_reward);

  function buildChart() {
    const canvas = document.getElementById("run-chart");
    if (!window.Chart || !canvas) return;
    chart = new Chart(canvas, {
      type: "scatter",
      data: { datasets: [{ label: "reward", data: [], pointRadius: 3, pointBackgroundColor: [] }] },
      options: {
        animation: false, maintainAspectRatio: false, parsing: false,
        plugins: { legend: { display: false }, tooltip: { callbacks: { label: (c) => {
          const p = points[c.dataIndex]; return `#${p.id} ${p.task_id} seed ${p.seed}: ${fmt(rewardOf(p))} (${p.status})`;
        } } } },
        scales: { x: { title: { display: true, text: "finished rollouts, in order" }, ticks: { precision: 0 } }, y: { title: { display: true, text: "reward" } } },
        onClick: (evt, els) => { if (els.length) location.href = rolloutUrl + points[els[0].index].id + "/"; },
      },
    });
    redraw();
  }
  function redraw() {
    if (!chart) return;
    const ds = chart.data.datasets[0];
    ds.data = points.map((p, i) => ({ x: i + 1, y: rewardOf(p) }));
    ds.pointBackgroundColor = points.map((p) => COLORS[p.status] || "#2f5bea");
    chart.update("none");
  }

  function applySummary(s) {
    const root = document.getElementById("summary-stats");
    if (!root || !s) return;
    const k = (name) => root.querySelector(`[data-k="${name}"]`);
    k("progress").textContent = `${s.done}/${s.total}`;
    k("bar").style.width = `${s.total ? Math.round((100 * s.done) / s.total) : 0}%`;
    k("success").textContent = s.success_rate === null ? "—" : `${Math.round(100 * s.success_rate)}%`;
    k("reward").textContent = fmt(s.mean_reward);
    k("steps").textContent = s.mean_steps === null ? "—" : fmt(s.mean_steps, 1);
    k("counts").innerHTML = Object.entries(s.counts).filter(([, n]) => n).map(([st, n]) => `<span class="badge ${st}">${st} ${n}</span>`).join(" ");
    const status = document.getElementById("run-status");
    if (status && s.status) { status.textContent = s.status; status.className = `badge ${s.status}`; }
    if (s.status && !["queued", "running"].includes(s.status)) finish();
  }

  function applyStatus(m) {
    const row = document.getElementById(`rollout-${m.rollout_id}`);
    if (row) {
      const cells = row.children;
      cells[3].innerHTML = `<span class="badge ${m.status}">${m.status}</span>`;
      cells[4].textContent = fmt(m.total_reward);
      cells[5].textContent = m.verifier_reward === null || m.verifier_reward === undefined ? "—" : fmt(m.verifier_reward, 2);
      cells[6].textContent = m.step_count;
      cells[8].innerHTML = m.error ? `<span class="danger" title="${esc(m.error)}">${esc(short(m.error, 90))}</span>` : "";
      row.classList.add("flash-row");
      setTimeout(() => row.classList.remove("flash-row"), 800);
    }
    if (FINISHED.includes(m.status)) {
      // Keep a finished rollout's last step on show briefly, so fast rollouts are seen at all.
      setTimeout(() => { latest.delete(m.rollout_id); renderLatest(); }, 2000);
      if (!seen.has(m.rollout_id)) {
        seen.add(m.rollout_id);
        points.push({ id: m.rollout_id, status: m.status, total_reward: m.total_reward, verifier_reward: m.verifier_reward, task_id: row ? row.children[1].textContent : "", seed: row ? row.children[2].textContent : "" });
        redraw();
      }
    }
  }

  function applySteps(m) {
    const last = m.steps[m.steps.length - 1];
    if (!last) return;
    latest.set(m.rollout_id, { step: last, at: Date.now() });
    const row = document.getElementById(`rollout-${m.rollout_id}`);
    if (row) {
      row.children[6].textContent = last.index + 1;
      if (!row.querySelector(".badge.running")) row.children[3].innerHTML = '<span class="badge running">running</span>';
    }
    scheduleLatest();
  }

  let latestFrame = null;
  function scheduleLatest() { if (!latestFrame) latestFrame = setTimeout(() => { latestFrame = null; renderLatest(); }, 150); }
  function renderLatest() {
    const list = document.getElementById("live-steps-list");
    if (!list) return;
    const newest = [...latest.entries()].sort((a, b) => b[1].at - a[1].at).slice(0, 6);
    list.innerHTML = newest.length ? newest.map(([id, { step }]) => `
      <a class="live-item" href="${rolloutUrl}${id}/">
        <div><strong>#${id}</strong> <span class="muted small">step ${step.index} · reward ${fmt(step.reward)}</span></div>
        <div class="small"><span class="muted">action</span> <code>${esc(short(step.action, 80))}</code></div>
        <div class="small"><span class="muted">obs</span> <code>${esc(short(step.observation))}</code></div>
        ${step.artifact_url ? `<img class="live-shot" src="${esc(step.artifact_url)}" alt="screenshot of step ${step.index}">` : ""}
      </a>`).join("") : '<p class="muted small">No rollout is running right now.</p>';
  }

  let socket = null, retry = 500, done = body.dataset.live !== "1", poller = null;
  function finish() {
    if (done) return;
    done = true;
    if (socket) socket.close();
    const panel = document.getElementById("live-steps");
    if (panel) panel.hidden = true;
  }
  function connect() {
    if (done) return;
    const proto = location.protocol === "https:" ? "wss" : "ws";
    socket = new WebSocket(`${proto}://${location.host}${body.dataset.wsPath}`);
    socket.onopen = () => { retry = 500; if (poller) { clearInterval(poller); poller = null; } };
    socket.onmessage = (e) => {
      const m = JSON.parse(e.data);
      if (m.type === "run") applySummary(m.summary);
      else if (m.type === "status") applyStatus(m);
      else if (m.type === "steps") applySteps(m);
    };
    socket.onclose = () => {
      if (done) return;
      // Fall back to polling the page while the socket is down, and keep trying to reconnect.
      if (!poller && window.htmx) poller = setInterval(() => {
        htmx.ajax("GET", location.pathname + location.search, { target: "#rollouts", swap: "outerHTML", select: "#rollouts" });
        htmx.ajax("GET", location.pathname + location.search, { target: "#summary-stats", swap: "outerHTML", select: "#summary-stats" });
      }, 3000);
      setTimeout(connect, retry);
      retry = Math.min(retry * 2, 10000);
    };
  }
  buildChart();
  connect();
})();
