//! Replay a stored run against this build (issue 50, item 3) — Temporal's replay test, for
//! agents. A run is [`export`]ed as a [`Recorded`] transcript: its checkpoints and audit rows,
//! the job that drove it, a SHA-256 of each offered tool's parameter schema, and the rows of its
//! org it found when it started (`store::replays`). [`replay`] writes those rows into a scratch
//! database (never the one the run is stored in: the CLI makes one and drops it, the CI test
//! uses its own), runs the same job there with this build's handler and loop, a provider that
//! answers each model call with the recorded answer ([`ReplayProvider`]) and a clock stopped at
//! the run's start, then compares what this build wrote with what was recorded, step by step,
//! and reports the first step where the decision differs: the kind of step, the tool called,
//! its arguments (the audit row's, as executed), the policy decision, the result (the state
//! written) or the run's end. Ids the replay made anew (a schema, a prompt, an extraction) are
//! paired with the recorded ones in order of appearance ([`IdMap`]): the recorded answers are
//! sent with the replay's ids, and two texts that differ only by paired ids, or by times, are
//! the same. A tool whose parameter schema changed since the recording is named first, so a
//! divergence it causes is read for what it is.

use crate::app::App;
use crate::kinds::{AutoCreate, JobKind, ProactiveSuggestion};
use crate::llm::{Block, CompletionRequest, CompletionResponse, LlmError, LlmProvider};
use crate::queue::worker::JobContext;
use crate::queue::{self, NewJob};
use crate::store::replays::{self, SeedRow};
use crate::store::runs::{self, StepKind};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// The format of a [`Recorded`] transcript this build writes and reads.
pub const FORMAT: u32 = 1;

/// A stored run as a replay needs it (`agentd runs export`; `tests/fixtures/replay/*.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Recorded {
    /// [`FORMAT`].
    pub format: u32,
    pub run_id: Uuid,
    pub org_id: Uuid,
    pub kind: String,
    pub subject: String,
    pub started_at: DateTime<Utc>,
    /// How the run ended (`succeeded`, `capped`, …) and why.
    pub status: String,
    pub stop_reason: Option<String>,
    /// The job that drove it.
    pub job: RecordedJob,
    /// SHA-256 (hex) of each offered tool's parameter schema, by tool name.
    pub tools: BTreeMap<String, String>,
    /// Its checkpoints and loop marks, in order.
    pub steps: Vec<RecordedStep>,
    /// Its audit rows, in order.
    pub audit: Vec<RecordedAudit>,
    /// The rows of its org it found (`store::replays::TABLES`).
    pub seed: Vec<SeedRow>,
}

/// The job of a recorded run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedJob {
    pub kind: String,
    pub payload: Value,
}

/// One checkpoint.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedStep {
    pub seq: i32,
    pub kind: String,
    pub call_id: Option<String>,
    pub payload: Value,
}

/// One audit row: what was called or decided, with what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedAudit {
    pub call_id: Option<String>,
    pub tool: String,
    pub decision: String,
    pub is_error: bool,
    pub args: Option<Value>,
}

/// Why a replay could not be made (a divergence is not an error: it is the report).
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("no run with id {0}")]
    NotFound(Uuid),
    #[error("run {0} is still running; replay it once it ended")]
    Running(Uuid),
    #[error("run {run} is a fork (of run {parent}); replay its parent")]
    Fork { run: Uuid, parent: Uuid },
    #[error("run {0} has no job to replay (its job is gone and its kind {1} cannot be rebuilt)")]
    NoJob(Uuid, String),
    #[error("transcript format {0}; this build reads format {FORMAT}")]
    Format(u32),
    #[error("the kind {0} has no job file or handler in this build")]
    Kind(String),
    #[error("the scratch database could not be seeded: {0}")]
    Seed(#[from] replays::SeedError),
    #[error("the scratch database could not be made (the role needs CREATEDB): {0}")]
    Scratch(String),
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    #[error(transparent)]
    Queue(#[from] queue::QueueError),
}

/// A tool whose parameter schema is not what the recording offered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolChange {
    pub tool: String,
    /// `changed` (another schema), `gone` (no longer offered) or `new` (offered now only).
    pub change: &'static str,
}

