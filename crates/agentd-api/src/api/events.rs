//! `GET /v1/events` (a cursor over the org's events) and `GET /v1/events/stream` (the same
//! stream as Server-Sent Events: `id:` is the event id, `Last-Event-ID` resumes, comments keep
//! the connection alive). Streams wake on the `agentd_events` NOTIFY of the dispatcher trigger
//! (migration 0042) and poll every second anyway: an event becomes readable only once no older
//! transaction is still running (`store::events::list_after`), which a NOTIFY does not announce.

use super::ApiState;
use super::auth::Scoped;
use super::error::{ApiResult, Problem, ok};
use super::extract::Params;
use crate::store::events::{self, EventRow, ReadError};
use crate::webhooks::{Event as EventView, event_json};
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use serde::Deserialize;
use sqlx::PgPool;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use utoipa::IntoParams;
use uuid::Uuid;

/// Most events per page (and per read of a stream).
pub const MAX_LIMIT: i64 = 1000;
/// How often a stream re-reads without a NOTIFY.
const POLL: Duration = Duration::from_secs(1);
/// How often an idle stream sends a keep-alive comment.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// Query of `GET /v1/events`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct EventsQuery {
    /// The id of the last event seen (`next_after` of the previous page); 0 or absent: from the
    /// start. An id that is not one of the org's events is 404.
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// 1–1000 (default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<i64>,
    /// Only the events about this id: a document (its own events and its auto-create runs':
    /// `run.*`, `extraction.flagged`, `job.dead`), a run (its own and its approvals'), an
    /// approval or a suggestion — the event's `subject_id`, or the `document_id` or `run_id` of
    /// its payload. Another org's id gives no events.
    pub subject: Option<Uuid>,
}

/// Query of `GET /v1/events/stream`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
#[serde(deny_unknown_fields)]
pub struct StreamQuery {
    /// Start after this event (the `Last-Event-ID` header wins). Absent: only new events, or
    /// with `subject` every event about it from the first.
    #[param(minimum = 0)]
    pub after: Option<i64>,
    /// Only the events about this id, as in `GET /v1/events` (`?subject=DOC`: one upload's
    /// progress, `run.started` … `run.step` … `proposal.ready`).
    pub subject: Option<Uuid>,
}

/// A page of `GET /v1/events`.
#[derive(Debug, serde::Serialize, utoipa::ToSchema)]
pub struct EventsPage {
    /// In stream order.
    pub events: Vec<EventView>,
    /// The cursor of the next page: the last event's id (`after` again if there was none).
    pub next_after: i64,
}

fn read_error(e: ReadError, field: &str) -> Problem {
    match e {
        // Not one of the org's events: as any other org's id, not found.
        ReadError::UnknownCursor(_) => {
            Problem::new(StatusCode::NOT_FOUND, "not-found", e.to_string()).field(field)
        }
        ReadError::Db(d) => Problem::from(d),
    }
}

/// A page of the org's events after a cursor, in stream order.
#[utoipa::path(get, path = "/v1/events", tag = "events", operation_id = "listEvents", params(EventsQuery),
    responses((status = 200, body = EventsPage, description = "A page of events"),
        (status = 404, description = "`after` is not one of the org's events (restart from 0)")))]
pub async fn list(req: Scoped, Params(q): Params<EventsQuery>) -> ApiResult {
    let after = q.after.unwrap_or(0);
    if after < 0 {
        return Err(Problem::bad_request(
            "after",
            format!("after must be an event id ≥ 0 (got {after})"),
        ));
    }
    let limit = q.limit.unwrap_or(100);
    if !(1..=MAX_LIMIT).contains(&limit) {
        return Err(Problem::bad_request(
            "limit",
            format!("limit must be 1–{MAX_LIMIT} (got {limit})"),
        ));
    }
    let rows = events::list_after_about(&req.app.pool, req.org_id(), after, &[], q.subject, limit)
        .await
        .map_err(|e| read_error(e, "after"))?;
    let next_after = rows.last().map_or(after, |e| e.id);
    let events = rows.iter().map(EventView::from).collect();
    ok(&EventsPage { events, next_after })
}

/// Open streams per API key; past it a new one is refused with 429 (review N6).
pub const MAX_STREAMS_PER_KEY: usize = 8;
/// Open streams per org, all its keys together, so one org's keys cannot take the process's
/// slots from the others (review D7).
pub const MAX_STREAMS_PER_ORG: usize = 32;
/// Open streams per process (each polls the database every [`POLL`] at most).
pub const MAX_STREAMS: usize = 256;
/// The longest a stream stays open; the client reconnects with `Last-Event-ID` and is
/// authorised afresh.
pub const MAX_STREAM_LIFETIME: Duration = Duration::from_secs(3600);

