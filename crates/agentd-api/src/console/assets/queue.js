// Queue page (admin): depth by kind and state, ready jobs and the oldest one's age, finished
// and failed jobs per 5-minute bucket over the last hour (inline SVG), pause and resume per
// kind, dead jobs with retry (one or all listed) and cancel (all listed).
"use strict";
(function () {
  const C = window.Console, h = C.h;
  const SVG = "http://www.w3.org/2000/svg";

  function svg(tag, attrs, ...kids) {
    const el = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) el.setAttribute(k, String(v));
    for (const k of kids) el.append(k instanceof Node ? k : document.createTextNode(String(k)));
    return el;
  }

  // Paired bars per bucket: succeeded (green) and failed (red), with a text table beside it
  // for screen readers.
  function chart(buckets) {
    const W = 720, H = 180, pad = 28, n = buckets.length || 1;
    const max = Math.max(1, ...buckets.map((b) => Math.max(b.succeeded, b.failed)));
    const slot = (W - pad * 2) / n, bw = Math.max(2, slot / 2 - 3);
    const y = (v) => H - pad - (v / max) * (H - pad * 2);
    const root = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img",
      "aria-labelledby": "chart-title chart-desc", width: "100%" });
    const total = (k) => buckets.reduce((s, b) => s + b[k], 0);
    root.append(svg("title", { id: "chart-title" }, "Jobs finished per 5 minutes, last hour"),
      svg("desc", { id: "chart-desc" }, `${total("succeeded")} succeeded and ${total("failed")} failed in the last hour`));
    root.append(svg("line", { x1: pad, y1: H - pad, x2: W - pad, y2: H - pad, stroke: "#444" }));
    root.append(svg("text", { x: 2, y: pad }, String(max)), svg("text", { x: 2, y: H - pad }, "0"));
    buckets.forEach((b, i) => {
      const x = pad + i * slot + 2;
      const when = new Date(b.start).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
      root.append(svg("rect", { x, y: y(b.succeeded), width: bw, height: H - pad - y(b.succeeded), class: "ok" },
        svg("title", {}, `${when}: ${b.succeeded} succeeded`)));
      root.append(svg("rect", { x: x + bw + 1, y: y(b.failed), width: bw, height: H - pad - y(b.failed), class: "bad" },
        svg("title", {}, `${when}: ${b.failed} failed`)));
      if (i % 3 === 0) root.append(svg("text", { x, y: H - pad + 14 }, when));
    });
    root.append(svg("rect", { x: W - 170, y: 4, width: 10, height: 10, class: "ok" }),
      svg("text", { x: W - 156, y: 13 }, "succeeded"),
      svg("rect", { x: W - 90, y: 4, width: 10, height: 10, class: "bad" }),
      svg("text", { x: W - 76, y: 13 }, "failed (dead)"));
    return root;
  }

  C.pages.queue = async function queue() {
    const r = await C.api("GET", "/v1/queue");
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
    C.page("Queue",
      C.facts([["as of", C.fmtTime(q.now)], ["oldest ready job waiting", C.fmtSecs(q.oldest_ready_secs)],
        ["paused kinds", paused.size ? [...paused.keys()].join(", ") : "none"]]),
      h("h2", {}, "Pause and resume"),
      h("p", { class: "muted" }, "A paused kind's jobs of this org wait: no worker claims them until it is resumed; running jobs finish."),
      pauses,
      h("h2", {}, "Depth by kind and state"), depth,
      h("h2", {}, "Ready"), ready,
      h("h2", {}, "Throughput and failures, last hour"),
      h("figure", {}, chart(q.throughput),
        h("figcaption", { class: "muted" }, "Each pair of bars is 5 minutes: green succeeded, red went dead.")),
      h("details", {}, h("summary", {}, "Same figures as a table"),
        C.table("Throughput", [{ label: "from" }, { label: "succeeded", num: true }, { label: "failed", num: true }, { label: "cancelled", num: true }], rows)),
      h("h2", {}, "Dead jobs"), bulk, dead);
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
