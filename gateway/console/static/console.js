// The pd-gateway console: every figure comes from the documented JSON API, called with the key
// the user signed in with (kept in this tab's sessionStorage only, sent as a bearer header; no
// cookies). Data is written with textContent / DOM APIs only, never as HTML.
"use strict";

const DAY = 86400;
const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
const session = {
  get key() { return sessionStorage.getItem("pdg.key"); },
  get role() { return sessionStorage.getItem("pdg.role"); },
  save(key, role) { sessionStorage.setItem("pdg.key", key); sessionStorage.setItem("pdg.role", role); },
  clear() { sessionStorage.removeItem("pdg.key"); sessionStorage.removeItem("pdg.role"); },
};
let editingKey = null;

// ---- API --------------------------------------------------------------------------------
async function api(method, path, body) {
  const headers = { authorization: "Bearer " + session.key };
  if (body !== undefined) headers["content-type"] = "application/json";
  const response = await fetch(path, {
    method, headers, credentials: "omit", cache: "no-store",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const message = (data.error && data.error.message) || response.statusText;
    const err = new Error(message);
    err.status = response.status;
    throw err;
  }
  return data;
}

function say(text, isError) {
  const status = $("status");
  status.textContent = text;
  status.classList.toggle("error", Boolean(isError));
}

async function guarded(fn) {
  try { await fn(); } catch (err) {
    if (err.status === 401) { signOut(); say("The key was refused: " + err.message, true); return; }
    say(err.message, true);
  }
}

// ---- DOM helpers -------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "text") node.textContent = value;
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : value);
  }
  for (const child of children) if (child !== null) node.append(child);
  return node;
}
function svg(tag, attrs) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs || {})) node.setAttribute(name, value);
  return node;
}
const fmt = (n) => Number(n).toLocaleString("en-US");
const day = (unix) => (unix ? new Date(unix * 1000).toISOString().slice(0, 10) : "");
const when = (unix) => (unix ? new Date(unix * 1000).toISOString().slice(0, 16).replace("T", " ") : "");

// ---- Sign in / out, views ------------------------------------------------------------------
async function signIn(event) {
  event.preventDefault();
  const key = $("api-key").value.trim();
  if (!key) return;
  session.save(key, "");
  try {
    await api("GET", "/admin/tenants");
    session.save(key, "admin");
  } catch (err) {
    if (err.status !== 403 && err.status !== 404) { session.clear(); say(err.message, true); return; }
    try { await api("GET", "/v1/keys"); session.save(key, "tenant"); } catch (err2) {
      session.clear(); say("Sign-in failed: " + err2.message, true); return;
    }
  }
  $("api-key").value = "";
  say("");
  start();
}

function signOut() {
  session.clear();
  $("nav").hidden = true;
  $("sign-out").hidden = true;
  $("who").textContent = "";
  for (const section of document.querySelectorAll("main > section")) section.hidden = true;
  $("sign-in").hidden = false;
  $("api-key").focus();
}

function start() {
  const admin = session.role === "admin";
  document.body.classList.toggle("admin", admin);
  for (const node of document.querySelectorAll("[data-admin]")) node.hidden = !admin;
  $("who").textContent = admin ? "Signed in with an admin key" : "Signed in with a tenant key";
  $("nav").hidden = false;
  $("sign-out").hidden = false;
  $("sign-in").hidden = true;
  show(location.hash.slice(1) || "usage");
}

function show(view) {
  if (!["usage", "keys", "routing"].includes(view)) view = "usage";
  if (view === "routing" && session.role !== "admin") view = "usage";
  if (location.hash !== "#" + view) history.replaceState(null, "", "#" + view);
  for (const button of $("nav").querySelectorAll("button")) {
    if (button.dataset.view === view) button.setAttribute("aria-current", "page");
    else button.removeAttribute("aria-current");
  }
  for (const name of ["usage", "keys", "routing"]) $("view-" + name).hidden = name !== view;
  markReady(view, ({ usage: loadUsage, keys: loadKeys, routing: loadRouting })[view]());
}

// body[data-ready] names the view once its data is drawn: what tests and the benchmark wait for.
// body[data-ready-ms] says how long it took, by the page's own clock: from navigation for the
// first view of a page load, from the click for later ones.
let navigated = true;
function markReady(view, loading) {
  const started = navigated ? 0 : performance.now();
  navigated = false;
  document.body.removeAttribute("data-ready");
  loading.then(() => {
    document.body.dataset.readyMs = String(Math.round(performance.now() - started));
    document.body.dataset.ready = view;
  });
}

