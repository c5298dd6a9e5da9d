"""The status page at ``/status`` (``/`` leads there): one self-contained HTML file.

No CDN, no build step: the HTML, its CSS and its script are below.  The script opens
``status/events`` (``status_stream``) and draws each snapshot it is sent; job fields
go into the page with ``textContent`` only, so a service, user or progress text can
never become markup.  Between snapshots the browser counts the uptime and the
elapsed times on by itself.  One column under 600 px wide, for a phone.
"""

from __future__ import annotations

from ..web.asgi import FixedPage


class ToStatus(FixedPage):
    """``/``: a redirect to the status page (relative, so it works behind a proxy's
    path prefix too)."""

    status = 303
    body = b"see status\n"
    headers = ((b"location", b"status"),)


HTML = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>xruntime status</title>
<style>
:root { color-scheme: light dark; --fg: #1c2230; --muted: #5d6676; --bg: #f3f5f8; --card: #fff;
        --line: #dce1e8; --accent: #2563c9; --warn: #b45309; --bad: #b91c1c; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e6e9ef; --muted: #9aa3b2; --bg: #14171c; --card: #1d2128; --line: #323844;
          --accent: #5b9bff; --warn: #f0a040; --bad: #f87171; }
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
       font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; }
header, main { max-width: 1100px; margin: 0 auto; padding: 12px 16px; }
header { display: flex; flex-wrap: wrap; align-items: baseline; gap: 4px 16px; }
h1 { font-size: 1.3rem; margin: 0; overflow-wrap: anywhere; }
h2 { font-size: .8rem; margin: 0 0 6px; color: var(--muted); text-transform: uppercase;
     letter-spacing: .05em; }
.meta { color: var(--muted); }
#live { margin-left: auto; font-size: .85rem; padding: 1px 8px; border-radius: 9px;
        border: 1px solid var(--line); }
#live.on { color: #15803d; border-color: currentColor; }
#live.off { color: var(--warn); border-color: currentColor; }
#problem { margin: 0 0 12px; padding: 8px 12px; border-radius: 6px; color: #fff;
           background: var(--bad); }
.cards { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 12px; }
.card, .running { background: var(--card); border: 1px solid var(--line); border-radius: 8px;
                  padding: 12px 14px; min-width: 0; }
.big { font-size: 1.6rem; font-weight: 600; margin: 0 0 6px; font-variant-numeric: tabular-nums; }
.big small { font-size: .9rem; font-weight: 400; color: var(--muted); }
.counts { display: grid; grid-template-columns: repeat(3, minmax(0, 1fr)); gap: 8px 12px;
          font-variant-numeric: tabular-nums; }
.counts span { display: block; color: var(--muted); font-size: .75rem; overflow-wrap: anywhere; }
.counts b { font-size: 1.15rem; }
progress { appearance: none; -webkit-appearance: none; display: block; width: 100%; height: 10px;
           border: 0; border-radius: 5px; background: var(--line); overflow: hidden; }
progress::-webkit-progress-bar { background: var(--line); border-radius: 5px; }
progress::-webkit-progress-value { background: var(--accent); border-radius: 5px; }
.bar progress::-webkit-progress-value { transition: width .4s ease; }   /* a job's bar glides */
progress::-moz-progress-bar { background: var(--accent); border-radius: 5px; }
progress:indeterminate { background: repeating-linear-gradient(-45deg, var(--line) 0 8px,
                                                                  transparent 8px 16px); }
.running { margin-top: 12px; }
#jobs { list-style: none; margin: 0; padding: 0; }
.job { display: grid; grid-template-columns: minmax(0, 2fr) minmax(0, 2fr) minmax(0, 3fr);
       gap: 2px 16px; align-items: center; padding: 8px 0; border-top: 1px solid var(--line); }
.job:first-child { border-top: 0; }
.what { font-weight: 600; overflow-wrap: anywhere; }
.status { font-size: .75rem; font-weight: 600; padding: 0 6px; border-radius: 8px;
          border: 1px solid currentColor; margin-left: 6px; color: var(--accent); }
.status.STOPPING { color: var(--warn); }
.who { color: var(--muted); font-size: .9rem; overflow-wrap: anywhere; }
.bar { display: flex; align-items: center; gap: 10px; min-width: 0; }
.bar progress { flex: 1 1 auto; min-width: 40px; }
.ptext { flex: 0 0 auto; max-width: 60%; font-size: .9rem; font-variant-numeric: tabular-nums;
         overflow-wrap: break-word; }
.id { grid-column: 1 / -1; font: .75rem ui-monospace, monospace; color: var(--muted);
      overflow-wrap: anywhere; }
.quiet { color: var(--muted); margin: 4px 0; }
@media (max-width: 600px) {
  header, main { padding: 10px; }
  .cards, .job { grid-template-columns: minmax(0, 1fr); }
  .ptext { max-width: 50%; }
}
</style>
</head>
<body>
<header>
  <h1>xruntime <span id="node">…</span></h1>
  <span class="meta">version <span id="version">…</span> · up <span id="uptime">…</span></span>
  <span id="live">connecting…</span>
