// Runs page: the org's runs (status, stop reason, tokens, cost, timings; one document's with ?subject=);
// one run as a timeline (each model round and tool call: time, tokens, outcome, flagged fields),
// live while it runs, with its transcript and audit trail; admins cancel a running run; reviewers
// fork a finished run from one of its steps and adopt an auto_create fork's proposal.
"use strict";
(function () {
  const C = window.Console, h = C.h;

  const took = (r) => (r.finished_at ? C.fmtSecs((new Date(r.finished_at) - new Date(r.started_at)) / 1000) : "running");

  async function list() {
    const subject = new URLSearchParams((location.hash || "").split("?")[1] || "").get("subject");
    const q = subject ? "&subject=" + encodeURIComponent(subject) : "";
    const r = await C.api("GET", "/v1/runs?limit=100" + q);
    const title = subject ? `Runs of ${C.short(subject)}` : "Runs";
    if (!r.ok) return C.page(title, h("p", { class: "error-text" }, C.problem(r)));
    C.page(title, subject ? h("p", {}, h("a", { href: "#/documents/" + encodeURIComponent(subject) }, "← the document"),
      " · ", h("a", { href: "#/runs" }, "all runs")) : null, C.table("Runs",
      ["run", "kind", "status", "stop reason", { label: "rounds", num: true }, { label: "tool calls", num: true },
        { label: "tokens in/out", num: true }, { label: "cost", num: true }, "started", { label: "took", num: true }],
      r.body.items.map((x) => [h("a", { href: "#/runs/" + encodeURIComponent(x.id) }, C.short(x.id)), x.kind,
        C.badge(x.status), x.stop_reason || "—", String(x.rounds), String(x.tool_calls),
        `${x.input_tokens} / ${x.output_tokens}`, h("span", { title: x.cost_note || "at the price table (llm.prices)" }, C.fmtUsd(x.cost_usd)),
        C.fmtTime(x.started_at), took(x)]),
      "No runs yet."));
  }

  // One checkpoint: what the model said or which tool answered, then the raw record.
  function step(s) {
    const p = s.payload || {};
    const text = typeof p.content === "string" ? p.content : typeof p.text === "string" ? p.text : null;
    const calls = Array.isArray(p.tool_calls) ? p.tool_calls.map((c) => (c.name || (c.function && c.function.name) || "?")) : [];
    return h("div", { class: "step" },
      h("h3", {}, `#${s.seq} ${s.kind.replace(/_/g, " ")}`, s.call_id ? ` (call ${s.call_id})` : "",
        h("span", { class: "muted" }, " · " + C.fmtTime(s.created_at))),
      text ? h("pre", {}, text) : null,
      calls.length ? h("p", {}, "Tool calls: " + calls.join(", ")) : null,
      h("details", {}, h("summary", {}, "Record"), h("pre", {}, C.json(p))));
  }

  // A duration in milliseconds in words ("—" when not known).
  const fmtMs = (ms) => (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0 ? "—"
    : ms < 1000 ? `${Math.round(ms)} ms` : `${(ms / 1000).toFixed(1)} s`);
  const num = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);

  // What a checkpoint's model answer used: {input, output} or null.
  function usage(p) {
    const u = (p.response && p.response.usage) || p.usage;
    if (!u || num(u.input_tokens) === null) return null;
    return { input: u.input_tokens, output: num(u.output_tokens) || 0 };
  }

  // The JSON pointers of the fields a tool result flagged (values its document does not
  // contain): names only, never the values.
  function flaggedFields(p) {
    if (typeof p.content !== "string") return [];
    try {
      const v = JSON.parse(p.content);
      return v && Array.isArray(v.ungrounded) ? v.ungrounded.filter((x) => typeof x === "string") : [];
    } catch (_) { return []; }
  }

  // The timeline: one row per checkpoint in order (model rounds, tools' model calls, tool calls,
  // loop marks) with how long it took, its tokens and its outcome. A model answer's time is
  // from the step before it (or the run's start); a tool call's is its audit row's.
  function timeline(run, steps, audit) {
    const byCall = new Map(audit.filter((a) => a.call_id).map((a) => [a.call_id, a]));
    // A tool's name by call, and the calls whose tool made a model call of its own (its tokens
    // are on that row, so the tool's row does not count them again).
    const toolOf = new Map(), modelled = new Set();
    let before = null;
    for (const s of steps) {
      if (s.kind === "tool_result" && s.call_id && s.payload && s.payload.tool) toolOf.set(s.call_id, s.payload.tool);
      if (s.kind === "tool_result" && before === "tool_model") modelled.add(s.seq);
      before = s.kind;
    }
    let prev = new Date(run.started_at).getTime(), round = 0;
    const rows = steps.map((s) => {
      const p = s.payload || {}, at = new Date(s.created_at).getTime();
      const since = Number.isFinite(at) && Number.isFinite(prev) ? at - prev : null;
      prev = at;
      const a = s.call_id ? byCall.get(s.call_id) : null;
      let what, ms = since, tokens = null, outcome = "—", flagged = [];
      if (s.kind === "llm_response") {
        round += 1;
        what = `model round ${round}`;
        const u = usage(p);
        tokens = u ? `${u.input} / ${u.output}` : null;
        const calls = Array.isArray(p.response && p.response.message && p.response.message.content)
          ? p.response.message.content.filter((b) => b && b.type === "tool_use").length : 0;
        outcome = calls ? `asked for ${calls} tool call${calls === 1 ? "" : "s"}` : "answered";
      } else if (s.kind === "tool_model") {
        const next = steps.find((t) => t.seq > s.seq && t.kind === "tool_result");
        const tool = toolOf.get(s.call_id) || (a && a.tool) || (next && next.payload && next.payload.tool);
        what = tool ? ["model call of ", h("code", {}, tool)] : "a tool's model call";
        const u = usage(p);
        tokens = u ? `${u.input} / ${u.output}` : null;
      } else if (s.kind === "tool_result") {
        what = ["tool ", h("code", {}, p.tool || (a && a.tool) || "?")];
        if (a) ms = num(a.duration_ms);
        if (a && a.tokens && !modelled.has(s.seq)) tokens = `${a.tokens} (total)`;
        const error = !!p.is_error;
        outcome = h("span", { class: error ? "error-text" : null },
          `${p.decision || (a && a.decision) || "—"} · ${error ? "error" : "no error"}`);
        flagged = flaggedFields(p);
      } else {
        what = s.kind.replace(/_/g, " ");
      }
      return h("tr", { class: flagged.length ? "flagged-row" : null, "data-seq": String(s.seq) },
        h("td", { class: "num" }, String(s.seq)), h("td", {}, what),
        h("td", { class: "num" }, fmtMs(ms)), h("td", { class: "num" }, tokens || "—"),
        h("td", {}, outcome),
        h("td", {}, flagged.length
          ? flagged.map((f, i) => [i ? " " : null, h("mark", { class: "flagged" }, f)]) : "—"));
    });
    if (!rows.length) return h("p", { class: "muted", id: "timeline" }, run.status === "running"
      ? "No step yet: the first appears when the model answers." : "No checkpoints (compacted or not started).");
    return h("table", { id: "timeline" },
      h("caption", { class: "visually-hidden" }, "Timeline"),
      h("thead", {}, h("tr", {}, ["#", "step", "took", "tokens in/out", "outcome", "flagged fields"].map((x, i) =>
        h("th", { scope: "col", class: [0, 2, 3].includes(i) ? "num" : null }, x)))),
      h("tbody", {}, rows),
      h("tfoot", {}, h("tr", {}, h("th", { scope: "row", colspan: "2" }, "whole run"),
        h("td", { class: "num" }, took(run)), h("td", { class: "num" }, `${run.input_tokens} / ${run.output_tokens}`),
        h("td", { colspan: "2" }, `${run.status}${run.stop_reason ? " (" + run.stop_reason + ")" : ""}, cost ` +
          C.fmtUsd(run.cost_usd)))));
  }

  // Everything of the page that changes while the run goes on.
  function body(run, steps, audit) {
    return [C.facts([["status", C.badge(run.status)], ["stop reason", run.stop_reason], ["subject", run.subject],
        ["provider / model", `${run.provider} / ${run.model}`], ["rounds", String(run.rounds)],
        ["tool calls", String(run.tool_calls)],
        ["tokens", `${run.input_tokens} in, ${run.output_tokens} out (${run.input_tokens + run.output_tokens} total)` +
          (run.cache_read_tokens || run.cache_write_tokens
            ? `; of the input ${run.cache_read_tokens} read from the prompt cache, ${run.cache_write_tokens} written to it` : "")],
        ["cost", h("span", { id: "run-cost" }, C.fmtUsd(run.cost_usd) + (run.cost_note ? ` (${run.cost_note})` : " at the price table"))],
        ["started", C.fmtTime(run.started_at)], ["finished", C.fmtTime(run.finished_at)], ["took", took(run)],
        ["job", run.job_id === null ? null : String(run.job_id)],
        run.error ? ["error", h("span", { class: "error-text" }, run.error)] : null]),
      h("h2", {}, `Timeline (${steps.length} steps)`), timeline(run, steps, audit),
      run.final_text ? [h("h2", {}, "Final answer"), h("pre", { id: "final-text" }, run.final_text)] : null,
      h("h2", {}, `Audit trail (${audit.length})`),
      C.table("Audit trail", ["when", "actor", "tool", "category", "decision", { label: "ms", num: true },
        { label: "tokens", num: true }, "outcome"],
        audit.map((a) => [C.fmtTime(a.created_at), a.actor, h("code", {}, a.tool), a.category,
          h("span", { class: a.is_error ? "error-text" : null }, a.decision + (a.is_error ? " (error)" : "")),
          String(a.duration_ms), String(a.tokens),
          h("details", {}, h("summary", {}, "outcome"), h("pre", {}, C.json({ args: a.args, outcome: a.outcome })))]),
        "No audit rows."),
      h("h2", {}, `Transcript (${steps.length} checkpoints)`),
      steps.length ? h("div", { id: "transcript" }, steps.map(step)) : h("p", { class: "muted" }, "No checkpoints (compacted or not started).")];
  }

  // Following a running run: the page reads GET /v1/events/stream?subject=<run> with fetch (an
  // EventSource cannot send the key's Authorization header) and reloads the run's JSON on each
  // run.step and run.finished; if the stream cannot be read it polls the run every 2 s. Either
  // stops when the run ends or the page is left.
  let live = null;
  function stopLive() {
    if (live) live.abort();
    live = null;
  }
  window.addEventListener("hashchange", stopLive);

  function follow(id) {
    stopLive();
    const ctl = (live = new AbortController());
    let queued = false;
    const refresh = async () => {
      queued = false;
      if (ctl.signal.aborted) return true;
      const r = await C.api("GET", "/v1/runs/" + encodeURIComponent(id));
      if (ctl.signal.aborted || !r.ok) return ctl.signal.aborted;
      const { run, steps, audit } = r.body;
      const box = document.getElementById("run-live");
      if (!box) { ctl.abort(); return true; }
      box.replaceChildren(...C.nodes(body(run, steps, audit)));
      C.scrollers(box);
      if (run.status !== "running") {
        const cancel = document.getElementById("cancel-actions");
        if (cancel) cancel.remove();
        const note = document.getElementById("live-note");
        if (note) note.textContent = `The run ended (${run.status}).`;
        ctl.abort();
        return true;
      }
      return false;
    };
    const soon = () => { if (!queued) { queued = true; setTimeout(refresh, 250); } };
    const poll = async () => {
      const note = document.getElementById("live-note");
      if (note && !ctl.signal.aborted) note.textContent = "Live: the page reloads the run every 2 s while it runs.";
      while (!ctl.signal.aborted) {
        await new Promise((ok) => setTimeout(ok, 2000));
        if (await refresh()) return;
      }
    };
    (async () => {
      let res;
      try {
        res = await fetch("/v1/events/stream?subject=" + encodeURIComponent(id), {
          headers: { Authorization: "Bearer " + C.key(), Accept: "text/event-stream" }, signal: ctl.signal, cache: "no-store" });
      } catch (_) { return ctl.signal.aborted ? null : poll(); }
      if (!res.ok || !res.body) return poll();
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = "";
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buf += value.replace(/\r\n?/g, "\n");
          let i;
          while ((i = buf.indexOf("\n\n")) >= 0) {
            const m = /^event: ?(.*)$/m.exec(buf.slice(0, i));
            buf = buf.slice(i + 2);
            if (m && (m[1] === "run.step" || m[1] === "run.finished")) soon();
          }
        }
      } catch (_) { if (ctl.signal.aborted) return; }
      if (!ctl.signal.aborted) poll();
    })();
  }

  async function one(id) {
    stopLive();
    const r = await C.api("GET", "/v1/runs/" + encodeURIComponent(id));
    if (!r.ok) return C.page("Run", h("p", { class: "error-text" }, C.problem(r)));
    const { run, steps, audit } = r.body;
    const running = run.status === "running";
    const cancel = running && C.can("admin")
      ? h("div", { class: "actions", id: "cancel-actions" }, C.button("Cancel run", () => cancelRun(run), { id: "cancel-run", class: "danger" }))
      : null;
    C.page(`Run ${C.short(run.id)} (${run.kind})`,
      h("p", {}, h("a", { href: "#/runs" }, "← all runs")), cancel,
      running ? h("p", { id: "live-note", role: "status", class: "muted" }, "Live: new steps appear as the run checkpoints them.") : null,
      h("div", { id: "run-live" }, body(run, steps, audit)), forkForm(run, steps));
    if (running) follow(run.id);
  }

  // Fork from here (issue 50): a reviewer forks a finished run from one of its steps — the
  // fork starts with the run's first N checkpoints (no model call or side effect again) and
  // goes on with the model given (POST /v1/runs/{id}/fork); an auto_create fork's proposal is
  // the document's only once adopted (POST /v1/runs/{id}/adopt).
  function forkForm(run, steps) {
    const parent = run.parent_run_id ? h("p", { class: "muted", id: "fork-parent" }, "A fork of ",
      h("a", { href: "#/runs/" + encodeURIComponent(run.parent_run_id) }, C.short(run.parent_run_id)),
      ` from its step ${run.parent_step}.`) : null;
    if (run.status === "running" || !C.can("reviewer") || !steps.length ||
      !["auto_create", "proactive_suggestion"].includes(run.kind)) return parent;
    const step = h("input", { id: "fork-step", type: "number", min: "1", max: String(steps.length),
      value: String(steps.length), required: true });
    const model = h("input", { id: "fork-model", maxlength: 200, autocomplete: "off", placeholder: run.model });
    const adopt = run.parent_run_id && run.kind === "auto_create" && ["succeeded", "capped"].includes(run.status)
      ? C.button("Adopt this fork's proposal", () => adoptFork(run), { id: "adopt-fork" }) : null;
    return h("section", { "aria-labelledby": "fork-title", id: "fork" },
      h("h2", { id: "fork-title" }, "Fork from here"), parent,
      h("div", { class: "actions" }, h("label", { for: "fork-step" }, "steps kept (1–" + steps.length + ")"), step,
        h("label", { for: "fork-model" }, "model"), model,
        C.button("Fork from here", () => forkRun(run, step.value, model.value), { id: "fork-run" }), adopt));
  }

  async function forkRun(run, step, model) {
    const body = { from_step: Number(step) };
    if (model.trim()) body.model = model.trim();
    const r = await C.api("POST", `/v1/runs/${encodeURIComponent(run.id)}/fork`, { body });
    if (!r.ok) return C.flash("Could not fork: " + C.problem(r), "error");
    // Said once the page moved to the fork (moving clears the flash).
    const said = `Fork ${C.short(r.body.run_id)} made from step ${r.body.parent_step}: a worker runs the rest.`;
    window.addEventListener("hashchange", () => C.flash(said, "ok"), { once: true });
    location.hash = "#/runs/" + encodeURIComponent(r.body.run_id);
  }

  async function adoptFork(run) {
    const r = await C.api("POST", `/v1/runs/${encodeURIComponent(run.id)}/adopt`);
    if (!r.ok) return C.flash("Could not adopt: " + C.problem(r), "error");
    C.flash("The document now proposes this fork's proposal: accept or reject it on its page.", "ok");
  }

  async function cancelRun(run) {
    const r = await C.api("POST", `/v1/runs/${encodeURIComponent(run.id)}/cancel`);
    if (!r.ok) return C.flash("Could not cancel: " + C.problem(r), "error");
    await C.route();
    C.flash(`Run cancelled (job ${r.body.id}): it stops at its next step.`, "ok");
  }

  C.pages.runs = (id) => (id ? one(id) : list());
})();
