// Floodgate's web page: the simulator (POST /v1/simulate, the engine of `floodgate simulate`)
// and the live view of the rules in force (GET /v1/ui/live, polled once a second).
"use strict";

const $ = (sel, root = document) => root.querySelector(sel);
const el = (tag, attrs = {}, ...children) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") e.textContent = v;
    else if (v !== false && v !== null && v !== undefined) e.setAttribute(k, v === true ? "" : v);
  }
  e.append(...children);
  return e;
};
const GREEN = "#2e9e44", RED = "#c0392b";
// Axis steps for counts: whole numbers only.
const COUNT_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1e3, 2e3, 5e3, 1e4, 2e4, 5e4, 1e5, 1e6, 1e7];

// ---------- the token (a server with an API or admin token wants one of them) ----------
// Taken from the field or once from the URL fragment (`/ui/#token=...`: a fragment is never
// sent to the server, so it stays out of its logs), kept for this tab only, and sent as
// `Authorization: Bearer`, never in a URL.
let token = sessionStorage.getItem("floodgate-token") || "";
{
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.has("token")) {
    token = fragment.get("token");
    sessionStorage.setItem("floodgate-token", token);
    // The token leaves the address bar; the view (`#live`) stays.
    history.replaceState(null, "", location.pathname + location.search + (fragment.has("live") ? "#live" : ""));
  }
  const field = $("#token");
  field.value = token;
  const take = () => {
    token = field.value.trim();
    if (token) sessionStorage.setItem("floodgate-token", token);
    else sessionStorage.removeItem("floodgate-token");
  };
  field.addEventListener("change", take);
  $("#token-form").addEventListener("submit", (e) => { e.preventDefault(); take(); });
}
const authHeaders = (headers = {}) => (token ? { ...headers, authorization: `Bearer ${token}` } : headers);
// A 401/403 names the token rather than the request.
function tokenProblem(answer) {
  if (answer.status === 401) return "This server needs a token: enter its API or admin token above.";
  if (answer.status === 403) return "Wrong token: enter the server's API or admin token above.";
  return null;
}

// ---------- the views (tabs, keyboard: arrows move between them) ----------
// The live view has an address of its own, `/ui/#live`: it opens that view, survives a
// reload and can be bookmarked; the simulator is plain `/ui/`.
const tabs = [...document.querySelectorAll("[role=tab]")];
function selectTab(tab, focus = true) {
  for (const t of tabs) {
    const on = t === tab;
    t.setAttribute("aria-selected", on);
    t.tabIndex = on ? 0 : -1;
    $("#" + t.getAttribute("aria-controls")).hidden = !on;
  }
  if (focus) tab.focus();
  const live = tab.id === "tab-live";
  const address = location.pathname + location.search + (live ? "#live" : "");
  if (location.pathname + location.search + location.hash !== address) history.replaceState(null, "", address);
  if (live) startLive(); else stopLive();
}
const tabOfAddress = () => $(new URLSearchParams(location.hash.slice(1)).has("live") ? "#tab-live" : "#tab-simulator");
window.addEventListener("hashchange", () => selectTab(tabOfAddress(), false));
for (const t of tabs) {
  t.addEventListener("click", () => selectTab(t));
  t.addEventListener("keydown", (e) => {
    const i = tabs.indexOf(t);
    if (e.key === "ArrowRight") selectTab(tabs[(i + 1) % tabs.length]);
    if (e.key === "ArrowLeft") selectTab(tabs[(i + tabs.length - 1) % tabs.length]);
  });
}

// ---------- simulator controls ----------
const EXERCISES = {
  1: { scenario: "boundary", algorithms: ["fixed_window", "sliding_window"], instances: 1,
       note: "Ten requests just before the window edge at 10 s and ten just after. The fixed " +
             "window admits all twenty (twice the limit in one second); the sliding window " +
             "rejects the second burst and admits ten." },
  2: { scenario: "calm-spike", algorithms: ["fixed_window", "sliding_window", "token_bucket"],
       instances: 1,
       note: "A calm client sends one request a second; at 4.5 s a spike of 15 arrives on the " +
             "same key. With either window the spike uses up the allowance and the calm client " +
             "gets rejected too. The token bucket lets the spike through up to its burst (ten " +
             "that second, the calm request included) and never rejects the calm requests." },
  3: { scenario: "flood", algorithms: ["fixed_window"], instances: 3, counter: "local",
       note: "Three instances, each with its own counter, behind a round-robin balancer: thirty " +
             "pass in ten seconds against a limit of ten. Switch the counter to shared: ten " +
             "again." },
};

