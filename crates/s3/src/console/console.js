// The railstore console: polls the admin API and draws the array. No framework, no build
// step; every value is put in the page as text (never as HTML).
"use strict";

const TOKEN_KEY = "railstore-admin-token";
const SVG = "http://www.w3.org/2000/svg";
// The layout's colour classes (a group has one device of each), drawn as the node's rim.
// Kept clear of the state colours (green, orange, blue, red, purple) that fill the nodes.
const CLASS_COLOURS = ["#00897b", "#f06292", "#fbc02d", "#8d6e63", "#4dd0e1", "#9e9d24",
                       "#37474f", "#ffab91", "#b0bec5", "#1a237e", "#a1887f", "#80cbc4"];
const STATES = ["reader", "writer", "guard", "none", "failed", "rebuilding"];
const STATE_NAMES = { reader: "reader", writer: "writer", guard: "guard",
                      none: "no separation", failed: "failed", rebuilding: "rebuilding" };

let token = null;
let timers = [];

function el(tag, attrs = {}, text) {
  const ns = ["svg", "circle", "text", "line", "polyline", "rect", "g", "path"].includes(tag);
  const e = ns ? document.createElementNS(SVG, tag) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, String(v));
  if (text !== undefined) e.textContent = String(text);
  return e;
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
}

function duration(us) {
  if (us === null || us === undefined) return "–";
  return us >= 1000 ? (us / 1000).toFixed(1) + " ms" : us + " µs";
}

// What a device is doing, as the ring colours it.
function stateOf(d) {
  if (d.recorded === "rebuilding") return "rebuilding";
  if (!d.healthy) return "failed";
  return STATES.includes(d.role) ? d.role : "none";
}

async function api(path) {
  const resp = await fetch("/admin/v1/" + path, {
    headers: { Authorization: "Bearer " + token },
    cache: "no-store",
  });
  if (resp.status === 401) {
    sessionStorage.removeItem(TOKEN_KEY);
    throw new Error("the admin token was refused");
  }
  const body = await resp.json();
  if (!resp.ok) throw new Error(body.error ? body.error.message : resp.statusText);
  return body;
}

function drawRing(status) {
  const svg = document.getElementById("ring");
  svg.replaceChildren();
  const n = status.devices.length;
  const cx = 200, cy = 200, radius = n > 1 ? 130 : 0;
  const node = Math.max(14, Math.min(34, 460 / Math.max(n, 1)));
  svg.append(el("circle", { cx, cy, r: radius, fill: "none", stroke: "#dde2ea",
                            "stroke-width": 3 }));
  const counts = {};
  status.devices.forEach((d, i) => {
    const a = -Math.PI / 2 + (2 * Math.PI * i) / Math.max(n, 1);
    const x = cx + radius * Math.cos(a), y = cy + radius * Math.sin(a);
    const state = stateOf(d);
    counts[state] = (counts[state] || 0) + 1;
    const g = el("g", { class: "device", "data-device": d.index, "data-state": state,
                        "data-role": d.role, "data-healthy": d.healthy,
                        "data-colour": d.colour });
    const c = el("circle", { class: "node state-" + state, cx: x.toFixed(1),
                             cy: y.toFixed(1), r: node.toFixed(1) });
    c.style.setProperty("stroke", CLASS_COLOURS[d.colour % CLASS_COLOURS.length]);
    const title = el("title", {}, `device ${d.index}: ${STATE_NAMES[state]}` +
                     (d.error ? ` (${d.error})` : ""));
    g.append(c, el("text", { x: x.toFixed(1), y: y.toFixed(1) }, d.index), title);
    // The write buffer's fill, under separation, next to the node.
    if (d.buffer_bytes > 0) {
      const bx = cx + (radius + node + 14) * Math.cos(a), by = cy + (radius + node + 14) * Math.sin(a);
      g.append(el("text", { class: "caption", x: bx.toFixed(1), y: by.toFixed(1) },
                  bytes(d.buffer_bytes)));
    }
    svg.append(g);
  });
  const summary = STATES.filter(s => counts[s]).map(s => `${counts[s]} ${STATE_NAMES[s]}`);
  svg.append(el("text", { class: "centre", x: cx, y: cy - 10 }, `${n} devices`));
  svg.append(el("text", { class: "caption", x: cx, y: cy + 12 }, summary.join(", ")));
  // The ring's place on the page, so a screenshot can be checked where the ring is.
  const box = svg.getBoundingClientRect();
  svg.setAttribute("data-box", [box.left, box.top, box.width, box.height]
                   .map(v => Math.round(v)).join(" "));

  const legend = document.getElementById("legend");
  legend.replaceChildren(...STATES.filter(s => s !== "none" || counts.none).map(s =>
    el("li", { class: "state-" + s }, STATE_NAMES[s])),
    el("li", { class: "rim" }, "rim: colour class (one of each per group)"));
}