/// The first difference between the recording and this build's replay.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Divergence {
    /// The recorded step (`seq`) where they part; `None`: the run's end.
    pub step: Option<i32>,
    /// What differs: `kind` (another step), `tool`, `call_id`, `arguments`, `decision`,
    /// `is_error`, `result` (the state written), `answer`, `text`, `status`, `missing`, `extra`.
    pub what: String,
    pub recorded: String,
    pub replayed: String,
}

/// What a replay found.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayReport {
    pub run_id: Uuid,
    pub kind: String,
    /// The run the replay made in the scratch database.
    pub replay_run_id: Option<Uuid>,
    /// Steps compared (loop marks of resumes left out).
    pub steps: usize,
    /// Tools whose parameter schema changed since the recording, named before any divergence.
    pub tools_changed: Vec<ToolChange>,
    /// `None`: this build decides every step as the recording did.
    pub divergence: Option<Divergence>,
    /// The replay job's error, if its handler failed.
    pub job_error: Option<String>,
}

impl ReplayReport {
    /// True when nothing differs (tools included).
    pub fn same(&self) -> bool {
        self.divergence.is_none() && self.tools_changed.is_empty()
    }

    /// The report for a person: one line if nothing differs, else what and where.
    pub fn text(&self) -> String {
        let mut out = Vec::new();
        for t in &self.tools_changed {
            out.push(format!(
                "tool {}: its parameter schema {} since the recording",
                t.tool,
                match t.change {
                    "changed" => "changed",
                    "gone" => "is no longer offered",
                    _ => "is new (not offered)",
                }
            ));
        }
        match &self.divergence {
            None => out.push(format!(
                "run {} ({}): {} steps replayed, every decision the same",
                self.run_id, self.kind, self.steps
            )),
            Some(d) => {
                let at = d
                    .step
                    .map(|s| format!("step {s}"))
                    .unwrap_or_else(|| "the run's end".into());
                let what = match d.what.as_str() {
                    "missing" => "a recorded step the replay did not make".to_string(),
                    "extra" => "a step the recording does not have".to_string(),
                    "status" => "how the run ended".to_string(),
                    other => format!("the {other} differs"),
                };
                out.push(format!(
                    "run {} ({}): diverges at {at}: {what}\n  recorded: {}\n  replayed: {}",
                    self.run_id, self.kind, d.recorded, d.replayed
                ));
            }
        }
        if let Some(e) = &self.job_error {
            out.push(format!("the replay's job failed: {e}"));
        }
        out.join("\n")
    }
}

/// SHA-256 (hex) of each tool's parameter schema that `kind`'s job file offers in this build.
pub fn tool_hashes(app: &App, kind: &str) -> BTreeMap<String, String> {
    let Some(spec) = app.catalog.get(kind) else {
        return BTreeMap::new();
    };
    app.registry
        .specs(&spec.agent.tools)
        .into_iter()
        .map(|t| {
            let text = serde_json::to_string(&t.parameters).unwrap_or_default();
            (t.name, hex::encode(Sha256::digest(text.as_bytes())))
        })
        .collect()
}

/// Run `run_id` as a [`Recorded`] transcript, read from `app`'s database (nothing written).
pub async fn export(app: &App, run_id: Uuid) -> Result<Recorded, ReplayError> {
    let pool = &app.pool;
    let run = runs::get_run(pool, run_id)
        .await?
        .ok_or(ReplayError::NotFound(run_id))?;
    if run.status == crate::store::states::RunStatus::Running {
        return Err(ReplayError::Running(run_id));
    }
    if let Some(parent) = run.parent_run_id {
        return Err(ReplayError::Fork {
            run: run_id,
            parent,
        });
    }
    let stored_job = match run.job_id {
        Some(id) => queue::store::get(pool, id).await?,
        None => None,
    };
    let document = match run.kind.as_str() {
        AutoCreate::NAME => Uuid::parse_str(&run.subject).ok(),
        _ => None,
    };
    let job = match stored_job {
        Some(j) => RecordedJob {
            kind: j.kind,
            payload: j.payload,
        },
        None => rebuilt_job(&run.kind, run.org_id, &run.subject)
            .ok_or_else(|| ReplayError::NoJob(run_id, run.kind.clone()))?,
    };
    let steps = crate::store::agent_loop::steps_and_marks(pool, run_id)
        .await?
        .into_iter()
        .map(|s| RecordedStep {
            seq: s.seq,
            kind: s.kind,
            call_id: s.call_id,
            payload: s.payload,
        })
        .collect();
    let audit = runs::audit_for_run(pool, run_id)
        .await?
        .into_iter()
        .map(|a| RecordedAudit {
            call_id: a.call_id,
            tool: a.tool,
            decision: a.decision,
            is_error: a.is_error,
            args: a.args,
        })
        .collect();
    let mut conn = pool.acquire().await?;
    let seed = replays::seed_rows(&mut conn, run.org_id, run_id, run.started_at, document).await?;
    Ok(Recorded {
        format: FORMAT,
        run_id,
        org_id: run.org_id,
        tools: tool_hashes(app, &run.kind),
        kind: run.kind,
        subject: run.subject,
        started_at: run.started_at,
        status: run.status.to_string(),
        stop_reason: run.stop_reason,
        job,
        steps,
        audit,
        seed,
    })
}

