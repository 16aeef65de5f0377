//! `agentd demo`: the whole mission on the embedded samples, printed as a readable report.
//!
//! 1. auto-create on the sample documents (workers until they drain); then a reviewer refines
//!    the first proposal with instructions (`agentd documents refine`): the proposal before and
//!    after;
//! 2. the nightly `proactive_suggestion` job for the demo org, after a person made a tag:
//!    suggestions and the pending approvals of their actions, each with its reason;
//! 3. time passes on the demo's own clock (nothing sleeps): a person changes one approval's
//!    document and approves another; the `approval_expiry` sweep (the job's code, restricted to
//!    the demo org's approvals) marks the changed one stale and, past the org's TTL, the
//!    untouched one expired;
//!    3b. a run that waits for its decisions and goes on (`agent.await_decisions`, on in the
//!    demo's catalog): the first night's run waited through step 3 and ended `capped` when an
//!    approval expired; the next night's proposes, waits, a person approves every proposal, and
//!    the run continues with the outcomes and ends;
//! 4. the events written along the way (what `GET /v1/events` and webhooks carry).
//!
//! Every run uses a fresh org (`demo`, else `demo-2`, …), so it can be repeated on one database.
//! The moved clock is used only for the demo org's approvals and documents, never by a worker.

use super::bad;
use super::output::print_json;
use super::report::{document_report, print_report};
use crate::app::{App, WorkerArgs};
use crate::approvals::{self, Decision, DecisionExtra};
use crate::clock::{Clock, ManualClock, SharedClock};
use crate::documents::{SAMPLES, add_document};
use crate::jobs::approval_expiry::ApprovalExpiry;
use crate::kinds::{self, JobKind};
use crate::org_settings::{self, Patch};
use crate::queue::{self, JobState};
use crate::store::api_reads::SuggestionItem;
use crate::store::states::{ApprovalStatus, AutoCreateStatus, RunStatus};
use crate::store::{api_reads, approvals as astore, auto_create, documents, events, orgs, runs};
use chrono::Duration as Span;
use clap::Args;
use serde_json::{Value, json};
use std::io::Write;
use std::time::{Duration, Instant};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// Options of `agentd demo`.
#[derive(Args, Debug)]
pub struct DemoCmd {
    /// Org name for the sample documents (taken: `NAME-2`, `NAME-3`, …).
    #[arg(long, default_value = "demo")]
    pub org: String,
    /// Give up waiting for a step after this many seconds.
    #[arg(long, default_value_t = 300)]
    pub timeout_secs: u64,
    /// The report as one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// The org's approval TTL in the demo (a per-org setting), and when the clock is read.
const TTL_SECS: i64 = 7200;
const EDIT_AT: i64 = 30;
const FIRST_SWEEP_AT: i64 = 75;
const SECOND_SWEEP_AT: i64 = 125;
const PERSON: &str = "user:demo";

/// Runs the demo.
pub async fn run(app: &App, cmd: DemoCmd) -> anyhow::Result<()> {
    let started = Instant::now();
    let org = fresh_org(app, &cmd.org).await?;
    let provider = app.provider.name().to_string();
    eprintln!(
        "agentd demo: org {} ({}), {} documents, provider {}{}",
        org.name,
        org.id,
        SAMPLES.len(),
        provider,
        if provider == "offline" {
            " (deterministic heuristic model, not an LLM; set OPENAI_API_KEY to use one)"
        } else {
            ""
        }
    );
    let mut demo_app = app.clone();
    let mut config = (*app.config).clone();
    config.http.addr = String::new();
    demo_app.config = std::sync::Arc::new(config);
    // The nightly runs wait for the decisions on their proposals and go on (step 3b).
    let mut catalog = (*app.catalog).clone();
    if let Some(nightly) = catalog.kinds.get_mut(kinds::ProactiveSuggestion::NAME) {
        nightly.agent.await_decisions = true;
    }
    demo_app.catalog = std::sync::Arc::new(catalog);
    let stop = CancellationToken::new();
    let args = WorkerArgs::serving(
        &[kinds::AutoCreate::NAME, kinds::ProactiveSuggestion::NAME],
        None,
    );
    let worker = demo_app
        .start_worker(args, stop.clone())
        .await
        .map_err(bad)?;
    let steps = async {
        let docs = auto_create_step(&demo_app, org.id, &cmd, started).await?;
        let refine = refine_step(&demo_app, org.id, &docs, &cmd).await?;
        let nightly = nightly_step(&demo_app, org.id, &cmd).await?;
        let later = later_step(&demo_app, org.id).await?;
        let go_on = go_on_step(&demo_app, org.id, &cmd, &nightly).await?;
        anyhow::Ok((docs, refine, nightly, later, go_on))
    }
    .await;
    stop.cancel();
    worker.join().await;
    let (docs, refine, nightly, later, go_on) = steps?;
    let evs = readable_events(app, org.id).await?;
    let written = events::count_written(&app.pool, org.id).await?;
    let period = runs::period_of(app.clock.now());
    let usage = runs::month_usage(&app.pool, org.id, period).await?;
    let (cost_usd, cost_note) = match usage.cost() {
        Ok(c) => (Some(c.dollars()), None),
        Err(why) => (None, Some(why)),
    };
    let report = json!({
        "org": {"id": org.id, "name": org.name}, "provider": provider,
        "seconds": started.elapsed().as_secs_f64(),
        "documents": docs, "refine": refine, "nightly": nightly, "later": later, "go_on": go_on,
        "events": evs, "event_counts": counts(&evs), "events_written": written,
        "usage": {"runs": usage.runs, "tokens": usage.input_tokens + usage.output_tokens,
            "cost_usd": cost_usd, "cost_note": cost_note},
    });
    if cmd.json {
        print_json(&report)?;
    } else {
        print_text(&report);
    }
    Ok(())
}

/// `name`, or the first of `name-2`, `name-3`, … that is not an org yet.
async fn fresh_org(app: &App, name: &str) -> anyhow::Result<orgs::OrgRow> {
    for n in 1.. {
        let candidate = if n == 1 {
            name.to_string()
        } else {
            format!("{name}-{n}")
        };
        if orgs::find(&app.pool, &candidate).await?.is_none() {
            return Ok(orgs::ensure(&app.pool, &candidate).await?);
        }
    }
    unreachable!("an unused org name exists")
}

/// Step 1: the samples uploaded with auto-create; waits until each is done.
async fn auto_create_step(
    app: &App,
    org: Uuid,
    cmd: &DemoCmd,
    started: Instant,
) -> anyhow::Result<Vec<Value>> {
    let mut ids = Vec::new();
    for (name, text) in SAMPLES {
        ids.push(add_document(app, org, name, text, true).await?.0);
    }
    let mut last_line = String::new();
    loop {
        let mut statuses = Vec::new();
        for id in &ids {
            if let Some(s) = auto_create::state(&app.pool, None, *id).await? {
                statuses.push(s.auto_create_status);
            }
        }
        let count =
            |want: &[AutoCreateStatus]| statuses.iter().filter(|s| want.contains(s)).count();
        let done = count(&AutoCreateStatus::DONE);
        let line = format!(
            "\r  auto-create: {done}/{} done ({} proposed, {} failed), {:.1}s",
            ids.len(),
            count(&[AutoCreateStatus::Proposed]),
            count(&[AutoCreateStatus::Failed]),
            started.elapsed().as_secs_f64()
        );
        if line != last_line {
            eprint!("{line}");
            let _ = std::io::stderr().flush();
            last_line = line;
        }
        if done == ids.len() {
            break;
        }
        if started.elapsed() > Duration::from_secs(cmd.timeout_secs) {
            return Err(anyhow::anyhow!(
                "demo: documents still not done after {}s; see `agentd status`",
                cmd.timeout_secs
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    eprintln!();
    let mut reports = Vec::new();
    for id in &ids {
        if let Some(r) = document_report(app, *id).await? {
            reports.push(r);
        }
    }
    Ok(reports)
}

/// What the demo's reviewer asks of the first proposal (the offline model understands "rename
/// X to Y", "add field X" and "remove field X").
pub const REFINE_INSTRUCTIONS: &str =
    "Rename total to total_due and add a field payment_reference.";

/// Step 1b: a reviewer refines the first sample's proposal; waits until it is proposed again.
async fn refine_step(app: &App, org: Uuid, docs: &[Value], cmd: &DemoCmd) -> anyhow::Result<Value> {
    let Some(before) = docs.first() else {
        return Ok(Value::Null);
    };
    let Some(id) = before["document_id"]
        .as_str()
        .and_then(|s| Uuid::parse_str(s).ok())
    else {
        return Ok(Value::Null);
    };
    if before["auto_create_status"] != "proposed" {
        return Ok(json!({"skipped": "the first sample has no proposal to refine"}));
    }
    let q = &app.spec(kinds::AutoCreate::NAME).queue;
    let (words, now) = (REFINE_INSTRUCTIONS, app.clock.now());
    let queued = crate::jobs::refine::request(&app.pool, q, org, id, words, "demo:reviewer", now)
        .await
        .map_err(|e| anyhow::anyhow!("demo: refine: {e}"))?;
    eprint!(
        "  refine of {} (job #{})…",
        s(&before["name"]),
        queued.job_id
    );
    let deadline = Instant::now() + Duration::from_secs(cmd.timeout_secs);
    loop {
        let st = auto_create::state(&app.pool, Some(org), id).await?;
        let status = st.map(|s| s.auto_create_status);
        if status.is_some_and(|s| AutoCreateStatus::DONE.contains(&s)) {
            break;
        }
        if Instant::now() > deadline {
            return Err(anyhow::anyhow!(
                "demo: the refine of document {id} is not done after {}s; see `agentd status`",
                cmd.timeout_secs
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = document_report(app, id).await?.unwrap_or(Value::Null);
    eprintln!(" {}", s(&after["auto_create_status"]));
    Ok(
        json!({"document_id": id, "instructions": words, "job_id": queued.job_id,
              "before": before, "after": after}),
    )
}

/// Step 2: a person makes a tag and sets the org's approval TTL; the nightly job runs.
async fn nightly_step(app: &App, org: Uuid, cmd: &DemoCmd) -> anyhow::Result<Value> {
    let now = app.clock.now();
    let mut conn = app.pool.acquire().await?;
    let (tag, _) =
        crate::store::tags::create(&mut conn, org, "paperwork", "#4a90d9", None, now).await?;
    drop(conn);
    let patch = Patch {
        approval_ttl_secs: Some(Some(TTL_SECS)),
        ..Patch::default()
    };
    let settings = org_settings::apply(
        &app.pool,
        &app.config,
        org,
        &patch,
        now,
        org_settings::SetBy::Operator,
    )
    .await
    .map_err(|e| anyhow::anyhow!("org settings: {e}"))?;
    let night = now.with_timezone(&org_settings::tz(&settings)).date_naive();
    let q = &app.spec(kinds::ProactiveSuggestion::NAME).queue;
    let job = crate::jobs::proactive_suggestion::nightly_job(q, org, night);
    let job_id = queue::enqueue(&app.pool, &job)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the nightly job of {night} already exists"))?;
    eprint!("  nightly job #{job_id} for {night}…");
    let state = job_finished(app, job_id, cmd).await?;
    eprintln!(" {state}");
    let run = runs::run_for_job(&app.pool, job_id).await?;
    let suggestions: Vec<SuggestionItem> =
        api_reads::page(&app.pool, org, None, None, None, 100).await?;
    let mut approvals =
        astore::list(&app.pool, Some(org), Some(ApprovalStatus::Pending), 100).await?;
    approvals.sort_by_key(|a| (a.created_at, a.id));
    Ok(json!({
        "tag": {"id": tag.id, "name": tag.name},
        "settings": {"approval_ttl_secs": settings.approval_ttl_secs, "timezone": settings.timezone},
        "night": night, "job": {"id": job_id, "state": state},
        "run": run.map(|r| {
            let cost = runs::CountersView::from(r.counters);
            json!({"id": r.id, "status": r.status, "tool_calls": r.counters.tool_calls,
            "tokens": r.counters.tokens(), "cost_usd": cost.cost_usd, "cost_note": cost.cost_note,
            "summary": r.final_text})
        }),
        "suggestions": suggestions.iter().rev().map(|s| json!({"id": s.row.id, "kind": s.row.fields.kind,
            "title": s.row.fields.title, "status": s.row.status, "approval_id": s.approval_id})).collect::<Vec<_>>(),
        "approvals": approvals.iter().map(|a| json!({"id": a.id, "tool": a.action.tool,
            "summary": a.summary, "rationale": a.rationale, "expires_at": a.expires_at}))
            .collect::<Vec<_>>(),
    }))
}

/// Step 3: hours pass on the demo's clock. The first pending approval's document is edited,
/// the last is approved, the sweep runs twice (before and after the TTL).
async fn later_step(app: &App, org: Uuid) -> anyhow::Result<Value> {
    let mut pending =
        astore::list(&app.pool, Some(org), Some(ApprovalStatus::Pending), 100).await?;
    pending.sort_by_key(|a| (a.created_at, a.id));
    if pending.len() < 2 {
        // A real model may propose fewer actions than the offline one: say so, fail nothing.
        return Ok(json!({"skipped": format!(
            "the nightly job left {} pending approval(s); this step needs 2 (one to change, one to expire)",
            pending.len())}));
    }
    let start = app.clock.now();
    let clock = ManualClock::new(start + Span::minutes(EDIT_AT));
    let shared: SharedClock = clock.clone();
    let mut timeline = Vec::new();

    let changed = &pending[0];
    let doc = changed.action.args["document_id"]
        .as_str()
        .and_then(|s| Uuid::parse_str(s).ok())
        .ok_or_else(|| anyhow::anyhow!("demo: approval {} names no document", changed.id))?;
    let mut conn = app.pool.acquire().await?;
    let d = documents::update(
        &mut conn,
        org,
        doc,
        None,
        Some(&json!({"checked_by": "demo"})),
        clock.now(),
    )
    .await?
    .ok_or_else(|| anyhow::anyhow!("demo: document {doc} is gone"))?;
    drop(conn);
    timeline.push(json!({"at_minutes": EDIT_AT, "what": format!(
        "a person set metadata checked_by=demo on '{}' (the data of approval {})", d.name, changed.id)}));

    let mut approved = None;
    if pending.len() >= 3 {
        let a = &pending[pending.len() - 1];
        let env = app.tool_env(app.spec(kinds::ProactiveSuggestion::NAME));
        let by = PERSON.to_string();
        let out = approvals::decide(
            &app.pool,
            &shared,
            &env,
            a.id,
            Some(org),
            Decision::Approve { by },
            DecisionExtra::default(),
        )
        .await?;
        timeline.push(json!({"at_minutes": EDIT_AT, "what": format!(
            "a person approved {} → {}", a.id, out.status)}));
        approved = Some(a.id);
    }

    let ids: Vec<Uuid> = pending.iter().map(|a| a.id).collect();
    let mut sweeper = ApprovalExpiry::sweeper(app);
    sweeper.clock = shared.clone();
    let mut sweeps = Vec::new();
    for at in [FIRST_SWEEP_AT, SECOND_SWEEP_AT] {
        clock.set(start + Span::minutes(at));
        let r = sweeper.run_once(Some(&ids)).await?;
        timeline.push(json!({"at_minutes": at, "what": format!(
            "approval_expiry sweep: {} stale, {} expired, {} re-proposal job(s) queued",
            r.stale, r.expired, r.reproposals_enqueued)}));
        sweeps.push(json!({"at_minutes": at, "report": r}));
    }
    let mut after = Vec::new();
    for id in &ids {
        if let Some(a) = astore::get(&app.pool, *id).await? {
            let changes = a.result.as_ref().and_then(|r| r.get("changes")).cloned();
            after.push(json!({"id": a.id, "summary": a.summary, "status": a.status,
                "decided_by": a.decided_by, "changed_keys": changes.as_ref()
                    .and_then(Value::as_object).map(|m| m.keys().cloned().collect::<Vec<_>>())}));
        }
    }
    let suggestions: Vec<SuggestionItem> =
        api_reads::page(&app.pool, org, None, None, None, 100).await?;
    Ok(json!({
        "ttl_secs": TTL_SECS, "changed": changed.id, "approved": approved,
        "timeline": timeline, "sweeps": sweeps, "approvals": after,
        "suggestions": suggestions.iter().rev().map(|s| json!({"id": s.row.id, "title": s.row.fields.title,
            "status": s.row.status})).collect::<Vec<_>>(),
    }))
}

/// The state job `job_id` ended in, once it ended (at most `--timeout-secs`).
async fn job_finished(app: &App, job_id: i64, cmd: &DemoCmd) -> anyhow::Result<JobState> {
    let deadline = Instant::now() + Duration::from_secs(cmd.timeout_secs);
    loop {
        let state = queue::store::get(&app.pool, job_id)
            .await?
            .map(|j| j.state)
            .unwrap_or(JobState::Succeeded);
        if state.is_finished() {
            return Ok(state);
        }
        if Instant::now() > deadline {
            return Err(anyhow::anyhow!(
                "demo: job #{job_id} is still {state} after {}s; see `agentd jobs list`",
                cmd.timeout_secs
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Run `id` once it ended (neither running nor waiting; at most `--timeout-secs`).
async fn run_ended(app: &App, id: Uuid, cmd: &DemoCmd) -> anyhow::Result<runs::RunRow> {
    let deadline = Instant::now() + Duration::from_secs(cmd.timeout_secs);
    loop {
        let run = runs::get_run(&app.pool, id)
            .await?
            .ok_or_else(|| anyhow::anyhow!("demo: run {id} is gone"))?;
        if !matches!(run.status, RunStatus::Running | RunStatus::Waiting) {
            return Ok(run);
        }
        if Instant::now() > deadline {
            return Err(anyhow::anyhow!(
                "demo: run {id} is still {} after {}s; see `agentd runs show {id}`",
                run.status,
                cmd.timeout_secs
            ));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn run_json(r: &runs::RunRow) -> Value {
    json!({"id": r.id, "status": r.status, "stop_reason": r.stop_reason,
        "rounds": r.counters.rounds, "tool_calls": r.counters.tool_calls, "summary": r.final_text})
}

/// Step 3b: the first night's run waited through step 3 and ended when its wait did; the next
/// night's run proposes and waits, a person approves every proposal, and it goes on to its end.
async fn go_on_step(app: &App, org: Uuid, cmd: &DemoCmd, nightly: &Value) -> anyhow::Result<Value> {
    let first = match nightly["run"]["id"]
        .as_str()
        .and_then(|s| Uuid::parse_str(s).ok())
    {
        Some(id) => Some(run_json(&run_ended(app, id, cmd).await?)),
        None => None,
    };
    let settings = crate::store::org_settings::get(&app.pool, org)
        .await?
        .ok_or_else(|| anyhow::anyhow!("demo: org {org} is gone"))?;
    let today = app
        .clock
        .now()
        .with_timezone(&org_settings::tz(&settings))
        .date_naive();
    let night = today.succ_opt().unwrap_or(today);
    let q = &app.spec(kinds::ProactiveSuggestion::NAME).queue;
    let job = crate::jobs::proactive_suggestion::nightly_job(q, org, night);
    let job_id = queue::enqueue(&app.pool, &job)
        .await?
        .ok_or_else(|| anyhow::anyhow!("the nightly job of {night} already exists"))?;
    eprint!("  nightly job #{job_id} for {night}…");
    let state = job_finished(app, job_id, cmd).await?;
    eprintln!(" {state}");
    let Some(run) = runs::run_for_job(&app.pool, job_id).await? else {
        return Ok(
            json!({"first": first, "night": night, "job": {"id": job_id, "state": state},
            "skipped": "the night's job ran no model (nothing to do)"}),
        );
    };
    let waiting = run_json(&run);
    let mut pending: Vec<_> =
        astore::list(&app.pool, Some(org), Some(ApprovalStatus::Pending), 100)
            .await?
            .into_iter()
            .filter(|a| a.run_id == Some(run.id))
            .collect();
    pending.sort_by_key(|a| (a.created_at, a.id));
    let env = app.tool_env(app.spec(kinds::ProactiveSuggestion::NAME));
    let mut approved = Vec::new();
    for a in &pending {
        let out = approvals::decide(
            &app.pool,
            &app.clock,
            &env,
            a.id,
            Some(org),
            Decision::Approve {
                by: PERSON.to_string(),
            },
            DecisionExtra::default(),
        )
        .await?;
        approved.push(json!({"id": a.id, "summary": a.summary, "status": out.status}));
    }
    let resume_job = crate::store::run_waits::resume_job(&app.pool, run.id).await?;
    let ended = run_ended(app, run.id, cmd).await?;
    Ok(
        json!({"first": first, "night": night, "job": {"id": job_id, "state": state},
        "waiting": waiting, "approved": approved, "resume_job": resume_job,
        "run": run_json(&ended)}),
    )
}

/// The org's events as a cursor reads them. A cursor shows an event only once no older
/// transaction (anywhere on the server) is still open, so the last ones may need a moment:
/// waits up to 10 s for all of them, then reports what is readable.
async fn readable_events(app: &App, org: Uuid) -> anyhow::Result<Vec<events::EventRow>> {
    let written = events::count_written(&app.pool, org).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let evs = events::list_after(&app.pool, org, 0, &[], 1000)
            .await
            .map_err(|e| anyhow::anyhow!("reading the events: {e}"))?;
        if evs.len() as i64 >= written.min(1000) || Instant::now() > deadline {
            return Ok(evs);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Events per type.
fn counts(evs: &[events::EventRow]) -> Value {
    let mut by: std::collections::BTreeMap<&str, u64> = Default::default();
    for e in evs {
        *by.entry(e.kind.as_str()).or_default() += 1;
    }
    json!(by)
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        other => other.to_string(),
    }
}

fn print_text(r: &Value) {
    println!(
        "\nagentd demo report — org {} ({}), provider {}, {:.1}s\n",
        s(&r["org"]["name"]),
        s(&r["org"]["id"]),
        s(&r["provider"]),
        r["seconds"].as_f64().unwrap_or(0.0)
    );
    let docs = r["documents"].as_array().cloned().unwrap_or_default();
    println!("1. Auto-create on {} sample documents", docs.len());
    for d in &docs {
        print_report(d);
    }
    let f = &r["refine"];
    if f["after"].is_object() {
        let fields = |d: &Value| {
            d["fields"]
                .as_array()
                .map(|fs| {
                    fs.iter()
                        .map(|x| s(&x["name"]))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default()
        };
        let (b, a) = (&f["before"], &f["after"]);
        println!(
            "\n1b. A reviewer refines {}'s proposal: \"{}\"",
            s(&b["name"]),
            s(&f["instructions"])
        );
        println!(
            "  before: schema {}: {}",
            s(&b["schema"]["revid"]),
            fields(b)
        );
        println!(
            "  after:  schema {}: {}",
            s(&a["schema"]["revid"]),
            fields(a)
        );
        println!(
            "  prompt {} → {}; run {}: {}",
            s(&b["prompt"]["revid"]),
            s(&a["prompt"]["revid"]),
            s(&a["run"]["id"]),
            s(&a["auto_create_status"])
        );
        println!("  extraction after: {}", a["extraction"]["result"]);
    }
    let n = &r["nightly"];
    println!(
        "\n2. The nightly job (proactive_suggestion #{} for {}: {})",
        s(&n["job"]["id"]),
        s(&n["night"]),
        s(&n["job"]["state"])
    );
    println!(
        "  before it: a person created the tag '{}'; org settings approval_ttl_secs={}",
        s(&n["tag"]["name"]),
        s(&n["settings"]["approval_ttl_secs"])
    );
    if let Some(run) = n["run"].as_object() {
        println!(
            "  run {} {}: {} tool calls, {} tokens, {} — {}",
            s(&run["id"]),
            s(&run["status"]),
            s(&run["tool_calls"]),
            s(&run["tokens"]),
            super::report::cost_text(&run["cost_usd"]),
            match run["summary"].as_str() {
                Some(text) => text.to_string(),
                None if run["status"] == "waiting" => {
                    "waits for the decisions on its proposals (step 3b)".into()
                }
                None => "-".into(),
            }
        );
    }
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    println!("  suggestions ({}):", list(&n["suggestions"]).len());
    for x in list(&n["suggestions"]) {
        println!(
            "    [{}] {} ({})",
            s(&x["kind"]),
            s(&x["title"]),
            s(&x["status"])
        );
    }
    println!(
        "  pending approvals ({}), each with its reason:",
        list(&n["approvals"]).len()
    );
    for a in list(&n["approvals"]) {
        println!("    {}  {}", s(&a["id"]), s(&a["summary"]));
        println!("      why: {}", s(&a["rationale"]));
        println!("      expires {}", s(&a["expires_at"]));
    }
    let l = &r["later"];
    println!("\n3. Later (the demo's clock moves; nothing sleeps)");
    if let Some(why) = l["skipped"].as_str() {
        println!("  skipped: {why}");
    }
    for t in list(&l["timeline"]) {
        let m = t["at_minutes"].as_i64().unwrap_or(0);
        println!("  +{}:{:02}  {}", m / 60, m % 60, s(&t["what"]));
    }
    println!("  approvals now:");
    for a in list(&l["approvals"]) {
        let keys = a["changed_keys"].as_array().map(|k| {
            let k: Vec<String> = k.iter().map(s).collect();
            format!(" (changed: {})", k.join(", "))
        });
        println!(
            "    {:<9} {}{}",
            s(&a["status"]),
            s(&a["summary"]),
            keys.unwrap_or_default()
        );
    }
    println!("  suggestions now:");
    for x in list(&l["suggestions"]) {
        println!("    {:<9} {}", s(&x["status"]), s(&x["title"]));
    }
    let g = &r["go_on"];
    println!("\n3b. A run that waits for its decisions and goes on (agent.await_decisions)");
    let line = |v: &Value| {
        format!(
            "run {} {}{}: {} rounds, {} tool calls — {}",
            s(&v["id"]),
            s(&v["status"]),
            v["stop_reason"]
                .as_str()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default(),
            s(&v["rounds"]),
            s(&v["tool_calls"]),
            v["summary"]
                .as_str()
                .map_or("waits for its decisions".into(), |t| t.replace("\n\n", " "))
        )
    };
    if g["first"].is_object() {
        println!(
            "  the first night's run waited through step 3: {}",
            line(&g["first"])
        );
    }
    println!(
        "  nightly job #{} for {}: {}",
        s(&g["job"]["id"]),
        s(&g["night"]),
        s(&g["job"]["state"])
    );
    if let Some(why) = g["skipped"].as_str() {
        println!("  skipped: {why}");
    } else {
        println!("  it proposed and waits: {}", line(&g["waiting"]));
        for a in list(&g["approved"]) {
            println!(
                "  a person approved {} → {}",
                s(&a["summary"]),
                s(&a["status"])
            );
        }
        println!(
            "  the last decision enqueued its resume job #{}",
            s(&g["resume_job"])
        );
        println!("  the run went on: {}", line(&g["run"]));
    }
    let evs = list(&r["events"]);
    println!(
        "\n4. Events written along the way ({}; GET /v1/events, webhooks)",
        evs.len()
    );
    // A run's steps are many (one per model round and tool call): counted, not listed.
    let steps = evs.iter().filter(|e| e["type"] == "run.step").count();
    for e in evs.iter().filter(|e| e["type"] != "run.step") {
        println!(
            "  #{:<6} {:<20} subject {}",
            s(&e["id"]),
            s(&e["type"]),
            s(&e["subject_id"])
        );
    }
    if steps > 0 {
        println!("  … and {steps} run.step events (one per model round and tool call)");
    }
    let by_type: Vec<String> = r["event_counts"]
        .as_object()
        .map(|m| m.iter().map(|(k, v)| format!("{k} {v}")).collect())
        .unwrap_or_default();
    println!("  by type: {}", by_type.join(", "));
    let written = r["events_written"].as_u64().unwrap_or(0);
    if written > evs.len() as u64 {
        println!(
            "  ({} more written, not yet readable by a cursor: an older transaction is still open)",
            written - evs.len() as u64
        );
    }
    let u = &r["usage"];
    println!(
        "\n5. Model use: {} runs, {} tokens, {}{}",
        s(&u["runs"]),
        s(&u["tokens"]),
        super::report::cost_text(&u["cost_usd"]),
        u["cost_note"]
            .as_str()
            .map(|why| format!(" ({why}; prices: [llm.prices])"))
            .unwrap_or_else(|| " at [llm.prices]".into())
    );
    let first_run = docs
        .iter()
        .find_map(|d| d["run"]["id"].as_str())
        .unwrap_or("RUN_ID");
    println!("\nWhere to look next:");
    println!("  agentd runs show {first_run}   # a run's transcript and audit trail");
    println!(
        "  agentd approvals list --org {}    # approvals with their reasons",
        s(&r["org"]["name"])
    );
    println!("  agentd status                     # queue, runs, approvals at a glance");
    println!(
        "  agentd keys create --org {} --role admin && agentd serve --addr 127.0.0.1:8080   # the HTTP API, GET /v1/events",
        s(&r["org"]["name"])
    );
}
