//! SQL for the auto-create pipeline: a document's proposal state, the artifacts a run proposed,
//! cleanup of a failed run's orphans, and accept/reject.

use super::states::AutoCreateStatus;
use crate::kinds::{AutoCreate, JobKind};
use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgConnection, PgExecutor};
use uuid::Uuid;

/// What a document's auto-create proposed (its `proposed_*` columns), or what a run created for
/// it ([`artifacts`]): a schema version, a prompt version and an extraction.
#[derive(Debug, Clone, Default, Serialize, sqlx::FromRow)]
pub struct Proposed {
    pub proposed_schema_id: Option<Uuid>,
    pub proposed_schema_version: Option<i32>,
    pub proposed_prompt_id: Option<Uuid>,
    pub proposed_prompt_version: Option<i32>,
    pub proposed_extraction_id: Option<Uuid>,
}

impl Proposed {
    /// The proposed schema version, `(schema_id, version)`.
    pub fn schema(&self) -> Option<(Uuid, i32)> {
        self.proposed_schema_id.zip(self.proposed_schema_version)
    }
    /// The proposed prompt version, `(prompt_id, version)`.
    pub fn prompt(&self) -> Option<(Uuid, i32)> {
        self.proposed_prompt_id.zip(self.proposed_prompt_version)
    }
    /// What a whole proposal (a schema, a prompt and an extraction) still lacks.
    pub fn missing(&self) -> Vec<&'static str> {
        [
            ("schema", self.proposed_schema_id.is_none()),
            ("prompt", self.proposed_prompt_id.is_none()),
            ("extraction", self.proposed_extraction_id.is_none()),
        ]
        .into_iter()
        .filter_map(|(part, absent)| absent.then_some(part))
        .collect()
    }
    /// A schema, a prompt and an extraction: a whole proposal.
    pub fn complete(&self) -> bool {
        self.missing().is_empty()
    }
}

/// What a run starts from besides its document (issue 33): a schema, a prompt and tags a
/// person named on upload or on the job (`schema_id`, `prompt_id`, `tag_ids`: reused, never
/// written), or, for a refine, the document's proposal, whose schema and prompt the run may
/// write new versions of (`revise`). A run that makes no schema or prompt of its own proposes
/// these ([`proposal`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StartFrom {
    /// A schema version `(schema_id, version)`.
    pub schema: Option<(Uuid, i32)>,
    /// A prompt version `(prompt_id, version)`.
    pub prompt: Option<(Uuid, i32)>,
    /// Tags for the prompt the run makes.
    pub tag_ids: Vec<Uuid>,
    /// A refine: the run may write new versions of `schema` and `prompt` (its subject's
    /// proposal), and of nothing else it did not create.
    pub revise: bool,
}

/// What run `run_id` proposes for `document_id`: what it made ([`artifacts`]), else what it
/// started from: the start prompt while the run's schema (if it made one) is the prompt's, the
/// start schema while the run made none. The extraction is always the run's own.
pub async fn proposal(
    conn: &mut PgConnection,
    org_id: Uuid,
    run_id: Uuid,
    document_id: Uuid,
    start: &StartFrom,
) -> sqlx::Result<Proposed> {
    let mut a = artifacts(&mut *conn, org_id, run_id, document_id).await?;
    if a.proposed_prompt_id.is_none()
        && let Some((id, version)) = start.prompt
        && let Some(p) = super::prompts::get(conn, org_id, id, version).await?
    {
        let pinned = (p.fields.schema_id, p.fields.schema_version);
        if a.schema().is_none_or(|s| s == pinned) {
            a.proposed_prompt_id = Some(id);
            a.proposed_prompt_version = Some(version);
            a.proposed_schema_id = Some(pinned.0);
            a.proposed_schema_version = Some(pinned.1);
        }
    }
    if a.proposed_schema_id.is_none()
        && let Some((id, version)) = start.schema
    {
        a.proposed_schema_id = Some(id);
        a.proposed_schema_version = Some(version);
    }
    Ok(a)
}

/// A document's auto-create state.
#[derive(Debug, Clone, Serialize, sqlx::FromRow)]
pub struct ProposalState {
    pub id: Uuid,
    pub org_id: Uuid,
    pub name: String,
    pub has_text: bool,
    pub auto_create_status: super::documents::AutoCreateStatus,
    #[serde(flatten)]
    #[sqlx(flatten)]
    pub proposed: Proposed,
    pub auto_create_run_id: Option<Uuid>,
    pub auto_create_error: Option<String>,
}

