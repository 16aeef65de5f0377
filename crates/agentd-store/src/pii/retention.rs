//! Retention and erasure of personal data held outside the documents table.
//!
//! - Transcripts (`agent_steps`) of finished runs are **compacted** after
//!   `retention.transcripts_after_days`: tool names, call ids, decisions, ids and counts stay;
//!   message text, tool arguments and tool results become summaries (see [`super::audit`]).
//!   The run's symbol table (`pii_tokens`) goes with it.
//! - Deleting a document **erases** its text from every transcript that carried it (the runs
//!   about it and any run whose steps name it) and drops those runs' symbol tables; its
//!   extractions are deleted with it (foreign key). Audit rows keep their hashes.

use super::audit::summarise;
use crate::clock::SharedClock;
use serde_json::{Map, Value, json};
use sqlx::{PgConnection, PgPool};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::info;
use uuid::Uuid;

/// Keys whose string values are message text, tool arguments or tool results.
const TEXT_KEYS: &[&str] = &["text", "content", "arguments", "final_text"];

/// A step payload with its text replaced by summaries; ids, names and flags stay, and the
/// shape stays readable by the transcript loader.
pub fn compact_payload(v: &Value) -> Value {
    let mut out = compact_value(v);
    if let Value::Object(m) = &mut out {
        m.insert("compacted".into(), json!(true));
    }
    out
}

fn compact_value(v: &Value) -> Value {
    match v {
        Value::Object(o) => Value::Object(
            o.iter()
                .map(|(k, x)| {
                    let y = match x {
                        Value::String(s) if TEXT_KEYS.contains(&k.as_str()) => {
                            Value::String(compact_text(k, s))
                        }
                        _ => compact_value(x),
                    };
                    (k.clone(), y)
                })
                .collect::<Map<_, _>>(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(compact_value).collect()),
        other => other.clone(),
    }
}

fn compact_text(key: &str, s: &str) -> String {
    if s.is_empty() {
        return String::new();
    }
    match serde_json::from_str::<Value>(s) {
        Ok(v @ (Value::Object(_) | Value::Array(_))) => summarise(&v).to_string(),
        // Arguments must stay a JSON object for the loader; text is simply gone.
        _ if key == "arguments" => "{}".into(),
        _ => format!("[removed: {} characters]", s.chars().count()),
    }
}

/// Compacts every step of `run_id` and drops its symbol table; returns the steps changed.
pub async fn compact_run(conn: &mut PgConnection, run_id: Uuid) -> sqlx::Result<u64> {
    let steps: Vec<(i32, Value)> = sqlx::query_as(
        "SELECT seq, payload FROM agent_steps
          WHERE run_id = $1 AND NOT coalesce((payload->>'compacted')::boolean, false)
          ORDER BY seq FOR UPDATE",
    )
    .bind(run_id)
    .fetch_all(&mut *conn)
    .await?;
    let (seqs, payloads): (Vec<i32>, Vec<Value>) = steps
        .into_iter()
        .map(|(seq, p)| (seq, compact_payload(&p)))
        .unzip();
    sqlx::query(
        "UPDATE agent_steps s SET payload = x.p
           FROM unnest($2::int[], $3::jsonb[]) AS x(seq, p)
          WHERE s.run_id = $1 AND s.seq = x.seq",
    )
    .bind(run_id)
    .bind(&seqs)
    .bind(&payloads)
    .execute(&mut *conn)
    .await?;
    sqlx::query("DELETE FROM pii_tokens WHERE run_id = $1")
        .bind(run_id)
        .execute(&mut *conn)
        .await?;
    sqlx::query("UPDATE agent_runs SET transcript_compacted = true WHERE id = $1")
        .bind(run_id)
        .execute(&mut *conn)
        .await?;
    Ok(seqs.len() as u64)
}

/// What an erased text field says instead.
const ERASED: &str = "[erased with its document]";

/// Erases a document's text from transcripts (call before deleting it, in the same
/// transaction), and what was derived from it elsewhere (review N12): the final text and error
/// of those runs, the arguments, snapshot, result, rationale and summary of the approvals on
/// the document (a pending one can then only end stale), the title and message of the
/// suggestions about it, and the instructions of its refines (`refine_requests`). Audit rows
/// keep their hashes and redacted arguments. Returns the runs compacted.
pub async fn erase_document(
    conn: &mut PgConnection,
    org_id: Uuid,
    document_id: Uuid,
) -> sqlx::Result<u64> {
    let runs: Vec<Uuid> = sqlx::query_scalar(
        "SELECT r.id FROM agent_runs r
          WHERE r.org_id = $1
            AND (r.subject = $2::text
                 OR EXISTS (SELECT 1 FROM agent_steps s
                             WHERE s.run_id = r.id AND strpos(s.payload::text, $2::text) > 0))",
    )
    .bind(org_id)
    .bind(document_id)
    .fetch_all(&mut *conn)
    .await?;
    for run in &runs {
        compact_run(conn, *run).await?;
    }
    sqlx::query(
        "UPDATE agent_runs SET final_text = CASE WHEN final_text IS NULL THEN NULL ELSE $3 END,
                               error = CASE WHEN error IS NULL THEN NULL ELSE $3 END
          WHERE org_id = $1 AND id = ANY($2)",
    )
    .bind(org_id)
    .bind(&runs)
    .bind(ERASED)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "UPDATE pending_approvals
            SET args = jsonb_build_object('document_id', $2::text), snapshot = '{}'::jsonb,
                result = NULL, rationale = NULL, summary = $3
          WHERE org_id = $1 AND document_id = $2",
    )
    .bind(org_id)
    .bind(document_id)
    .bind(ERASED)
    .execute(&mut *conn)
    .await?;
    // A refine's words (D13, migration 0100): the job that carried them keeps only who asked.
    sqlx::query("DELETE FROM refine_requests WHERE org_id = $1 AND document_id = $2")
        .bind(org_id)
        .bind(document_id)
        .execute(&mut *conn)
        .await?;
    sqlx::query(
        "UPDATE suggestions SET title = $3, message = $3
          WHERE org_id = $1 AND (document_id = $2 OR subject = $2::text)",
    )
    .bind(org_id)
    .bind(document_id)
    .bind(ERASED)
    .execute(&mut *conn)
    .await?;
    Ok(runs.len() as u64)
}

