// kvtier operator UI. Plain JavaScript, no dependencies, no external fetch.
"use strict";

const API = "/api/v1";
const $ = (sel) => document.querySelector(sel);
const state = {
  page: "overview", tiers: null, cluster: null,
  tput: { puts: [], gets: [] },          // one point per poll
  evict: { evict: [], offload: [] },      // one point per second from events
  evictNow: { evict: 0, offload: 0 },
  events: [], eventsPaused: false,
  objCursors: [""], objPage: 0, objNext: "",
};
const MAXPTS = 90;

// ---------- formatting ----------
function esc(s) {
  return String(s ?? "").replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function fmtBytes(n) {
  if (n == null || isNaN(n)) return "–";
  const u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0, v = Number(n);
  while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
  return (i === 0 ? v.toFixed(0) : v.toFixed(v < 10 ? 2 : v < 100 ? 1 : 0)) + " " + u[i];
}
function fmtRate(bps) { // decimal for throughput, as NICs and disks quote it
  if (bps == null || isNaN(bps)) return "–";
  const u = ["B/s", "kB/s", "MB/s", "GB/s"];
  let i = 0, v = bps;
  while (v >= 1000 && i < u.length - 1) { v /= 1000; i++; }
  return v.toFixed(v < 10 ? 2 : 1) + " " + u[i];
}
function fmtNum(n) { return n == null ? "–" : Number(n).toLocaleString("en-US"); }
function fmtOps(n) {
  if (n == null || isNaN(n)) return "–";
  if (n >= 1e6) return (n / 1e6).toFixed(2) + " M";
  if (n >= 1e3) return (n / 1e3).toFixed(1) + " k";
  return n.toFixed(n < 10 ? 1 : 0);
}
function fmtPct(f, digits = 1) { return f == null || isNaN(f) ? "–" : (f * 100).toFixed(digits) + " %"; }
function fmtAgo(iso) {
  if (!iso) return "never";
  const s = (Date.now() - Date.parse(iso)) / 1000;
  if (s < 0) return "in " + fmtDur(-s);
  return fmtDur(s) + " ago";
}
function fmtDur(s) {
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  if (s < 60) return s.toFixed(s < 10 ? 1 : 0) + " s";
  if (s < 3600) return (s / 60).toFixed(0) + " min";
  if (s < 86400) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}
function fmtTime(iso) { return iso ? new Date(iso).toLocaleString() : "–"; }
function badge(cls, text) { return `<span class="badge ${esc(cls)}">${esc(text ?? cls)}</span>`; }
function bar(frac, markFrac, markLabel) {
  const f = Math.max(0, Math.min(1, frac || 0));
  const cls = markFrac && f >= markFrac ? "full" : f >= 0.8 ? "hot" : "";
  const mark = markFrac ? `<div class="mark" style="left:${(markFrac * 100).toFixed(1)}%" data-label="${esc(markLabel || "")}"></div>` : "";
  return `<div class="bar" title="${fmtPct(f)}"><div class="fill ${cls}" style="width:${(f * 100).toFixed(1)}%"></div>${mark}</div>`;
}

// ---------- API ----------
class ApiError extends Error {
  constructor(status, body) { super(body.message || ("HTTP " + status)); this.status = status; this.code = body.code || ""; }
}
function token() { return sessionStorage.getItem("kvtier-token") || ""; }
async function api(method, path, body, retried) {
  const headers = {};
  if (token()) headers["Authorization"] = "Bearer " + token();
  let payload;
  if (body !== undefined) { headers["Content-Type"] = "application/json"; payload = JSON.stringify(body); }
  const r = await fetch(API + path, { method, headers, body: payload });
  if (r.status === 204) return null;
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { data = { message: text }; }
  if (r.status === 401 && !retried) {
    if (await askToken()) return api(method, path, body, true);
  }
  if (!r.ok) throw new ApiError(r.status, data || {});
  return data;
}
function askToken() {
  return new Promise((resolve) => {
    const d = $("#token-dlg");
    $("#token-input").value = "";
    d.onclose = () => {
      const v = $("#token-input").value.trim();
      if (d.returnValue === "ok" && v) { sessionStorage.setItem("kvtier-token", v); resolve(true); } else resolve(false);
    };
    d.showModal();
  });
}
function confirmDialog(title, html, okText = "Confirm", danger = true) {
  return new Promise((resolve) => {
    const d = $("#confirm");
    $("#confirm-title").textContent = title;
    $("#confirm-body").innerHTML = html;
    const ok = $("#confirm-ok");
    ok.textContent = okText;
    ok.className = "btn " + (danger ? "danger" : "primary");
    d.onclose = () => resolve(d.returnValue === "ok");
    d.returnValue = "";
    d.showModal();
  });
}
let toastTimer;
function toast(msg, err) {
  const t = $("#toast");
  t.textContent = msg;
  t.className = "toast" + (err ? " err" : "");
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => t.classList.add("hidden"), err ? 7000 : 3500);
}
function showErr(e) { toast((e.code ? e.code + ": " : "") + e.message, true); }

// ---------- routing ----------
const loaders = {};
function route() {
  const p = (location.hash || "#overview").slice(1).split("?")[0];
  state.page = loaders[p] ? p : "overview";
  document.querySelectorAll(".page").forEach((s) => s.classList.toggle("hidden", s.id !== "page-" + state.page));
  document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === state.page));
  loaders[state.page]();
}
window.addEventListener("hashchange", route);

// ---------- health ----------
async function refreshHealth() {
  const pill = $("#health-pill");
  try {
    const r = await fetch(API + "/ready");
    const j = await r.json();
    state.ready = j;
    pill.className = "pill " + (j.ready && !j.degraded ? "pill-ok" : "pill-warn");
    pill.textContent = j.ready ? (j.degraded ? "degraded" : "ready") : "not ready";
    pill.title = j.reason || "";
    $("#banner").classList.add("hidden");
  } catch (e) {
    pill.className = "pill pill-bad"; pill.textContent = "unreachable";
    const b = $("#banner"); b.textContent = "Cannot reach the kvtier server: " + e.message; b.classList.remove("hidden");
  }
}