/// The state of `document_id` in `org_id`, locked for update.
pub async fn lock_state(
    conn: &mut PgConnection,
    org_id: Uuid,
    document_id: Uuid,
) -> sqlx::Result<Option<ProposalState>> {
    read_state(conn, Some(org_id), document_id, " FOR UPDATE").await
}

/// The state without a lock (`org_id` None: whichever org has the document).
pub async fn state<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Option<Uuid>,
    document_id: Uuid,
) -> sqlx::Result<Option<ProposalState>> {
    read_state(exec, org_id, document_id, "").await
}

async fn read_state<'e>(
    exec: impl PgExecutor<'e>,
    org_id: Option<Uuid>,
    document_id: Uuid,
    lock: &str,
) -> sqlx::Result<Option<ProposalState>> {
    sqlx::query_as(sqlx::AssertSqlSafe(format!(
        "SELECT id, org_id, name, COALESCE(length(btrim(text, E' \\t\\r\\n\\f')), 0) > 0 AS has_text, auto_create_status,
                proposed_schema_id, proposed_schema_version, proposed_prompt_id, proposed_prompt_version,
                proposed_extraction_id, auto_create_run_id, auto_create_error
           FROM documents WHERE id = $2 AND ($1::uuid IS NULL OR org_id = $1){lock}"
    )))
    .bind(org_id)
    .bind(document_id)
    .fetch_optional(exec)
    .await
}

/// Sets the status (and error) of a document's auto-create.
pub async fn set_status<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    document_id: Uuid,
    status: AutoCreateStatus,
    run_id: Option<Uuid>,
    error: Option<&str>,
    now: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE documents SET auto_create_status = $3, auto_create_run_id = COALESCE($4, auto_create_run_id),
                auto_create_error = $5, updated_at = $6
          WHERE org_id = $1 AND id = $2",
    )
    .bind(org_id)
    .bind(document_id)
    .bind(status)
    .bind(run_id)
    .bind(error.map(super::documents::bounded_error))
    .bind(now)
    .execute(exec)
    .await?;
    Ok(())
}

/// Fails a document's auto-create (`queued` or `running`) because its job `job_id` was
/// cancelled, unless another auto_create job of the document is waiting or running (that one
/// will finish it): `failed`, or for a refine the status it had when the refine was asked
/// ([`refine_request`]; its proposal is untouched). Whether the document changed.
pub async fn fail_cancelled<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    document_id: Uuid,
    job_id: i64,
    now: DateTime<Utc>,
) -> sqlx::Result<bool> {
    let done = sqlx::query(
        "UPDATE documents d SET updated_at = $4,
                auto_create_status = COALESCE((SELECT r.prior_status FROM refine_requests r
                                                WHERE r.job_id = $3 AND r.org_id = d.org_id
                                                  AND r.document_id = d.id), 'failed'),
                auto_create_error = 'auto_create job ' || $3 || ' was cancelled'
          WHERE d.org_id = $1 AND d.id = $2 AND d.auto_create_status IN ('queued', 'running')
            AND NOT EXISTS (SELECT 1 FROM agentd_jobs a
                             WHERE a.kind = $5 AND a.id <> $3
                               AND a.payload->>'document_id' = d.id::text
                               AND a.state IN ('available', 'running'))",
    )
    .bind(org_id)
    .bind(document_id)
    .bind(job_id)
    .bind(now)
    .bind(AutoCreate::NAME)
    .execute(exec)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// A refine's request (migration 0100): the reviewer's words, kept out of the job's payload,
/// and the document's status when it was asked.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RefineRequest {
    pub instructions: String,
    pub prior_status: AutoCreateStatus,
}

/// Records the request of refine job `job_id` of `org_id`'s document `document_id` (in the
/// transaction that enqueued the job).
pub async fn add_refine_request<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    document_id: Uuid,
    job_id: i64,
    r: &RefineRequest,
    now: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO refine_requests (job_id, org_id, document_id, instructions, prior_status, created_at)
         VALUES ($3, $1, $2, $4, $5, $6)",
    )
    .bind(org_id)
    .bind(document_id)
    .bind(job_id)
    .bind(&r.instructions)
    .bind(r.prior_status)
    .bind(now)
    .execute(exec)
    .await?;
    Ok(())
}

