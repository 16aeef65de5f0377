//! The built-in tools against a real PostgreSQL: for every tool the success path, invalid
//! input, and another org's id (which must look exactly like a missing one and leave the other
//! org's rows unchanged); plus versioning, extraction validation, suggestion uniqueness and
//! cap, the overview's signals, NUL bytes, big documents and approval snapshots.
//!
//! One test binary: this file is the harness (two orgs, a call through the registry, the
//! error matchers); each module holds the tests of one tool group.

use crate::common;
mod documents;
mod extraction;
mod prompts;
mod races;
mod registry;
mod schemas;
mod snapshots;
mod suggestions;
mod tags;

use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::llm::{
    CompletionRequest, CompletionResponse, FinishReason, LlmError, Message, Role, SharedProvider,
    ToolChoice, Usage,
};
use agentd::store;
use agentd::tools::registry::CallError;
use agentd::tools::{Category, ToolCtx, ToolError, builtin_registry};
use chrono::{DateTime, Duration, NaiveDate, TimeZone, Utc};
use common::TestDb;
use serde_json::{Value, json};
use sqlx::PgPool;
use std::sync::Arc;
use uuid::Uuid;

// ---------------------------------------------------------------------------------------------
// Harness

/// How a call is made: the ToolCtx fields a test varies.
#[derive(Clone)]
struct Ctx {
    org: Uuid,
    run_id: Option<Uuid>,
    document_id: Option<Uuid>,
    night: Option<NaiveDate>,
    max_suggestions: Option<u32>,
    excerpt_chars: usize,
    now: DateTime<Utc>,
    provider: SharedProvider,
}

/// Two orgs, each with one document.
struct World {
    db: TestDb,
    a: Uuid,
    b: Uuid,
    doc_a: Uuid,
    doc_b: Uuid,
    now: DateTime<Utc>,
}

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 3, 10, 2, 0, 0).unwrap()
}