/// Compacts transcripts of runs finished longer ago than `keep`, a batch of runs at a time.
pub struct TranscriptRetention {
    pub pool: PgPool,
    pub clock: SharedClock,
    pub keep: chrono::Duration,
    pub batch: u32,
    pub interval: Duration,
}

impl TranscriptRetention {
    /// One pass; returns the runs compacted.
    pub async fn run_once(&self) -> sqlx::Result<u64> {
        let cutoff = self.clock.now() - self.keep;
        let total = crate::queue::maintenance::drain(self.batch, || async {
            let mut tx = self.pool.begin().await?;
            let runs: Vec<Uuid> = sqlx::query_scalar(
                "SELECT id FROM agent_runs
                  WHERE status <> 'running' AND NOT transcript_compacted AND finished_at < $1
                  ORDER BY finished_at LIMIT $2 FOR UPDATE SKIP LOCKED",
            )
            .bind(cutoff)
            .bind(i64::from(self.batch))
            .fetch_all(&mut *tx)
            .await?;
            for run in &runs {
                compact_run(&mut tx, *run).await?;
            }
            tx.commit().await?;
            Ok::<_, sqlx::Error>(runs.len() as u64)
        })
        .await?;
        if total > 0 {
            info!(runs = total, "retention compacted finished transcripts");
        }
        // A refine's words go with its job (migration 0106: no foreign key from the domain to
        // the queue's table): the rows whose job the queue has purged.
        let words = sqlx::query(
            "DELETE FROM refine_requests r
              WHERE NOT EXISTS (SELECT 1 FROM agentd_jobs j WHERE j.id = r.job_id)",
        )
        .execute(&self.pool)
        .await?
        .rows_affected();
        if words > 0 {
            info!(
                refines = words,
                "retention deleted the words of purged refine jobs"
            );
        }
        Ok(total)
    }

    /// Runs until `stop`.
    pub async fn run(self, stop: CancellationToken) {
        let interval = self.interval;
        let pass = || self.run_once();
        crate::queue::maintenance::every(interval, stop, "transcript retention", pass).await
    }
}

/// What agentd keeps about a document (`agentd documents show --retention`).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Kept {
    pub document_id: Uuid,
    pub text_chars: i64,
    pub extractions: i64,
    pub runs: i64,
    pub transcript_steps: i64,
    pub compacted_steps: i64,
    pub audit_rows: i64,
    pub pii_tokens: i64,
    /// Approvals about the document (any status; erasure blanks their arguments' values).
    pub approvals: i64,
    /// Suggestions about it (erasure removes their words).
    pub suggestions: i64,
    /// Refines' instructions kept while their jobs live (`refine_requests`).
    pub refine_requests: i64,
}