// ---------- overview ----------
async function loadOverview() {
  try {
    const [c, t, cl] = await Promise.all([api("GET", "/cluster"), api("GET", "/tiers"), api("GET", "/clients")]);
    state.cluster = c; state.tiers = t; state.clients = cl.clients || [];
    renderOverview(c, t);
  } catch (e) { showErr(e); }
}

// renderAppliances lists every appliance (a client serving storage) with
// whether it is up: a suspect, departed or unhealthy one shows "down" and
// why, since its replicas are not handed out meanwhile.
function renderAppliances() {
  const apps = (state.clients || []).filter((x) => x.storage || x.segments.length || (x.disk && x.disk.capacity > 0));
  const down = apps.filter((a) => a.state !== "live" || (a.problems || []).length);
  $("#ov-app-summary").textContent = apps.length ? `${apps.length - down.length} up · ${down.length} down` : "";
  $("#ov-appliances").innerHTML = apps.map((a) => {
    const up = a.state === "live" && !(a.problems || []).length;
    const why = (a.problems || []).join("; ") || (up ? `heartbeat ${fmtAgo(a.last_heartbeat)}` : a.state);
    return `<div class="kvrow" data-appliance="${esc(a.id)}" data-up="${up ? "1" : "0"}"><span class="key">${esc(a.id)}</span>
      <span>${up ? badge("live", "up") : badge("gone", "down")} <span class="${up ? "muted" : "bad"} small">${esc(why)}</span></span></div>`;
  }).join("") || '<div class="muted">No appliance has registered.</div>';
}
loaders.overview = loadOverview;

const TIER_NAMES = { memory: "DRAM", nof: "NVMe-oF", disk: "SSD" };
const TIER_COLORS = { memory: "#2f80ed", nof: "#8e44ad", disk: "#16a085" };
function tierStat(c, name) { return (c.tiers || []).find((t) => t.tier === name) || { capacity: 0, used: 0, objects: 0 }; }

function renderOverview(c, t) {
  const r = state.ready;
  $("#ov-health").innerHTML = r ? (r.ready ? (r.degraded ? '<span class="warn">Degraded</span>' : '<span class="ok">Ready</span>') : '<span class="warn">Not ready</span>') : "–";
  $("#ov-health-reason").textContent = r ? (r.ready && !r.degraded ? `${r.mounted_segments} segment(s) mounted${c.leader ? ", leader" : ""}` : (r.degraded ? (r.reasons || []).join(" · ") : r.reason)) : "";
  renderAppliances();
  $("#ov-objects").textContent = fmtNum(c.objects);
  const mem = tierStat(c, "memory");
  $("#ov-objects-hint").textContent = `${fmtNum(mem.objects)} replicas in DRAM · ${fmtNum(tierStat(c, "disk").objects)} on SSD`;
  $("#ov-mem-used").textContent = fmtBytes(mem.used);
  $("#ov-mem-hint").textContent = mem.capacity ? `of ${fmtBytes(mem.capacity)} (${fmtPct(mem.used / mem.capacity)})` : "no DRAM mounted";
  $("#ov-hitrate").textContent = c.gets.total ? fmtPct(c.gets.hit_rate) : "–";
  $("#ov-hit-hint").textContent = `${fmtNum(c.gets.total)} gets · ${fmtNum(c.gets.misses)} misses`;
  $("#ov-rates").textContent = c.rates.valid ? `${fmtOps(c.rates.puts_per_sec)} / ${fmtOps(c.rates.gets_per_sec)}` : "measuring…";
  $("#ov-rejected").textContent = fmtNum(c.puts.rejected.total);
  $("#ov-rejected").className = "value" + (c.puts.rejected.total ? " bad" : "");
  $("#ov-rejected-hint").textContent = `no space ${fmtNum(c.puts.rejected.no_space)} · quota ${fmtNum(c.puts.rejected.quota)} · count ${fmtNum(c.puts.rejected.object_count)}`;

  // tiers with capacity bars and watermark markers
  const hw = { memory: t.dram.high_watermark, disk: t.ssd.high_watermark };
  let html = "";
  for (const name of ["memory", "nof", "disk"]) {
    const s = tierStat(c, name);
    if (!s.capacity && name !== "memory") continue;
    const frac = s.capacity ? s.used / s.capacity : 0;
    html += `<div class="tier" data-tier="${name}"><div class="head"><span class="name">${TIER_NAMES[name]}</span>
      <span class="figs">${fmtBytes(s.used)} of ${fmtBytes(s.capacity)} · ${fmtPct(frac)} · ${fmtNum(s.objects)} ${name === "disk" ? "objects" : "replicas"}</span></div>
      ${bar(frac, hw[name], hw[name] ? "HW " + fmtPct(hw[name], 0) : "")}</div>`;
  }
  html += `<div class="muted small">DRAM eviction frees ${fmtPct(t.dram.eviction_ratio, 0)} per pass · lease policy ${esc(t.dram.lease_policy)} · offload ${esc(t.ssd.offload_mode)} · SSD ${esc((t.ssd.policy || "").toUpperCase())}</div>`;
  $("#ov-tiers").innerHTML = html;

  // hit rate by tier: share of all gets served by each tier, and misses
  const g = c.gets;
  const parts = [["memory", g.share_by_tier.memory], ["nof", g.share_by_tier.nof], ["disk", g.share_by_tier.disk], ["miss", g.miss_fraction]];
  let stack = "", legend = "";
  for (const [n, f] of parts) {
    const color = n === "miss" ? "#c9ced6" : TIER_COLORS[n];
    if (f > 0) stack += `<div style="width:${(f * 100).toFixed(2)}%;background:${color}" title="${n} ${fmtPct(f)}"></div>`;
    legend += `<span><i style="background:${color}"></i>${n === "miss" ? "miss" : TIER_NAMES[n]} ${g.total ? fmtPct(f) : "–"}</span>`;
  }
  let rows = "";
  for (const ts of c.tiers || []) {
    if (!ts.capacity && !ts.hits) continue; // tier not present on this cluster
    rows += `<div class="kvrow"><span>${TIER_NAMES[ts.tier] || esc(ts.tier)}</span><span>${fmtNum(ts.hits)} hits · ${fmtNum(ts.misses)} misses · <b>${ts.hits + ts.misses ? fmtPct(ts.hit_rate) : "–"}</b></span></div>`;
  }
  $("#ov-hits").innerHTML = `<div class="stack">${stack}</div><div class="legend">${legend}</div><div class="muted small" style="margin-top:10px">Share of ${fmtNum(g.total)} gets served by each tier; per tier:</div>${rows}`;

  const sf = c.evictions.shortfall;
  $("#ov-shortfall").innerHTML = `<div class="kvrow"><span>Evicted</span><span>${fmtNum(c.evictions.count)} objects · ${fmtBytes(c.evictions.bytes)} in ${fmtNum(c.evictions.passes)} passes</span></div>` +
    [["leased", "objects still leased by readers"], ["pinned", "pinned objects"], ["in_flight", "puts in flight"], ["awaiting_offload", "waiting for SSD offload"]]
      .map(([k, d]) => `<div class="kvrow"><span>${esc(d)}</span><span class="${sf[k] ? "warn" : ""}">${fmtNum(sf[k])}</span></div>`).join("");
  const o = c.offloads;
  $("#ov-offloads").innerHTML = [["Queued", o.queued], ["Completed", o.completed], ["Failed", o.failed], ["Skipped (queue full)", o.skipped_queue_full]]
    .map(([k, v]) => `<div class="kvrow"><span>${k}</span><span class="${(k === "Failed" || k.startsWith("Skipped")) && v ? "bad" : ""}">${fmtNum(v)}</span></div>`).join("") +
    `<div class="kvrow"><span>SSD buckets dropped</span><span>${fmtNum(c.other.disk_buckets_dropped)}</span></div>`;
  drawCharts();
}