function radios(container, name, list, checked) {
  for (const { name: value, description } of list) {
    const id = `${name}-${value}`;
    const input = el("input", { type: "radio", name, id, value, checked: value === checked });
    container.append(el("label", { for: id, title: description }, input, " " + value));
  }
}

async function setupControls() {
  const choices = await (await fetch("choices.json")).json();
  const algos = $("#algorithms");
  for (const { name } of choices.algorithm) {
    const id = `algorithm-${name}`;
    const input = el("input", { type: "checkbox", name: "algorithm", id, value: name,
                                checked: name === "fixed_window" || name === "sliding_window" });
    algos.append(el("label", { for: id }, input, " " + name));
  }
  radios($("#scenarios"), "scenario",
         [...choices.scenario, { name: "trace", description: "your own requests (CSV or JSON lines)" }],
         "boundary");
  radios($("#counters"), "counter", choices.counter, "local");
  radios($("#balances"), "balance", choices.balance, "round-robin");
  const form = $("#sim-form");
  form.addEventListener("input", () => { clearPreset(); schedule(); });
  form.addEventListener("change", () => { clearPreset(); schedule(); });
  form.addEventListener("submit", (e) => e.preventDefault());
  $("#trace-file").addEventListener("change", async (e) => {
    const file = e.target.files[0];
    if (file) { $("#trace").value = await file.text(); schedule(); }
  });
  for (const b of document.querySelectorAll("[data-preset]")) {
    b.addEventListener("click", () => applyExercise(b.dataset.preset));
  }
  syncControls();
  run();
}

function clearPreset() {
  for (const b of document.querySelectorAll("[data-preset]")) b.setAttribute("aria-pressed", "false");
}

function applyExercise(n) {
  const ex = EXERCISES[n];
  for (const box of document.querySelectorAll("[name=algorithm]")) box.checked = ex.algorithms.includes(box.value);
  $(`#scenario-${ex.scenario}`).checked = true;
  $("#instances").value = ex.instances;
  $(`#counter-${ex.counter || "local"}`).checked = true;
  $("#balance-round-robin").checked = true;
  $("#limit").value = "10/10s";
  $("#burst").value = "";
  clearPreset();
  $(`#preset-${n}`).setAttribute("aria-pressed", "true");
  $("#preset-note").textContent = ex.note;
  run();
}

function syncControls() {
  const trace = $("#scenario-trace").checked;
  $("#trace-box").hidden = !trace;
  const many = Number($("#instances").value) > 1;
  for (const input of document.querySelectorAll("#counters input, #balances input")) {
    input.disabled = !many;
    input.parentElement.classList.toggle("disabled", !many);
  }
}

/** The /v1/simulate body the controls describe, and the algorithms to show. */
function request() {
  const shown = [...document.querySelectorAll("[name=algorithm]:checked")].map((b) => b.value);
  // The checked algorithms as one list (`fixed_window,sliding_window`): the engine runs
  // exactly those, as `floodgate simulate -a fixed_window,sliding_window` does.
  const body = { algorithm: shown.join(","), limit: $("#limit").value.trim() };
  const scenario = document.querySelector("[name=scenario]:checked").value;
  if (scenario === "trace") body.trace = $("#trace").value; else body.scenario = scenario;
  if ($("#burst").value !== "") body.burst = Number($("#burst").value);
  const instances = Number($("#instances").value);
  body.instances = instances;
  if (instances > 1) {
    body.counter = document.querySelector("[name=counter]:checked").value;
    body.balance = document.querySelector("[name=balance]:checked").value;
  }
  return { body, shown };
}

let timer = null, generation = 0;
function schedule() { clearTimeout(timer); timer = setTimeout(run, 250); }

const FIELD_CONTROL = { limit: "#limit", burst: "#burst", instances: "#instances", trace: "#trace" };

