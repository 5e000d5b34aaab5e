// Spot price history: one step line per chip type, from the JSON at [data-spot-history].
// A price holds from its clearing until the next one, so each line steps at the clearings and runs on to now.
(() => {
  const REFRESH_MS = 15000;
  const PALETTE = ["#4f46e5", "#15803d", "#b45309", "#be185d", "#0e7490", "#7c3aed", "#b42318", "#475569"];

  const clock = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit" });
  const stamp = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit" });

  function datasets(body) {
    const now = Date.parse(body.now);
    return body.series.map((series, index) => {
      const points = series.points.map(([at, price]) => ({ x: at, y: Number(price) }));
      const last = points[points.length - 1];
      if (last && last.x < now) points.push({ x: now, y: last.y });
      const stroke = PALETTE[index % PALETTE.length];
      return { label: series.name, data: points, stepped: true, borderColor: stroke, backgroundColor: stroke, borderWidth: 2, pointRadius: 0, pointHitRadius: 6 };
    });
  }

  function draw(canvas, body) {
    const money = (value) => `${body.currency}${Number(value).toFixed(2)}`;
    return new window.Chart(canvas, {
      type: "line",
      data: { datasets: datasets(body) },
      options: {
        parsing: false,
        animation: false,
        maintainAspectRatio: false,
        interaction: { mode: "nearest", axis: "x", intersect: false },
        scales: {
          x: { type: "linear", min: Date.parse(body.since), max: Date.parse(body.now), ticks: { callback: (v) => clock.format(v), maxTicksLimit: 9 }, grid: { display: false } },
          y: { beginAtZero: true, grace: "10%", ticks: { callback: money } },
        },
        plugins: {
          legend: { position: "bottom", labels: { boxWidth: 12 } },
          tooltip: {
            callbacks: {
              title: (items) => stamp.format(items[0].parsed.x),
              label: (item) => `${item.dataset.label}: ${money(item.parsed.y)}/h`,
            },
          },
        },
      },
    });
  }

  async function load(root) {
    const response = await fetch(root.dataset.spotHistory, { headers: { Accept: "application/json" }, credentials: "same-origin" });
    if (!response.ok) return null;
    return response.json();
  }

  async function start(root) {
    const canvas = root.querySelector("canvas");
    if (!canvas || !window.Chart) return;
    let chart = null;
    async function refresh() {
      let body = null;
      try {
        body = await load(root);
      } catch {
        // A network blip: the next refresh tries again.
      }
      if (body && body.series.length) {
        if (chart) {
          chart.data.datasets = datasets(body);
          chart.options.scales.x.min = Date.parse(body.since);
          chart.options.scales.x.max = Date.parse(body.now);
          chart.update("none");
        } else {
          chart = draw(canvas, body);
        }
        root.classList.add("has-data");
        root.dataset.drawn = "true";
      }
      window.setTimeout(refresh, REFRESH_MS);
    }
    refresh();
  }

  function startAll() {
    document.querySelectorAll("[data-spot-history]").forEach(start);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", startAll);
  else startAll();
})();