function pushPoint(arr, v) { arr.push(v); if (arr.length > MAXPTS) arr.shift(); }
async function pollRates() {
  try {
    const c = await api("GET", "/cluster");
    state.cluster = c;
    if (state.page === "overview") { // appliances and health change in seconds: follow them here
      const [cl] = await Promise.all([api("GET", "/clients"), refreshHealth()]);
      state.clients = cl.clients || [];
    }
    if (c.rates.valid) { pushPoint(state.tput.puts, c.rates.puts_per_sec); pushPoint(state.tput.gets, c.rates.gets_per_sec); }
    if (state.page === "overview" && state.tiers) renderOverview(c, state.tiers);
  } catch { /* health pill shows it */ }
}

// ---------- charts (canvas, hand-drawn) ----------
function lineChart(canvas, series, fmt) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (!w || !h) return;
  canvas.width = w * dpr; canvas.height = h * dpr;
  const g = canvas.getContext("2d");
  g.scale(dpr, dpr);
  g.clearRect(0, 0, w, h);
  const L = 56, R = 10, T = 10, B = 26;
  let max = 0;
  for (const s of series) for (const v of s.values) max = Math.max(max, v);
  max = niceMax(max || 1);
  g.font = "11px system-ui, sans-serif";
  g.strokeStyle = "#edf0f4"; g.fillStyle = "#8a94a6"; g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const y = T + (h - T - B) * (1 - i / 4);
    g.beginPath(); g.moveTo(L, y + .5); g.lineTo(w - R, y + .5); g.stroke();
    g.textAlign = "right"; g.fillText(fmt(max * i / 4), L - 6, y + 4);
  }
  g.textAlign = "left"; g.fillText(`last ${MAXPTS} samples`, L, h - 8);
  const xs = (i) => L + (w - L - R) * (i / (MAXPTS - 1));
  for (const s of series) {
    const off = MAXPTS - s.values.length;
    g.strokeStyle = s.color; g.lineWidth = 2; g.setLineDash(s.dash || []); g.beginPath();
    s.values.forEach((v, i) => { const x = xs(i + off), y = T + (h - T - B) * (1 - v / max); i ? g.lineTo(x, y) : g.moveTo(x, y); });
    g.stroke();
  }
  g.setLineDash([]);
  let lx = w - R;
  g.textAlign = "right";
  for (const s of [...series].reverse()) {
    const last = s.values.length ? fmt(s.values[s.values.length - 1]) : "–";
    const label = `${s.label} ${last}`;
    g.fillStyle = "#445"; g.fillText(label, lx, h - 8);
    lx -= g.measureText(label).width + 8;
    g.fillStyle = s.color; g.fillRect(lx, h - 16, 8, 8);
    lx -= 14;
  }
}
function niceMax(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}
function drawCharts() {
  if (state.page !== "overview") return;
  lineChart($("#chart-tput"), [{ label: "puts/s", color: "#2f80ed", values: state.tput.puts }, { label: "gets/s", color: "#16a085", values: state.tput.gets, dash: [6, 4] }], fmtOps);
  lineChart($("#chart-evict"), [{ label: "evictions/s", color: "#d64545", values: state.evict.evict }, { label: "offloads/s", color: "#8e44ad", values: state.evict.offload, dash: [6, 4] }], fmtOps);
}
setInterval(() => { // one eviction-chart point per second from the live events
  pushPoint(state.evict.evict, state.evictNow.evict); pushPoint(state.evict.offload, state.evictNow.offload);
  state.evictNow = { evict: 0, offload: 0 };
  drawCharts();
}, 1000);
window.addEventListener("resize", drawCharts);