/// The request of refine job `job_id` of `org_id`'s document `document_id`; `None` when it is
/// gone (the document was erased) or never was.
pub async fn refine_request<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    document_id: Uuid,
    job_id: i64,
) -> sqlx::Result<Option<RefineRequest>> {
    sqlx::query_as(
        "SELECT instructions, prior_status FROM refine_requests
          WHERE org_id = $1 AND document_id = $2 AND job_id = $3",
    )
    .bind(org_id)
    .bind(document_id)
    .bind(job_id)
    .fetch_optional(exec)
    .await
}

/// What run `run_id` created in `org_id` for `document_id`, as the proposal it would record. The
/// prompt is the latest one; the schema is the prompt's (else the latest created); the extraction
/// is the latest for this document.
pub async fn artifacts<'e, E: PgExecutor<'e>>(
    exec: E,
    org_id: Uuid,
    run_id: Uuid,
    document_id: Uuid,
) -> sqlx::Result<Proposed> {
    sqlx::query_as(
        "WITH p AS (SELECT prompt_id, version, schema_id, schema_version FROM prompts
                     WHERE org_id = $1 AND run_id = $2 ORDER BY created_at DESC, version DESC LIMIT 1),
              s AS (SELECT schema_id, version FROM schemas WHERE org_id = $1 AND run_id = $2
                     ORDER BY created_at DESC, version DESC LIMIT 1),
              r AS (SELECT reused_schema_id, reused_schema_version FROM agent_runs
                     WHERE org_id = $1 AND id = $2),
              e AS (SELECT id FROM extractions WHERE org_id = $1 AND run_id = $2 AND document_id = $3
                     ORDER BY created_at DESC LIMIT 1)
         SELECT COALESCE((SELECT schema_id FROM p), (SELECT schema_id FROM s),
                         (SELECT reused_schema_id FROM r)) AS proposed_schema_id,
                COALESCE((SELECT schema_version FROM p), (SELECT version FROM s),
                         (SELECT reused_schema_version FROM r)) AS proposed_schema_version,
                (SELECT prompt_id FROM p) AS proposed_prompt_id,
                (SELECT version FROM p) AS proposed_prompt_version,
                (SELECT id FROM e) AS proposed_extraction_id",
    )
    .bind(org_id)
    .bind(run_id)
    .bind(document_id)
    .fetch_one(exec)
    .await
}

/// Records that run `run_id` reused version `version` of the org's schema `schema_id` as it is
/// (no new version: it held every field the run wanted), so its proposal names it
/// ([`artifacts`]) before the run made a prompt on it.
pub async fn set_reused_schema(
    conn: &mut PgConnection,
    org_id: Uuid,
    run_id: Uuid,
    schema_id: Uuid,
    version: i32,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE agent_runs SET reused_schema_id = $3, reused_schema_version = $4
          WHERE org_id = $1 AND id = $2",
    )
    .bind(org_id)
    .bind(run_id)
    .bind(schema_id)
    .bind(version)
    .execute(conn)
    .await?;
    Ok(())
}

/// Records on run `run_id` the field names its schema calls left out (`agent_runs.dropped_fields`,
/// migration 0099): each entry of `dropped` (an object with a `name`) replaces the one of that
/// name already recorded, others are added after them.
pub async fn add_dropped_fields(
    conn: &mut PgConnection,
    org_id: Uuid,
    run_id: Uuid,
    dropped: &serde_json::Value,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE agent_runs
            SET dropped_fields = COALESCE((SELECT jsonb_agg(d) FROM jsonb_array_elements(dropped_fields) d
                                            WHERE NOT EXISTS (SELECT 1 FROM jsonb_array_elements($3) n
                                                               WHERE n->'name' = d->'name')), '[]'::jsonb)
                                 || $3
          WHERE org_id = $1 AND id = $2",
    )
    .bind(org_id)
    .bind(run_id)
    .bind(dropped)
    .execute(conn)
    .await?;
    Ok(())
}