async function run() {
  syncControls();
  const { body, shown } = request();
  const status = $("#sim-status");
  for (const c of document.querySelectorAll("[aria-invalid]")) c.removeAttribute("aria-invalid");
  if (shown.length === 0) {
    status.textContent = "Choose at least one algorithm.";
    return;
  }
  const mine = ++generation;
  status.className = "";
  status.textContent = "Simulating…";
  const answer = await fetch("/v1/simulate", {
    method: "POST", headers: authHeaders({ "content-type": "application/json" }),
    body: JSON.stringify(body),
  });
  const doc = await answer.json();
  if (mine !== generation) return; // a newer run started meanwhile
  if (!answer.ok) {
    status.className = "error";
    status.setAttribute("role", "alert");
    status.textContent = tokenProblem(answer) || doc.detail || doc.title;
    const control = FIELD_CONTROL[doc.field];
    if (control) $(control).setAttribute("aria-invalid", "true");
    return;
  }
  status.setAttribute("role", "status");
  status.textContent = `${doc.traffic}; ${describeSetup(doc.setup)}; limit ${doc.policy.limit} per ` +
    `${seconds(doc.policy.period_us)}, burst ${doc.policy.burst}.`;
  drawRuns(doc, shown);
}

function describeSetup(s) {
  if (s.instances === 1) return "1 instance";
  return `${s.instances} instances, ${s.counter} counters, ${s.balance} balancing`;
}

function seconds(us) {
  const s = us / 1e6;
  return Number.isInteger(s) ? `${s} s` : `${s.toFixed(3).replace(/0+$/, "")} s`;
}

// ---------- simulator charts ----------
let hatch = null;
function hatchPattern(ctx) {
  if (hatch) return hatch;
  const c = document.createElement("canvas");
  c.width = c.height = 8;
  const g = c.getContext("2d");
  g.fillStyle = "#f6d5d1"; g.fillRect(0, 0, 8, 8);
  g.strokeStyle = RED; g.lineWidth = 2;
  g.beginPath(); g.moveTo(0, 8); g.lineTo(8, 0); g.moveTo(-2, 2); g.lineTo(2, -2); g.moveTo(6, 10); g.lineTo(10, 6); g.stroke();
  hatch = ctx.createPattern(c, "repeat");
  return hatch;
}

const charts = [];
function drawRuns(doc, shown) {
  for (const c of charts.splice(0)) c.destroy();
  const runs = doc.runs.filter((r) => shown.includes(r.algorithm));
  // One vertical scale for every panel, as the terminal and the SVG share one.
  const scale = Math.max(1, ...runs.flatMap((r) => r.summary.columns.map((c) => c.admitted + c.rejected + c.impossible)));
  const box = $("#runs");
  box.replaceChildren(...runs.map((r) => runPanel(doc, r, scale)));
}

function runPanel(doc, run, scale) {
  const s = run.summary;
  const period = seconds(doc.policy.period_us);
  const maxUnits = s.max_in_period ? s.max_in_period.units : 0;
  const ratio = `${s.over_admission.toFixed(2)}x`;
  const panel = el("article", { class: "run", id: `run-${run.algorithm}`, "data-algorithm": run.algorithm },
                   el("h3", { text: run.algorithm }));
  const chart = el("div", { class: "chart", role: "img",
    "aria-label": `${run.algorithm}: ${s.admitted} admitted, ${s.rejected} rejected, at most ` +
                  `${maxUnits} in any ${period} (${ratio} the limit)` });
  panel.append(chart);
  const totals = el("dl", { class: "totals" });
  const row = (label, cls, value) => totals.append(el("dt", { text: label }), el("dd", { class: cls, text: String(value) }));
  row("admitted", "admitted", s.admitted);
  row("rejected", "rejected", s.rejected);
  if (s.impossible) row("impossible (cost above capacity)", "impossible", s.impossible);
  row(`most admitted in any ${period}`, "max", maxUnits);
  row("vs limit", "ratio", ratio);
  if (s.shared_reference) {
    row("with one shared counter", "shared",
        `${s.shared_reference.admitted} admitted, max ${s.shared_reference.max_in_period}`);
  }
  panel.append(totals);
  if (s.per_source.length > 1) {
    const t = el("table", { class: "sources" }, el("caption", { class: "sr-only", text: `${run.algorithm} by source` }),
      el("tr", {}, el("th", { text: "source" }), el("th", { text: "admitted" }), el("th", { text: "rejected" })));
    for (const src of s.per_source) {
      t.append(el("tr", { "data-source": src.source }, el("td", { text: src.source }),
        el("td", { class: "admitted", text: String(src.admitted) }),
        el("td", { class: "rejected", text: String(src.rejected) })));
    }
    panel.append(t);
  }
  const cols = el("table", { class: "columns" },
    el("tr", {}, el("th", { text: "from" }), el("th", { text: "admitted" }), el("th", { text: "rejected" })));
  for (const c of s.columns) {
    cols.append(el("tr", {}, el("td", { text: seconds(c.start_us) }), el("td", { text: String(c.admitted) }),
      el("td", { text: String(c.rejected + c.impossible) })));
  }
  panel.append(el("details", {}, el("summary", { text: `Per ${seconds(s.column_us)} table` }), cols));
  // The chart needs the panel in the document to measure its width: drawn on the next frame.
  requestAnimationFrame(() => charts.push(barChart(chart, doc, s, scale)));
  return panel;
}