// ---------- events ----------
// The stream is read with fetch, not EventSource, so that it carries the
// bearer token a master with --credentials asks for (EventSource cannot send
// headers); it reconnects as EventSource would.
function connectEvents() {
  const pill = $("#live-pill");
  const kinds = new Set(["put", "remove", "evict", "offload", "bucket_delete", "segment", "client", "message"]);
  const warn = (text) => { pill.className = "pill pill-warn"; pill.textContent = text; };
  const again = (text) => { warn(text || "reconnecting"); setTimeout(run, 3000); };
  async function run() {
    let r;
    try {
      const headers = {};
      if (token()) headers["Authorization"] = "Bearer " + token();
      r = await fetch(API + "/events", { headers });
    } catch { return again(); }
    if (!r.ok || !r.body) return again(r.status === 401 || r.status === 403 ? "no access: set a token" : "reconnecting");
    pill.className = "pill pill-ok"; pill.textContent = "live";
    const reader = r.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = "";
    for (;;) {
      let chunk;
      try { chunk = await reader.read(); } catch { return again(); }
      if (chunk.done) return again();
      buf += chunk.value.replace(/\r\n/g, "\n");
      let i;
      while ((i = buf.indexOf("\n\n")) >= 0) {
        const block = buf.slice(0, i);
        buf = buf.slice(i + 2);
        let kind = "message";
        const data = [];
        for (const line of block.split("\n")) {
          if (line.startsWith("event:")) kind = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (kind === "end") { reader.cancel().catch(() => {}); return again("stream ended"); }
        if (kinds.has(kind) && data.length) { try { onEvent(JSON.parse(data.join("\n"))); } catch { /* ignore */ } }
      }
    }
  }
  run();
}
function onEvent(ev) {
  if (ev.kind === "evict") state.evictNow.evict++;
  if (ev.kind === "offload") state.evictNow.offload++;
  if (ev.kind === "segment" || ev.kind === "client") { if (state.page === "segments" || state.page === "clients") loaders[state.page](); }
  if (state.eventsPaused) return;
  state.events.unshift(ev);
  if (state.events.length > 500) state.events.pop();
  if (state.page === "events") renderEvents();
}
function renderEvents() {
  const kind = $("#ev-kind").value;
  const list = state.events.filter((e) => !kind || e.kind === kind);
  $("#ev-empty").classList.toggle("hidden", list.length > 0);
  $("#ev-count").textContent = `${list.length} events shown (newest first, up to 500 kept)`;
  $("#ev-table tbody").innerHTML = list.slice(0, 300).map((e) =>
    `<tr><td>${esc(new Date(e.time).toLocaleTimeString())}</td><td>${badge(e.kind)}</td><td class="key">${esc(e.key || (e.key_b64 ? "~b64:" + e.key_b64 : ""))}</td>
     <td>${esc([e.segment, e.node].filter(Boolean).join(" · "))}</td><td class="num">${e.bytes ? fmtBytes(e.bytes) : ""}</td><td>${esc(e.message)}</td></tr>`).join("");
}
loaders.events = renderEvents;

// ---------- segments ----------
async function loadSegments() {
  try {
    const [s, c] = await Promise.all([api("GET", "/segments"), api("GET", "/clients")]);
    const segs = s.segments || [];
    let cap = 0, used = 0;
    $("#seg-table tbody").innerHTML = segs.map((g) => {
      cap += g.capacity; used += g.used;
      const frac = g.capacity ? g.used / g.capacity : 0;
      const drain = g.state === "draining" ? ` <span class="muted small">until ${esc(fmtTime(g.drain_deadline))}</span>` : "";
      return `<tr data-seg="${esc(g.name)}"><td class="key">${esc(g.name)}</td><td>${badge(g.type)}</td><td>${esc(g.owner)}</td><td>${badge(g.state)}${drain}</td>
        <td>${bar(frac)}<div class="muted small">${fmtBytes(g.used)} · ${fmtPct(frac)}</div></td><td class="num">${fmtBytes(g.capacity)}</td>
        <td class="num">${fmtBytes(g.largest_free)}</td><td class="num">${fmtNum(g.replicas)}</td>
        <td class="num"><button class="btn sm drain" data-name="${esc(g.name_path)}" ${g.state !== "mounted" ? "disabled" : ""}>Drain</button>
        <button class="btn sm unmount" data-name="${esc(g.name_path)}">Unmount</button></td></tr>`;
    }).join("");
    $("#seg-empty").classList.toggle("hidden", segs.length > 0);
    $("#seg-summary").textContent = segs.length ? `${segs.length} segments · ${fmtBytes(used)} of ${fmtBytes(cap)} used` : "";
    const hasSSD = (x) => x.disk && x.disk.capacity > 0;
    const apps = (c.clients || []).filter((x) => x.segments.length || hasSSD(x));
    $("#app-table tbody").innerHTML = apps.map((a) => {
      const d = hasSSD(a) ? a.disk : null;
      const frac = d && d.capacity ? d.used / d.capacity : 0;
      return `<tr><td class="key">${esc(a.id)}</td><td>${badge(a.state)}</td><td class="num">${a.segments.length}</td>
        <td>${d ? bar(frac) + `<div class="muted small">${fmtBytes(d.used)} of ${fmtBytes(d.capacity)}</div>` : '<span class="muted">no SSD</span>'}</td>
        <td class="num">${d ? fmtNum(d.buckets) + (d.quarantined_buckets ? ` <span class="bad">(${d.quarantined_buckets} quarantined)</span>` : "") : "–"}</td>
        <td class="num">${d ? fmtNum(d.offload_queue) : "–"}</td><td>${d ? (d.index_loaded ? badge("live", "loaded") : badge("grace", "loading")) : "–"}</td></tr>`;
    }).join("") || `<tr><td colspan="7" class="empty">No appliance has registered.</td></tr>`;
  } catch (e) { showErr(e); }
}
loaders.segments = loadSegments;
document.addEventListener("click", async (ev) => {
  const b = ev.target.closest("button");
  if (!b) return;
  if (b.classList.contains("drain")) {
    const name = decodeURIComponent(b.dataset.name);
    if (!await confirmDialog("Drain segment?", `<p>Segment <b class="key">${esc(name)}</b> stops taking new objects; reads are served for 30 s, then it is unmounted and its DRAM replicas are dropped (SSD copies stay).</p>`, "Drain")) return;
    try { await api("POST", `/segments/${b.dataset.name}/drain`, { grace_ms: 30000 }); toast("Draining " + name); loadSegments(); } catch (e) { showErr(e); }
  } else if (b.classList.contains("unmount")) {
    const name = decodeURIComponent(b.dataset.name);
    if (!await confirmDialog("Unmount segment now?", `<p>Segment <b class="key">${esc(name)}</b> is unmounted <b>at once</b>. Objects whose only copy is in it are lost.</p>`, "Unmount")) return;
    try { await api("DELETE", `/segments/${b.dataset.name}`); toast("Unmounted " + name); loadSegments(); } catch (e) { showErr(e); }
  } else if (b.classList.contains("del")) {
    await deleteObject(b.dataset.key, b.dataset.label, b.dataset.leased === "1");
  } else if (b.classList.contains("info")) {
    await showObject(b.dataset.key);
  }
});

// ---------- objects ----------
function objQuery(cursor) {
  const p = new URLSearchParams();
  const prefix = $("#obj-prefix").value;
  if (prefix) p.set("prefix", prefix);
  const tenant = $("#obj-tenant").value.trim();
  if (tenant && tenant !== "default") p.set("tenant", tenant);
  p.set("limit", $("#obj-limit").value);
  if (cursor) p.set("cursor", cursor);
  return p.toString();
}
function tenantQS() { const t = $("#obj-tenant").value.trim(); return t && t !== "default" ? "?tenant=" + encodeURIComponent(t) : ""; }
async function loadObjects() {
  try {
    const r = await api("GET", "/objects?" + objQuery(state.objCursors[state.objPage]));
    const objs = r.objects || [];
    state.objNext = r.next_cursor || "";
    $("#obj-table tbody").innerHTML = objs.map((o) => {
      const label = o.key || "~b64:" + o.key_b64;
      const pins = (o.hard_pin ? badge("hard", "hard pin") : "") + (o.soft_pin ? badge("soft", "soft pin") : "") || '<span class="muted">–</span>';
      const lease = o.lease.active ? badge("leased", "leased " + fmtAgo(o.lease.deadline).replace(" ago", "")) : '<span class="muted">none</span>';
      const reps = o.replicas.map((x) => badge(x.unavailable ? "gone" : x.state === "COMPLETE" ? x.type : x.state, (x.type === "LOCAL_DISK" ? "SSD" : x.type === "MEMORY" ? "DRAM" : x.type) + (x.unavailable ? " (down)" : ""))).join("");
      return `<tr data-key="${esc(o.key_path)}"><td class="key">${esc(label)}</td><td class="num">${fmtBytes(o.size)}</td>
        <td>${o.tiers.map((t) => badge(t, TIER_NAMES[t] || t)).join("") || badge("PROCESSING", "writing")}</td>
        <td>${o.replicas.length} ${reps}</td><td>${lease}</td><td>${pins}</td><td class="num">${fmtNum(o.read_count)}</td>
        <td>${o.created ? esc(fmtAgo(o.created)) : "–"}</td>
        <td class="num"><button class="btn sm info" data-key="${esc(o.key_path)}">Details</button>
        <button class="btn sm del" data-key="${esc(o.key_path)}" data-label="${esc(label)}" data-leased="${o.lease.active ? 1 : 0}">Delete</button></td></tr>`;
    }).join("");
    $("#obj-empty").classList.toggle("hidden", objs.length > 0);
    $("#obj-prev").disabled = state.objPage === 0;
    $("#obj-next").disabled = !state.objNext;
    $("#obj-page").textContent = `page ${state.objPage + 1} · ${objs.length} objects`;
  } catch (e) { showErr(e); }
}
loaders.objects = loadObjects;
$("#obj-form").addEventListener("submit", (e) => { e.preventDefault(); state.objCursors = [""]; state.objPage = 0; $("#obj-detail").classList.add("hidden"); loadObjects(); });
$("#obj-next").addEventListener("click", () => { if (!state.objNext) return; state.objCursors[state.objPage + 1] = state.objNext; state.objPage++; loadObjects(); });
$("#obj-prev").addEventListener("click", () => { if (state.objPage > 0) { state.objPage--; loadObjects(); } });

async function deleteObject(keyPath, label, leased) {
  const force = leased ? `<label><input type="checkbox" id="del-force"> Force: the object is leased by a reader right now</label>` : "";
  const ok = await confirmDialog("Delete object?", `<p>Delete <b class="key">${esc(label)}</b> and all its replicas? This cannot be undone.</p>${force}`, "Delete");
  if (!ok) return;
  const f = document.getElementById("del-force");
  const qs = tenantQS();
  const sep = qs ? "&" : "?";
  try {
    await api("DELETE", `/objects/${keyPath}${qs}${f && f.checked ? sep + "force=true" : ""}`);
    toast("Deleted " + label);
    $("#obj-detail").classList.add("hidden");
    loadObjects();
  } catch (e) { showErr(e); }
}
async function showObject(keyPath) {
  try {
    const o = await api("GET", `/objects/${keyPath}${tenantQS()}`);
    const d = $("#obj-detail");
    const rows = [["Key", `<span class="key">${esc(o.key || "~b64:" + o.key_b64)}</span>`], ["Tenant", esc(o.tenant)], ["Size", fmtBytes(o.size) + ` (${fmtNum(o.size)} bytes)`],
      ["Checksum", o.crc32c != null ? "CRC32C " + o.crc32c.toString(16).padStart(8, "0") : "none"], ["Writer", esc(o.writer || "–")],
      ["Created", esc(fmtTime(o.created))], ["Lease", o.lease.active ? "held until " + esc(fmtTime(o.lease.deadline)) : "none"],
      ["Pin", o.hard_pin ? "hard" : o.soft_pin ? "soft until " + esc(fmtTime(o.soft_pin_until)) : "none"], ["Reads", fmtNum(o.read_count)]];
    d.innerHTML = `<h2>Object details <button class="btn sm" id="obj-detail-close">Close</button></h2><table class="tbl kv"><tbody>${rows.map(([k, v]) => `<tr><td>${k}</td><td>${v}</td></tr>`).join("")}</tbody></table>
      <h2 style="margin-top:14px">Replicas</h2><table class="tbl"><thead><tr><th>Type</th><th>State</th><th>Where</th><th>Node</th><th class="num">Offset</th><th class="num">Length</th></tr></thead><tbody>
      ${o.replicas.map((r) => `<tr><td>${badge(r.type)}</td><td>${badge(r.state)}${r.unavailable ? " " + badge("gone", "node down: not served") : ""}</td><td class="key">${esc(r.type === "LOCAL_DISK" ? "bucket " + r.bucket : r.segment)}</td><td>${esc(r.node)}</td><td class="num">${fmtNum(r.offset)}</td><td class="num">${fmtBytes(r.length)}</td></tr>`).join("")}</tbody></table>`;
    d.classList.remove("hidden");
    $("#obj-detail-close").onclick = () => d.classList.add("hidden");
  } catch (e) { showErr(e); }
}

// ---------- clients ----------
async function loadClients() {
  try {
    const r = await api("GET", "/clients");
    const cl = r.clients || [];
    const n = { live: 0, grace: 0, gone: 0 };
    cl.forEach((c) => n[c.state] = (n[c.state] || 0) + 1);
    $("#cl-summary").textContent = cl.length ? `${n.live} live · ${n.grace} in grace · ${n.gone} gone` : "";
    $("#cl-table tbody").innerHTML = cl.map((c) => {
      const ssd = c.disk && c.disk.capacity > 0;
      const role = (ssd ? "appliance (DRAM + SSD)" : c.segments.length ? "storage node (DRAM)" : "caller (GPU node)") +
        (c.nvme_addr ? ` · <a href="#nvme">NVMe/TCP on <span class="key">${esc(c.nvme_addr)}</span></a>` : "");
      return `<tr><td class="key">${esc(c.id)}</td><td>${badge(c.state)}</td><td class="key">${esc(c.endpoint || "–")}</td>
      <td>${c.segments.map((s) => `<span class="key">${esc(s)}</span>`).join("<br>") || '<span class="muted">none</span>'}</td>
      <td>${esc(fmtAgo(c.last_heartbeat))}</td><td>${role}</td></tr>`;
    }).join("");
    $("#cl-empty").classList.toggle("hidden", cl.length > 0);
  } catch (e) { showErr(e); }
}
loaders.clients = loadClients;

// ---------- NVMe ----------
// Counters are totals that appliances report with each heartbeat; a rate is
// the change between two reports over the time between those heartbeats.
state.nvmePrev = {};  // "node|nqn|nsid" -> last counters and heartbeat time (ms)
state.nvmeRate = {};  // "node|nqn|nsid" -> {rIops, rBps, wIops, wBps}
function nvmeRate(ap, sub, ns) {
  const key = `${ap.node}|${sub.nqn}|${ns.nsid}`;
  const t = ap.last_heartbeat ? Date.parse(ap.last_heartbeat) : 0;
  const prev = state.nvmePrev[key];
  if (prev && t > prev.t) {
    const dt = (t - prev.t) / 1000;
    if (ns.read_ops >= prev.r && ns.write_ops >= prev.w) {
      state.nvmeRate[key] = { rIops: (ns.read_ops - prev.r) / dt, rBps: (ns.read_bytes - prev.rb) / dt,
        wIops: (ns.write_ops - prev.w) / dt, wBps: (ns.write_bytes - prev.wb) / dt };
    } else delete state.nvmeRate[key]; // the target restarted: counters began again at 0
  }
  if (!prev || t > prev.t) state.nvmePrev[key] = { t, r: ns.read_ops, rb: ns.read_bytes, w: ns.write_ops, wb: ns.write_bytes };
  return ap.state === "live" ? state.nvmeRate[key] : undefined;
}
function rateCell(bps, iops) {
  return bps == null ? '<span class="muted">measuring…</span>' : `${fmtRate(bps)}<div class="muted small">${fmtOps(iops)} IOPS</div>`;
}
async function loadNVMe() {
  try {
    const r = await api("GET", "/nvme");
    const aps = r.appliances || [], tot = r.totals;
    let rBps = 0, wBps = 0, rIops = 0, wIops = 0, measured = false;
    const cards = aps.map((ap) => {
      const subs = ap.subsystems.map((sub) => {
        const rows = sub.namespaces.map((ns) => {
          const rt = nvmeRate(ap, sub, ns);
          if (rt) { measured = true; rBps += rt.rBps; wBps += rt.wBps; rIops += rt.rIops; wIops += rt.wIops; }
          const g = ns.segment;
          const seg = g ? `${bar(ns.size ? g.used / ns.size : 0)}<div class="muted small">${fmtBytes(g.used)} in ${fmtNum(g.replicas)} NOF replicas · <span class="key">${esc(g.name)}</span> ${g.state !== "mounted" ? badge(g.state) : ""}</div>`
            : '<span class="muted">not mounted as a NOF segment</span>';
          return `<tr data-nsid="${ns.nsid}"><td class="num">${ns.nsid}</td><td class="num">${fmtBytes(ns.size)}<div class="muted small">${fmtNum(ns.blocks)} blocks</div></td>
            <td class="num">${fmtBytes(ns.block_size)}</td><td>${seg}</td>
            <td class="num nv-read">${fmtBytes(ns.read_bytes)}<div class="muted small">${fmtNum(ns.read_ops)} commands</div></td>
            <td class="num nv-write">${fmtBytes(ns.write_bytes)}<div class="muted small">${fmtNum(ns.write_ops)} commands</div></td>
            <td class="num nv-rrate">${rateCell(rt && rt.rBps, rt && rt.rIops)}</td><td class="num nv-wrate">${rateCell(rt && rt.wBps, rt && rt.wIops)}</td>
            <td class="num">${fmtNum(ns.other_ops)}</td><td class="num ${ns.errors ? "bad" : ""}">${fmtNum(ns.errors)}</td></tr>`;
        }).join("");
        return `<div class="nv-sub"><div class="muted small">Subsystem</div><div class="key nv-nqn">${esc(sub.nqn)}</div>
          <table class="tbl nv-ns"><thead><tr><th class="num">NSID</th><th class="num">Capacity</th><th class="num">Block</th><th class="w30">NOF segment use</th>
          <th class="num">Read</th><th class="num">Written</th><th class="num">Read now</th><th class="num">Write now</th><th class="num" title="flush, write zeroes, deallocate">Other cmds</th><th class="num">Errors</th></tr></thead>
          <tbody>${rows || '<tr><td colspan="10" class="empty">No namespace.</td></tr>'}</tbody></table></div>`;
      }).join("");
      const hosts = ap.hosts.map((h) => `<tr><td class="num">${h.cntlid}</td><td class="key">${esc(h.host_nqn)}</td>
        <td>${h.sub_nqn.endsWith(".discovery") ? badge("grace", "discovery") : `<span class="key">${esc(h.sub_nqn)}</span>`}</td>
        <td class="key">${esc(h.remote_addr || "–")}</td><td class="num">${fmtNum(h.io_queues)}</td></tr>`).join("");
      return `<div class="card nv-target" data-node="${esc(ap.node)}">
        <h2><span class="key">${esc(ap.node)}</span> ${badge(ap.state)} <span class="muted small">NVMe/TCP listener <span class="key">${esc(ap.addr)}</span> · figures from the heartbeat ${esc(fmtAgo(ap.last_heartbeat))}</span></h2>
        ${subs || '<p class="empty">No subsystem.</p>'}
        <h3 class="sub-h">Connected hosts <span class="muted small">${ap.hosts.length}</span></h3>
        <table class="tbl nv-hosts"><thead><tr><th class="num">CNTLID</th><th>Host NQN</th><th>Connected to</th><th>Remote address</th><th class="num">I/O queues</th></tr></thead>
        <tbody>${hosts || '<tr><td colspan="5" class="empty">No host is connected.</td></tr>'}</tbody></table></div>`;
    }).join("");
    $("#nv-targets-list").innerHTML = cards;
    $("#nv-empty").classList.toggle("hidden", aps.length > 0);
    const live = aps.filter((a) => a.state === "live").length;
    $("#nv-targets").textContent = fmtNum(tot.appliances);
    $("#nv-targets-hint").textContent = tot.appliances ? `${live} live · ${fmtNum(tot.subsystems)} subsystem(s)` : "none exporting";
    $("#nv-namespaces").textContent = fmtNum(tot.namespaces);
    $("#nv-namespaces-hint").textContent = `${fmtBytes(tot.capacity)} exported`;
    $("#nv-hosts").textContent = fmtNum(tot.hosts);
    $("#nv-hosts-hint").textContent = "host controllers, all targets";
    $("#nv-read").textContent = fmtBytes(tot.read_bytes);
    $("#nv-read-hint").textContent = `${fmtNum(tot.read_ops)} commands · now ${measured ? fmtRate(rBps) + ", " + fmtOps(rIops) + " IOPS" : "measuring…"}`;
    $("#nv-write").textContent = fmtBytes(tot.write_bytes);
    $("#nv-write-hint").textContent = `${fmtNum(tot.write_ops)} commands · now ${measured ? fmtRate(wBps) + ", " + fmtOps(wIops) + " IOPS" : "measuring…"}`;
    $("#nv-errors").textContent = fmtNum(tot.errors);
    $("#nv-errors").className = "value" + (tot.errors ? " bad" : "");
  } catch (e) { showErr(e); }
}
loaders.nvme = loadNVMe;

// ---------- tier settings ----------
async function loadTiers() {
  try {
    const t = await api("GET", "/tiers");
    state.tiers = t;
    $("#dram-hw").value = +(t.dram.high_watermark * 100).toFixed(2);
    $("#dram-ratio").value = +(t.dram.eviction_ratio * 100).toFixed(2);
    $("#dram-policy").value = t.dram.lease_policy;
    $("#dram-current").textContent = `now: ${fmtPct(t.dram.high_watermark)} · ${fmtPct(t.dram.eviction_ratio)} · ${t.dram.lease_policy}`;
    $("#ssd-offload").value = t.ssd.offload_mode;
    $("#ssd-policy").value = t.ssd.policy;
    $("#ssd-capacity").value = "";
    $("#ssd-capacity").placeholder = t.ssd.capacity ? fmtBytes(t.ssd.capacity).replace(" ", "") : "e.g. 512GiB";
    $("#ssd-hw").value = t.ssd.high_watermark ? +(t.ssd.high_watermark * 100).toFixed(2) : "";
    $("#ssd-current").textContent = `now: ${t.ssd.offload_mode} · ${(t.ssd.policy || "").toUpperCase()} · ${t.ssd.capacity ? fmtBytes(t.ssd.capacity) : "configured capacity"}`;
  } catch (e) { showErr(e); }
}
loaders.tiers = loadTiers;
function changeList(rows) {
  return "<ul>" + rows.map(([k, from, to]) => `<li><b>${esc(k)}</b>: ${esc(from)} &rarr; <b>${esc(to)}</b></li>`).join("") + "</ul><p class=\"muted\">Takes effect at once on every node.</p>";
}
$("#dram-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const t = state.tiers.dram;
  const hw = parseFloat($("#dram-hw").value) / 100, ratio = parseFloat($("#dram-ratio").value) / 100, pol = $("#dram-policy").value;
  if (!(hw > 0 && hw <= 1)) return toast("High watermark must be above 0 and at most 100 %", true);
  if (!(ratio > 0 && ratio <= 1)) return toast("Eviction ratio must be above 0 and at most 100 %", true);
  const body = {}, rows = [];
  if (Math.abs(hw - t.high_watermark) > 1e-9) { body.high_watermark = hw; rows.push(["High watermark", fmtPct(t.high_watermark), fmtPct(hw)]); }
  if (Math.abs(ratio - t.eviction_ratio) > 1e-9) { body.eviction_ratio = ratio; rows.push(["Eviction ratio", fmtPct(t.eviction_ratio), fmtPct(ratio)]); }
  if (pol !== t.lease_policy) { body.lease_policy = pol; rows.push(["Lease policy", t.lease_policy, pol]); }
  if (!rows.length) return toast("Nothing changed");
  if (!await confirmDialog("Change DRAM tier settings?", changeList(rows), "Apply", false)) return;
  try { await api("PATCH", "/tiers/dram", body); toast("DRAM settings applied"); loadTiers(); } catch (err) { showErr(err); }
});
$("#ssd-form").addEventListener("submit", async (e) => {
  e.preventDefault();
  const t = state.tiers.ssd;
  const body = {}, rows = [];
  const mode = $("#ssd-offload").value, pol = $("#ssd-policy").value, cap = $("#ssd-capacity").value.trim(), hwv = $("#ssd-hw").value;
  if (mode !== t.offload_mode) { body.offload_mode = mode; rows.push(["Offload mode", t.offload_mode, mode]); }
  if (pol !== t.policy) { body.policy = pol; rows.push(["Bucket eviction", t.policy, pol]); }
  if (cap) { body.capacity = /^\d+$/.test(cap) ? Number(cap) : cap; rows.push(["Capacity", t.capacity ? fmtBytes(t.capacity) : "configured", cap]); }
  if (hwv !== "") {
    const hw = parseFloat(hwv) / 100;
    if (!(hw > 0 && hw <= 1)) return toast("SSD high watermark must be above 0 and at most 100 %", true);
    if (Math.abs(hw - t.high_watermark) > 1e-9) { body.high_watermark = hw; rows.push(["SSD high watermark", fmtPct(t.high_watermark), fmtPct(hw)]); }
  }
  if (!rows.length) return toast("Nothing changed");
  if (!await confirmDialog("Change SSD tier settings?", changeList(rows), "Apply", false)) return;
  try { await api("PATCH", "/tiers/ssd", body); toast("SSD settings applied"); loadTiers(); } catch (err) { showErr(err); }
});