/// The field names run `run_id` left out ([`add_dropped_fields`]); empty for an unknown run.
pub async fn dropped_fields<'e, E: PgExecutor<'e>>(
    exec: E,
    run_id: Uuid,
) -> sqlx::Result<serde_json::Value> {
    let v: Option<serde_json::Value> =
        sqlx::query_scalar("SELECT dropped_fields FROM agent_runs WHERE id = $1")
            .bind(run_id)
            .fetch_optional(exec)
            .await?;
    Ok(v.unwrap_or_else(|| serde_json::json!([])))
}

/// Records on run `run_id` what its latest proposal left out as "also found"
/// (`agent_runs.also_found`, migration 0113): replaces what was recorded.
pub async fn set_also_found(
    conn: &mut PgConnection,
    org_id: Uuid,
    run_id: Uuid,
    also_found: &serde_json::Value,
) -> sqlx::Result<()> {
    sqlx::query("UPDATE agent_runs SET also_found = $3 WHERE org_id = $1 AND id = $2")
        .bind(org_id)
        .bind(run_id)
        .bind(also_found)
        .execute(conn)
        .await?;
    Ok(())
}

/// What run `run_id`'s proposal left out ([`set_also_found`]); empty for an unknown run.
pub async fn also_found<'e, E: PgExecutor<'e>>(
    exec: E,
    run_id: Uuid,
) -> sqlx::Result<serde_json::Value> {
    let v: Option<serde_json::Value> =
        sqlx::query_scalar("SELECT also_found FROM agent_runs WHERE id = $1")
            .bind(run_id)
            .fetch_optional(exec)
            .await?;
    Ok(v.unwrap_or_else(|| serde_json::json!([])))
}

/// A reviewer added an also-found field to document `document_id`'s proposal: the document
/// proposes schema version `schema_version` and prompt version `prompt_version` (new versions
/// made for it), its proposed extraction points at them with `result`, and the run's
/// `also_found` no longer lists `name`.
#[allow(clippy::too_many_arguments)]
pub async fn field_added(
    conn: &mut PgConnection,
    org_id: Uuid,
    document_id: Uuid,
    run_id: Uuid,
    name: &str,
    schema_version: i32,
    prompt_version: Option<i32>,
    result: Option<&serde_json::Value>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE documents SET proposed_schema_version = $3,
                proposed_prompt_version = COALESCE($4, proposed_prompt_version)
          WHERE org_id = $1 AND id = $2",
    )
    .bind(org_id)
    .bind(document_id)
    .bind(schema_version)
    .bind(prompt_version)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "UPDATE extractions e SET schema_version = $3,
                prompt_version = COALESCE($4, e.prompt_version), result = COALESCE($5, e.result)
           FROM documents d
          WHERE d.org_id = $1 AND d.id = $2 AND e.org_id = $1 AND e.id = d.proposed_extraction_id
            AND e.status = 'proposed'",
    )
    .bind(org_id)
    .bind(document_id)
    .bind(schema_version)
    .bind(prompt_version)
    .bind(result)
    .execute(&mut *conn)
    .await?;
    sqlx::query(
        "UPDATE agent_runs SET also_found = COALESCE((SELECT jsonb_agg(f)
                  FROM jsonb_array_elements(also_found) f WHERE f->>'name' <> $3), '[]'::jsonb)
          WHERE org_id = $1 AND id = $2",
    )
    .bind(org_id)
    .bind(run_id)
    .bind(name)
    .execute(conn)
    .await?;
    Ok(())
}

/// Records the proposal on the document.
pub async fn set_proposed(
    conn: &mut PgConnection,
    org_id: Uuid,
    document_id: Uuid,
    run_id: Uuid,
    a: &Proposed,
    now: DateTime<Utc>,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE documents SET auto_create_status = 'proposed', auto_create_run_id = $3,
                proposed_schema_id = $4, proposed_schema_version = $5, proposed_prompt_id = $6,
                proposed_prompt_version = $7, proposed_extraction_id = $8, auto_create_error = NULL,
                updated_at = $9
          WHERE org_id = $1 AND id = $2",
    )
    .bind(org_id)
    .bind(document_id)
    .bind(run_id)
    .bind(a.proposed_schema_id)
    .bind(a.proposed_schema_version)
    .bind(a.proposed_prompt_id)
    .bind(a.proposed_prompt_version)
    .bind(a.proposed_extraction_id)
    .bind(now)
    .execute(conn)
    .await?;
    Ok(())
}

