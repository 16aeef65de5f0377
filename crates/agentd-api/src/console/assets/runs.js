// Runs page: the org's runs (status, stop reason, tokens, cost, timings); one run's transcript
// (checkpoints in order) and its audit trail; admins cancel a running run.
"use strict";
(function () {
  const C = window.Console, h = C.h;

  const took = (r) => (r.finished_at ? C.fmtSecs((new Date(r.finished_at) - new Date(r.started_at)) / 1000) : "running");

  async function list() {
    const r = await C.api("GET", "/v1/runs?limit=100");
    if (!r.ok) return C.page("Runs", h("p", { class: "error-text" }, C.problem(r)));
    C.page("Runs", C.table("Runs",
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

  async function one(id) {
    const r = await C.api("GET", "/v1/runs/" + encodeURIComponent(id));
    if (!r.ok) return C.page("Run", h("p", { class: "error-text" }, C.problem(r)));
    const { run, steps, audit } = r.body;
    const cancel = run.status === "running" && C.can("admin")
      ? h("div", { class: "actions" }, C.button("Cancel run", () => cancelRun(run), { id: "cancel-run", class: "danger" }))
      : null;
    C.page(`Run ${C.short(run.id)} (${run.kind})`,
      h("p", {}, h("a", { href: "#/runs" }, "← all runs")), cancel,
      C.facts([["status", C.badge(run.status)], ["stop reason", run.stop_reason], ["subject", run.subject],
        ["provider / model", `${run.provider} / ${run.model}`], ["rounds", String(run.rounds)],
        ["tool calls", String(run.tool_calls)],
        ["tokens", `${run.input_tokens} in, ${run.output_tokens} out (${run.input_tokens + run.output_tokens} total)` +
          (run.cache_read_tokens || run.cache_write_tokens
            ? `; of the input ${run.cache_read_tokens} read from the prompt cache, ${run.cache_write_tokens} written to it` : "")],
        ["cost", h("span", { id: "run-cost" }, C.fmtUsd(run.cost_usd) + (run.cost_note ? ` (${run.cost_note})` : " at the price table"))],
        ["started", C.fmtTime(run.started_at)], ["finished", C.fmtTime(run.finished_at)], ["took", took(run)],
        ["job", run.job_id === null ? null : String(run.job_id)],
        run.error ? ["error", h("span", { class: "error-text" }, run.error)] : null]),
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
      steps.length ? h("div", { id: "transcript" }, steps.map(step)) : h("p", { class: "muted" }, "No checkpoints (compacted or not started)."));
  }

  async function cancelRun(run) {
    const r = await C.api("POST", `/v1/runs/${encodeURIComponent(run.id)}/cancel`);
    if (!r.ok) return C.flash("Could not cancel: " + C.problem(r), "error");
    await C.route();
    C.flash(`Run cancelled (job ${r.body.id}): it stops at its next step.`, "ok");
  }

  C.pages.runs = (id) => (id ? one(id) : list());
})();