async function tenantOptions(select, withAll) {
  const previous = select.value;
  const tenants = (await api("GET", "/admin/tenants")).data;
  select.replaceChildren(...(withAll ? [el("option", { value: "", text: "All tenants" })] : []));
  for (const t of tenants) select.append(el("option", { value: t.id, text: t.name === t.id ? t.id : `${t.name} (${t.id})` }));
  if ([...select.options].some((o) => o.value === previous)) select.value = previous;
  return tenants;
}

// ---- Usage -------------------------------------------------------------------------------
function usageRange() {
  const from = Date.parse($("usage-from").value + "T00:00:00Z") / 1000;
  const to = Date.parse($("usage-to").value + "T00:00:00Z") / 1000 + DAY;
  return [from, to];
}

// What the usage view asks for: the caller's tenant (tenant key), one tenant by key (admin with a
// tenant chosen) or every tenant (admin); "who" names the table's grouping.
function usageQuery() {
  const [from, to] = usageRange();
  if (!(to > from)) throw new Error("The range is empty: pick a start before the end.");
  const params = new URLSearchParams({ start_time: from, end_time: to });
  if (session.role !== "admin") { params.set("scope", "tenant"); return { path: "/v1/usage", params, who: "key_id", from, to }; }
  const tenant = $("usage-tenant").value;
  if (tenant) params.set("tenant_id", tenant);
  return { path: "/admin/usage", params, who: tenant ? "key_id" : "tenant_id", from, to };
}

async function usageReport(query, groups) {
  const params = new URLSearchParams(query.params);
  params.set("group_by", groups);
  return api("GET", query.path + "?" + params);
}

// Charts by day and model, the table by key (or tenant) and model: two small reports from the
// daily totals, a few hundred rows even for a year (the day x key x model detail is the CSV's).
async function loadUsage() {
  if (!$("usage-from").value) {
    const today = Math.floor(Date.now() / 1000 / DAY) * DAY;
    $("usage-from").value = day(today - 29 * DAY);
    $("usage-to").value = day(today);
  }
  await guarded(async () => {
    // The tenant list loads beside the reports (the first view asks for every tenant anyway).
    const tenants = session.role === "admin" && $("usage-tenant").options.length <= 1
      ? tenantOptions($("usage-tenant"), true) : null;
    const query = usageQuery();
    const [byDay, byWho] = await Promise.all([
      usageReport(query, "day,model"), usageReport(query, query.who + ",model"), tenants]);
    renderUsage(query, byDay.data, byWho.data);
    say(byDay.has_more || byWho.has_more ? "The report was cut: narrow the range." : `${fmt(byWho.data.length)} rows`);
  });
}

function renderUsage(query, byDay, byWho) {
  const models = [...new Set(byDay.map((r) => r.model))].sort();
  const days = [];
  for (let t = query.from; t < query.to; t += DAY) days.push(day(t));
  $("usage-charts").replaceChildren(
    chart("Input tokens per day", "input_tokens", days, models, byDay),
    chart("Output tokens per day", "output_tokens", days, models, byDay),
    chart("Requests per day", "requests", days, models, byDay),
  );
  const who = query.who;
  const whoLabel = who === "key_id" ? "Key" : "Tenant";
  const cols = [whoLabel, "Model", "Requests", "Input tokens", "Output tokens", "Cached tokens"];
  const table = $("usage-table");
  $("usage-caption").textContent = `Usage by ${whoLabel.toLowerCase()} and model, ${day(query.from)} to ${day(query.to - DAY)}`;
  table.tHead.replaceChildren(el("tr", {}, ...cols.map((c, i) => el("th", { scope: "col", class: i > 1 ? "num" : null, text: c }))));
  const totals = { requests: 0, input_tokens: 0, output_tokens: 0, cached_tokens: 0 };
  table.tBodies[0].replaceChildren(...byWho.map((r) => {
    for (const k of Object.keys(totals)) totals[k] += r[k];
    return el("tr", {}, el("td", { text: r[who] ?? "(none)" }), el("td", { text: r.model }),
      ...Object.keys(totals).map((k) => el("td", { class: "num", text: fmt(r[k]) })));
  }));
  table.tFoot.replaceChildren(el("tr", {}, el("td", { text: "Total", colspan: "2" }),
    ...Object.keys(totals).map((k) => el("td", { class: "num", "data-total": k, text: fmt(totals[k]) }))));
}

