// The deployment page: latency (median time to first byte and duration) and throughput (completion tokens/s)
// charts fed by metrics.json, refreshed while the deployment is live; the replicas' log box kept at its end
// across the live section's swaps (htmx, #deployment-live), unless its reader has scrolled up.
(() => {
  const POLL_MS = 10000;
  const LOG = "deployment-log";

  let logPinned = true;
  const atEnd = (box) => box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
  const toEnd = () => {
    const box = document.getElementById(LOG);
    if (box) box.scrollTop = box.scrollHeight;
  };
  document.addEventListener("htmx:beforeSwap", (event) => {
    const box = document.getElementById(LOG);
    if (box && event.detail.target?.id === "deployment-live") logPinned = atEnd(box);
  });
  document.addEventListener("htmx:afterSettle", (event) => {
    if (event.detail.target?.id === "deployment-live" && logPinned) toEnd();
  });

  const css = getComputedStyle(document.documentElement);
  const color = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
  // Django's JavaScript catalog (/i18n/catalog.js, loaded by base.html); English as it is without it.
  const gettext = window.gettext || ((text) => text);
  // Times in the person's own zone (the page's data-time-zone, from their account), in the page's language.
  const language = document.documentElement.lang || undefined;
  const zoneOf = () => {
    const wanted = document.querySelector("[data-time-zone]")?.dataset.timeZone;
    try {
      return wanted ? new Intl.DateTimeFormat(undefined, { timeZone: wanted }).resolvedOptions().timeZone : undefined;
    } catch {
      return undefined; // a zone this browser does not know: its own
    }
  };
  const timeZone = zoneOf();
  const clock = new Intl.DateTimeFormat(language, { timeZone, hour: "2-digit", minute: "2-digit", hourCycle: "h23" });
  // The tooltip's time carries its offset ("GMT+8"); a browser without "shortOffset" names the zone its own way.
  const stampOptions = { timeZone, month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23" };
  let stamp;
  try {
    stamp = new Intl.DateTimeFormat(language, { ...stampOptions, timeZoneName: "shortOffset" });
  } catch {
    stamp = new Intl.DateTimeFormat(language, { ...stampOptions, timeZoneName: "short" });
  }
  const compact = new Intl.NumberFormat(language, { notation: "compact", maximumSignificantDigits: 3 });

  function line(label, stroke, dashed = false) {
    return { label, data: [], borderColor: stroke, backgroundColor: stroke, borderWidth: 2, pointRadius: 2, tension: 0.15, spanGaps: true, borderDash: dashed ? [5, 4] : [] };
  }

  function chart(canvas, datasets, formatY) {
    return new window.Chart(canvas, {
      type: "line",
      data: { datasets },
      options: {
        parsing: false,
        animation: false,
        maintainAspectRatio: false,
        interaction: { mode: "nearest", axis: "x", intersect: false },
        scales: {
          x: { type: "linear", ticks: { callback: (v) => clock.format(v), maxTicksLimit: 8 }, grid: { display: false } },
          y: { beginAtZero: true, grace: "5%", ticks: { callback: formatY } },
        },
        plugins: {
          legend: { position: "bottom", labels: { boxWidth: 12 } },
          tooltip: { callbacks: { title: (items) => stamp.format(items[0].parsed.x) } },
        },
      },
    });
  }

  const series = (points, key) => points.filter((p) => p[key] !== null).map((p) => ({ x: p.at, y: p[key] }));

  function start() {
    const root = document.querySelector("[data-metrics-url]");
    if (!root || !window.Chart) return;
    const latency = chart(
      document.getElementById("latency-chart"),
      [line(gettext("time to first byte"), color("--accent", "#4f46e5")), line(gettext("duration"), color("--warn", "#b45309"), true)],
      (v) => `${compact.format(v)} ms`,
    );
    const throughput = chart(
      document.getElementById("throughput-chart"),
      [line(gettext("served, all requests"), color("--ok", "#15803d")), line(gettext("per request, median"), color("--accent", "#4f46e5"), true)],
      (v) => compact.format(v),
    );

    async function refresh() {
      const response = await fetch(root.dataset.metricsUrl, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (!response.ok) return;
      const body = await response.json();
      const span = { min: Date.parse(body.since) - body.bucket_s * 1000, max: Date.parse(body.now) };
      latency.data.datasets[0].data = series(body.points, "first_byte_p50_ms");
      latency.data.datasets[1].data = series(body.points, "duration_p50_ms");
      throughput.data.datasets[0].data = series(body.points, "tokens_per_s");
      throughput.data.datasets[1].data = series(body.points, "request_tokens_per_s_p50");
      for (const each of [latency, throughput]) {
        Object.assign(each.options.scales.x, span);
        each.update("none");
      }
      if (body.points.length) root.classList.add("has-data");
    }

    async function poll() {
      try {
        await refresh();
      } catch {
        // a network blip: the next tick tries again
      }
      if (root.hasAttribute("data-live")) window.setTimeout(poll, POLL_MS);
    }
    poll();
  }

  document.addEventListener("DOMContentLoaded", toEnd);
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