/// Deletes what run `run_id` proposed (still `proposed`) in `org_id`; returns rows deleted.
pub async fn remove_proposed(
    conn: &mut PgConnection,
    org_id: Uuid,
    run_id: Uuid,
) -> sqlx::Result<u64> {
    let mut n = 0;
    for sql in [
        "DELETE FROM extractions WHERE org_id = $1 AND run_id = $2 AND status = 'proposed'",
        "DELETE FROM prompts WHERE org_id = $1 AND run_id = $2 AND status = 'proposed'",
        // Not a version another run's prompt uses or reused (`create_schema` reuses the org's
        // schemas, proposed ones too): rejecting one document leaves the others' proposals.
        // Nor one a later version of the schema by another run (or a person) built on (D6:
        // reuse extends a proposed version): that proposal's chain stays whole, and the fields
        // of this run it carries are its own reviewer's to accept or reject with it.
        "DELETE FROM schemas s WHERE org_id = $1 AND run_id = $2 AND status = 'proposed'
            AND NOT EXISTS (SELECT 1 FROM prompts p WHERE p.org_id = $1 AND p.schema_id = s.schema_id
                               AND p.schema_version = s.version AND p.run_id IS DISTINCT FROM $2)
            AND NOT EXISTS (SELECT 1 FROM schemas l WHERE l.org_id = $1 AND l.schema_id = s.schema_id
                               AND l.version > s.version AND l.run_id IS DISTINCT FROM $2)
            AND NOT EXISTS (SELECT 1 FROM agent_runs r WHERE r.org_id = $1 AND r.id <> $2
                               AND r.status NOT IN ('failed', 'cancelled')
                               AND r.reused_schema_id = s.schema_id
                               AND r.reused_schema_version = s.version)",
    ] {
        n += sqlx::query(sql)
            .bind(org_id)
            .bind(run_id)
            .execute(&mut *conn)
            .await?
            .rows_affected();
    }
    Ok(n)
}

/// Accepts a proposal: exactly the schema version, prompt version and extraction recorded on
/// the document become active/accepted (nothing else the run wrote), the document `accepted`.
pub async fn accept(
    conn: &mut PgConnection,
    org_id: Uuid,
    document_id: Uuid,
    _run_id: Uuid,
    now: DateTime<Utc>,
) -> sqlx::Result<()> {
    for sql in [
        "UPDATE schemas s SET status = 'active' FROM documents d
          WHERE d.org_id = $1 AND d.id = $2 AND s.org_id = d.org_id AND s.status = 'proposed'
            AND s.schema_id = d.proposed_schema_id AND s.version = d.proposed_schema_version",
        "UPDATE prompts p SET status = 'active' FROM documents d
          WHERE d.org_id = $1 AND d.id = $2 AND p.org_id = d.org_id AND p.status = 'proposed'
            AND p.prompt_id = d.proposed_prompt_id AND p.version = d.proposed_prompt_version",
        "UPDATE extractions e SET status = 'accepted' FROM documents d
          WHERE d.org_id = $1 AND d.id = $2 AND e.org_id = d.org_id AND e.status = 'proposed'
            AND e.id = d.proposed_extraction_id AND e.document_id = d.id",
    ] {
        sqlx::query(sql)
            .bind(org_id)
            .bind(document_id)
            .execute(&mut *conn)
            .await?;
    }
    set_status(
        &mut *conn,
        org_id,
        document_id,
        AutoCreateStatus::Accepted,
        None,
        None,
        now,
    )
    .await
}

/// Rejects a proposal: the run's proposed artifacts are removed, the refs cleared.
pub async fn reject(
    conn: &mut PgConnection,
    org_id: Uuid,
    document_id: Uuid,
    run_id: Uuid,
    now: DateTime<Utc>,
) -> sqlx::Result<u64> {
    sqlx::query(
        "UPDATE documents SET proposed_schema_id = NULL, proposed_schema_version = NULL, proposed_prompt_id = NULL,
                proposed_prompt_version = NULL, proposed_extraction_id = NULL
          WHERE org_id = $1 AND id = $2",
    )
    .bind(org_id)
    .bind(document_id)
    .execute(&mut *conn)
    .await?;
    let n = remove_proposed(conn, org_id, run_id).await?;
    set_status(
        &mut *conn,
        org_id,
        document_id,
        AutoCreateStatus::Rejected,
        None,
        None,
        now,
    )
    .await?;
    Ok(n)
}