function barChart(target, doc, s, scale) {
  const colS = s.column_us / 1e6;
  const xs = s.columns.map((c) => c.start_us / 1e6);
  const admitted = s.columns.map((c) => c.admitted);
  const total = s.columns.map((c) => c.admitted + c.rejected + c.impossible);
  // Empty columns draw nothing (null), not a hairline at zero.
  const orNull = (v) => (v === 0 ? null : v);
  const periodS = doc.policy.period_us / 1e6;
  const bars = uPlot.paths.bars({ size: [0.85, Infinity], align: 1 });
  const end = xs.length ? xs[xs.length - 1] + colS : 1;
  const opts = {
    width: 360, height: 200,
    scales: { x: { time: false, range: [0, end] }, y: { range: [0, scale] } },
    axes: [{ values: (u, v) => v.map((x) => `${+x.toFixed(3)}s`) }, { size: 40, incrs: COUNT_STEPS }],
    legend: { show: false },
    cursor: { show: false },
    series: [
      {},
      { label: "rejected", paths: bars, points: { show: false }, stroke: RED, width: 1,
        fill: (u) => hatchPattern(u.ctx) },
      { label: "admitted", paths: bars, points: { show: false }, stroke: GREEN, width: 1, fill: GREEN },
    ],
    hooks: { draw: [(u) => drawMarks(u, xs, admitted, total, colS, periodS, end)] },
  };
  return new uPlot(opts, [xs, total.map(orNull), admitted.map(orNull)], target);
}

/** An x on every rejected part of a column, and a dashed line at every window edge. */
function drawMarks(u, xs, admitted, total, colS, periodS, end) {
  const ctx = u.ctx;
  ctx.save();
  ctx.strokeStyle = "#7a1f16";
  ctx.lineWidth = 2 * devicePixelRatio;
  const colPx = u.valToPos(colS, "x", true) - u.valToPos(0, "x", true);
  for (let i = 0; i < xs.length; i++) {
    if (total[i] <= admitted[i]) continue;
    const cx = u.valToPos(xs[i] + colS / 2, "x", true);
    const top = u.valToPos(total[i], "y", true), bottom = u.valToPos(admitted[i], "y", true);
    const r = Math.min(colPx * 0.3, (bottom - top) / 2, 8 * devicePixelRatio);
    const cy = (top + bottom) / 2;
    ctx.beginPath();
    ctx.moveTo(cx - r, cy - r); ctx.lineTo(cx + r, cy + r);
    ctx.moveTo(cx + r, cy - r); ctx.lineTo(cx - r, cy + r);
    ctx.stroke();
  }
  ctx.strokeStyle = "#5b6670";
  ctx.lineWidth = devicePixelRatio;
  ctx.setLineDash([4 * devicePixelRatio, 4 * devicePixelRatio]);
  for (let edge = periodS; edge < end; edge += periodS) {
    const x = u.valToPos(edge, "x", true);
    ctx.beginPath(); ctx.moveTo(x, u.bbox.top); ctx.lineTo(x, u.bbox.top + u.bbox.height); ctx.stroke();
  }
  ctx.restore();
}