/// Wakes streams when events commit: one LISTEN per process, started by the first stream;
/// and counts the open streams, per key, per org and in all.
#[derive(Clone, Default)]
pub struct EventWaker {
    rx: std::sync::Arc<std::sync::OnceLock<watch::Receiver<u64>>>,
    open: std::sync::Arc<std::sync::Mutex<OpenStreams>>,
}

/// The open streams, by key and by org.
#[derive(Debug, Default)]
struct OpenStreams {
    per_key: std::collections::HashMap<Uuid, usize>,
    per_org: std::collections::HashMap<Uuid, usize>,
    total: usize,
}

/// One less in `map[id]`, forgetting it at zero.
fn release(map: &mut std::collections::HashMap<Uuid, usize>, id: Uuid) {
    if let Some(n) = map.get_mut(&id) {
        *n = n.saturating_sub(1);
        if *n == 0 {
            map.remove(&id);
        }
    }
}

/// One open stream's place in the counts; given back when the stream ends.
struct StreamSlot {
    open: std::sync::Arc<std::sync::Mutex<OpenStreams>>,
    key: Uuid,
    org: Uuid,
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        release(&mut open.per_key, self.key);
        release(&mut open.per_org, self.org);
        open.total = open.total.saturating_sub(1);
    }
}

impl EventWaker {
    fn subscribe(&self, pool: &PgPool, stop: &CancellationToken) -> watch::Receiver<u64> {
        self.rx
            .get_or_init(|| {
                let (tx, rx) = watch::channel(0u64);
                // The LISTEN needs a session of its own: with PgBouncer in transaction mode, a
                // pooled connection would never hear it (review L9).
                let pool = crate::db::pooling::listen_pool(pool);
                tokio::spawn(listen(pool, tx, stop.clone()));
                rx
            })
            .clone()
    }

    /// A place for one more stream of `key` of `org`, or the 429 that says which limit is
    /// reached.
    fn admit(&self, key: Uuid, org: Uuid) -> Result<StreamSlot, Problem> {
        let mut open = self.open.lock().unwrap_or_else(|p| p.into_inner());
        let total = open.total;
        let mine = open.per_key.get(&key).copied().unwrap_or(0);
        let ours = open.per_org.get(&org).copied().unwrap_or(0);
        let too_many = |detail: String| {
            Problem::new(
                axum::http::StatusCode::TOO_MANY_REQUESTS,
                "too-many-streams",
                detail,
            )
        };
        if mine >= MAX_STREAMS_PER_KEY {
            return Err(too_many(format!(
                "this key has {mine} event streams open, the most one key may; close one or read GET /v1/events"
            )));
        }
        if ours >= MAX_STREAMS_PER_ORG {
            return Err(too_many(format!(
                "this org's keys have {ours} event streams open, the most one org may; close one or read GET /v1/events"
            )));
        }
        if total >= MAX_STREAMS {
            return Err(too_many(format!(
                "the server has {total} event streams open, its limit; retry later or read GET /v1/events"
            )));
        }
        *open.per_key.entry(key).or_default() += 1;
        *open.per_org.entry(org).or_default() += 1;
        open.total += 1;
        Ok(StreamSlot {
            open: self.open.clone(),
            key,
            org,
        })
    }
}

async fn listen(pool: PgPool, tx: watch::Sender<u64>, stop: CancellationToken) {
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            r = listen_once(&pool, &tx) => if let Err(e) = r {
                tracing::warn!(error = %e, "events LISTEN failed; streams poll until it is back");
            },
        }
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
        }
    }
}

async fn listen_once(pool: &PgPool, tx: &watch::Sender<u64>) -> sqlx::Result<()> {
    let mut l = sqlx::postgres::PgListener::connect_with(pool).await?;
    l.listen("agentd_events").await?;
    loop {
        l.recv().await?;
        tx.send_modify(|n| *n += 1);
    }
}

struct Cursor {
    pool: PgPool,
    org: Uuid,
    key: Uuid,
    after: i64,
    subject: Option<Uuid>,
    buf: VecDeque<EventRow>,
    wake: watch::Receiver<u64>,
    stop: CancellationToken,
    opened: std::time::Instant,
    _slot: StreamSlot,
}

impl Cursor {
    /// Whether the stream may read more: its key still unrevoked and its org active, and the
    /// stream younger than [`MAX_STREAM_LIFETIME`]. Asked before every read of new events, so
    /// nothing written after a key's revocation reaches its streams (review N6).
    async fn still_authorised(&mut self) -> bool {
        if self.opened.elapsed() >= MAX_STREAM_LIFETIME {
            return false;
        }
        match crate::store::api_keys::is_live(&self.pool, self.key, self.org).await {
            Ok(live) => live,
            Err(e) => {
                tracing::warn!(error = %e, "could not re-check an event stream's key; closing it");
                false
            }
        }
    }
}