</header>
<main>
  <p id="problem" hidden></p>
  <section class="cards">
    <div class="card"><h2>Workers of this node</h2>
      <p class="big"><span id="busy">–</span> <small>busy</small>
        <span id="idle">–</span> <small>idle</small></p>
      <progress id="workload" max="1" value="0"></progress></div>
    <div class="card"><h2>Queue</h2>
      <p class="big"><span id="queued">–</span> <small>jobs waiting</small></p></div>
    <div class="card"><h2>Jobs by status</h2><div class="counts" id="counts"></div></div>
  </section>
  <section class="running"><h2>Running jobs</h2>
    <p class="quiet" id="none">No job is running.</p>
    <ul id="jobs"></ul>
    <p class="quiet" id="more" hidden></p>
  </section>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
let last = null, receivedAt = 0;

function duration(ms) {
  let s = Math.max(0, Math.floor(ms / 1000));
  const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
  s %= 60;
  if (d) return d + " d " + h + " h";
  if (h) return h + " h " + m + " min";
  if (m) return m + " min " + s + " s";
  return s + " s";
}

function el(tag, cls, parent) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (parent) parent.appendChild(e);
  return e;
}

function jobRow(job) {
  let li = document.querySelector('li[data-job-id="' + CSS.escape(job.id) + '"]');
  if (!li) {
    li = el("li", "job");
    li.dataset.jobId = job.id;
    const what = el("div", "what", li);
    el("span", "name", what);
    el("span", "status", what);
    el("div", "who", li);
    const bar = el("div", "bar", li);
    const p = el("progress", "", bar);
    p.max = 1;
    el("span", "ptext", bar);
    el("div", "id", li);
  }
  li.querySelector(".name").textContent = job.service + "." + job.operation;
  const status = li.querySelector(".status");
  status.textContent = job.status;
  status.className = "status " + job.status;
  li.querySelector(".id").textContent =
    job.id + (job.parentId ? "  (child of " + job.parentId + ")" : "");
  const p = li.querySelector("progress");
  if (job.bar && job.bar.fraction !== null) p.value = job.bar.fraction;
  else p.removeAttribute("value");            // no progress, or one without an end
  li.querySelector(".ptext").textContent = job.bar ? job.bar.text : "";
  return li;
}

function render(s) {
  last = s;
  receivedAt = Date.now();
  $("node").textContent = s.node;
  $("version").textContent = s.version;
  $("busy").textContent = s.workers.busy;
  $("idle").textContent = s.workers.idle;
  $("workload").value = s.workers.total ? s.workers.busy / s.workers.total : 0;
  $("queued").textContent = s.queued;
  const counts = $("counts");
  counts.replaceChildren();
  for (const [status, n] of Object.entries(s.jobs)) {
    const cell = el("div", "", counts);
    el("span", "", cell).textContent = status;
    el("b", "", cell).textContent = n;
  }
  const list = $("jobs");
  const rows = s.running.map(jobRow);
  list.replaceChildren(...rows);
  $("none").hidden = rows.length > 0;
  $("more").hidden = !s.moreRunning;
  $("more").textContent = "and " + s.moreRunning + " more";
  document.title =
    "xruntime: " + s.workers.busy + "/" + s.workers.total + " busy, " + s.queued + " queued";
  tick();
}

function tick() {                               // counts on between snapshots
  if (!last) return;
  const since = Date.now() - receivedAt;
  $("uptime").textContent = duration(last.uptimeMs + since);
  for (const job of last.running) {
    const li = document.querySelector('li[data-job-id="' + CSS.escape(job.id) + '"]');
    if (!li) continue;
    li.querySelector(".who").textContent = [
      job.user || "anonymous",
      job.node ? "on " + job.node : "waiting for its child jobs",
      duration(job.elapsedMs + since),
    ].join(" · ");
  }
}
setInterval(tick, 1000);

function connect() {
  const live = $("live");
  const source = new EventSource("status/events");
  source.onopen = () => { live.textContent = "live"; live.className = "on"; };
  source.onerror = () => {
    live.textContent = source.readyState === EventSource.CLOSED ? "disconnected" : "reconnecting…";
    live.className = "off";
  };
  source.onmessage = (event) => {
    const s = JSON.parse(event.data);
    $("problem").hidden = !s.error;
    if (s.error) $("problem").textContent = s.error;
    else render(s);
  };
}
connect();
</script>
</body>
</html>
"""


class StatusPage(FixedPage):
    """``/status``: the page; its data arrive over ``/status/events``."""

    content_type = "text/html; charset=utf-8"
    body = HTML.encode("utf-8")
    headers = (
        (
            b"content-security-policy",
            b"default-src 'self'; style-src 'unsafe-inline'; script-src 'unsafe-inline'",
        ),
    )