// ---------- host & config ----------
async function loadHost() {
  try {
    const [s, cfg, doc] = await Promise.all([api("GET", "/system"), api("GET", "/config"), api("GET", "/system/doctor")]);
    const docCls = { ok: "live", skip: "skip", warn: "grace", fail: "gone" };
    $("#host-doctor tbody").innerHTML = (doc.checks || []).map((c) => `<tr data-check="${esc(c.name)}" data-status="${esc(c.status)}"><td class="key">${esc(c.name)}</td>
      <td>${badge(docCls[c.status] || "skip", c.status)}</td><td>${esc(c.found)}</td><td class="small">${c.status === "warn" || c.status === "fail" ? esc(c.fix || c.want || "") : ""}</td></tr>`).join("");
    $("#doc-summary").textContent = `${doc.ok ? "ok" : "NOT READY"} · ${doc.failed} failed · ${doc.warned} warnings`;
    const hp = s.hugepages, m = s.memory, c = s.cpu;
    const card = (label, value, hint) => `<div class="card stat"><div class="label">${label}</div><div class="value">${value}</div><div class="hint">${hint}</div></div>`;
    $("#host-cards").innerHTML =
      card("Host", esc(s.hostname || "–"), esc(`${s.os} · kernel ${s.kernel} · up ${fmtDur(s.uptime_seconds)}`)) +
      card("CPU", fmtPct(c.used_percent / 100), esc(`${c.logical} threads / ${c.physical} cores · ${c.numa_nodes || 1} NUMA node(s) · load ${(c.load || []).map((x) => x.toFixed(2)).join(" ")}`)) +
      card("Memory", fmtBytes(m.used), `of ${fmtBytes(m.total)} (${fmtPct(m.used_percent / 100)}) · ${fmtBytes(m.available)} available`) +
      card("Hugepages", hp.total ? `${fmtNum(hp.total - hp.free)} / ${fmtNum(hp.total)}` : "none", hp.total ? `${fmtBytes(hp.page_size)} pages · ${fmtBytes(hp.total_bytes)} reserved · ${fmtNum(hp.free)} free` : `page size ${fmtBytes(hp.page_size)} · kvtier falls back to normal pages`);
    $("#host-disks tbody").innerHTML = (s.disks || []).map((d) => `<tr><td class="key">${esc(d.mountpoint)}</td><td class="key">${esc(d.device)}</td><td>${esc(d.fstype)}</td>
      <td>${bar(d.used_percent / 100)}<div class="muted small">${fmtBytes(d.used)} used · ${fmtBytes(d.free)} free</div></td><td class="num">${fmtBytes(d.total)}</td></tr>`).join("");
    $("#host-nics tbody").innerHTML = (s.nics || []).map((n) => `<tr><td class="key">${esc(n.name)}</td><td>${n.up ? badge("live", "up") : badge("gone", "down")}</td><td class="num">${n.mtu}</td>
      <td class="key">${n.addrs.map(esc).join("<br>")}</td><td class="num">${fmtBytes(n.bytes_sent)}</td><td class="num">${fmtBytes(n.bytes_recv)}</td></tr>`).join("");
    const flat = [];
    (function walk(prefix, v) {
      if (v && typeof v === "object" && !Array.isArray(v)) { for (const k of Object.keys(v).sort()) walk(prefix ? prefix + "." + k : k, v[k]); }
      else flat.push([prefix, Array.isArray(v) ? v.join(", ") : String(v)]);
    })("", cfg);
    $("#cfg-table tbody").innerHTML = flat.map(([k, v]) => `<tr><td>${esc(k)}</td><td>${esc(v)}</td></tr>`).join("");
    $("#cfg-empty").classList.toggle("hidden", flat.length > 0);
  } catch (e) { showErr(e); }
}
loaders.host = loadHost;
$("#ev-kind").addEventListener("change", renderEvents);
$("#ev-pause").addEventListener("click", (e) => { state.eventsPaused = !state.eventsPaused; e.target.textContent = state.eventsPaused ? "Resume" : "Pause"; });
$("#ev-clear").addEventListener("click", () => { state.events = []; renderEvents(); });

// ---------- start ----------
refreshHealth().then(route);
connectEvents();
setInterval(refreshHealth, 5000);
setInterval(pollRates, 2000);
setInterval(() => { if (state.page === "segments" || state.page === "clients") loaders[state.page](); }, 5000);
setInterval(() => { if (state.page === "nvme") loadNVMe(); }, 2000);
