// Usage page: the org's model use this month (runs, tokens, cost, budget) and per day over the
// last 7, 30 or 90 days (#/usage?days=N, GET /v1/usage?days=N): tokens in and out per day and
// what they cost, as inline SVG charts with the same figures in a table.
"use strict";
(function () {
  const C = window.Console, h = C.h;
  const DAYS = [7, 30, 90];
  const fmtInt = (n) => Number(n).toLocaleString();
  const dayLabel = (d) => new Date(d + "T00:00:00Z").toLocaleDateString([], { month: "short", day: "numeric", timeZone: "UTC" });

  C.pages.usage = async function usage() {
    const asked = Number(C.query().get("days"));
    const days = DAYS.includes(asked) ? asked : 30;
    const r = await C.api("GET", "/v1/usage?days=" + days);
    if (!r.ok) return C.page("Usage", h("p", { class: "error-text" }, C.problem(r)));
    const u = r.body, daily = u.daily || [];
    const pick = h("select", { id: "usage-days", name: "days" },
      DAYS.map((d) => h("option", { value: String(d), selected: d === days }, `last ${d} days`)));
    const form = h("form", { class: "inline", onsubmit: (e) => {
      e.preventDefault();
      location.hash = "#/usage?days=" + encodeURIComponent(pick.value);
    } }, h("label", { for: "usage-days" }, "Days"), pick, h("button", { type: "submit", id: "usage-show" }, "Show"));
    const sum = (k) => daily.reduce((a, d) => a + d[k], 0);
    const unknown = daily.filter((d) => d.cost_usd === null).length;
    const tokens = C.barChart({ id: "usage-tokens", stacked: true, title: `Tokens per day, last ${days} days`,
      desc: `${fmtInt(sum("input_tokens"))} input and ${fmtInt(sum("output_tokens"))} output tokens in ${fmtInt(sum("runs"))} runs`,
      fmtMax: fmtInt,
      groups: daily.map((d) => ({ label: dayLabel(d.day), bars: [
        { value: d.input_tokens, class: "in", title: `${d.day}: ${fmtInt(d.input_tokens)} input tokens` },
        { value: d.output_tokens, class: "out", title: `${d.day}: ${fmtInt(d.output_tokens)} output tokens` }] })),
      legend: [{ class: "in", label: "input" }, { class: "out", label: "output" }] });
    const cost = C.barChart({ id: "usage-cost", title: `Cost per day (US dollars), last ${days} days`,
      desc: `${C.fmtUsd(sum("priced_cost_usd"))} at the price table` + (unknown ? `; ${unknown} day(s) with a cost not fully known` : ""),
      fmtMax: (m) => C.fmtUsd(m), floor: 0.000001,
      groups: daily.map((d) => ({ label: dayLabel(d.day), bars: [
        { value: d.priced_cost_usd, class: d.cost_usd === null ? "bad" : "ok",
          title: `${d.day}: ${C.fmtUsd(d.cost_usd)}` + (d.cost_note ? ` (priced calls: ${C.fmtUsd(d.priced_cost_usd)}; ${d.cost_note})` : "") }] })),
      legend: [{ class: "ok", label: "cost" }, { class: "bad", label: "not fully known" }] });
    const limit = u.effective_token_limit;
    C.page("Usage",
      h("h2", {}, "This month"),
      C.facts([["month from", u.period_start], ["runs", fmtInt(u.runs)],
        ["tokens", `${fmtInt(u.tokens)} (${fmtInt(u.input_tokens)} in, ${fmtInt(u.output_tokens)} out)`],
        ["cost", u.cost_usd === null ? `${C.fmtUsd(u.cost_usd)} — ${u.cost_note || "not known"}; priced calls ${C.fmtUsd(u.priced_cost_usd)}` : C.fmtUsd(u.cost_usd)],
        ["token budget", limit === null ? "none (unlimited)" : `${fmtInt(u.budget_tokens_used)} of ${fmtInt(limit)} used`]]),
      h("h2", {}, `Per day (UTC), last ${days} days`), form,
      h("figure", {}, tokens, h("figcaption", { class: "muted" }, "Each bar is a day: input tokens below, output tokens on top.")),
      h("figure", {}, cost, h("figcaption", { class: "muted" }, "Each bar is a day's cost at the price table (llm.prices); red where some calls had no price.")),
      h("details", { id: "usage-table" }, h("summary", {}, "Same figures as a table"),
        C.table("Usage per day", [{ label: "day" }, { label: "runs", num: true }, { label: "input tokens", num: true },
          { label: "output tokens", num: true }, { label: "cost", num: true }],
        daily.map((d) => [d.day, fmtInt(d.runs), fmtInt(d.input_tokens), fmtInt(d.output_tokens),
          h("span", { title: d.cost_note || "at the price table (llm.prices)" }, C.fmtUsd(d.cost_usd))]), "No days.")));
  };
})();
