// Queue page (admin): depth by kind and state, ready jobs and the oldest one's age, finished
// and failed jobs per 5-minute bucket over the last hour (inline SVG), depth and throughput per
// kind over a window (?window=1h|6h|24h), pause and resume per kind, dead jobs with retry (one
// or all listed) and cancel (all listed), workers online with their breakers, provider limits.
"use strict";
(function () {
  const C = window.Console, h = C.h;
  const at = (t) => new Date(t).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });

  // Paired bars per 5 minutes: succeeded (green) and failed (red), with a table beside it.
  function chart(buckets) {
    const total = (k) => buckets.reduce((s, b) => s + b[k], 0);
    return C.barChart({ id: "chart", title: "Jobs finished per 5 minutes, last hour",
      desc: `${total("succeeded")} succeeded and ${total("failed")} failed in the last hour`,
      groups: buckets.map((b) => ({ label: at(b.start), bars: [
        { value: b.succeeded, class: "ok", title: `${at(b.start)}: ${b.succeeded} succeeded` },
        { value: b.failed, class: "bad", title: `${at(b.start)}: ${b.failed} failed` }] })),
      legend: [{ class: "ok", label: "succeeded" }, { class: "bad", label: "failed (dead)" }] });
  }

  const WINDOWS = { "1h": "last hour", "6h": "last 6 hours", "24h": "last 24 hours" };
  // A bucket's width in words: "5 minutes", "2 hours".
  const width = (s) => (s % 3600 === 0 ? `${s / 3600} hour${s === 3600 ? "" : "s"}`
    : s % 60 === 0 ? `${s / 60} minutes` : `${s} seconds`);

  // One kind over the window: bars of what finished per bucket, lines of the depth at each
  // bucket's end; the same figures in a table.
  function kindChart(s, bucket, words) {
    const sum = (k) => s.points.reduce((a, p) => a + p[k], 0);
    const last = s.points[s.points.length - 1] || { ready: 0, running: 0, dead: 0 };
    const per = width(bucket);
    const caption = h("figcaption", {}, h("h3", {}, s.kind),
      h("span", { class: "muted" }, `Bars: jobs finished per ${per}; lines: jobs ready, running and dead at the end of each ${per}; the ${words}.`));
    const fig = h("figure", { class: "kind-chart", "data-kind": s.kind }, caption,
      C.barChart({ id: "kind-chart-" + s.kind, attrs: { "data-kind": s.kind },
        title: `${s.kind}: depth and jobs finished per ${per}, ${words}`,
        desc: `${sum("succeeded")} succeeded and ${sum("failed")} went dead; now ${last.ready} ready, ${last.running} running, ${last.dead} dead`,
        groups: s.points.map((p) => ({ label: at(p.at), bars: [
          { value: p.succeeded, class: "ok", title: `${at(p.at)}: ${p.succeeded} succeeded` },
          { value: p.failed, class: "bad", title: `${at(p.at)}: ${p.failed} went dead` }] })),
        lines: [{ class: "l-ready", label: "ready", values: s.points.map((p) => p.ready) },
          { class: "l-running", label: "running", values: s.points.map((p) => p.running) },
          { class: "l-dead", label: "dead", values: s.points.map((p) => p.dead) }],
        legend: [{ class: "ok", label: "succeeded" }, { class: "bad", label: "went dead" },
          { class: "l-ready", label: "ready", line: true }, { class: "l-running", label: "running", line: true },
          { class: "l-dead", label: "dead", line: true }] }));
    const table = h("details", {}, h("summary", {}, `${s.kind}: the same figures as a table`),
      C.table(`${s.kind} over time`, [{ label: "until" }, { label: "ready", num: true }, { label: "running", num: true },
        { label: "dead", num: true }, { label: "succeeded", num: true }, { label: "went dead", num: true }],
      s.points.map((p) => [C.fmtTime(p.at), String(p.ready), String(p.running), String(p.dead), String(p.succeeded), String(p.failed)])));
    return [fig, table];
  }

  function breakerText(b) {
    const since = b.since ? " since " + C.fmtTime(b.since) : "";
    const extra = b.state === "open" && b.until ? ", probe from " + C.fmtTime(b.until)
      : b.state === "closed" && b.failures ? `, ${b.failures} failure(s) in a row` : "";
    return h("li", {}, h("span", { class: "badge s-breaker-" + b.state }, b.state), " ", b.provider, since + extra);
  }

  function workersTable(q) {
    const ago = (t) => C.fmtSecs((new Date(q.now) - new Date(t)) / 1000) + " ago";
    return C.table("Workers online",
      [{ label: "worker" }, { label: "kinds" }, { label: "up since" }, { label: "last heartbeat" }, { label: "provider breakers" }],
      (q.workers || []).map((w) => [h("code", {}, w.name), w.kinds.join(", ") || "—", C.fmtTime(w.started_at),
        h("span", { title: C.fmtTime(w.seen_at) }, ago(w.seen_at)),
        w.breakers_unreadable ? h("span", { class: "muted" }, "written by a newer worker: not readable here")
          : w.breakers.length ? h("ul", { class: "plain" }, w.breakers.map(breakerText))
            : h("span", { class: "muted" }, "no provider entry with a breaker")]),
      "No worker is online: nothing claims jobs until one starts (agentd worker).");
  }

  function limitsTable(q) {
    return C.table("Provider limits",
      [{ label: "endpoint" }, { label: "requests/min", num: true }, { label: "tokens/min", num: true },
        { label: "granted", num: true }, { label: "throttled", num: true }, { label: "rate-limited (429)", num: true }, { label: "state" }],
      (q.provider_limits || []).map((l) => [h("code", {}, l.name), String(l.requests_per_minute), String(l.tokens_per_minute),
        String(l.granted), String(l.throttled), String(l.rate_limited),
        l.blocked_secs > 0 ? h("span", { class: "error-text" }, "blocked after a 429 for " + C.fmtSecs(l.blocked_secs)) : "open"]),
      "No provider endpoint has fleet limits (llm.requests_per_minute / tokens_per_minute).");
  }

  C.pages.queue = async function queue() {
    const win = C.query().get("window") || "1h";
    const r = await C.api("GET", "/v1/queue" + (win !== "1h" ? "?window=" + encodeURIComponent(win) : ""));
    if (!r.ok) return C.page("Queue", h("p", { class: "error-text" }, C.problem(r)));
    const q = r.body;
    const kinds = [...new Set(q.depth.map((d) => d.kind))].sort();
    const states = ["available", "running", "succeeded", "dead", "cancelled"];
    const count = (k, s) => (q.depth.find((d) => d.kind === k && d.state === s) || {}).count || 0;
    const depth = C.table("Jobs by kind and state",
      [{ label: "kind" }, ...states.map((s) => ({ label: s, num: true }))],
      kinds.map((k) => [k, ...states.map((s) => String(count(k, s)))]), "No jobs for this org yet.");
    const ready = C.table("Ready jobs", [{ label: "kind" }, { label: "ready now", num: true }, { label: "oldest waiting", num: true }],
      q.ready.map((x) => [x.kind, String(x.ready), C.fmtSecs(x.oldest_ready_secs)]), "No job is waiting.");
    const rows = q.throughput.map((b) => [C.fmtTime(b.start), String(b.succeeded), String(b.failed), String(b.cancelled)]);
    const dead = C.table("Dead jobs",
      [{ label: "job", num: true }, { label: "kind" }, { label: "attempts", num: true }, { label: "died" }, { label: "last error" }, { label: "action" }],
      q.dead.map((j) => [String(j.id), j.kind, `${j.attempt}/${j.max_attempts}`, C.fmtTime(j.finished_at),
        h("pre", {}, j.last_error || "—"),
        C.button("Retry", async () => {
          const res = await C.api("POST", `/v1/jobs/${j.id}/retry`);
          if (res.ok) { await C.route(); C.flash(`Job ${j.id} is ready again.`, "ok"); }
          else C.flash(`Retry of job ${j.id} failed: ` + C.problem(res), "error");
        }, { "aria-label": `Retry job ${j.id}`, "data-retry": j.id })]),
      "No dead jobs.");
    const paused = new Map((q.paused || []).map((p) => [p.kind, p]));
    const pauses = C.table("Pause and resume",
      [{ label: "kind" }, { label: "claims" }, { label: "action" }],
      (q.kinds || []).map((k) => {
        const p = paused.get(k);
        return [k, p ? "paused since " + C.fmtTime(p.paused_at) : "running",
          p ? C.button("Resume", () => pauseOrResume(k, "resume"), { id: "resume-" + k, "aria-label": "Resume " + k })
            : C.button("Pause", () => pauseOrResume(k, "pause"), { id: "pause-" + k, "aria-label": "Pause " + k })];
      }), "No job kinds.");
    const ids = q.dead.map((j) => j.id);
    const bulk = ids.length ? h("div", { class: "actions" },
      C.button(`Retry all ${ids.length} listed`, () => onDead("retry", ids), { id: "retry-dead-all" }),
      C.button(`Cancel all ${ids.length} listed`, () => onDead("cancel", ids), { id: "cancel-dead-all", class: "danger" })) : null;
    const words = WINDOWS[win] || win;
    const pick = h("select", { id: "queue-window", name: "window" },
      Object.entries(WINDOWS).map(([v, label]) => h("option", { value: v, selected: v === win }, label)));
    const windowForm = h("form", { class: "inline", onsubmit: (e) => {
      e.preventDefault();
      location.hash = "#/queue" + (pick.value === "1h" ? "" : "?window=" + encodeURIComponent(pick.value));
    } }, h("label", { for: "queue-window" }, "Window"), pick, h("button", { type: "submit", id: "queue-window-show" }, "Show"));
    const perKind = (q.series || []).length
      ? h("div", { id: "kind-charts" }, q.series.map((s) => kindChart(s, q.series_bucket_secs, words)))
      : h("p", { class: "muted", id: "kind-charts" }, `No job of this org in the ${words}.`);
    C.page("Queue",
      C.facts([["as of", C.fmtTime(q.now)], ["oldest ready job waiting", C.fmtSecs(q.oldest_ready_secs)],
        ["paused kinds", paused.size ? [...paused.keys()].join(", ") : "none"]]),
      h("h2", {}, "Pause and resume"),
      h("p", { class: "muted" }, "A paused kind's jobs of this org wait: no worker claims them until it is resumed; running jobs finish."),
      pauses,
      h("h2", {}, "Depth by kind and state"), depth,
      h("h2", {}, "Per kind over time"), windowForm, perKind,
      h("h2", {}, "Ready"), ready,
      h("h2", {}, "Throughput and failures, last hour"),
      h("figure", {}, chart(q.throughput),
        h("figcaption", { class: "muted" }, "Each pair of bars is 5 minutes: green succeeded, red went dead.")),
      h("details", {}, h("summary", {}, "Same figures as a table"),
        C.table("Throughput", [{ label: "from" }, { label: "succeeded", num: true }, { label: "failed", num: true }, { label: "cancelled", num: true }], rows)),
      h("h2", {}, "Dead jobs"), bulk, dead,
      h("h2", {}, "Workers online"),
      h("p", { class: "muted" }, "The fleet's workers (every org's jobs run on them), by a name that does not say their host; breakers as of each one's last heartbeat."),
      workersTable(q),
      h("h2", {}, "Provider limits"),
      h("p", { class: "muted" }, "Fleet-wide rate limits per provider endpoint, shared by every worker (named by a hash: operators see the address with agentd status)."),
      limitsTable(q));
  };

  async function pauseOrResume(kind, what) {
    const r = await C.api("POST", `/v1/queue/${encodeURIComponent(kind)}/${what}`);
    if (!r.ok) return C.flash(`Could not ${what} ${kind}: ` + C.problem(r), "error");
    await C.route();
    C.flash(what === "pause" ? `${kind} is paused: its jobs wait until you resume it.` : `${kind} is resumed.`, "ok");
  }

  async function onDead(what, ids) {
    const r = await C.api("POST", `/v1/jobs/dead/${what}`, { body: { ids } });
    if (!r.ok) return C.flash(`Could not ${what} the dead jobs: ` + C.problem(r), "error");
    const b = r.body;
    await C.route();
    const done = what === "retry" ? "ready again" : "cancelled";
    C.flash(`${b.ids.length} dead job(s) ${done}` +
      (b.skipped.length ? `; ${b.skipped.length} left dead (another job holds their unique key)` : "") + ".", "ok");
  }
})();