function drawBuffers(status) {
  const svg = document.getElementById("buffers");
  svg.replaceChildren();
  const n = status.devices.length;
  const max = Math.max(1, ...status.devices.map(d => d.buffer_bytes));
  const w = 560 / Math.max(n, 1);
  status.devices.forEach((d, i) => {
    const h = Math.round(110 * d.buffer_bytes / max);
    const x = 30 + i * w;
    svg.append(el("rect", { class: "empty", x: x.toFixed(1), y: 10, width: (w * 0.7).toFixed(1),
                            height: 110 }));
    svg.append(el("rect", { x: x.toFixed(1), y: 120 - h, width: (w * 0.7).toFixed(1), height: h,
                            "data-device": d.index, "data-bytes": d.buffer_bytes }));
    svg.append(el("text", { x: (x + w * 0.35).toFixed(1), y: 136, "text-anchor": "middle" },
                  d.index));
    svg.append(el("text", { x: (x + w * 0.35).toFixed(1), y: 152, "text-anchor": "middle" },
                  bytes(d.buffer_bytes)));
  });
}

function drawLatency(history) {
  const svg = document.getElementById("latency");
  svg.replaceChildren();
  const samples = history.samples;
  const left = 50, right = 390, top = 22, bottom = 190;
  const peak = Math.max(1000, ...samples.flatMap(s => [s.reads.p99_us || 0, s.writes.p99_us || 0]));
  const x = i => left + (right - left) * i / Math.max(samples.length - 1, 1);
  const y = us => bottom - (bottom - top) * us / peak;
  svg.append(el("line", { class: "axis", x1: left, y1: bottom, x2: right, y2: bottom }));
  svg.append(el("line", { class: "axis", x1: left, y1: top, x2: left, y2: bottom }));
  svg.append(el("text", { x: 4, y: top + 8 }, duration(peak)));
  svg.append(el("text", { x: 4, y: bottom }, "0"));
  svg.append(el("text", { x: left, y: bottom + 16 }, `${samples.length} s ago`));
  svg.append(el("text", { x: right - 24, y: bottom + 16 }, "now"));
  for (const kind of ["reads", "writes"]) {
    const points = [];
    samples.forEach((s, i) => {
      if (s[kind].p99_us !== null) points.push(`${x(i).toFixed(1)},${y(s[kind].p99_us).toFixed(1)}`);
    });
    const line = el("polyline", { class: kind === "reads" ? "read" : "write",
                                  points: points.join(" "), "data-points": points.length });
    svg.append(line);
  }
  svg.append(el("text", { class: "read", x: left + 8, y: 10 }, "GET/HEAD p99"));
  svg.append(el("text", { class: "write", x: left + 110, y: 10 }, "PUT/POST/DELETE p99"));
  const recent = samples.slice(-10);
  const sum = k => recent.reduce((a, s) => a + s[k].count, 0);
  const worst = k => Math.max(0, ...recent.map(s => s[k].p99_us || 0));
  document.getElementById("latency-now").textContent =
    `last 10 s: ${sum("reads")} reads (p99 ${duration(worst("reads") || null)}), ` +
    `${sum("writes")} writes (p99 ${duration(worst("writes") || null)})`;
}

function drawSummary(status) {
  const set = (id, v) => { document.getElementById(id).textContent = v; };
  set("array-id", status.array ? `array ${status.array[0]} · start ${status.array[1]}` : "memory devices");
  set("policy", status.policy);
  set("updated", "updated " + new Date().toLocaleTimeString());
  set("objects", status.objects);
  set("object-bytes", bytes(status.object_bytes));
  set("buckets", status.buckets);
  set("uploads", status.uploads);
  const w = status.window;
  set("separation", w
    ? `on: ${w.size} of ${w.colours} colours read` +
      (w.adaptive ? ` (adaptive, ${w.size_range[0]}-${w.size_range[1]})` : "") +
      `, ${w.frame_ms} ms frames, ${w.off_window_reads} reads outside the window; writes ` +
      `${bytes(w.write_bytes_per_s)}/s of ` +
      (w.write_bound_bytes_per_s == null ? "(rate not measured yet)"
        : `${bytes(w.write_bound_bytes_per_s)}/s the writers absorb`)
    : (status.separation ? "on (readers never write)" : "off"));
  const serving = status.devices.filter(d => d.healthy).length;
  set("in-service", `${serving} of ${status.devices.length}`);
  const used = status.devices.reduce((a, d) => a + d.used_bytes, 0);
  const cap = status.devices.reduce((a, d) => a + d.capacity_bytes, 0);
  const share = cap > 0 ? used / cap : 0;
  document.getElementById("capacity-bar").style.setProperty("width", (100 * share).toFixed(1) + "%");
  set("capacity", `${bytes(used)} of ${bytes(cap)} used (${(100 * share).toFixed(1)} %)`);
  const r = status.at_risk;
  set("risk", r ? `${r.objects_at_risk} objects at risk with device(s) ${r.devices_out.join(", ")} ` +
      `out: ${r.objects_without_redundancy} without redundancy, ${r.objects_unreadable} unreadable`
    : "none: every device serves");
}

