// The follower's live view: polls ../v1/ui/state (swa_es/service/ui.py says what it holds)
// every POLL_MS, fills the page and keeps HISTORY_S of history for the charts (uPlot).
"use strict";

(function () {
  const POLL_MS = 1000;
  const HISTORY_S = 300;
  const WINDOW_S = 5; // rate and latency quantiles are taken over about this many seconds
  const STATE_URL = "../v1/ui/state";

  const token = new URLSearchParams(location.hash.slice(1)).get("token");
  const headers = token ? { Authorization: "Bearer " + token } : {};

  const $ = (id) => document.getElementById(id);
  const samples = []; // {t, count, buckets, bounds}: the routing API's counters at each poll
  const history = { t: [], rate: [], p50: [], p99: [], lagRecords: [], lagS: [] };
  let charts = null;

  // --- formatting -----------------------------------------------------------------------

  function fmtInt(n) {
    return n === null || n === undefined ? "-" : Number(n).toLocaleString("en-US");
  }

  function fmtSeconds(s) {
    if (s === null || s === undefined) return "-";
    if (s < 1) return (s * 1000).toFixed(0) + " ms";
    if (s < 120) return s.toFixed(1) + " s";
    if (s < 7200) return (s / 60).toFixed(1) + " min";
    return (s / 3600).toFixed(1) + " h";
  }

  function fmtMs(s) {
    if (s === null || s === undefined) return "-";
    const ms = s * 1000;
    return (ms < 1 ? ms.toFixed(3) : ms < 10 ? ms.toFixed(2) : ms.toFixed(1)) + " ms";
  }

  function el(tag, text, attrs) {
    const node = document.createElement(tag);
    if (text !== undefined && text !== null) node.textContent = text;
    for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
    return node;
  }

  // --- the routing API's rate and latency ------------------------------------------------

  // The q-quantile of a histogram given by its bounds and cumulative counts (+Inf last), by
  // linear interpolation inside the bucket it falls in (as Prometheus' histogram_quantile).
  function quantile(q, bounds, cumulative) {
    const total = cumulative[cumulative.length - 1];
    if (!total) return null;
    const rank = q * total;
    let i = 0;
    while (i < cumulative.length && cumulative[i] < rank) i++;
    if (i >= bounds.length) return bounds[bounds.length - 1];
    const lower = i === 0 ? 0 : bounds[i - 1];
    const below = i === 0 ? 0 : cumulative[i - 1];
    const inBucket = cumulative[i] - below;
    return inBucket ? lower + ((bounds[i] - lower) * (rank - below)) / inBucket : bounds[i];
  }

  // Rate and p50/p99 between the newest sample and the oldest one within WINDOW_S.
  function windowed() {
    const last = samples[samples.length - 1];
    let first = null;
    for (const s of samples) {
      if (s !== last && last.t - s.t <= WINDOW_S + 0.5 && sameBounds(s, last)) {
        first = s;
        break;
      }
    }
    if (first === null || last.t <= first.t) return { rate: null, p50: null, p99: null };
    const delta = last.buckets.map((n, i) => n - (first.buckets[i] || 0));
    const rate = (last.count - first.count) / (last.t - first.t);
    if (rate < 0) return { rate: null, p50: null, p99: null }; // the follower restarted
    return {
      rate: rate,
      p50: quantile(0.5, last.bounds, delta),
      p99: quantile(0.99, last.bounds, delta),
    };
  }

  function sameBounds(a, b) {
    return a.bounds.length === b.bounds.length && a.bounds.every((x, i) => x === b.bounds[i]);
  }

  // --- rendering -------------------------------------------------------------------------

  function renderHealth(state) {
    const badge = $("health");
    badge.dataset.ok = String(state.health.ok);
    badge.textContent = state.health.ok ? "ok" : state.health.detail;
    badge.title = state.health.detail;
    $("updated").textContent = "updated " + new Date().toLocaleTimeString();
  }

  function renderSummary(state, now) {
    const asOf = state.as_of || {};
    const position = Object.entries(asOf.position || {})
      .map(([p, o]) => p + ":" + fmtInt(o))
      .join(" ");
    $("position").textContent = position || "0";
    const lagS = lagSeconds(state);
    $("lag").textContent =
      fmtInt(asOf.lag_records) + (asOf.lag_records === 1 ? " record" : " records") +
      (lagS === null ? "" : " / " + fmtSeconds(lagS));
    $("rate").textContent = now.rate === null ? "-" : now.rate.toFixed(1) + " req/s";
    $("latency").textContent = fmtMs(now.p50) + " / " + fmtMs(now.p99);
    const refusals = Object.entries(state.http.refusals || {}).filter(([, n]) => n > 0);
    $("refusals").textContent = refusals.length
      ? refusals.map(([reason, n]) => reason + " " + fmtInt(n)).join(", ")
      : "none";
    renderRecovery(state, asOf);
  }

  // Recovery progress: /readyz's document when the follower judges readiness, else how far
  // the replay has read while /healthz says it is restoring.
  function renderRecovery(state, asOf) {
    const ready = state.readiness;
    $("readiness").textContent = ready ? (ready.ready ? "ready" : "not ready") : "-";
    const recovering = !state.health.ok || (ready && !ready.ready);
    $("recovery").hidden = !recovering;
    if (!recovering) return;
    const lines = [];
    if (ready) {
      lines.push(ready.reason);
      const numbers = [fmtInt(ready.records_to_go) + " records to go"];
      if (ready.rate_records_per_s) numbers.push(fmtInt(Math.round(ready.rate_records_per_s)) + " records/s");
      if (ready.eta_s !== null && ready.eta_s !== undefined) numbers.push("about " + fmtSeconds(ready.eta_s) + " left");
      const sources = ready.sources || {};
      numbers.push(fmtInt(sources.caught_up) + " of " + fmtInt(sources.live) + " live sources caught up");
      lines.push(numbers.join(", "));
    } else {
      const read = Object.values(asOf.position || {}).reduce((a, b) => a + b, 0);
      lines.push(state.health.detail + ": " + fmtInt(read) + " records of the log read so far");
    }
    $("recovery-text").textContent = lines.join(" \u2014 ");
  }

  function lagSeconds(state) {
    for (const answer of Object.values(state.sources || {})) return answer.lag_s;
    return null;
  }

  function tiersText(tiers) {
    return Object.entries(tiers || {})
      .map(([medium, blocks]) => medium + " " + fmtInt(blocks))
      .join(" \u00b7 ");
  }

  function note(answer) {
    const parts = [];
    if (answer.offline) parts.push(answer.offline);
    if (answer.diverged) parts.push("diverged: " + answer.diverged);
    if (answer.swa_residency && answer.swa_residency !== "events") parts.push(answer.swa_residency);
    return parts.join("; ");
  }

  function shareCell(answer) {
    const cell = el("td");
    if (!answer.swa_events) {
      cell.textContent = "n/a";
      return cell;
    }
    if (!answer.blocks) {
      cell.textContent = "-";
      return cell;
    }
    const share = (answer.blocks - answer.tombstones) / answer.blocks;
    const bar = el("span", null, { class: "share" });
    const fill = el("span");
    fill.style.width = (share * 100).toFixed(1) + "%";
    bar.appendChild(fill);
    cell.appendChild(bar);
    cell.appendChild(document.createTextNode((share * 100).toFixed(1) + " %"));
    return cell;
  }

  function renderSources(state) {
    const body = document.querySelector("#sources tbody");
    const rows = [];
    const sources = state.sources || {};
    for (const name of Object.keys(sources).sort()) {
      const a = sources[name];
      const row = el("tr", null, { "data-source": name, "data-state": a.state });
      row.appendChild(el("td", name, { class: "name" }));
      row.appendChild(el("td", a.state, { class: "state", "data-state": a.state }));
      row.appendChild(el("td", a.last_heard_s === null ? "never" : fmtSeconds(a.last_heard_s) + " ago"));
      row.appendChild(el("td", tiersText(a.tiers)));
      row.appendChild(el("td", fmtInt(a.tombstones)));
      row.appendChild(shareCell(a));
      row.appendChild(el("td", fmtInt(a.lag_records) + " rec / " + fmtSeconds(a.lag_s)));
      const epoch = a.epoch === null ? "-" : a.epoch.slice(0, 8) + " / " + fmtInt(a.seq);
      row.appendChild(el("td", epoch, { title: a.epoch === null ? "" : "epoch " + a.epoch }));
      row.appendChild(el("td", note(a), { class: "note" }));
      rows.push(row);
    }
    body.replaceChildren(...rows);
    const none = $("no-sources");
    none.hidden = rows.length > 0;
    none.textContent = state.sources === null ? state.health.detail : "no source heard yet";
  }

  function fmtShare(x) {
    return x === null || x === undefined ? "-" : (x * 100).toFixed(1) + " %";
  }

  function fmtTokens(x) {
    return x === null || x === undefined ? "-" : fmtInt(x);
  }

  const QUALITY_COLUMNS = [
    ["reports", (q) => fmtInt(q.reports)],
    ["incorrect routes", (q) => fmtInt(q.incorrect) + " (" + fmtShare(q.incorrect_rate) + ")"],
    ["unpredicted", (q) => fmtInt(q.unpredicted)],
    ["reused / prompt tokens", (q) => fmtInt(q.reused_tokens) + " / " + fmtInt(q.prompt_tokens) + " (" + fmtShare(q.reuse_rate) + ")"],
    ["predicted \u2212 reused, mean", (q) => (q.error_tokens.mean === null ? "-" : q.error_tokens.mean.toFixed(1))],
    ["p50 / p99 (recent)", (q) => fmtTokens(q.error_tokens.recent.p50) + " / " + fmtTokens(q.error_tokens.recent.p99)],
    ["exact predictions", (q) => fmtInt(q.error_tokens.exact)],
  ];

  function noFeedback(box) {
    box.classList.add("muted");
    box.textContent = "no feedback reported";
  }

  // GET /v1/quality: per chosen source and over all, what routers reported to /v1/feedback.
  async function renderQuality(route) {
    const box = $("quality");
    if (!route) {
      noFeedback(box);
      return;
    }
    let doc;
    try {
      const reply = await fetch(".." + route, { headers: headers, cache: "no-store" });
      if (!reply.ok) {
        noFeedback(box);
        return;
      }
      doc = await reply.json();
    } catch (err) {
      return; // the state poll reports the follower unreachable
    }
    if (!doc.all || !doc.all.reports) {
      noFeedback(box);
      return;
    }
    const table = el("table");
    const head = el("tr");
    head.appendChild(el("th", "chosen source"));
    for (const [title] of QUALITY_COLUMNS) head.appendChild(el("th", title));
    table.appendChild(head);
    const rows = [["all", doc.all], ...Object.entries(doc.sources || {})];
    for (const [name, q] of rows) {
      const row = el("tr", null, { "data-quality": name });
      row.appendChild(el("td", name));
      for (const [, cell] of QUALITY_COLUMNS) row.appendChild(el("td", cell(q)));
      table.appendChild(row);
    }
    box.classList.remove("muted");
    box.replaceChildren(table);
  }

  // --- charts ----------------------------------------------------------------------------

  // Three charts side by side: their row's width less two gaps of 12 px, each chart's box
  // less its padding and border (18 px).
  function chartWidth() {
    const row = document.querySelector(".charts").clientWidth;
    return Math.max(280, Math.floor((row - 24) / 3) - 18);
  }

  window.addEventListener("resize", () => {
    if (charts === null) return;
    const width = chartWidth();
    for (const chart of Object.values(charts)) chart.setSize({ width: width, height: chart.height });
  });

  function makeCharts() {
    const width = chartWidth();
    const height = 150;
    const x = { scales: { x: { time: true } }, legend: { live: false } };
    return {
      rate: new uPlot(
        Object.assign({}, x, {
          width: width,
          height: height,
          series: [{}, { label: "req/s", stroke: "#2b6cb0", width: 1.5 }],
        }),
        [[], []],
        $("chart-rate"),
      ),
      latency: new uPlot(
        Object.assign({}, x, {
          width: width,
          height: height,
          series: [
            {},
            { label: "p50", stroke: "#2b6cb0", width: 1.5, value: (u, v) => fmtPlain(v) },
            { label: "p99", stroke: "#c05621", width: 1.5, value: (u, v) => fmtPlain(v) },
          ],
        }),
        [[], [], []],
        $("chart-latency"),
      ),
      lag: new uPlot(
        Object.assign({}, x, {
          width: width,
          height: height,
          scales: { x: { time: true }, rec: {}, s: {} },
          series: [
            {},
            { label: "records", stroke: "#2b6cb0", width: 1.5, scale: "rec" },
            { label: "seconds", stroke: "#c05621", width: 1.5, scale: "s" },
          ],
          axes: [{}, { scale: "rec" }, { scale: "s", side: 1, grid: { show: false } }],
        }),
        [[], [], []],
        $("chart-lag"),
      ),
    };
  }

  function fmtPlain(v) {
    return v === null || v === undefined ? "-" : v.toFixed(3);
  }

  function record(t, now, state) {
    const h = history;
    h.t.push(t);
    h.rate.push(now.rate);
    h.p50.push(now.p50 === null ? null : now.p50 * 1000);
    h.p99.push(now.p99 === null ? null : now.p99 * 1000);
    h.lagRecords.push((state.as_of || {}).lag_records ?? null);
    h.lagS.push(lagSeconds(state));
    while (h.t.length && t - h.t[0] > HISTORY_S) {
      for (const series of Object.values(h)) series.shift();
    }
    if (charts === null) charts = makeCharts();
    charts.rate.setData([h.t, h.rate]);
    charts.latency.setData([h.t, h.p50, h.p99]);
    charts.lag.setData([h.t, h.lagRecords, h.lagS]);
  }

  // --- the poll --------------------------------------------------------------------------

  function disconnected(why) {
    const badge = $("health");
    badge.dataset.ok = "";
    badge.textContent = why;
  }

  async function poll() {
    let state;
    try {
      const reply = await fetch(STATE_URL, { headers: headers, cache: "no-store" });
      if (!reply.ok) {
        disconnected(reply.status === 401 || reply.status === 403
          ? "unauthorized: open the page as /ui/#token=..."
          : "state: HTTP " + reply.status);
        return;
      }
      state = await reply.json();
    } catch (err) {
      disconnected("unreachable");
      return;
    }
    const t = Date.now() / 1000;
    samples.push({
      t: t,
      count: state.http.count,
      buckets: state.http.buckets,
      bounds: state.http.bounds_s,
    });
    while (samples.length && t - samples[0].t > WINDOW_S + 1) samples.shift();
    const now = windowed();
    renderHealth(state);
    renderSummary(state, now);
    renderSources(state);
    record(t, now, state);
    await renderQuality(state.quality_route);
  }

  async function loop() {
    await poll();
    setTimeout(loop, POLL_MS);
  }

  loop();
})();