/// Counts what is kept for a document of `org_id`; `None` if there is no such document.
pub async fn kept_for_document(
    conn: &mut PgConnection,
    org_id: Uuid,
    document_id: Uuid,
) -> sqlx::Result<Option<Kept>> {
    type Row = (i64, i64, i64, i64, i64, i64, i64, i64, i64, i64);
    let row: Option<Row> = sqlx::query_as(
        "WITH d AS (SELECT id, length(coalesce(text, ''))::bigint AS chars FROM documents
                     WHERE org_id = $1 AND id = $2),
              r AS (SELECT id FROM agent_runs WHERE org_id = $1 AND subject = $2::text)
         SELECT d.chars,
                (SELECT count(*) FROM extractions WHERE org_id = $1 AND document_id = $2),
                (SELECT count(*) FROM r),
                (SELECT count(*) FROM agent_steps WHERE run_id IN (SELECT id FROM r)),
                (SELECT count(*) FROM agent_steps WHERE run_id IN (SELECT id FROM r)
                    AND coalesce((payload->>'compacted')::boolean, false)),
                (SELECT count(*) FROM audit_events WHERE run_id IN (SELECT id FROM r)),
                (SELECT count(*) FROM pii_tokens WHERE run_id IN (SELECT id FROM r)),
                (SELECT count(*) FROM pending_approvals WHERE org_id = $1 AND document_id = $2),
                (SELECT count(*) FROM suggestions WHERE org_id = $1 AND document_id = $2),
                (SELECT count(*) FROM refine_requests WHERE org_id = $1 AND document_id = $2)
           FROM d",
    )
    .bind(org_id)
    .bind(document_id)
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map(|(c, e, r, s, cs, a, p, ap, su, rr)| Kept {
        document_id,
        text_chars: c,
        extractions: e,
        runs: r,
        transcript_steps: s,
        compacted_steps: cs,
        audit_rows: a,
        pii_tokens: p,
        approvals: ap,
        suggestions: su,
        refine_requests: rr,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A tool's name as a model writes it (any name: compaction keeps names, whatever they are).
    const TOOL: &str = "look_up";

    #[test]
    fn compaction_keeps_names_and_ids_and_drops_text() {
        let step = json!({"response": {"message": {"role": "assistant", "content": [
            {"type": "text", "text": "Jane Doe owes 12 EUR"},
            {"type": "tool_use", "id": "r1.0", "name": TOOL,
             "arguments": "{\"document_id\":\"d1\",\"note\":\"Jane Doe\"}"}]}}});
        let c = compact_payload(&step);
        let s = c.to_string();
        assert!(!s.contains("Jane"), "{s}");
        assert_eq!(c["compacted"], true);
        let block = &c["response"]["message"]["content"][1];
        assert_eq!(block["name"], TOOL);
        assert_eq!(block["id"], "r1.0");
        let args: Value = serde_json::from_str(block["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args["document_id"], "d1");
    }
}

/// What deleting an org removed.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
pub struct OrgErasure {
    pub documents: u64,
    pub runs: u64,
    pub jobs_cancelled: u64,
}

/// Deletes an org and everything it owns (documents, extractions, schemas, prompts, runs and
/// their transcripts and redaction tokens, approvals, suggestions, keys), in one transaction.
/// Its waiting jobs are cancelled. Audit rows stay: they hold summaries and hashes, never
/// document text. `None`: no such org.
pub async fn delete_org(
    conn: &mut PgConnection,
    org_id: Uuid,
    now: chrono::DateTime<chrono::Utc>,
) -> sqlx::Result<Option<OrgErasure>> {
    let exists: Option<Uuid> = sqlx::query_scalar("SELECT id FROM orgs WHERE id = $1 FOR UPDATE")
        .bind(org_id)
        .fetch_optional(&mut *conn)
        .await?;
    if exists.is_none() {
        return Ok(None);
    }
    let (documents, runs): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM documents WHERE org_id = $1),
                (SELECT count(*) FROM agent_runs WHERE org_id = $1)",
    )
    .bind(org_id)
    .fetch_one(&mut *conn)
    .await?;
    let jobs = sqlx::query(
        "UPDATE agentd_jobs SET state = 'cancelled', finished_at = $2, last_error = 'the org was deleted'
          WHERE state = 'available' AND payload->>'org_id' = $1::text",
    )
    .bind(org_id)
    .bind(now)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    // Cascades to every table that references the org (migrations 0002, 0003, 0010, 0020,
    // 0030): transcripts and symbol tables go with the runs.
    sqlx::query("DELETE FROM orgs WHERE id = $1")
        .bind(org_id)
        .execute(&mut *conn)
        .await?;
    Ok(Some(OrgErasure {
        documents: documents as u64,
        runs: runs as u64,
        jobs_cancelled: jobs,
    }))
}