// A stacked bar per day, one colour per model; each bar carries its numbers as data-* (and a
// <title> for pointer users); the table below is the accessible alternative.
function chart(title, field, days, models, rows) {
  const width = Math.max(360, Math.min(640, days.length * 18 + 60)), height = 190;
  const plot = { left: 52, top: 10, right: width - 8, bottom: height - 28 };
  const byDay = new Map(days.map((d) => [d, new Map()]));
  for (const r of rows) {
    const m = byDay.get(r.date);
    if (m) m.set(r.model, (m.get(r.model) || 0) + r[field]);
  }
  const sums = days.map((d) => [...byDay.get(d).values()].reduce((a, b) => a + b, 0));
  const max = Math.max(1, ...sums);
  const total = sums.reduce((a, b) => a + b, 0);
  const figure = el("figure", { "data-chart": field });
  const caption = el("figcaption", { id: "chart-" + field, text: `${title} (total ${fmt(total)})` });
  const image = svg("svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img",
    "aria-labelledby": "chart-" + field });
  image.append(svg("line", { class: "axis", x1: plot.left, y1: plot.bottom, x2: plot.right, y2: plot.bottom }));
  const top = svg("text", { x: plot.left - 4, y: plot.top + 8, "text-anchor": "end" });
  top.textContent = compact(max);
  const zero = svg("text", { x: plot.left - 4, y: plot.bottom, "text-anchor": "end" });
  zero.textContent = "0";
  image.append(top, zero);
  const step = (plot.right - plot.left) / days.length;
  const scale = (plot.bottom - plot.top) / max;
  days.forEach((d, i) => {
    let y = plot.bottom;
    models.forEach((model, mi) => {
      const value = byDay.get(d).get(model) || 0;
      if (!value) return;
      const h = value * scale;
      y -= h;
      const bar = svg("rect", { x: plot.left + i * step + 1, y, width: Math.max(1, step - 2), height: h,
        class: "c" + (mi % 6), "data-date": d, "data-model": model, "data-value": value });
      const tip = svg("title");
      tip.textContent = `${d} ${model}: ${fmt(value)}`;
      bar.append(tip);
      image.append(bar);
    });
    if (i === 0 || i === days.length - 1 || (days.length > 10 && i % Math.ceil(days.length / 5) === 0)) {
      const label = svg("text", { x: plot.left + i * step + step / 2, y: height - 10, "text-anchor": "middle" });
      label.textContent = d.slice(5);
      image.append(label);
    }
  });
  const legend = el("ul", { class: "legend" }, ...models.map((m, mi) =>
    el("li", {}, el("span", { class: "swatch c" + (mi % 6), "aria-hidden": "true" }), m)));
  figure.append(caption, image, legend);
  return figure;
}
const compact = (n) => (n >= 1e6 ? (n / 1e6).toFixed(1) + "M" : n >= 1e3 ? (n / 1e3).toFixed(1) + "k" : String(n));