/// The job of a run whose job row is gone (retention), for the kinds whose payload is the run's
/// org and subject.
fn rebuilt_job(kind: &str, org_id: Uuid, subject: &str) -> Option<RecordedJob> {
    let payload = match kind {
        AutoCreate::NAME => {
            serde_json::json!({"org_id": org_id, "document_id": Uuid::parse_str(subject).ok()?})
        }
        ProactiveSuggestion::NAME => {
            let night: chrono::NaiveDate = subject.parse().ok()?;
            serde_json::json!({"org_id": org_id, "night": night})
        }
        _ => return None,
    };
    Some(RecordedJob {
        kind: kind.to_string(),
        payload,
    })
}

/// Replays `rec` in `scratch`'s database, which must hold no data of its org (a fresh, migrated
/// database): see the module's text. `scratch`'s provider and clock are replaced.
pub async fn replay(scratch: &App, rec: &Recorded) -> Result<ReplayReport, ReplayError> {
    if rec.format != FORMAT {
        return Err(ReplayError::Format(rec.format));
    }
    let mut app = scratch.clone();
    let handlers = super::handlers(&app);
    if app.catalog.get(&rec.job.kind).is_none() || !handlers.contains_key(&rec.job.kind) {
        return Err(ReplayError::Kind(rec.job.kind.clone()));
    }
    let tools_changed = tool_changes(&rec.tools, &tool_hashes(&app, &rec.kind));
    let provider = std::sync::Arc::new(ReplayProvider::new(rec));
    app.provider = provider.clone();
    app.clock = crate::clock::ManualClock::new(rec.started_at);
    let handler = super::handlers(&app)
        .remove(&rec.job.kind)
        .ok_or_else(|| ReplayError::Kind(rec.job.kind.clone()))?;
    let mut conn = app.pool.acquire().await?;
    replays::write_seed(&mut conn, &rec.seed).await?;
    drop(conn);
    let job = NewJob::new(rec.job.kind.clone(), rec.job.payload.clone()).run_at(rec.started_at);
    let job_id = queue::enqueue(&app.pool, &job).await?;
    let lease = chrono::Duration::minutes(30);
    let claimed = queue::store::claim(
        &app.pool,
        std::slice::from_ref(&rec.job.kind),
        1,
        "replay",
        rec.started_at,
        lease,
    )
    .await?;
    let Some(claimed) = claimed.into_iter().next() else {
        return Err(ReplayError::NoJob(rec.run_id, rec.job.kind.clone()));
    };
    let job_id = job_id.unwrap_or(claimed.id);
    let ctx = JobContext {
        job: claimed,
        cancel: CancellationToken::new(),
    };
    let job_error = handler.handle(ctx).await.err().map(|e| e.to_string());
    let run = runs::run_for_job(&app.pool, job_id).await?;
    let (steps, audit, end) = match &run {
        Some(r) => {
            let steps = crate::store::agent_loop::steps_and_marks(&app.pool, r.id)
                .await?
                .into_iter()
                .map(|s| RecordedStep {
                    seq: s.seq,
                    kind: s.kind,
                    call_id: s.call_id,
                    payload: s.payload,
                })
                .collect();
            let audit = runs::audit_for_run(&app.pool, r.id)
                .await?
                .into_iter()
                .map(|a| RecordedAudit {
                    call_id: a.call_id,
                    tool: a.tool,
                    decision: a.decision,
                    is_error: a.is_error,
                    args: a.args,
                })
                .collect();
            (
                steps,
                audit,
                Some((r.status.to_string(), r.stop_reason.clone())),
            )
        }
        None => (Vec::new(), Vec::new(), None),
    };
    let replayed = Replayed { steps, audit, end };
    let (compared, divergence) = compare(rec, &replayed);
    Ok(ReplayReport {
        run_id: rec.run_id,
        kind: rec.kind.clone(),
        replay_run_id: run.map(|r| r.id),
        steps: compared,
        tools_changed,
        divergence,
        job_error,
    })
}

