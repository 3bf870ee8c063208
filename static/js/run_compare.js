// Run comparison: success rate per task, one bar per run (data from the page, drawn by Chart.js).
(function () {
  const data = JSON.parse(document.getElementById("compare-data").textContent);
  const canvas = document.getElementById("compare-chart");
  if (!window.Chart || !canvas) return;
  const COLORS = ["#2f5bea", "#1f8a4c", "#b7791f", "#c2362b", "#6b46c1", "#0f766e"];
  new Chart(canvas, {
    type: "bar",
    data: {
      labels: data.tasks,
      datasets: data.runs.map((name, i) => ({ label: name, data: data.success.map((row) => row[i]), backgroundColor: COLORS[i % COLORS.length] })),
    },
    options: {
      animation: false, maintainAspectRatio: false,
      plugins: { legend: { position: "bottom" }, tooltip: { callbacks: { label: (c) => `${c.dataset.label}: ${c.raw === null ? "not run" : c.raw + "%"}` } } },
      scales: { y: { min: 0, max: 100, ticks: { callback: (v) => `${v}%` } } },
    },
  });
})();