// The CSV is the detail: one line per day, key (or tenant) and model, fetched when asked for.
async function downloadCsv() {
  await guarded(async () => {
    const query = usageQuery();
    const report = await usageReport(query, `day,${query.who},model`);
    const rows = report.data;
    if (!rows.length) { say("Nothing to download: no usage in this range."); return; }
    const cols = Object.keys(rows[0]);
    const quote = (v) => { const s = v === null || v === undefined ? "" : String(v); return /[",\n]/.test(s) ? '"' + s.replace(/"/g, '""') + '"' : s; };
    const text = [cols.join(","), ...rows.map((r) => cols.map((c) => quote(r[c])).join(","))].join("\n") + "\n";
    const link = el("a", { href: URL.createObjectURL(new Blob([text], { type: "text/csv" })),
      download: `usage-${$("usage-from").value}-${$("usage-to").value}.csv` });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(link.href), 1000);
    say(report.has_more ? "The CSV was cut: narrow the range." : `${fmt(rows.length)} lines downloaded.`);
  });
}

// ---- Keys and limits -----------------------------------------------------------------------
async function loadKeys() {
  await guarded(async () => {
    const admin = session.role === "admin";
    let keys;
    if (admin) {
      const tenants = await tenantOptions($("keys-tenant"), false);
      const tenant = tenants.find((t) => t.id === $("keys-tenant").value);
      if (!tenant) { say("No tenant yet: create one with the admin API or the CLI."); return; }
      keys = (await api("GET", `/admin/tenants/${encodeURIComponent(tenant.id)}/keys`)).data;
      if (!editingKey) fillLimits(tenant.limits, null);
    } else {
      keys = (await api("GET", "/v1/keys")).data;
    }
    renderKeys(keys, admin);
  });
}

function renderKeys(keys, admin) {
  const now = Date.now() / 1000;
  $("keys-table").tBodies[0].replaceChildren(...keys.map((k) => {
    const expired = k.expires_at && k.expires_at <= now;
    const state = k.revoked ? "revoked" : expired ? "expired" : "active";
    const limits = Object.entries(k.limits).map(([n, v]) => `${n.replace(/_/g, " ")}: ${fmt(v)}`).join("; ");
    const actions = admin && !k.revoked ? el("td", {},
      el("button", { type: "button", "aria-label": `Edit limits of ${k.name}`, onclick: () => editKey(k), text: "Limits" }), " ",
      el("button", { type: "button", class: "danger", "aria-label": `Revoke ${k.name}`, onclick: () => revoke(k), text: "Revoke" }))
      : admin ? el("td") : null;
    return el("tr", { "data-key": k.id }, el("td", { text: k.name }), el("td", {}, el("code", { text: k.id })),
      el("td", { text: when(k.created_at) }), el("td", { text: k.expires_at ? when(k.expires_at) : "never" }),
      el("td", { text: when(k.last_used_at) || "never" }),
      el("td", { class: state === "active" ? "ok" : "bad", "data-state": state, text: state }),
      el("td", { text: limits || "tenant's" }), actions);
  }));
}

async function createKey(event) {
  event.preventDefault();
  await guarded(async () => {
    const tenant = $("keys-tenant").value;
    const days = $("create-key-days").value;
    const spec = { name: $("create-key-name").value.trim() };
    if (days) spec.expires_in_seconds = Number(days) * DAY;
    const issued = await api("POST", `/admin/tenants/${encodeURIComponent(tenant)}/keys`, spec);
    $("create-key-name").value = "";
    $("create-key-days").value = "";
    $("new-secret-value").value = issued.key;
    $("new-secret").hidden = false;
    $("new-secret-value").focus();
    $("new-secret-value").select();
    say(`Key ${issued.name} created.`);
    await loadKeys();
  });
}

async function copySecret() {
  const input = $("new-secret-value");
  try { await navigator.clipboard.writeText(input.value); say("Copied to the clipboard."); } catch {
    input.select();  // no clipboard permission: leave it selected for Ctrl+C
    say("Press Ctrl+C to copy the selected secret.");
  }
}

function hideSecret() {
  $("new-secret-value").value = "";
  $("new-secret").hidden = true;
  $("create-key-name").focus();
}

async function revoke(key) {
  if (!confirm(`Revoke key ${key.name} (${key.id})? It stops working at once.`)) return;
  await guarded(async () => {
    await api("POST", `/admin/keys/${encodeURIComponent(key.id)}/revoke`);
    say(`Key ${key.name} revoked.`);
    await loadKeys();
  });
}

const LIMIT_FIELDS = { "limit-rpm": "requests_per_minute", "limit-tpm": "tokens_per_minute",
  "limit-conc": "concurrent_requests", "limit-daily": "daily_tokens" };

function fillLimits(limits, key) {
  editingKey = key;
  for (const [id, name] of Object.entries(LIMIT_FIELDS)) $(id).value = limits[name] ?? "";
  $("limits-title").textContent = key ? `Limits of key ${key.name}` : `Limits of tenant ${$("keys-tenant").value}`;
  for (const node of document.querySelectorAll(".key-only")) node.hidden = !key;
  $("limits-cancel").hidden = !key;
  $("limit-expiry").value = key && key.expires_at ? day(key.expires_at) : "";
}

function editKey(key) {
  fillLimits(key.limits, key);
  $("limit-rpm").focus();
}

async function saveLimits(event) {
  event.preventDefault();
  await guarded(async () => {
    const limits = {};
    for (const [id, name] of Object.entries(LIMIT_FIELDS)) if ($(id).value) limits[name] = Number($(id).value);
    if (editingKey) {
      const update = { limits };
      const expiry = $("limit-expiry").value;
      if (expiry) update.expires_at = Date.parse(expiry + "T00:00:00Z") / 1000 + DAY - 1;
      else update.clear_expiry = true;
      await api("PATCH", `/admin/keys/${encodeURIComponent(editingKey.id)}`, update);
      say(`Limits of key ${editingKey.name} saved.`);
      editingKey = null;
    } else {
      const tenant = $("keys-tenant").value;
      await api("PATCH", `/admin/tenants/${encodeURIComponent(tenant)}`, { limits });
      say(`Limits of tenant ${tenant} saved.`);
    }
    await loadKeys();
  });
}

// ---- Routing -------------------------------------------------------------------------------
async function loadRouting() {
  await guarded(async () => {
    const status = await api("GET", "/admin/routing");
    $("routing-models").replaceChildren(...Object.entries(status.models).map(([name, m]) => modelPanel(name, m)));
    $("routing-load").replaceChildren(loadTable(status.pools));
    $("routing-queue").replaceChildren(queueTable(status.flow));
    $("routing-pools").replaceChildren(poolTable(status.pools));
    say("Routing as of " + new Date().toISOString().slice(11, 19) + " UTC");
  });
}

function modelPanel(name, model) {
  const canary = model.canary;
  const cols = ["Variant", "Weight", "Configured", "Pools", "Requests (window)", "Error rate", "p95 TTFT", "Rollback"];
  const rows = Object.entries(model.variants).map(([vname, v]) => {
    const input = el("input", { type: "number", min: "0", step: "any", class: "weight", value: v.weight,
      id: `weight-${name}-${vname}`, "aria-label": `Weight of ${name} variant ${vname}` });
    const set = el("button", { type: "button", text: "Set", onclick: () => setWeight(name, vname, input.value) });
    const last = v.last_rollback;
    const rollback = v.rolled_back ? `rolled back: ${last ? last.reason : ""}` : last ? `last: ${last.reason} (${when(last.at)})` : "none";
    const w = v.window;
    return el("tr", { "data-variant": vname }, el("th", { scope: "row", text: vname }), el("td", {}, input, " ", set),
      el("td", { class: "num", text: String(v.configured_weight) }),
      el("td", { text: Object.entries(v.pools).map(([role, pool]) => `${role}: ${pool}`).join(", ") }),
      el("td", { class: "num", text: fmt(w.requests) }),
      el("td", { class: "num", text: w.requests ? (w.error_rate * 100).toFixed(1) + "%" : "–" }),
      el("td", { class: "num", text: w.ttft_p95_ms === null ? "–" : w.ttft_p95_ms.toFixed(0) + " ms" }),
      el("td", { class: v.rolled_back ? "bad" : null, text: rollback }));
  });
  const canaryText = canary ? `Canary: baseline ${canary.baseline}, window ${canary.window_seconds} s, ` +
    `at least ${canary.min_requests} requests, error margin ${canary.error_rate_margin}, p95 TTFT margin ${canary.ttft_p95_margin}` : "No canary judge (weights are fixed).";
  return el("section", { class: "model", "aria-label": `Model ${name}` }, el("h3", { text: name }),
    el("p", { text: `PD from ${fmt(model.policy.pd_threshold_tokens)} prompt tokens. ${canaryText}` }),
    el("table", {}, el("caption", { text: `Variants of ${name}` }),
      el("thead", {}, el("tr", {}, ...cols.map((c) => el("th", { scope: "col", text: c })))), el("tbody", {}, ...rows)));
}

function poolTable(pools) {
  const cols = ["Pool", "In flight", "Replica", "Healthy", "Breaker", "Outstanding", "Last error"];
  const rows = [];
  for (const [name, pool] of Object.entries(pools)) {
    for (const r of pool.replicas) {
      rows.push(el("tr", { "data-pool": name }, el("th", { scope: "row", text: name }),
        el("td", { class: "num", text: `${pool.in_flight}${pool.capacity ? " / " + pool.capacity : ""}` }),
        el("td", {}, el("code", { text: r.url })),
        el("td", { class: r.healthy ? "ok" : "bad", text: r.healthy ? "up" : "down" }),
        el("td", { class: r.breaker === "closed" ? "ok" : "bad", text: r.breaker.replace("_", "-") }),
        el("td", { class: "num", text: String(r.outstanding) }),
        el("td", { text: r.error || r.last_failure || "" })));
    }
  }
  return el("table", {}, el("caption", { text: "Pools and replicas" }),
    el("thead", {}, el("tr", {}, ...cols.map((c) => el("th", { scope: "col", text: c })))), el("tbody", {}, ...rows));
}

// The gateway's own load view and the engines' gauges (when fresh), per pool.
function loadTable(pools) {
  const cols = ["Pool", "In flight", "Prompt tokens", "Other gateways", "Engine running", "Engine waiting",
    "KV usage", "Prefix hits", "Signal age", "Saturated", "Prefix index"];
  const num = (v, digits = 0) => (v === null || v === undefined ? "–" : Number(v).toFixed(digits));
  const rows = Object.entries(pools).map(([name, p]) => {
    const e = p.engine;
    const stale = e && !e.fresh;
    return el("tr", { "data-load": name }, el("th", { scope: "row", text: name }),
      el("td", { class: "num", text: `${p.in_flight}${p.capacity ? " / " + p.capacity : ""}` }),
      el("td", { class: "num", text: fmt(p.prompt_tokens_in_flight) }),
      el("td", { class: "num", text: String(p.other_gateways.in_flight) }),
      el("td", { class: "num", text: e ? num(e.running) : "–" }),
      el("td", { class: "num", text: e ? num(e.waiting) : "–" }),
      el("td", { class: "num", text: e && e.kv_usage !== null ? (e.kv_usage * 100).toFixed(0) + "%" : "–" }),
      el("td", { class: "num", text: e && e.prefix_hit_rate !== null ? (e.prefix_hit_rate * 100).toFixed(0) + "%" : "–" }),
      el("td", { class: stale ? "bad" : null, text: e ? num(e.age_seconds, 1) + " s" + (stale ? " (stale)" : "") : p.engine_error || "no signal" }),
      el("td", { class: p.saturated ? "bad" : "ok", text: p.saturated || "no" }),
      el("td", { class: "num", text: fmt(p.prefix_index_blocks) }));
  });
  return el("table", {}, el("caption", { text: "Pool load: the gateway's own view and the engines' gauges" }),
    el("thead", {}, el("tr", {}, ...cols.map((c) => el("th", { scope: "col", text: c })))), el("tbody", {}, ...rows));
}

function queueTable(flow) {
  if (!flow.enabled) return el("p", { text: "Flow control is off: requests never wait at the gateway." });
  const rows = flow.bands.map((b) => el("tr", { "data-band": b.name }, el("th", { scope: "row", text: b.name }),
    el("td", { class: "num", text: String(b.waiting) }), el("td", { text: b.sheddable ? "yes" : "no" })));
  return el("table", {}, el("caption", { text: `Waiting: ${flow.waiting} of ${flow.max_queued}, ` +
      `${fmt(flow.bytes)} bytes, at most ${flow.max_wait_seconds} s each` }),
    el("thead", {}, el("tr", {}, ...["Band", "Waiting", "Sheddable"].map((c) => el("th", { scope: "col", text: c })))),
    el("tbody", {}, ...rows));
}

async function setWeight(model, variant, value) {
  await guarded(async () => {
    const weight = Number(value);
    if (!(weight >= 0)) throw new Error("A weight is a number of at least 0.");
    await api("PUT", `/admin/routing/models/${encodeURIComponent(model)}/variants/${encodeURIComponent(variant)}`, { weight });
    await loadRouting();
    say(`Weight of ${model}/${variant} set to ${weight}.`);
  });
}

// ---- Wiring --------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", () => {
  $("sign-in-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", () => { signOut(); say("Signed out."); });
  for (const button of $("nav").querySelectorAll("button")) button.addEventListener("click", () => show(button.dataset.view));
  $("usage-form").addEventListener("submit", (e) => { e.preventDefault(); markReady("usage", loadUsage()); });
  $("usage-csv").addEventListener("click", downloadCsv);
  $("keys-tenant").addEventListener("change", () => { editingKey = null; $("new-secret").hidden = true; loadKeys(); });
  $("create-key-form").addEventListener("submit", createKey);
  $("copy-secret").addEventListener("click", copySecret);
  $("hide-secret").addEventListener("click", hideSecret);
  $("limits-form").addEventListener("submit", saveLimits);
  $("limits-cancel").addEventListener("click", () => { editingKey = null; loadKeys(); });
  $("routing-refresh").addEventListener("click", loadRouting);
  window.addEventListener("hashchange", () => { if (session.key) show(location.hash.slice(1)); });
  if (session.key && session.role) start(); else signOut();
});