/// Replays `rec` in a scratch database made for it on the server of `live`'s database (a
/// fresh, migrated `agentd_replay_<hex>`), dropped after: `live`'s data is only read.
pub async fn replay_in_scratch(live: &App, rec: &Recorded) -> Result<ReplayReport, ReplayError> {
    let name = format!("agentd_replay_{}", Uuid::new_v4().simple());
    replays::create_scratch(&live.pool, &name)
        .await
        .map_err(|e| ReplayError::Scratch(e.to_string()))?;
    let replayed = async {
        let options = live.pool.connect_options().as_ref().clone().database(&name);
        let pool = sqlx::postgres::PgPoolOptions::new()
            .max_connections(4)
            .connect_with(options)
            .await?;
        crate::db::migrate(&pool)
            .await
            .map_err(|e| ReplayError::Scratch(e.to_string()))?;
        let config = (*live.config).clone();
        let catalog = (*live.catalog).clone();
        let app = App::new(pool.clone(), live.clock.clone(), config, catalog);
        let report = replay(&app, rec).await;
        pool.close().await;
        report
    }
    .await;
    replays::drop_scratch(&live.pool, &name).await?;
    replayed
}

/// Tools whose schema hash differs between the recording and now, by name.
fn tool_changes(
    recorded: &BTreeMap<String, String>,
    now: &BTreeMap<String, String>,
) -> Vec<ToolChange> {
    let mut out = Vec::new();
    for (name, hash) in recorded {
        match now.get(name) {
            Some(h) if h == hash => {}
            Some(_) => out.push(ToolChange {
                tool: name.clone(),
                change: "changed",
            }),
            None => out.push(ToolChange {
                tool: name.clone(),
                change: "gone",
            }),
        }
    }
    for name in now.keys().filter(|n| !recorded.contains_key(*n)) {
        out.push(ToolChange {
            tool: name.clone(),
            change: "new",
        });
    }
    out
}

/// What the replay wrote.
pub struct Replayed {
    pub steps: Vec<RecordedStep>,
    pub audit: Vec<RecordedAudit>,
    /// How the replayed run ended (`None`: no run was opened).
    pub end: Option<(String, Option<String>)>,
}

/// Steps that are decisions: a resume mark only says an attempt began again.
fn decided(steps: &[RecordedStep]) -> Vec<&RecordedStep> {
    steps
        .iter()
        .filter(|s| StepKind::parse(&s.kind) != Some(StepKind::Resume))
        .collect()
}

/// Compact JSON of `v` for a report, at most 300 characters.
fn shown(v: &Value) -> String {
    let text = match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.chars().count() <= 300 {
        text
    } else {
        format!("{}…", text.chars().take(300).collect::<String>())
    }
}