fn sse_event(e: &EventRow) -> Event {
    Event::default()
        .id(e.id.to_string())
        .event(e.kind.as_str())
        .data(event_json(e).to_string())
}

/// The org's events as Server-Sent Events, from `Last-Event-ID` (or `after`), else from now
/// (with `subject`: from its first event); `subject` keeps only the events about it.
#[utoipa::path(get, path = "/v1/events/stream", tag = "events", operation_id = "streamEvents", params(StreamQuery,
        ("Last-Event-ID" = Option<i64>, Header, minimum = 0, description = "Resume after this event id")),
    responses((status = 200, body = String, content_type = "text/event-stream",
        description = "`id:` event id, `event:` type, `data:` the event as in GET /v1/events; `:` comments keep alive"),
        (status = 404, description = "`Last-Event-ID` or `after` is not one of the org's events")))]
pub async fn stream(
    State(s): State<ApiState>,
    req: Scoped,
    headers: HeaderMap,
    Params(q): Params<StreamQuery>,
) -> Result<Sse<impl futures::Stream<Item = Result<Event, Infallible>>>, Problem> {
    let pool = req.app.pool.clone();
    let org = req.org_id();
    let key = req.caller.key_id;
    let slot = s.events.admit(key, org)?;
    let (after, field) = match headers.get("last-event-id") {
        Some(v) => {
            let id = v.to_str().ok().and_then(|v| v.trim().parse::<i64>().ok());
            match id {
                Some(id) if id >= 0 => (id, "Last-Event-ID"),
                _ => {
                    return Err(Problem::bad_request(
                        "Last-Event-ID",
                        "Last-Event-ID must be an event id (a number ≥ 0)",
                    ));
                }
            }
        }
        None => match q.after {
            Some(a) if a < 0 => {
                return Err(Problem::bad_request("after", "after must be ≥ 0"));
            }
            Some(a) => (a, "after"),
            // One subject's stream starts at its first event: a product that uploads, then
            // opens the stream, misses none of the run's progress.
            None if q.subject.is_some() => (0, "after"),
            None => (events::stream_end(&pool, org).await?, "after"),
        },
    };
    let subject = q.subject;
    // A bad cursor is refused before the stream starts.
    let first = events::list_after_about(&pool, org, after, &[], subject, MAX_LIMIT)
        .await
        .map_err(|e| read_error(e, field))?;
    let cur = Cursor {
        wake: s.events.subscribe(&pool, &s.shutdown),
        pool,
        org,
        key,
        after,
        subject,
        buf: first.into(),
        stop: s.shutdown.clone(),
        opened: std::time::Instant::now(),
        _slot: slot,
    };
    let stream = futures::stream::unfold(cur, |mut c| async move {
        loop {
            if let Some(e) = c.buf.pop_front() {
                c.after = e.id;
                return Some((Ok::<Event, Infallible>(sse_event(&e)), c));
            }
            tokio::select! {
                _ = c.stop.cancelled() => return None,
                r = c.wake.changed() => if r.is_err() {
                    tokio::time::sleep(POLL).await;
                },
                _ = tokio::time::sleep(POLL) => {}
            }
            // Re-authorised before new events are read: a revoked key's stream ends here.
            if !c.still_authorised().await {
                return None;
            }
            match events::list_after_about(&c.pool, c.org, c.after, &[], c.subject, MAX_LIMIT).await
            {
                Ok(rows) => c.buf.extend(rows),
                Err(e) => {
                    tracing::warn!(error = %e, org_id = %c.org, "event stream read failed; closing it (the client resumes with Last-Event-ID)");
                    return None;
                }
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

#[cfg(test)]
mod stream_slots {
    use super::*;

    #[test]
    fn one_orgs_keys_cannot_take_every_slot_and_a_closed_stream_gives_its_back() {
        let w = EventWaker::default();
        let (noisy, quiet) = (Uuid::new_v4(), Uuid::new_v4());
        // Many keys of one org, each under its own cap: the org's cap stops them.
        let mut held = Vec::new();
        for _ in 0..MAX_STREAMS_PER_ORG / 2 {
            let key = Uuid::new_v4();
            held.push(w.admit(key, noisy).unwrap());
            held.push(w.admit(key, noisy).unwrap());
        }
        let refused = w
            .admit(Uuid::new_v4(), noisy)
            .err()
            .expect("over the org's cap");
        assert!(
            refused.detail.contains("this org's keys"),
            "{}",
            refused.detail
        );
        // Another org still gets a stream.
        let other = w.admit(Uuid::new_v4(), quiet).unwrap();
        // One closed stream of the noisy org gives its slot back.
        held.pop();
        let again = w.admit(Uuid::new_v4(), noisy).unwrap();
        drop((again, other, held));
        let open = w.open.lock().unwrap();
        assert_eq!(
            (open.total, open.per_key.len(), open.per_org.len()),
            (0, 0, 0),
            "every slot given back"
        );
    }
}