// ---------- live view ----------
let liveTimer = null;
const liveCharts = new Map();
function startLive() { if (!liveTimer) { poll(); liveTimer = setInterval(poll, 1000); } }
function stopLive() { clearInterval(liveTimer); liveTimer = null; }

async function poll() {
  const status = $("#live-status");
  let doc;
  try {
    const answer = await fetch("/v1/ui/live", { headers: authHeaders() });
    doc = await answer.json();
    const refused = tokenProblem(answer);
    if (refused) {
      status.className = "error";
      status.textContent = refused;
      return;
    }
    if (!answer.ok) throw new Error(doc.detail || answer.statusText);
  } catch (e) {
    status.className = "error";
    status.textContent = `Cannot reach the server: ${e.message}`;
    return;
  }
  status.className = "";
  status.textContent = `Configuration generation ${doc.generation}; ${doc.samples} samples, ` +
    `one a second, last ${doc.window_s / 60} minutes kept.`;
  drawStore(doc.store);
  drawRules(doc);
  drawDeniedKeys(doc.denied_keys);
  drawLeases(doc.leases);
}

function drawStore(store) {
  const dl = $("#store");
  const rows = [["kind", store.kind], ["state", store.state]];
  if (store.keys !== undefined) rows.push(["keys held", `${store.keys} of ${store.max_keys}`]);
  if (store.fallback) rows.push(["fallback", store.fallback]);
  if (store.reason) rows.push(["reason", store.reason]);
  dl.replaceChildren(...rows.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { class: k.replace(/ /g, "-"), text: String(v) })]));
}

// What a rule's chart and totals show: an enforcing rule what it admitted and denied, a
// shadow rule what it would have admitted and denied (the `shadow_allowed` and `shadow_denied`
// series of /metrics); both the store errors. [group in /v1/ui/live, label, colour, filled].
const ENFORCING = [["admitted", "admitted", GREEN, true], ["denied", "denied", RED, true]];
const SHADOW = [["shadow_allowed", "would admit", GREEN, true], ["shadow_denied", "would deny", RED, true]];
const ERRORS = ["error", "store errors", "#d68910", false];
const seriesOf = (rule) => [...(rule.shadow ? SHADOW : ENFORCING), ERRORS];

/** The value of the last second of each series, written at the right end of its line. */
function drawCurrent(u, series) {
  const ctx = u.ctx;
  const last = u.data[0].length - 1;
  if (last < 0) return;
  ctx.save();
  ctx.font = `${12 * devicePixelRatio}px system-ui, sans-serif`;
  ctx.textAlign = "left";
  ctx.textBaseline = "middle";
  const x = u.bbox.left + u.bbox.width + 4 * devicePixelRatio;
  let previous = -Infinity;
  // Lowest value first, each label at least a line below the one above it.
  const order = series.map((s, i) => [u.data[i + 1][last] || 0, i]).sort((a, b) => b[0] - a[0]);
  for (const [value, i] of order) {
    let y = u.valToPos(value, "y", true);
    y = Math.max(y, previous + 14 * devicePixelRatio);
    previous = y;
    ctx.fillStyle = series[i][2];
    ctx.fillText(`${value}/s`, x, y);
  }
  ctx.restore();
}

function liveChart(rule, doc, box, chart) {
  const series = seriesOf(rule);
  const width = Math.max(320, Math.min(1100, (box.clientWidth || 700) - 40));
  return new uPlot({
    width, height: 200,
    padding: [12, 56, 0, 0],
    legend: { show: false },
    cursor: { show: false },
    scales: { x: { time: false, range: [1 - doc.window_s, 0] }, y: { range: (u, min, max) => [0, Math.max(1, max)] } },
    axes: [
      { label: "seconds ago", labelSize: 20, values: (u, v) => v.map((x) => `${-x}`) },
      { label: "decisions per second", labelSize: 20, size: 44, incrs: COUNT_STEPS },
    ],
    series: [{}, ...series.map(([, label, colour, filled]) => ({
      label, stroke: colour, width: 2, points: { show: false },
      fill: filled ? colour + "33" : undefined, paths: uPlot.paths.stepped({ align: 1 }),
    }))],
    hooks: { draw: [(u) => drawCurrent(u, series)] },
  }, [[], ...series.map(() => [])], chart);
}