/// The number of steps compared and the first divergence of `rep` from `rec`.
pub fn compare(rec: &Recorded, rep: &Replayed) -> (usize, Option<Divergence>) {
    let mut ids = IdMap::default();
    let (a, b) = (decided(&rec.steps), decided(&rep.steps));
    let args_of = |audit: &[RecordedAudit], call: &str| -> Value {
        audit
            .iter()
            .find(|x| x.call_id.as_deref() == Some(call))
            .and_then(|x| x.args.clone())
            .unwrap_or(Value::Null)
    };
    let differ = |step: Option<i32>, what: &str, r: &Value, p: &Value| Divergence {
        step,
        what: what.to_string(),
        recorded: shown(r),
        replayed: shown(p),
    };
    for i in 0..a.len().max(b.len()) {
        let (r, p) = match (a.get(i), b.get(i)) {
            (Some(r), Some(p)) => (*r, *p),
            (Some(r), None) => {
                let v = Value::String(format!("{} step", r.kind));
                let none = Value::String("the replay ended before it".into());
                return (i, Some(differ(Some(r.seq), "missing", &v, &none)));
            }
            (None, Some(p)) => {
                let none = Value::String("the recording ended before it".into());
                let v = Value::String(format!("{} step", p.kind));
                let at = a.last().map(|l| l.seq + 1);
                return (i, Some(differ(at, "extra", &none, &v)));
            }
            (None, None) => break,
        };
        let at = Some(r.seq);
        if r.kind != p.kind {
            let (x, y) = (Value::String(r.kind.clone()), Value::String(p.kind.clone()));
            return (i, Some(differ(at, "kind", &x, &y)));
        }
        let fields: &[(&str, &str)] = match StepKind::parse(&r.kind) {
            Some(StepKind::ToolResult) => &[
                ("tool", "/tool"),
                ("call_id", "/call_id"),
                ("arguments", ""),
                ("decision", "/decision"),
                ("is_error", "/is_error"),
                ("result", "/content"),
            ],
            Some(StepKind::LlmResponse) => &[("answer", "/response"), ("summary", "/summary")],
            Some(StepKind::ToolModel) => &[("request", "/state"), ("answer", "/response")],
            Some(StepKind::Nudge) => &[("text", "/text")],
            Some(StepKind::Cap) => &[("cap", "/reason")],
            _ => &[("payload", "")],
        };
        for (what, pointer) in fields {
            let (x, y) = match (*what, *pointer) {
                ("arguments", _) => {
                    let call = r.call_id.as_deref().unwrap_or_default();
                    let pc = p.call_id.as_deref().unwrap_or_default();
                    (args_of(&rec.audit, call), args_of(&rep.audit, pc))
                }
                (_, "") => (r.payload.clone(), p.payload.clone()),
                (_, ptr) => (
                    r.payload.pointer(ptr).cloned().unwrap_or(Value::Null),
                    p.payload.pointer(ptr).cloned().unwrap_or(Value::Null),
                ),
            };
            if !ids.same(&x, &y) {
                return (i + 1, Some(differ(at, what, &x, &y)));
            }
        }
    }
    let compared = a.len();
    let recorded = Value::String(format!(
        "{} ({})",
        rec.status,
        rec.stop_reason.as_deref().unwrap_or("-")
    ));
    let replayed = Value::String(match &rep.end {
        Some((s, why)) => format!("{s} ({})", why.as_deref().unwrap_or("-")),
        None => "no run".into(),
    });
    if recorded != replayed {
        return (compared, Some(differ(None, "status", &recorded, &replayed)));
    }
    (compared, None)
}

/// One piece of a text as [`IdMap`] reads it.
#[derive(Debug, PartialEq)]
enum Piece<'a> {
    Id(&'a str),
    Time,
    Char(char),
}

/// `s` cut into ids (UUIDs), times (RFC 3339, to any fraction of a second) and other characters.
fn pieces(s: &str) -> Vec<Piece<'_>> {
    let mut out = Vec::new();
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if let Some(id) = rest.get(..36).filter(|x| Uuid::try_parse(x).is_ok()) {
            out.push(Piece::Id(id));
            rest = &rest[36..]; // checked: `get(..36)` succeeded, an ASCII prefix
            continue;
        }
        if let Some(n) = time_len(rest) {
            out.push(Piece::Time);
            rest = rest.get(n..).unwrap_or_default();
            continue;
        }
        out.push(Piece::Char(c));
        rest = &rest[c.len_utf8()..]; // checked: the first character's own length
    }
    out
}

