// The job page: loss and tokens/s charts fed by metrics.json, a followed log that stays scrolled to its
// end, and collapsed sections that stay open across the live swaps. The rest of the page is live through
// htmx (#job-poller; the logs through #job-log-follower).
(() => {
  const POLL_MS = 2000;
  const CATCH_UP_STEPS = 100;

  // Logs: new lines are appended to the box; keep it at its end, unless the reader has scrolled up.
  const LOGS = "job-log-lines";
  let logsPinned = true;
  const atEnd = (box) => box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
  const toEnd = (box) => {
    if (box) box.scrollTop = box.scrollHeight;
  };

  document.addEventListener("htmx:beforeSwap", (event) => {
    if (event.detail.target?.id === LOGS) logsPinned = atEnd(event.detail.target);
  });
  document.addEventListener("htmx:afterSwap", (event) => {
    if (event.detail.target?.id === LOGS && logsPinned) toEnd(event.detail.target);
  });
  // A new page of the log (paging, a search) opens at its end, where the newest of its lines are.
  document.addEventListener("htmx:load", (event) => {
    const elt = event.detail.elt;
    if (elt.id === "job-log-view") toEnd(elt.querySelector(`#${LOGS}`));
  });
  document.addEventListener("DOMContentLoaded", () => toEnd(document.getElementById(LOGS)));

  // A live section replaced out of band keeps the <details data-keep-open> its reader opened (checkpoints).
  document.addEventListener("htmx:oobBeforeSwap", (event) => {
    const fresh = event.detail.fragment;
    if (!fresh?.querySelectorAll || !event.target.querySelectorAll) return;
    for (const old of event.target.querySelectorAll("details[data-keep-open]")) {
      const twin = fresh.querySelector(`details[data-keep-open="${CSS.escape(old.dataset.keepOpen)}"]`);
      if (twin) twin.open = old.open;
    }
  });

  // Charts: their words come from Django's JavaScript catalog (djangojs), loaded by base.html before this script.
  const gettext = window.gettext || ((text) => text);
  const interpolate = window.interpolate || ((text, values) => text.replace(/%\(\w+\)s/g, (key) => values[key.slice(2, -2)]));
  const css = getComputedStyle(document.documentElement);
  const color = (name, fallback) => css.getPropertyValue(name).trim() || fallback;

  function lineChart(canvas, label, stroke, formatY, maxStep) {
    return new window.Chart(canvas, {
      type: "line",
      data: { datasets: [{ label, data: [], borderColor: stroke, backgroundColor: stroke, borderWidth: 2, pointRadius: 0, tension: 0.15 }] },
      options: {
        parsing: false,
        normalized: true,
        animation: false,
        maintainAspectRatio: false,
        interaction: { mode: "nearest", axis: "x", intersect: false },
        scales: {
          x: { type: "linear", min: 0, max: maxStep, title: { display: true, text: gettext("step") }, ticks: { precision: 0 }, grid: { display: false } },
          y: { beginAtZero: true, ticks: { callback: formatY }, grace: "5%" }, // zero stays the floor: no "-2K tokens/s"
        },
        plugins: {
          legend: { display: false },
          decimation: { enabled: true, algorithm: "lttb", samples: 600 },
          tooltip: { callbacks: { title: (items) => interpolate(gettext("step %(step)s"), { step: items[0].parsed.x }, true) } },
        },
      },
    });
  }

  const compact = new Intl.NumberFormat(undefined, { notation: "compact", maximumSignificantDigits: 3 });

  // A resumed job (after a migration) reports some steps again: the newer run replaces the tail.
  function append(points, step, value) {
    while (points.length && points[points.length - 1].x >= step) points.pop();
    points.push({ x: step, y: value });
  }

  function start() {
    const root = document.querySelector("[data-metrics-url]");
    if (!root || !window.Chart) return;
    const maxStep = Number(root.dataset.maxSteps) || undefined;
    const loss = lineChart(document.getElementById("loss-chart"), gettext("loss"), color("--accent", "#4f46e5"), (v) => Number(v).toFixed(2), maxStep);
    const speed = lineChart(document.getElementById("speed-chart"), gettext("tokens/s"), color("--ok", "#15803d"), (v) => compact.format(v), maxStep);
    // Held-out loss: a second line of points on the loss chart, sent whole with every answer.
    loss.data.datasets.push({
      label: gettext("held-out loss"),
      data: [],
      borderColor: color("--warn", "#b45309"),
      backgroundColor: color("--warn", "#b45309"),
      borderWidth: 2,
      pointRadius: 3,
      tension: 0,
    });
    loss.options.plugins.legend.display = false;
    const lossPoints = [];
    const speedPoints = [];
    let since = 0;

    const live = () => document.querySelector("#job-poller[data-live]") !== null;

    async function fetchSteps() {
      const response = await fetch(`${root.dataset.metricsUrl}?since_step=${since}`, {
        headers: { Accept: "application/json" },
        credentials: "same-origin",
      });
      if (!response.ok) return;
      const body = await response.json();
      for (const entry of body.steps) {
        append(lossPoints, entry.step, entry.loss);
        append(speedPoints, entry.step, entry.tokens_per_s);
        since = Math.max(since, entry.step);
      }
      const evals = (body.evals || []).map((entry) => ({ x: entry.step, y: entry.eval_loss }));
      if (evals.length !== loss.data.datasets[1].data.length) {
        loss.data.datasets[1].data = evals;
        loss.update("none");
        root.classList.add("has-data");
      }
      if (body.steps.length) {
        loss.data.datasets[0].data = lossPoints;
        speed.data.datasets[0].data = speedPoints;
        loss.update("none");
        speed.update("none");
        root.classList.add("has-data");
      }
      return body.steps.length;
    }

    // Poll while the job runs; catch up at once on a long history (the endpoint sends it in chunks);
    // once the job has ended, fetch until nothing new is left, then stop.
    async function poll() {
      const wasLive = live();
      let got = 0;
      try {
        got = await fetchSteps();
      } catch {
        // A network blip: try again on the next tick.
      }
      const catchingUp = got > CATCH_UP_STEPS || (got > 0 && !wasLive);
      if (wasLive || got) window.setTimeout(poll, catchingUp ? 0 : POLL_MS);
    }
    poll();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