function drawRules(doc) {
  const box = $("#rules");
  const names = doc.rules.map((r) => r.name);
  for (const [name, entry] of liveCharts) {
    if (!names.includes(name) || entry.shadow !== doc.rules.find((r) => r.name === name).shadow) {
      entry.chart.destroy(); entry.panel.remove(); liveCharts.delete(name);
    }
  }
  for (const rule of doc.rules) {
    const series = seriesOf(rule);
    let entry = liveCharts.get(rule.name);
    if (!entry) {
      const panel = el("article", { class: "rule", "data-rule": rule.name },
        el("h3", { text: rule.name }),
        el("p", { class: "meta", text: `${rule.algorithm}, ${rule.quota}${rule.shadow ? ", shadow" : ""}` }));
      if (rule.shadow) {
        panel.append(el("p", { class: "note", text: "A shadow rule never denies: these are the " +
          "requests it would have admitted and denied (/metrics: outcome shadow_allowed and shadow_denied)." }));
      }
      const now = el("dl", { class: "now" });
      const totals = el("dl", { class: "totals" });
      const chart = el("div", { class: "chart", role: "img" });
      panel.append(now, chart, totals);
      box.append(panel);
      entry = { panel, now, totals, shadow: rule.shadow, chart: liveChart(rule, doc, box, chart) };
      liveCharts.set(rule.name, entry);
    }
    const n = rule.per_second.admitted.length;
    const xs = rule.per_second.admitted.map((_, i) => i - n + 1);
    entry.chart.setData([xs, ...series.map(([g]) => rule.per_second[g])]);
    const window = `${Math.max(1, n)} s`;
    // The last second, in large type: readable at a glance, without hovering.
    entry.now.replaceChildren(...series.flatMap(([g, label]) => [
      el("dt", { text: `${label} per second` }),
      el("dd", { "data-now": g, text: String(rule.per_second[g][n - 1] ?? 0) })]));
    entry.totals.replaceChildren(...series.flatMap(([g, label]) => [
      el("dt", { text: `${label} in the last ${window}` }), el("dd", { class: g, text: String(rule.totals[g]) })]));
    entry.panel.querySelector(".chart").setAttribute("aria-label",
      `${rule.name}: ${series.map(([g, label]) => `${rule.totals[g]} ${label}`).join(", ")} in the last ${window}`);
  }
}

function drawDeniedKeys(d) {
  const box = $("#denied-keys");
  if (!d) {
    box.replaceChildren(el("p", { class: "note", text: "Off: keys can be personal data, so this panel is opt-in." }));
    return;
  }
  const t = el("table", {}, el("tr", {}, el("th", { text: "rule" }), el("th", { text: "key" }),
    el("th", { text: "denials" }), el("th", { text: "± overcount" })));
  for (const k of d.keys) {
    t.append(el("tr", {}, el("td", { text: k.rule }), el("td", { text: k.key }),
      el("td", { text: String(k.count) }), el("td", { text: String(k.error) })));
  }
  box.replaceChildren(el("p", { class: "note", text: `The ${d.capacity} busiest of ${d.denials} denials. ` +
    "Secret values (API keys, users, headers) are shown as a hash (#…) that the admin API " +
    "resolves: GET /v1/keys/{rule}/{key}?encoded=true with # written %23." }), t);
}

// Rules with a quota lease and their bound (docs/spec/leases.md).
function drawLeases(leases) {
  const box = $("#leases");
  if (!leases || leases.length === 0) {
    box.replaceChildren(el("p", { class: "note", text: "No rule in force has a lease: every decision is exact." }));
    return;
  }
  const t = el("table", {}, el("tr", {}, el("th", { text: "rule" }), el("th", { text: "lease" }),
    el("th", { text: "units per lease" }), el("th", { text: "beyond exact, one instance" })));
  for (const l of leases) {
    t.append(el("tr", { "data-rule": l.rule }, el("td", { text: l.rule }), el("td", { text: seconds(l.lease_us) }),
      el("td", { text: String(l.max_units) }), el("td", { class: "bound", text: String(l.bound_one_instance) })));
  }
  box.replaceChildren(t, ...leases.map((l) => el("p", { class: "note", text: `${l.rule}: ${l.bound}` })));
}

setupControls();
selectTab(tabOfAddress(), false);