/// The length of the RFC 3339 time `s` starts with, if it starts with one.
fn time_len(s: &str) -> Option<usize> {
    let b = s.as_bytes();
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let at = |i: usize, c: u8| b.get(i) == Some(&c);
    let head = (0..4).all(digit)
        && at(4, b'-')
        && digit(5)
        && digit(6)
        && at(7, b'-')
        && digit(8)
        && digit(9)
        && (at(10, b'T') || at(10, b' '))
        && digit(11)
        && digit(12)
        && at(13, b':')
        && digit(14)
        && digit(15)
        && at(16, b':')
        && digit(17)
        && digit(18);
    if !head {
        return None;
    }
    let mut n = 19;
    if at(n, b'.') {
        n += 1;
        while digit(n) {
            n += 1;
        }
    }
    if at(n, b'Z') {
        n += 1;
    } else if (at(n, b'+') || at(n, b'-')) && digit(n + 1) && digit(n + 2) {
        n += 3;
        if at(n, b':') && digit(n + 1) && digit(n + 2) {
            n += 3;
        }
    }
    Some(n)
}

/// Recorded ids paired with the replay's, learnt in order of appearance: a recorded id stands
/// for one replayed id from its first pairing on.
#[derive(Debug, Default, Clone)]
pub struct IdMap {
    map: HashMap<String, String>,
}

impl IdMap {
    /// True if the recorded text and the replayed one are the same but for paired ids and
    /// times; the pairs they show are learnt only then.
    pub fn same_str(&mut self, recorded: &str, replayed: &str) -> bool {
        let (a, b) = (pieces(recorded), pieces(replayed));
        if a.len() != b.len() {
            return false;
        }
        let mut learnt = self.map.clone();
        for (x, y) in a.iter().zip(&b) {
            match (x, y) {
                (Piece::Id(x), Piece::Id(y)) => match learnt.get(*x) {
                    Some(m) if m != y => return false,
                    Some(_) => {}
                    None => {
                        learnt.insert(x.to_string(), y.to_string());
                    }
                },
                (Piece::Time, Piece::Time) => {}
                (Piece::Char(x), Piece::Char(y)) if x == y => {}
                _ => return false,
            }
        }
        self.map = learnt;
        true
    }

    /// [`IdMap::same_str`] over JSON: the same shape, equal numbers and flags, same strings.
    pub fn same(&mut self, recorded: &Value, replayed: &Value) -> bool {
        let mut trial = self.clone();
        if !trial.walk(recorded, replayed) {
            return false;
        }
        *self = trial;
        true
    }

    fn walk(&mut self, a: &Value, b: &Value) -> bool {
        match (a, b) {
            (Value::String(x), Value::String(y)) => self.same_str(x, y),
            (Value::Array(x), Value::Array(y)) => {
                x.len() == y.len() && x.iter().zip(y).all(|(x, y)| self.walk(x, y))
            }
            (Value::Object(x), Value::Object(y)) => {
                x.len() == y.len()
                    && x.iter()
                        .all(|(k, v)| y.get(k).is_some_and(|w| self.walk(v, w)))
            }
            (x, y) => x == y,
        }
    }

    /// `s` with each recorded id replaced by the replay's it stands for.
    pub fn apply_str(&self, s: &str) -> String {
        let mut out = String::with_capacity(s.len());
        let mut rest = s;
        while let Some(c) = rest.chars().next() {
            if let Some(id) = rest.get(..36).filter(|x| Uuid::try_parse(x).is_ok()) {
                out.push_str(self.map.get(id).map(String::as_str).unwrap_or(id));
                rest = &rest[36..]; // checked: `get(..36)` succeeded, an ASCII prefix
                continue;
            }
            out.push(c);
            rest = &rest[c.len_utf8()..]; // checked: the first character's own length
        }
        out
    }

    /// [`IdMap::apply_str`] over every string of `v`.
    pub fn apply(&self, v: &Value) -> Value {
        match v {
            Value::String(s) => Value::String(self.apply_str(s)),
            Value::Array(a) => Value::Array(a.iter().map(|x| self.apply(x)).collect()),
            Value::Object(o) => {
                Value::Object(o.iter().map(|(k, x)| (k.clone(), self.apply(x))).collect())
            }
            other => other.clone(),
        }
    }
}

/// A provider that answers each call with the next recorded model answer (the loop's rounds
/// and a tool's own calls, in the order they were checkpointed), with the replay's ids in place
/// of the recorded ones: learnt from the tool results each request carries, paired by call id
/// with the recorded results. A call past the last recorded answer fails (not retryable): the
/// replay asked the model more than the recording did.
pub struct ReplayProvider {
    answers: Mutex<VecDeque<CompletionResponse>>,
    /// The recorded result of each call id.
    results: HashMap<String, String>,
    ids: Mutex<IdMap>,
    calls: AtomicUsize,
}

