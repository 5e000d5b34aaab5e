// Spot price history: one step line per chip type, from the JSON at [data-spot-history].
// A price holds from its clearing until the next one, so each line steps at the clearings and runs on to now.
// When one spike would squeeze every other line flat, the server names a ceiling (`axis_max`, market/chart.py):
// the axis stops there and a price above it is drawn at the edge as a triangle, its real value in the tooltip.
(() => {
  const REFRESH_MS = 15000;
  const PALETTE = ["#4f46e5", "#15803d", "#b45309", "#be185d", "#0e7490", "#7c3aed", "#b42318", "#475569"];

  // Times in the person's own zone (the page names it: data-time-zone, their saved zone or Asia/Shanghai), not the
  // browser's, so the chart agrees with every other time on the page; the axis says which zone it is.
  const locale = document.documentElement.lang || undefined;
  function clocks(zone, plain = false) {
    const options = zone ? { timeZone: zone } : {};
    const offset = plain ? {} : { timeZoneName: "shortOffset" };
    try {
      return {
        clock: new Intl.DateTimeFormat(locale, { ...options, hour: "2-digit", minute: "2-digit", hourCycle: "h23" }),
        stamp: new Intl.DateTimeFormat(locale, {
          ...options, ...offset, month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", hourCycle: "h23",
        }),
        zone: zone || Intl.DateTimeFormat().resolvedOptions().timeZone,
      };
    } catch (error) {
      // A zone (or an option) this browser doesn't know: its own zone, plainly.
      if (zone || !plain) return clocks(null, true);
      throw error;
    }
  }

  const ceilingOf = (body) => (body.axis_max === null || body.axis_max === undefined ? null : Number(body.axis_max));
  const above = (point) => point.real !== undefined && !point.tail;

  function datasets(body) {
    const now = Date.parse(body.now);
    const ceiling = ceilingOf(body);
    return body.series.map((series, index) => {
      const points = series.points.map(([at, price]) => {
        const y = Number(price);
        return ceiling !== null && y > ceiling ? { x: at, y: ceiling, real: y } : { x: at, y };
      });
      const last = points[points.length - 1];
      if (last && last.x < now) points.push({ ...last, x: now, tail: true });
      const stroke = PALETTE[index % PALETTE.length];
      return {
        label: series.name, data: points, stepped: true, borderColor: stroke, backgroundColor: stroke, borderWidth: 2,
        pointStyle: "triangle", pointRadius: (ctx) => (ctx.raw && above(ctx.raw) ? 6 : 0), pointHitRadius: 6,
        clip: 8,  // the triangle at the top edge is drawn whole
      };
    });
  }

  // Under the chart: what the triangles stand for.
  function explainCeiling(root, body) {
    const note = root.querySelector(".chart-note");
    const ceiling = ceilingOf(body);
    if (ceiling === null) delete root.dataset.axisMax;
    else root.dataset.axisMax = String(ceiling);
    if (!note) return;
    const highest = Math.max(...body.series.flatMap((series) => series.points.map(([, price]) => Number(price))));
    note.textContent = ceiling === null ? ""
      : interpolate(gettext("▲ A spike above %(ceiling)s, up to %(highest)s/h, is drawn at the top edge; hover it for the price."), {
        ceiling: `${body.currency}${ceiling.toFixed(2)}`, highest: `${body.currency}${highest.toFixed(2)}`,
      }, true);
    note.hidden = ceiling === null;
  }

  function draw(canvas, body, time) {
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
          x: { type: "linear", min: Date.parse(body.since), max: Date.parse(body.now), ticks: { callback: (v) => time.clock.format(v), maxTicksLimit: 9 }, grid: { display: false },
            title: { display: true, text: interpolate(gettext("Time (%(zone)s)"), { zone: time.zone }, true) } },
          y: { beginAtZero: true, grace: ceilingOf(body) === null ? "10%" : 0, max: ceilingOf(body) ?? undefined, ticks: { callback: money } },
        },
        plugins: {
          legend: { position: "bottom", labels: { boxWidth: 12 } },
          tooltip: {
            callbacks: {
              title: (items) => time.stamp.format(items[0].parsed.x),
              label: (item) => (above(item.raw)
                ? interpolate(gettext("%(chip)s: %(price)s/h (above the scale)"), { chip: item.dataset.label, price: money(item.raw.real) }, true)
                : `${item.dataset.label}: ${money(item.raw.real ?? item.parsed.y)}/h`),
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
    const time = clocks(root.dataset.timeZone);
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
          chart.options.scales.y.max = ceilingOf(body) ?? undefined;
          chart.options.scales.y.grace = ceilingOf(body) === null ? "10%" : 0;
          chart.update("none");
        } else {
          chart = draw(canvas, body, time);
        }
        explainCeiling(root, body);
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

// Bid hints: beside every bid input, the chip type's prices now and, for the bid as typed, how long it would
// have run uninterrupted (GET /api/v1/market/advice/), with a warning when it is above the on-demand price.
(() => {
  const DELAY_MS = 300;

  function paragraph(className, text, testid) {
    const p = document.createElement("p");
    p.className = className;
    p.textContent = text;
    if (testid) p.dataset.testid = testid;
    return p;
  }

  function render(hint, body, currency, chipName) {
    const money = (value) => (value === null || value === undefined ? "—" : `${currency}${value}`);
    const nodes = [
      paragraph("bid-prices", interpolate(gettext("%(chip)s: spot now %(spot)s · floor %(floor)s · on-demand %(on_demand)s per chip-hour"), {
        chip: chipName, spot: money(body.spot_price), floor: money(body.floor), on_demand: money(body.on_demand_price),
      }, true)),
    ];
    if (body.bid !== null) {
      nodes.push(paragraph("bid-advice", interpolate(gettext("At %(bid)s: %(summary)s"), { bid: money(body.bid), summary: body.summary }, true), "bid-advice"));
    }
    body.warnings.forEach((warning) => {
      const p = paragraph("bid-warning", warning, "bid-warning");
      p.setAttribute("role", "alert");
      nodes.push(p);
    });
    hint.replaceChildren(...nodes);
  }

  function wire(hint, url, currency) {
    const form = hint.closest("form");
    const select = form.querySelector("select[name=chip]");
    const input = form.querySelector("input[name=max_price]");
    let timer = null;
    let asked = 0;
    async function update() {
      const chip = hint.dataset.chip || (select && select.value);
      if (!chip) return;
      const chipName = select ? select.selectedOptions[0].textContent : hint.closest("tr").querySelector(".chip-name").textContent;
      const params = new URLSearchParams({ chip });
      const bid = input.value.trim();
      if (bid && Number(bid) > 0) params.set("bid", bid);
      const mine = ++asked;
      try {
        const response = await fetch(`${url}?${params}`, { headers: { Accept: "application/json" } });
        if (mine !== asked || !response.ok) return;
        render(hint, await response.json(), currency, chipName.trim());
        hint.dataset.ready = "true";
      } catch {
        // A network blip: the next keystroke asks again.
      }
    }
    const later = () => {
      window.clearTimeout(timer);
      timer = window.setTimeout(update, DELAY_MS);
    };
    input.addEventListener("input", later);
    if (select) select.addEventListener("change", later);
    update();
  }

  function curveChart(root, currency) {
    const data = document.getElementById("advice-curves");
    const canvas = root.querySelector("canvas");
    if (!data || !canvas || !window.Chart) return;
    const curves = JSON.parse(data.textContent);
    if (!curves.length) return;
    const palette = ["#4f46e5", "#15803d", "#b45309", "#be185d", "#0e7490", "#7c3aed", "#b42318", "#475569"];
    const datasets = curves.map((curve, index) => ({
      label: curve.name,
      data: curve.points.map(([bid, hours]) => ({ x: Number(bid), y: hours })),
      stepped: true,
      borderColor: palette[index % palette.length],
      backgroundColor: palette[index % palette.length],
      borderWidth: 2,
      pointRadius: 2,
    }));
    new window.Chart(canvas, {
      type: "line",
      data: { datasets },
      options: {
        parsing: false,
        animation: false,
        maintainAspectRatio: false,
        interaction: { mode: "nearest", intersect: false },
        scales: {
          x: { type: "linear", title: { display: true, text: interpolate(gettext("Bid (%(currency)s per chip-hour)"), { currency }, true) }, ticks: { callback: (v) => `${currency}${Number(v).toFixed(2)}` } },
          y: { beginAtZero: true, title: { display: true, text: gettext("Expected uninterrupted hours") } },
        },
        plugins: {
          legend: { position: "bottom", labels: { boxWidth: 12 } },
          tooltip: { callbacks: { label: (item) => interpolate(gettext("%(chip)s: %(hours)s h at %(bid)s"), {
            chip: item.dataset.label, hours: item.parsed.y.toFixed(1), bid: `${currency}${item.parsed.x.toFixed(2)}`,
          }, true) } },
        },
      },
    });
    root.classList.add("has-data");
    root.dataset.drawn = "true";
  }

  function startAll() {
    const page = document.querySelector("[data-advice-url]");
    if (!page) return;
    const currency = page.dataset.currency || "";
    document.querySelectorAll("[data-bid-hint]").forEach((hint) => wire(hint, page.dataset.adviceUrl, currency));
    const chart = document.querySelector(".advice-chart");
    if (chart) curveChart(chart, currency);
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", startAll);
  else startAll();
})();