async fn world() -> World {
    let db = TestDb::new().await;
    let now = t0();
    let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
    for (id, name) in [(a, "org-a"), (b, "org-b")] {
        sqlx::query("INSERT INTO orgs (id, name) VALUES ($1, $2)")
            .bind(id)
            .bind(name)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    let doc_a = add_doc(&db.pool, a, "Invoice A-1", "Invoice A-1\ntotal 12.50", now).await;
    let doc_b = add_doc(&db.pool, b, "Invoice B-1", "Invoice B-1\ntotal 99.00", now).await;
    World {
        db,
        a,
        b,
        doc_a,
        doc_b,
        now,
    }
}

async fn add_doc(pool: &PgPool, org: Uuid, name: &str, text: &str, now: DateTime<Utc>) -> Uuid {
    let mut c = pool.acquire().await.unwrap();
    store::documents::insert(
        &mut c,
        org,
        name,
        Some(text),
        &json!({"source": "test"}),
        now,
    )
    .await
    .unwrap()
}

impl World {
    fn pool(&self) -> &PgPool {
        &self.db.pool
    }

    /// A context for `org` with no run, a provider that must not be called.
    fn ctx(&self, org: Uuid) -> Ctx {
        Ctx {
            org,
            run_id: Some(Uuid::new_v4()),
            document_id: None,
            night: None,
            max_suggestions: None,
            excerpt_chars: 1000,
            now: self.now,
            provider: Arc::new(ScriptedProvider::new(vec![])),
        }
    }

    /// Calls a tool through the registry in one transaction, committed whatever the outcome
    /// (so a failed call that wrote something would show).
    async fn call(&self, c: &Ctx, name: &str, args: Value) -> Result<Value, CallError> {
        let mut tx = self.pool().begin().await.unwrap();
        let mut ctx = tool_ctx(c, &mut tx);
        let r = builtin_registry().execute(&mut ctx, name, &args).await;
        drop(ctx);
        tx.commit().await.unwrap();
        r
    }

    /// `call`, expecting success.
    async fn ok(&self, c: &Ctx, name: &str, args: Value) -> Value {
        match self.call(c, name, args.clone()).await {
            Ok(v) => v,
            Err(e) => panic!("{name}({args}) failed: {e:?}"),
        }
    }

    /// A tool's snapshot.
    async fn snapshot(&self, c: &Ctx, name: &str, args: Value) -> Value {
        let r = builtin_registry();
        let tool = r.get(name).unwrap().clone();
        let mut tx = self.pool().begin().await.unwrap();
        let mut ctx = tool_ctx(c, &mut tx);
        let v = tool
            .snapshot(&mut ctx, &args)
            .await
            .unwrap_or_else(|| panic!("{name} has no snapshot"))
            .unwrap_or_else(|e| panic!("{name} snapshot failed: {e:?}"));
        drop(ctx);
        tx.commit().await.unwrap();
        v
    }

    async fn count(&self, sql: &'static str, org: Uuid) -> i64 {
        sqlx::query_scalar(sql)
            .bind(org)
            .fetch_one(self.pool())
            .await
            .unwrap()
    }

    /// Creates a strict two-field schema in `org`; returns its revid.
    async fn schema(&self, c: &Ctx) -> String {
        let v = self
            .ok(
                c,
                "create_schema",
                json!({"name": "Invoice", "response_format": invoice_rf()}),
            )
            .await;
        v["schema_revid"].as_str().unwrap().to_string()
    }

    /// Creates a prompt on `schema_revid`; returns its revid.
    async fn prompt(&self, c: &Ctx, schema_revid: &str, content: &str) -> String {
        let v = self
            .ok(
                c,
                "create_prompt",
                json!({"name": "Invoice prompt", "content": content, "schema_revid": schema_revid}),
            )
            .await;
        v["prompt_revid"].as_str().unwrap().to_string()
    }

    async fn doc_row(&self, id: Uuid) -> (Vec<Uuid>, Value, DateTime<Utc>) {
        sqlx::query_as("SELECT tag_ids, metadata, updated_at FROM documents WHERE id = $1")
            .bind(id)
            .fetch_one(self.pool())
            .await
            .unwrap()
    }
}

fn tool_ctx<'c>(c: &Ctx, tx: &'c mut sqlx::Transaction<'static, sqlx::Postgres>) -> ToolCtx<'c> {
    ToolCtx {
        org_id: c.org,
        run_id: c.run_id,
        actor: "agent:test".into(),
        conn: tx,
        provider: c.provider.clone(),
        model: "test-model".into(),
        excerpt_chars: c.excerpt_chars,
        now: c.now,
        document_id: c.document_id,
        night: c.night,
        max_suggestions: c.max_suggestions,
        subject: Default::default(),
    }
}

fn invoice_rf() -> Value {
    json!({"type": "json_schema", "json_schema": {"name": "invoice", "strict": true, "schema": {
        "type": "object",
        "properties": {"number": {"type": "string"}, "total": {"type": "number"}},
        "required": ["number", "total"],
        "additionalProperties": false}}})
}

fn invalid(r: Result<Value, CallError>) -> String {
    match r {
        Err(CallError::Tool(ToolError::Invalid(m))) => m,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

fn not_found(r: Result<Value, CallError>) -> String {
    match r {
        Err(CallError::Tool(ToolError::NotFound(m))) => m,
        other => panic!("expected NotFound, got {other:?}"),
    }
}

fn conflict(r: Result<Value, CallError>) -> String {
    match r {
        Err(CallError::Tool(ToolError::Conflict(m))) => m,
        other => panic!("expected Conflict, got {other:?}"),
    }
}

fn uuid(v: &Value) -> Uuid {
    Uuid::parse_str(v.as_str().unwrap_or_else(|| panic!("not a string: {v}"))).unwrap()
}

/// Stores an extraction for `doc` in `org` through the tool; returns its id.
async fn extract(w: &World, org: Uuid, doc: Uuid, answer: &'static str) -> (Uuid, String) {
    let mut c = w.ctx(org);
    c.provider = Arc::new(ScriptedProvider::new(vec![Turn::text(answer)]));
    let schema = w.schema(&c).await;
    let p = w.prompt(&c, &schema, "Extract.").await;
    let v = w
        .ok(
            &c,
            "run_extraction",
            json!({"prompt_revid": p, "document_id": doc}),
        )
        .await;
    (uuid(&v["extraction_id"]), schema)
}