impl ReplayProvider {
    /// The provider of `rec`'s answers.
    pub fn new(rec: &Recorded) -> Self {
        let answers = rec
            .steps
            .iter()
            .filter(|s| {
                matches!(
                    StepKind::parse(&s.kind),
                    Some(StepKind::LlmResponse | StepKind::ToolModel)
                )
            })
            .filter_map(|s| serde_json::from_value(s.payload["response"].clone()).ok())
            .collect();
        let results = rec
            .steps
            .iter()
            .filter(|s| StepKind::parse(&s.kind) == Some(StepKind::ToolResult))
            .filter_map(|s| {
                let id = s.call_id.clone()?;
                Some((id, s.payload["content"].as_str()?.to_string()))
            })
            .collect();
        Self {
            answers: Mutex::new(answers),
            results,
            ids: Mutex::new(IdMap::default()),
            calls: AtomicUsize::new(0),
        }
    }

    /// Calls answered so far.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl LlmProvider for ReplayProvider {
    fn name(&self) -> &str {
        "replay"
    }

    async fn complete(&self, req: CompletionRequest) -> Result<CompletionResponse, LlmError> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
        let mut ids = self
            .ids
            .lock()
            .map_err(|_| LlmError::new("replay", "id map poisoned", false))?;
        for b in req.messages.iter().flat_map(|m| m.content.iter()) {
            if let Block::ToolResult {
                call_id, content, ..
            } = b
                && let Some(recorded) = self.results.get(call_id)
            {
                ids.same_str(recorded, content);
            }
        }
        let answer = self
            .answers
            .lock()
            .map_err(|_| LlmError::new("replay", "answers poisoned", false))?
            .pop_front()
            .ok_or_else(|| {
                LlmError::new(
                    "replay",
                    format!("call #{n}: the recording has no model answer left"),
                    false,
                )
            })?;
        let value = serde_json::to_value(&answer)
            .map_err(|e| LlmError::new("replay", e.to_string(), false))?;
        serde_json::from_value(ids.apply(&value))
            .map_err(|e| LlmError::new("replay", e.to_string(), false))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn texts_differing_by_paired_ids_and_times_are_the_same_and_others_not() {
        let (a, b) = (Uuid::now_v7().to_string(), Uuid::now_v7().to_string());
        let c = Uuid::now_v7().to_string();
        let mut ids = IdMap::default();
        assert!(ids.same_str(
            &format!("schema {a}:1 at 2026-12-01T10:00:00.123Z"),
            &format!("schema {b}:1 at 2026-12-04T03:07:33+00:00")
        ));
        // From then on `a` stands for `b` only.
        assert!(!ids.same_str(&a, &c));
        assert!(ids.same_str(&format!("[{a}]"), &format!("[{b}]")));
        assert!(!ids.same_str("total 1250", "total 1251"));
        assert_eq!(ids.apply_str(&format!("use {a}:2")), format!("use {b}:2"));
        assert!(ids.same(&json!({"x": [a, 1]}), &json!({"x": [b, 1]})));
        assert!(!ids.same(&json!({"x": [a, 1]}), &json!({"x": [b, 2]})));
        // Not a UUID or a time: compared as characters, multi-byte ones too.
        assert!(ids.same_str("é 2026-12-01", "é 2026-12-01"));
        assert!(!ids.same_str("é 2026-12-01", "é 2026-12-02"));
    }

    #[test]
    fn a_changed_gone_or_new_tool_is_named() {
        let rec: BTreeMap<String, String> = [("a", "1"), ("b", "2"), ("c", "3")]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let mut now = rec.clone();
        now.insert("b".into(), "9".into());
        now.remove("c");
        now.insert("d".into(), "4".into());
        let changes = tool_changes(&rec, &now);
        let named: Vec<(&str, &str)> = changes
            .iter()
            .map(|c| (c.tool.as_str(), c.change))
            .collect();
        assert_eq!(named, vec![("b", "changed"), ("c", "gone"), ("d", "new")]);
    }
}
