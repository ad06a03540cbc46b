#include "http/status_page.h"

namespace ddp {
namespace {

// Plain HTML, CSS and JavaScript (ES2017, no libraries). Every text from the
// status document goes through esc() before it reaches innerHTML.
constexpr const char* kPage = R"PAGE(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ddplaunch</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1em 1.5em; color: #222; background: #fafafa; }
h1 { font-size: 1.3em; margin: 0 0 .3em; }
h2 { font-size: 1.05em; margin: 1.2em 0 .4em; }
#line { color: #666; font-size: .9em; }
.bad { color: #b00020; }
.warn { color: #9a6700; }
table { border-collapse: collapse; background: #fff; }
th, td { padding: 3px 9px; border-bottom: 1px solid #e4e4e4; text-align: left; white-space: nowrap; }
th { background: #f0f0f0; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.silent td, tr.late td { background: #fff4e5; }
tr.exited td { color: #888; }
svg.spark { vertical-align: middle; }
pre { background: #fff; border: 1px solid #e4e4e4; padding: .6em; max-height: 24em; overflow: auto; }
.kv span { margin-right: 1.4em; }
</style>
</head>
<body data-updates="0">
<h1>ddplaunch <span id="job"></span></h1>
<div id="line">loading /status.json&hellip;</div>
<div id="summary" class="kv"></div>
<div id="failure"></div>
<h2>Ranks</h2>
<table id="ranks"><thead><tr><th>rank</th><th>node</th><th>host</th><th>pid</th><th>state</th><th>step</th>
<th>phase</th><th>heartbeat</th><th>step time</th><th>last step times</th><th>resources</th></tr></thead>
<tbody></tbody></table>
<h2>Open collectives</h2>
<div id="collectives"></div>
<h2>Recent warnings</h2>
<div id="warnings"></div>
<div id="report"></div>
<script>
"use strict";
const HISTORY = 60;           // step times kept per rank, in this browser only
const POLL_MS = 1500;
const params = new URLSearchParams(location.search);
const token = params.get("token");
const job = params.get("job");
const history = new Map();    // rank -> [{step, secs, gpu}]
let updates = 0;

function esc(v) {
  return String(v === undefined || v === null ? "" : v).replace(/[&<>"']/g,
    c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", "\"": "&quot;", "'": "&#39;"})[c]);
}
function num(v) { return typeof v === "number" && isFinite(v); }
function bytes(n) {
  if (!num(n)) return "";
  const u = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n.toFixed(0)) + " " + u[i];
}
function secs(v) { return num(v) ? (v < 1 ? (v * 1000).toFixed(0) + " ms" : v.toFixed(2) + " s") : "-"; }

function sparkline(values, title) {
  const v = values.filter(num);
  if (v.length < 2) return "";
  const w = 120, h = 22, max = Math.max(...v) || 1;
  const pts = v.map((x, i) => (i * w / (v.length - 1)).toFixed(1) + "," + (h - 1 - x / max * (h - 2)).toFixed(1));
  return "<svg class=\"spark\" width=\"" + w + "\" height=\"" + h + "\" viewBox=\"0 0 " + w + " " + h + "\">" +
    "<title>" + esc(title) + "</title><polyline fill=\"none\" stroke=\"#3366cc\" stroke-width=\"1.5\" points=\"" +
    pts.join(" ") + "\"/></svg>";
}

function gpuMean(res) {
  if (!res || !Array.isArray(res.gpus)) return undefined;
  const u = res.gpus.map(g => g && g.util_percent).filter(num);
  return u.length ? u.reduce((a, b) => a + b, 0) / u.length : undefined;
}

function resources(res) {
  if (!res || typeof res !== "object") return "-";
  const parts = [];
  if (num(res.cpu_percent)) parts.push(res.cpu_percent.toFixed(0) + "% CPU");
  if (num(res.rss_bytes)) parts.push(bytes(res.rss_bytes) + " RSS");
  if (num(res.threads)) parts.push(res.threads + " threads");
  if (res.process_gone) parts.push("process gone");
  if (Array.isArray(res.gpus)) {
    res.gpus.forEach((g, i) => {
      if (!g || typeof g !== "object") return;
      let t = "GPU " + (g.index !== undefined ? g.index : i) + ":";
      if (num(g.util_percent)) t += " " + g.util_percent.toFixed(0) + "%";
      if (num(g.mem_used_bytes)) t += " " + bytes(g.mem_used_bytes) +
        (num(g.mem_total_bytes) ? "/" + bytes(g.mem_total_bytes) : "");
      if (num(g.power_w)) t += " " + g.power_w.toFixed(0) + " W";
      if (Array.isArray(g.throttle_reasons) && g.throttle_reasons.length) t += " (" + g.throttle_reasons.join(" ") + ")";
      if (num(g.temperature_c)) t += " " + g.temperature_c.toFixed(0) + "\u00b0C";
      parts.push(t);
    });
  }
  return parts.length ? esc(parts.join(", ")) : "-";
}

function remember(r) {
  if (!r.monitored || !num(r.step)) return [];
  let h = history.get(r.rank);
  if (!h) { h = []; history.set(r.rank, h); }
  const last = h[h.length - 1];
  if (!last || last.step !== r.step) {
    if (last && r.step < last.step) h.length = 0;  // a restart
    h.push({step: r.step, secs: r.step_seconds, gpu: gpuMean(r.resources)});
    if (h.length > HISTORY) h.shift();
  }
  return h;
}

// A warning of the health view's "warnings" (TroubleWarnings::recent_json):
// kind, rank, gpu, summary, look_at, age_s.
function warningText(w) {
  if (typeof w === "string") return w;
  if (!w || typeof w !== "object") return String(w);
  let t = (w.kind ? w.kind + ": " : "") + (w.summary || w.message || w.text || JSON.stringify(w));
  if (w.look_at) t += "; look at: " + w.look_at;
  if (num(w.age_s)) t += " (" + w.age_s.toFixed(0) + " s ago)";
  return t;
}

function render(s) {
  document.getElementById("job").textContent = s.job_id || "";
  document.title = "ddplaunch " + (s.job_id || "");
  const health = s.ranks && typeof s.ranks === "object" ? s.ranks : {};
  const ranks = Array.isArray(health.ranks) ? health.ranks : [];
  const kv = [["generation", s.generation], ["state", s.state],
              ["restarts", (s.restarts_used || 0) + "/" + (s.max_restarts || 0)],
              ["ranks", s.world_size], ["nodes", s.nnodes],
              ["elapsed", num(s.elapsed_s) ? s.elapsed_s.toFixed(0) + " s" : "-"],
              ["since progress", secs(health.seconds_since_progress)],
              ["hang timeout", num(health.hang_timeout_s) ? health.hang_timeout_s + " s" : "-"]];
  document.getElementById("summary").innerHTML =
    kv.map(([k, v]) => "<span><b>" + esc(k) + "</b> " + esc(v) + "</span>").join("");
  let failure = "";
  if (s.failure) failure += "<p class=\"bad\"><b>failure:</b> " + esc(s.failure) + "</p>";
  if (s.stop_requested) failure += "<p class=\"warn\"><b>stop requested:</b> " + esc(s.stop_requested.reason) + "</p>";
  (Array.isArray(s.departed) ? s.departed : []).forEach(d => { failure += "<p class=\"warn\">left: " + esc(d) + "</p>"; });
  document.getElementById("failure").innerHTML = failure;

  const rows = [], open = [];
  for (const r of ranks) {
    const h = remember(r);
    const state = r.state || (r.monitored ? "running" : "no heartbeats");
    const m = r.monitored;
    const spark = sparkline(h.map(x => x.secs), "step time, last " + h.length + " steps") +
                  sparkline(h.map(x => x.gpu), "GPU utilisation");
    rows.push("<tr class=\"" + esc(state.replace(/ /g, "-")) + "\" data-rank=\"" + esc(r.rank) + "\"" +
      (m && num(r.step) ? " data-step=\"" + esc(r.step) + "\"" : "") + ">" +
      "<td class=\"num\">" + esc(r.rank) + "</td><td class=\"num\">" + esc(m ? r.node : "-") + "</td>" +
      "<td>" + esc(m ? r.host : "-") + "</td><td class=\"num\">" + esc(m ? r.pid : "-") + "</td>" +
      "<td>" + esc(state) + "</td><td class=\"num step\">" + esc(m && num(r.step) ? r.step : "-") + "</td>" +
      "<td>" + esc(m ? r.phase : "-") + "</td><td class=\"num\">" + (m ? secs(r.heartbeat_age_s) : "-") + "</td>" +
      "<td class=\"num\">" + (m && r.step_seconds > 0 ? secs(r.step_seconds) : "-") + "</td>" +
      "<td>" + spark + "</td><td>" + resources(r.resources) + "</td></tr>");
    for (const c of (Array.isArray(r.open_collectives) ? r.open_collectives : [])) open.push([r.rank, c]);
  }
  document.querySelector("#ranks tbody").innerHTML = rows.join("");

  document.getElementById("collectives").innerHTML = open.length ?
    "<table><tr><th>rank</th><th>op</th><th>seq</th><th>bytes</th><th>dtype</th><th>state</th><th>age</th></tr>" +
    open.map(([rank, c]) => "<tr><td class=\"num\">" + esc(rank) + "</td><td>" + esc(c.op) +
      (c.group !== undefined ? " (group " + esc(c.group) + ")" : "") + "</td><td class=\"num\">" +
      esc(c.sequence) + "</td><td class=\"num\">" + esc(bytes(c.bytes)) + "</td><td>" + esc(c.dtype) + "</td><td>" +
      esc(c.state) + "</td><td class=\"num\">" + secs(c.age_s) + "</td></tr>").join("") + "</table>" : "<p>none</p>";

  const warnings = [].concat(Array.isArray(s.warnings) ? s.warnings : [],
                             Array.isArray(health.warnings) ? health.warnings : []);
  document.getElementById("warnings").innerHTML = warnings.length ?
    "<ul>" + warnings.slice(-20).map(w => "<li class=\"warn\"" +
      (w && num(w.rank) ? " data-rank=\"" + esc(w.rank) + "\" data-kind=\"" + esc(w.kind) + "\"" : "") + ">" +
      esc(warningText(w)) + "</li>").join("") + "</ul>" :
    "<p>none</p>";

  const report = s.hang_report || s.last_hang_report || s.failure_report;
  document.getElementById("report").innerHTML = report ?
    "<h2>Last hang report</h2><pre>" + esc(typeof report === "string" ? report : JSON.stringify(report, null, 2)) +
    "</pre>" : "";
}

function line(html, cls) {
  const el = document.getElementById("line");
  el.className = cls || "";
  el.innerHTML = html;
}

async function poll() {
  let wait = POLL_MS;
  try {
    const q = job ? "?job=" + encodeURIComponent(job) : "";
    const headers = token ? {"Authorization": "Bearer " + token} : {};
    const res = await fetch("status.json" + q, {headers, cache: "no-store"});
    const body = await res.json().catch(() => ({}));
    if (res.status === 401) {
      line("This job needs its token: open this page as <code>/?token=TOKEN</code> (" + esc(body.error) + ").", "bad");
      return;  // polling again would not help
    }
    if (Array.isArray(body.jobs)) {
      line("This coordinator serves several jobs: " + body.jobs.map(j =>
        "<a href=\"?job=" + encodeURIComponent(j) + (token ? "&token=" + encodeURIComponent(token) : "") + "\">" +
        esc(j) + "</a>").join(", "));
      return;
    }
    if (!res.ok) throw new Error(body.error || ("HTTP " + res.status));
    render(body);
    updates++;
    document.body.dataset.updates = String(updates);
    line("updated " + new Date().toLocaleTimeString() + " (every " + POLL_MS / 1000 + " s)");
  } catch (e) {
    line("cannot read /status.json: " + esc(e.message) + " (the job may have ended); retrying", "bad");
    wait = 5000;
  }
  setTimeout(poll, wait);
}
poll();
</script>
</body>
</html>
)PAGE";

}  // namespace

const std::string& status_page_html() {
  static const std::string page(kPage);
  return page;
}

}  // namespace ddp