function drawRepair(status) {
  const r = status.repair;
  const p = document.getElementById("repair");
  const bar = document.getElementById("repair-progress");
  if (!r) {
    p.textContent = "no rebuild, scrub or move since the server started";
    bar.max = 1; bar.value = 0;
  } else {
    const what = r.kind === "rebuild" ? `rebuild of device ${r.device}`
      : r.kind === "grow" ? "grow: objects moving to the added devices"
      : r.kind === "drain" ? "drain: objects moving off the drained devices"
      : "scrub";
    const state = r.running ? "running" : (r.error ? `stopped: ${r.error}` : "finished");
    const eta = r.running && r.eta_s !== null ? `, ETA ${Math.round(r.eta_s)} s` : "";
    p.textContent = `${what}: ${state}, ${r.items_done} of ${r.items_total} objects and sets, ` +
      `${bytes(r.bytes_done)} written at ${bytes(r.bytes_per_s)}/s${eta}` +
      (r.objects_lost ? `, ${r.objects_lost} lost` : "");
    bar.max = Math.max(r.items_total, 1);
    bar.value = r.running ? r.items_done : bar.max;
  }
  const s = status.last_scrub;
  document.getElementById("scrub").textContent = s
    ? `last scrub (${s.reason}), ended ${new Date(s.finished_unix_ms).toLocaleString()}: ` +
      `${s.objects} objects checked, ${s.objects_repaired} repaired, ${s.objects_lost} unrecoverable`
    : "no scrub has run";
}

function drawHealth(status) {
  const rows = status.devices.map(d => {
    const state = stateOf(d);
    const tr = el("tr", { "data-device": d.index });
    const cells = [d.index, d.path || "memory", d.colour, d.role,
                   state === "failed" || state === "rebuilding" ? state : "ok",
                   bytes(d.used_bytes), bytes(d.capacity_bytes), d.keys, d.error || ""];
    cells.forEach((v, i) => {
      const td = el("td", {}, v);
      if (i === 4) td.className = "state-cell state-" + (v === "ok" ? "ok" : v);
      tr.append(td);
    });
    return tr;
  });
  document.querySelector("#health tbody").replaceChildren(...rows);
}

async function refreshStatus() {
  const status = await api("status");
  document.getElementById("status-json").textContent = JSON.stringify(status);
  drawSummary(status);
  drawRing(status);
  drawBuffers(status);
  drawRepair(status);
  drawHealth(status);
}

async function refreshLatency() {
  drawLatency(await api("latency"));
}

function every(ms, f) {
  const run = async () => {
    try {
      await f();
      document.getElementById("error").textContent = "";
    } catch (e) {
      document.getElementById("error").textContent = e.message;
      if (!sessionStorage.getItem(TOKEN_KEY)) return showLogin(e.message);
    }
    timers.push(setTimeout(run, ms));
  };
  run();
}

function showLogin(why) {
  timers.forEach(clearTimeout);
  timers = [];
  document.getElementById("console").hidden = true;
  document.getElementById("login").hidden = false;
  if (why) document.getElementById("error").textContent = why;
}

function start() {
  document.getElementById("login").hidden = true;
  document.getElementById("console").hidden = false;
  every(1000, refreshStatus);
  every(2000, refreshLatency);
}

// The token comes from the login form, or once from the address (#token=...), which is then
// dropped from the address; it is kept for this tab only.
const fromAddress = /(?:^#|&)token=([^&]+)/.exec(location.hash);
if (fromAddress) {
  sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(fromAddress[1]));
  history.replaceState(null, "", location.pathname + location.search);
}
token = sessionStorage.getItem(TOKEN_KEY);
document.getElementById("login").addEventListener("submit", ev => {
  ev.preventDefault();
  token = document.getElementById("token-input").value.trim();
  sessionStorage.setItem(TOKEN_KEY, token);
  start();
});
if (token) start(); else showLogin();
