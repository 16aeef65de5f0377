//! The built-in tools against a real PostgreSQL: for every tool the success path, invalid
//! input, and another org's id (which must look exactly like a missing one and leave the other
//! org's rows unchanged); plus versioning, extraction validation, suggestion uniqueness and
//! cap, the overview's signals, NUL bytes, big documents and approval snapshots.

mod common;

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

// ---------------------------------------------------------------------------------------------
// Registry

#[test]
fn registry_has_every_tool_with_closed_parameters() {
    let r = builtin_registry();
    let expected = [
        ("get_document", Category::Read),
        ("get_ocr_text", Category::Read),
        ("list_documents", Category::Read),
        ("update_document", Category::Write),
        ("delete_document", Category::Destructive),
        ("get_schema", Category::Read),
        ("list_schemas", Category::Read),
        ("validate_schema", Category::Read),
        ("create_schema", Category::Write),
        ("update_schema", Category::Write),
        ("delete_schema", Category::Destructive),
        ("get_prompt", Category::Read),
        ("list_prompts", Category::Read),
        ("create_prompt", Category::Write),
        ("update_prompt", Category::Write),
        ("delete_prompt", Category::Destructive),
        ("list_tags", Category::Read),
        ("create_tag", Category::Write),
        ("delete_tag", Category::Destructive),
        ("get_extraction_result", Category::Read),
        ("run_extraction", Category::Write),
        ("update_extraction_field", Category::Write),
        ("org_overview", Category::Read),
        ("create_suggestion", Category::Write),
        ("help_schemas", Category::Read),
        ("help_prompts", Category::Read),
    ];
    assert_eq!(r.names().len(), expected.len(), "{:?}", r.names());
    for (name, cat) in expected {
        let t = r.get(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(t.category(), cat, "{name}");
        let p = t.parameters();
        assert!(jsonschema::draft7::meta::is_valid(&p), "{name}: {p}");
        assert_eq!(p["type"], "object", "{name}");
        assert_eq!(p["additionalProperties"], false, "{name}");
        assert!(p["required"].is_array(), "{name}");
        assert!(!t.description().is_empty());
    }
}

/// A call runs on a savepoint of the step's transaction (sqlx nested transaction): a failure
/// undoes the call's writes and nothing else; the step's transaction goes on and commits.
#[tokio::test]
async fn a_savepoint_undoes_only_the_failed_calls_writes() {
    let w = world().await;
    let c = w.ctx(w.a);
    let r = builtin_registry();
    let tag = |name: &str| json!({"name": name, "color": "#112233"});
    let mut tx = w.pool().begin().await.unwrap();
    let mut ctx = tool_ctx(&c, &mut tx);
    r.execute(&mut ctx, "create_tag", &tag("outer"))
        .await
        .unwrap();
    let undone = ctx
        .savepoint(async |c| {
            r.execute(c, "create_tag", &tag("undone")).await?;
            Err::<Value, CallError>(CallError::BadJson("fails after writing".into()))
        })
        .await
        .unwrap();
    assert!(undone.is_err());
    let kept = ctx
        .savepoint(async |c| r.execute(c, "create_tag", &tag("kept")).await)
        .await
        .unwrap();
    assert_eq!(kept.unwrap()["name"], "kept");
    drop(ctx);
    tx.commit().await.unwrap();
    let names: Vec<String> =
        sqlx::query_scalar("SELECT name FROM tags WHERE org_id = $1 ORDER BY name")
            .bind(w.a)
            .fetch_all(w.pool())
            .await
            .unwrap();
    assert_eq!(names, ["kept", "outer"]);
}

// ---------------------------------------------------------------------------------------------
// Documents

#[tokio::test]
async fn get_document_reads_own_documents_only() {
    let w = world().await;
    let mut c = w.ctx(w.a);
    let v = w
        .ok(&c, "get_document", json!({"document_id": w.doc_a}))
        .await;
    assert_eq!(v["name"], "Invoice A-1");
    assert_eq!(v["text"], "Invoice A-1\ntotal 12.50");
    assert_eq!(v["metadata"], json!({"source": "test"}));
    assert_eq!(v["auto_create_status"], "none");
    assert_eq!(v["truncated"], false);
    assert_eq!(v["tag_ids"], json!([]));

    // Defaults to the run's document.
    c.document_id = Some(w.doc_a);
    let v = w.ok(&c, "get_document", json!({})).await;
    assert_eq!(uuid(&v["document_id"]), w.doc_a);
    c.document_id = None;

    let m = invalid(w.call(&c, "get_document", json!({})).await);
    assert!(m.contains("document_id is required"), "{m}");
    let m = invalid(
        w.call(&c, "get_document", json!({"document_id": "doc-1"}))
            .await,
    );
    assert!(m.contains("document_id must be a UUID"), "{m}");
    let m = invalid(w.call(&c, "get_document", json!({"id": w.doc_a})).await);
    assert!(m.contains("id"), "{m}");

    // Another org's id reads exactly like a missing one.
    let other = not_found(
        w.call(&c, "get_document", json!({"document_id": w.doc_b}))
            .await,
    );
    let missing_id = Uuid::new_v4();
    let missing = not_found(
        w.call(&c, "get_document", json!({"document_id": missing_id}))
            .await,
    );
    assert_eq!(
        other.replace(&w.doc_b.to_string(), "ID"),
        missing.replace(&missing_id.to_string(), "ID")
    );
    assert!(!other.contains("Invoice B"), "{other}");
}

#[tokio::test]
async fn get_ocr_text_splits_pages_on_form_feed() {
    let w = world().await;
    let c = w.ctx(w.a);
    let d = add_doc(
        w.pool(),
        w.a,
        "scan",
        "page one\x0cpage two\x0cpage three",
        w.now,
    )
    .await;
    let v = w
        .ok(&c, "get_ocr_text", json!({"document_id": d, "page": 2}))
        .await;
    assert_eq!(v["text"], "page two");
    assert_eq!(v["page_count"], 3);
    assert_eq!(v["page"], 2);
    let v = w.ok(&c, "get_ocr_text", json!({"document_id": d})).await;
    assert_eq!(v["text"], "page one\x0cpage two\x0cpage three");
    assert_eq!(v["page_count"], 3);

    let m = invalid(
        w.call(&c, "get_ocr_text", json!({"document_id": d, "page": 4}))
            .await,
    );
    assert!(
        m.contains("page 4 does not exist") && m.contains("3 page"),
        "{m}"
    );
    invalid(
        w.call(&c, "get_ocr_text", json!({"document_id": d, "page": 0}))
            .await,
    );
    invalid(
        w.call(&c, "get_ocr_text", json!({"document_id": d, "page": "2"}))
            .await,
    );
    not_found(
        w.call(
            &c,
            "get_ocr_text",
            json!({"document_id": w.doc_b, "page": 1}),
        )
        .await,
    );
}

#[tokio::test]
async fn list_documents_filters_and_never_shows_other_orgs() {
    let w = world().await;
    let c = w.ctx(w.a);
    let tag = w
        .ok(
            &c,
            "create_tag",
            json!({"name": "paid", "color": "#00ff00"}),
        )
        .await;
    let tag_id = tag["tag_id"].clone();
    let receipt = add_doc(w.pool(), w.a, "Receipt March", "r", w.now).await;
    w.ok(
        &c,
        "update_document",
        json!({"document_id": receipt, "tag_ids": [tag_id]}),
    )
    .await;
    sqlx::query("UPDATE documents SET auto_create_status = 'failed' WHERE id = $1")
        .bind(w.doc_a)
        .execute(w.pool())
        .await
        .unwrap();

    let v = w.ok(&c, "list_documents", json!({})).await;
    assert_eq!(v["count"], 2);
    assert!(v["documents"][0].get("text").is_none());
    let ids: Vec<Uuid> = v["documents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| uuid(&d["document_id"]))
        .collect();
    assert!(!ids.contains(&w.doc_b));

    let v = w
        .ok(&c, "list_documents", json!({"name_search": "rECEIPT"}))
        .await;
    assert_eq!(v["count"], 1);
    assert_eq!(uuid(&v["documents"][0]["document_id"]), receipt);
    let v = w
        .ok(&c, "list_documents", json!({"tag_ids": [tag_id]}))
        .await;
    assert_eq!(v["count"], 1);
    let v = w
        .ok(&c, "list_documents", json!({"status": "failed"}))
        .await;
    assert_eq!(uuid(&v["documents"][0]["document_id"]), w.doc_a);
    assert_eq!(v["count"], 1);
    let v = w.ok(&c, "list_documents", json!({"limit": 1})).await;
    assert_eq!(v["count"], 1);
    // Another org's name matches nothing here.
    let v = w
        .ok(&c, "list_documents", json!({"name_search": "B-1"}))
        .await;
    assert_eq!(v["count"], 0);

    invalid(w.call(&c, "list_documents", json!({"limit": 101})).await);
    invalid(w.call(&c, "list_documents", json!({"limit": 0})).await);
    let m = invalid(
        w.call(&c, "list_documents", json!({"status": "done"}))
            .await,
    );
    assert!(m.contains("status"), "{m}");
    invalid(
        w.call(&c, "list_documents", json!({"tag_ids": ["x"]}))
            .await,
    );
}

#[tokio::test]
async fn update_document_sets_tags_merges_metadata_and_bumps_updated_at() {
    let w = world().await;
    let c = w.ctx(w.a);
    let t1 = w
        .ok(&c, "create_tag", json!({"name": "a", "color": "#111111"}))
        .await["tag_id"]
        .clone();
    let t2 = w
        .ok(&c, "create_tag", json!({"name": "b", "color": "#222222"}))
        .await["tag_id"]
        .clone();
    let (_, _, before) = w.doc_row(w.doc_a).await;
    let v = w
        .ok(
            &c,
            "update_document",
            json!({"document_id": w.doc_a, "tag_ids": [t1, t2, t1],
                   "metadata": {"vendor": "ACME", "source": null}}),
        )
        .await;
    assert_eq!(v["updated"], true);
    let (tags, meta, after) = w.doc_row(w.doc_a).await;
    assert_eq!(tags, vec![uuid(&t1), uuid(&t2)]);
    assert_eq!(meta, json!({"vendor": "ACME"}));
    assert!(
        after > before,
        "updated_at must move even with a frozen clock"
    );
    // Metadata alone leaves the tags.
    w.ok(
        &c,
        "update_document",
        json!({"document_id": w.doc_a, "metadata": {"n": 1}}),
    )
    .await;
    let (tags, meta, _) = w.doc_row(w.doc_a).await;
    assert_eq!(tags.len(), 2);
    assert_eq!(meta, json!({"vendor": "ACME", "n": 1}));

    let m = invalid(
        w.call(&c, "update_document", json!({"document_id": w.doc_a}))
            .await,
    );
    assert!(m.contains("nothing to update"), "{m}");
    invalid(
        w.call(
            &c,
            "update_document",
            json!({"document_id": w.doc_a, "metadata": [1]}),
        )
        .await,
    );
    invalid(
        w.call(
            &c,
            "update_document",
            json!({"document_id": w.doc_a, "tag_ids": ["nope"]}),
        )
        .await,
    );

    // Another org's tag cannot be attached; nothing changes.
    let cb = w.ctx(w.b);
    let tb = w
        .ok(
            &cb,
            "create_tag",
            json!({"name": "b-tag", "color": "#333333"}),
        )
        .await["tag_id"]
        .clone();
    let m = not_found(
        w.call(
            &c,
            "update_document",
            json!({"document_id": w.doc_a, "tag_ids": [tb]}),
        )
        .await,
    );
    assert!(m.contains("list_tags"), "{m}");
    assert_eq!(w.doc_row(w.doc_a).await.0.len(), 2);

    // Another org's document: not found, unchanged.
    let b_before = w.doc_row(w.doc_b).await;
    not_found(
        w.call(
            &c,
            "update_document",
            json!({"document_id": w.doc_b, "metadata": {"x": 1}}),
        )
        .await,
    );
    let b_after = w.doc_row(w.doc_b).await;
    assert_eq!(b_before, b_after);
}

#[tokio::test]
async fn delete_document_removes_own_document_only() {
    let w = world().await;
    let c = w.ctx(w.a);
    let m = invalid(w.call(&c, "delete_document", json!({})).await);
    assert!(m.contains("document_id"), "{m}");
    not_found(
        w.call(&c, "delete_document", json!({"document_id": w.doc_b}))
            .await,
    );
    assert_eq!(
        w.count("SELECT count(*) FROM documents WHERE org_id = $1", w.b)
            .await,
        1
    );
    let v = w
        .ok(&c, "delete_document", json!({"document_id": w.doc_a}))
        .await;
    assert_eq!(v["deleted"], true);
    assert_eq!(
        w.count("SELECT count(*) FROM documents WHERE org_id = $1", w.a)
            .await,
        0
    );
    not_found(
        w.call(&c, "delete_document", json!({"document_id": w.doc_a}))
            .await,
    );
}

#[tokio::test]
async fn nul_bytes_and_invalid_utf8_are_stored_safely() {
    let w = world().await;
    let c = w.ctx(w.a);
    let d = add_doc(w.pool(), w.a, "nul\0name", "a\0b\0c", w.now).await;
    let v = w.ok(&c, "get_document", json!({"document_id": d})).await;
    assert_eq!(v["text"], "abc");
    assert_eq!(v["name"], "nulname");
    assert_eq!(
        store::documents::text_from_bytes(b"ok\xff\x00end"),
        "ok\u{fffd}end"
    );
    // Model-supplied strings with NUL, in jsonb and text columns.
    w.ok(
        &c,
        "update_document",
        json!({"document_id": d, "metadata": {"k\u{0}ey": "v\u{0}al"}}),
    )
    .await;
    assert_eq!(w.doc_row(d).await.1["key"], "val");
    let t = w
        .ok(
            &c,
            "create_tag",
            json!({"name": "x\u{0}y", "color": "#abcdef"}),
        )
        .await;
    assert_eq!(t["name"], "xy");
}

#[tokio::test]
async fn a_5mb_document_returns_a_bounded_excerpt() {
    let w = world().await;
    let mut c = w.ctx(w.a);
    c.excerpt_chars = 4000;
    let big = "é".repeat(2_500_000) + "\x0c" + &"x".repeat(100);
    assert!(big.len() > 5_000_000);
    let d = add_doc(w.pool(), w.a, "big", &big, w.now).await;
    let v = w.ok(&c, "get_document", json!({"document_id": d})).await;
    assert_eq!(v["text"].as_str().unwrap().chars().count(), 4000);
    assert_eq!(v["truncated"], true);
    assert_eq!(v["text_chars"], 2_500_101);
    assert_eq!(v["page_count"], 2);
    let v = w
        .ok(&c, "get_ocr_text", json!({"document_id": d, "page": 1}))
        .await;
    assert_eq!(v["text"].as_str().unwrap().chars().count(), 4000);
    assert_eq!(v["truncated"], true);
    let v = w
        .ok(&c, "get_ocr_text", json!({"document_id": d, "page": 2}))
        .await;
    assert_eq!(v["text"].as_str().unwrap(), "x".repeat(100));
    assert_eq!(v["truncated"], false);
}

// ---------------------------------------------------------------------------------------------
// Tags

#[tokio::test]
async fn tags_create_idempotently_list_and_delete_per_org() {
    let w = world().await;
    let c = w.ctx(w.a);
    let cb = w.ctx(w.b);
    let v = w
        .ok(
            &c,
            "create_tag",
            json!({"name": "Invoice", "color": "#FF0000"}),
        )
        .await;
    assert_eq!(v["existing"], false);
    assert_eq!(v["color"], "#ff0000");
    let tag = uuid(&v["tag_id"]);
    let run: Option<Uuid> = sqlx::query_scalar("SELECT run_id FROM tags WHERE id = $1")
        .bind(tag)
        .fetch_one(w.pool())
        .await
        .unwrap();
    assert_eq!(run, c.run_id);
    let again = w
        .ok(
            &c,
            "create_tag",
            json!({"name": "invoice", "color": "#000000"}),
        )
        .await;
    assert_eq!(again["existing"], true);
    assert_eq!(uuid(&again["tag_id"]), tag);
    assert_eq!(
        w.count("SELECT count(*) FROM tags WHERE org_id = $1", w.a)
            .await,
        1
    );

    // The same name in another org is another tag.
    let vb = w
        .ok(
            &cb,
            "create_tag",
            json!({"name": "Invoice", "color": "#00ff00"}),
        )
        .await;
    assert_eq!(vb["existing"], false);
    let tag_b = uuid(&vb["tag_id"]);
    w.ok(
        &cb,
        "update_document",
        json!({"document_id": w.doc_b, "tag_ids": [tag_b]}),
    )
    .await;

    let m = invalid(
        w.call(&c, "create_tag", json!({"name": "x", "color": "red"}))
            .await,
    );
    assert!(m.contains("color"), "{m}");
    invalid(
        w.call(&c, "create_tag", json!({"name": "", "color": "#000000"}))
            .await,
    );
    invalid(w.call(&c, "create_tag", json!({"name": "x"})).await);

    w.ok(
        &c,
        "update_document",
        json!({"document_id": w.doc_a, "tag_ids": [tag]}),
    )
    .await;
    let l = w.ok(&c, "list_tags", json!({})).await;
    assert_eq!(l["count"], 1);
    assert_eq!(l["tags"][0]["document_count"], 1);
    invalid(w.call(&c, "list_tags", json!({"org_id": w.b})).await);

    // Another org's tag: not found; it and its document stay.
    not_found(w.call(&c, "delete_tag", json!({"tag_id": tag_b})).await);
    assert_eq!(w.doc_row(w.doc_b).await.0, vec![tag_b]);
    assert_eq!(
        w.count("SELECT count(*) FROM tags WHERE org_id = $1", w.b)
            .await,
        1
    );
    invalid(w.call(&c, "delete_tag", json!({"tag_id": "t"})).await);

    let (_, _, before) = w.doc_row(w.doc_a).await;
    let d = w.ok(&c, "delete_tag", json!({"tag_id": tag})).await;
    assert_eq!(d["documents_updated"], 1);
    let (tags, _, after) = w.doc_row(w.doc_a).await;
    assert!(tags.is_empty());
    assert!(after > before);
    assert_eq!(
        w.count("SELECT count(*) FROM tags WHERE org_id = $1", w.a)
            .await,
        0
    );
}

// ---------------------------------------------------------------------------------------------
// Schemas

#[tokio::test]
async fn create_get_and_list_schemas() {
    let w = world().await;
    let c = w.ctx(w.a);
    let v = w
        .ok(
            &c,
            "create_schema",
            json!({"name": "Invoice", "response_format": invoice_rf()}),
        )
        .await;
    let revid = v["schema_revid"].as_str().unwrap().to_string();
    assert!(revid.ends_with(":1"));
    assert_eq!(v["status"], "proposed");
    let (status, run): (String, Option<Uuid>) =
        sqlx::query_as("SELECT status, run_id FROM schemas WHERE org_id = $1")
            .bind(w.a)
            .fetch_one(w.pool())
            .await
            .unwrap();
    assert_eq!((status.as_str(), run), ("proposed", c.run_id));

    let g = w.ok(&c, "get_schema", json!({"schema_revid": revid})).await;
    assert_eq!(g["response_format"], invoice_rf());
    assert_eq!(g["name"], "Invoice");
    let l = w.ok(&c, "list_schemas", json!({})).await;
    assert_eq!(l["count"], 1);
    assert_eq!(l["schemas"][0]["fields"], json!(["number", "total"]));

    invalid(
        w.call(&c, "get_schema", json!({"schema_revid": "abc:1"}))
            .await,
    );
    invalid(w.call(&c, "get_schema", json!({})).await);
    // Another org's revid.
    let rb = w.schema(&w.ctx(w.b)).await;
    let m = not_found(w.call(&c, "get_schema", json!({"schema_revid": rb})).await);
    assert!(m.contains("list_schemas"), "{m}");
    let lb = w.ok(&c, "list_schemas", json!({})).await;
    assert_eq!(lb["count"], 1);
}

#[tokio::test]
async fn create_schema_reports_every_problem_at_once() {
    let w = world().await;
    let c = w.ctx(w.a);
    let bad = json!({"type": "json_schema", "json_schema": {
        "name": "has spaces", "strict": true, "extra": 1,
        "schema": {"type": "object",
                   "properties": {"total": {"type": "strin"},
                                  "lines": {"type": "array", "items": {"type": "object",
                                            "properties": {"amount": {"type": "number"}}}}},
                   "required": ["total"]}}});
    let m = invalid(
        w.call(
            &c,
            "create_schema",
            json!({"name": "x", "response_format": bad}),
        )
        .await,
    );
    for needle in [
        "json_schema.name must match",
        "json_schema.extra: unknown key",
        "json_schema.schema.properties.total.type: \"strin\" is not a JSON Schema type",
        "not valid Draft 7",
        "json_schema.schema: strict mode requires \"additionalProperties\": false",
        "missing: lines",
        "json_schema.schema.properties.lines.items: strict mode requires \"additionalProperties\"",
        "json_schema.schema.properties.lines.items: strict mode requires every property in \"required\" (missing: amount)",
    ] {
        assert!(m.contains(needle), "missing {needle:?} in: {m}");
    }
    assert!(m.contains("problem(s)"), "{m}");
    assert_eq!(
        w.count("SELECT count(*) FROM schemas WHERE org_id = $1", w.a)
            .await,
        0
    );

    let m = invalid(
        w.call(
            &c,
            "create_schema",
            json!({"name": "x", "response_format": {"type": "object", "properties": {}}}),
        )
        .await,
    );
    assert!(m.contains("bare JSON Schema"), "{m}");
    let m = invalid(
        w.call(
            &c,
            "create_schema",
            json!({"name": "x", "response_format": {"type": "json_schema", "json_schema": {
                "name": "n", "schema": {"type": "array", "items": {}}}}}),
        )
        .await,
    );
    assert!(m.contains("type must be \"object\""), "{m}");
    assert!(m.contains("properties must be a non-empty object"), "{m}");
    invalid(w.call(&c, "create_schema", json!({"name": "x"})).await);
}

/// The compact form a small model writes: `fields`, an object of field name → type.
#[tokio::test]
async fn create_schema_from_fields_builds_a_strict_schema_and_names_what_is_missing() {
    let w = world().await;
    let c = w.ctx(w.a);
    let r = w
        .ok(
            &c,
            "create_schema",
            json!({"name": "Receipt", "fields": {"merchant": "string", "total": "number",
                   "items": [{"description": "string", "price": "number"}]}}),
        )
        .await;
    assert!(
        r["completed"][0]
            .as_str()
            .unwrap()
            .contains("from `fields`"),
        "{r}"
    );
    let stored: Value = sqlx::query_scalar("SELECT response_format FROM schemas WHERE org_id = $1")
        .bind(w.a)
        .fetch_one(&w.db.pool)
        .await
        .unwrap();
    let schema = &stored["json_schema"]["schema"];
    assert_eq!(stored["json_schema"]["strict"], true);
    assert_eq!(schema["required"], json!(["items", "merchant", "total"]));
    assert_eq!(
        schema["properties"]["items"]["items"]["additionalProperties"],
        false
    );

    // Neither fields nor response_format: the error says what to send.
    let m = invalid(w.call(&c, "create_schema", json!({"name": "x"})).await);
    assert!(m.contains("no fields: give `fields`"), "{m}");
    // A bare "json_schema" (what a 0.5B model sent): the error says what to send instead.
    let m = invalid(
        w.call(
            &c,
            "create_schema",
            json!({"name": "x", "response_format": "json_schema"}),
        )
        .await,
    );
    assert!(
        m.contains("response_format must be an object") && m.contains("simpler: give `fields`"),
        "{m}"
    );
    // With fields, a response_format that is not a schema (the 0.5B model copied the
    // description into it) is ignored, and the result says so.
    let r = w
        .ok(
            &c,
            "create_schema",
            json!({"name": "Y", "fields": {"total": "number"},
                   "response_format": "OpenAI's structured-output shape"}),
        )
        .await;
    assert!(
        r["completed"]
            .to_string()
            .contains("response_format was ignored"),
        "{r}"
    );
    // Unknown arguments: the error lists the arguments there are.
    let m = invalid(
        w.call(
            &c,
            "create_schema",
            json!({"name": "x", "fields": {"a": "string"}, "schema_revid": "1"}),
        )
        .await,
    );
    assert!(m.contains("the arguments are"), "{m}");
    // Fields that are not a field map are explained with the path.
    let m = invalid(
        w.call(
            &c,
            "create_schema",
            json!({"name": "x", "fields": {"a": 3}}),
        )
        .await,
    );
    assert!(m.contains("fields.a"), "{m}");
}

#[tokio::test]
async fn validate_schema_checks_without_saving() {
    let w = world().await;
    let c = w.ctx(w.a);
    let v = w
        .ok(&c, "validate_schema", json!({"schema": invoice_rf()}))
        .await;
    assert_eq!(v, json!({"valid": true, "errors": []}));
    let v = w
        .ok(
            &c,
            "validate_schema",
            json!({"schema": {"type": "json_schema", "json_schema": {"schema": {
                "type": "object", "properties": {"a": {"type": "string"}}}}}}),
        )
        .await;
    assert_eq!(v["valid"], false);
    assert!(
        v["errors"][0]
            .as_str()
            .unwrap()
            .contains("json_schema.name is required")
    );
    invalid(w.call(&c, "validate_schema", json!({})).await);
    invalid(w.call(&c, "validate_schema", json!({"schema": "x"})).await);
    assert_eq!(
        w.count("SELECT count(*) FROM schemas WHERE org_id = $1", w.a)
            .await,
        0
    );
}

#[tokio::test]
async fn update_schema_writes_a_new_version() {
    let w = world().await;
    let c = w.ctx(w.a);
    let revid = w.schema(&c).await;
    let id = revid.split(':').next().unwrap().to_string();
    let mut rf2 = invoice_rf();
    rf2["json_schema"]["schema"]["properties"]["currency"] = json!({"type": ["string", "null"]});
    rf2["json_schema"]["schema"]["required"] = json!(["number", "total", "currency"]);
    let v = w
        .ok(
            &c,
            "update_schema",
            json!({"schema_id": id, "response_format": rf2}),
        )
        .await;
    assert_eq!(v["version"], 2);
    assert_eq!(v["schema_revid"], format!("{id}:2"));
    let v1 = w.ok(&c, "get_schema", json!({"schema_revid": revid})).await;
    assert_eq!(v1["response_format"], invoice_rf());
    let v2 = w
        .ok(&c, "get_schema", json!({"schema_revid": format!("{id}:2")}))
        .await;
    assert_eq!(v2["response_format"], rf2);
    assert_eq!(v2["status"], "proposed");
    let latest = w.ok(&c, "get_schema", json!({"schema_revid": id})).await;
    assert_eq!(latest["version"], 2);
    let l = w.ok(&c, "list_schemas", json!({})).await;
    assert_eq!(l["schemas"][0]["version"], 2);
    // The same format again changes nothing.
    let same = w
        .ok(
            &c,
            "update_schema",
            json!({"schema_id": id, "response_format": rf2}),
        )
        .await;
    assert_eq!(same["unchanged"], true);

    let mut bad = rf2.clone();
    bad["json_schema"]["schema"]["additionalProperties"] = json!(true);
    let m = invalid(
        w.call(
            &c,
            "update_schema",
            json!({"schema_id": id, "response_format": bad}),
        )
        .await,
    );
    assert!(m.contains("additionalProperties"), "{m}");
    assert_eq!(
        w.count("SELECT count(*) FROM schemas WHERE org_id = $1", w.a)
            .await,
        2
    );
    invalid(
        w.call(
            &c,
            "update_schema",
            json!({"schema_id": "s", "response_format": rf2}),
        )
        .await,
    );

    let cb = w.ctx(w.b);
    let rb = w.schema(&cb).await;
    let idb = rb.split(':').next().unwrap();
    not_found(
        w.call(
            &c,
            "update_schema",
            json!({"schema_id": idb, "response_format": rf2}),
        )
        .await,
    );
    let versions: Vec<i32> = sqlx::query_scalar("SELECT version FROM schemas WHERE org_id = $1")
        .bind(w.b)
        .fetch_all(w.pool())
        .await
        .unwrap();
    assert_eq!(versions, vec![1]);
}

#[tokio::test]
async fn delete_schema_refuses_while_prompts_use_it() {
    let w = world().await;
    let c = w.ctx(w.a);
    let revid = w.schema(&c).await;
    let id = revid.split(':').next().unwrap().to_string();
    let p = w.prompt(&c, &revid, "Extract.").await;
    let m = conflict(w.call(&c, "delete_schema", json!({"schema_id": id})).await);
    assert!(m.contains(&p), "{m}");
    let pid = p.split(':').next().unwrap();
    w.ok(&c, "delete_prompt", json!({"prompt_id": pid})).await;
    w.ok(
        &c,
        "update_schema",
        json!({"schema_id": id, "response_format": {
        "type": "json_schema", "json_schema": {"name": "n", "schema": {
            "type": "object", "properties": {"a": {"type": "string"}}}}}}),
    )
    .await;
    let v = w.ok(&c, "delete_schema", json!({"schema_id": id})).await;
    assert_eq!(v["versions_deleted"], 2);
    assert_eq!(
        w.count("SELECT count(*) FROM schemas WHERE org_id = $1", w.a)
            .await,
        0
    );

    invalid(w.call(&c, "delete_schema", json!({"schema_id": 5})).await);
    let rb = w.schema(&w.ctx(w.b)).await;
    let idb = rb.split(':').next().unwrap();
    not_found(w.call(&c, "delete_schema", json!({"schema_id": idb})).await);
    assert_eq!(
        w.count("SELECT count(*) FROM schemas WHERE org_id = $1", w.b)
            .await,
        1
    );
}

// ---------------------------------------------------------------------------------------------
// Prompts

#[tokio::test]
async fn prompts_create_get_list_update_delete() {
    let w = world().await;
    let c = w.ctx(w.a);
    let schema = w.schema(&c).await;
    let tag = w
        .ok(&c, "create_tag", json!({"name": "inv", "color": "#123456"}))
        .await["tag_id"]
        .clone();
    let v = w
        .ok(
            &c,
            "create_prompt",
            json!({"name": "P", "content": "Extract the invoice.", "schema_revid": schema,
                   "model": "gpt-x", "tag_ids": [tag]}),
        )
        .await;
    let revid = v["prompt_revid"].as_str().unwrap().to_string();
    let id = revid.split(':').next().unwrap().to_string();
    assert!(revid.ends_with(":1"));
    assert_eq!(v["status"], "proposed");
    let g = w.ok(&c, "get_prompt", json!({"prompt_revid": revid})).await;
    assert_eq!(g["content"], "Extract the invoice.");
    assert_eq!(g["schema_revid"], schema);
    assert_eq!(g["model"], "gpt-x");
    assert_eq!(g["tag_ids"], json!([tag]));
    let run: Option<Uuid> = sqlx::query_scalar("SELECT run_id FROM prompts WHERE org_id = $1")
        .bind(w.a)
        .fetch_one(w.pool())
        .await
        .unwrap();
    assert_eq!(run, c.run_id);

    let u = w
        .ok(
            &c,
            "update_prompt",
            json!({"prompt_id": id, "content": "Extract better."}),
        )
        .await;
    assert_eq!(u["version"], 2);
    let g2 = w
        .ok(&c, "get_prompt", json!({"prompt_revid": format!("{id}:2")}))
        .await;
    assert_eq!(g2["content"], "Extract better.");
    assert_eq!(g2["model"], "gpt-x");
    assert_eq!(g2["tag_ids"], json!([tag]));
    let g1 = w.ok(&c, "get_prompt", json!({"prompt_revid": revid})).await;
    assert_eq!(g1["content"], "Extract the invoice.");
    let l = w.ok(&c, "list_prompts", json!({})).await;
    assert_eq!(l["count"], 1);
    assert_eq!(l["prompts"][0]["version"], 2);

    // Invalid input.
    let m = invalid(w.call(&c, "update_prompt", json!({"prompt_id": id})).await);
    assert!(m.contains("nothing to update"), "{m}");
    invalid(
        w.call(
            &c,
            "create_prompt",
            json!({"name": "P", "content": "x", "schema_revid": "nope"}),
        )
        .await,
    );
    invalid(
        w.call(
            &c,
            "create_prompt",
            json!({"name": "P", "content": "  ", "schema_revid": schema}),
        )
        .await,
    );
    invalid(
        w.call(&c, "create_prompt", json!({"name": "P", "content": "x"}))
            .await,
    );
    invalid(
        w.call(&c, "get_prompt", json!({"prompt_revid": "1:2:3"}))
            .await,
    );

    // Another org's schema and prompt.
    let cb = w.ctx(w.b);
    let sb = w.schema(&cb).await;
    let pb = w.prompt(&cb, &sb, "B's prompt").await;
    let pb_id = pb.split(':').next().unwrap();
    not_found(
        w.call(
            &c,
            "create_prompt",
            json!({"name": "P", "content": "x", "schema_revid": sb}),
        )
        .await,
    );
    not_found(
        w.call(
            &c,
            "update_prompt",
            json!({"prompt_id": id, "schema_revid": sb}),
        )
        .await,
    );
    not_found(w.call(&c, "get_prompt", json!({"prompt_revid": pb})).await);
    not_found(
        w.call(
            &c,
            "update_prompt",
            json!({"prompt_id": pb_id, "content": "hijack"}),
        )
        .await,
    );
    not_found(
        w.call(&c, "delete_prompt", json!({"prompt_id": pb_id}))
            .await,
    );
    let b_content: Vec<String> =
        sqlx::query_scalar("SELECT content FROM prompts WHERE org_id = $1")
            .bind(w.b)
            .fetch_all(w.pool())
            .await
            .unwrap();
    assert_eq!(b_content, vec!["B's prompt".to_string()]);

    let d = w.ok(&c, "delete_prompt", json!({"prompt_id": id})).await;
    assert_eq!(d["versions_deleted"], 2);
    assert_eq!(
        w.count("SELECT count(*) FROM prompts WHERE org_id = $1", w.a)
            .await,
        0
    );
    invalid(w.call(&c, "delete_prompt", json!({"prompt_id": "p"})).await);
}

// ---------------------------------------------------------------------------------------------
// Extraction

fn fenced_answer(req: &CompletionRequest) -> Result<CompletionResponse, LlmError> {
    Ok(CompletionResponse {
        message: Message::text(
            Role::Assistant,
            "```json\n{\"number\": \"A-1\", \"total\": 12.5}\n```",
        ),
        usage: Usage {
            input_tokens: 50,
            output_tokens: 10,
        },
        finish: FinishReason::EndTurn,
        model: req.model.clone(),
    })
}

#[tokio::test]
async fn run_extraction_calls_the_model_and_stores_a_proposed_result() {
    let w = world().await;
    let provider = Arc::new(ScriptedProvider::new(vec![Turn::Dynamic(fenced_answer)]));
    let mut c = w.ctx(w.a);
    c.provider = provider.clone();
    c.document_id = Some(w.doc_a);
    c.excerpt_chars = 11;
    let schema = w.schema(&c).await;
    // An older prompt of another run, then two of this run: the latest of this run is used.
    let other_run = Ctx {
        run_id: Some(Uuid::new_v4()),
        ..c.clone()
    };
    w.prompt(&other_run, &schema, "Other run.").await;
    w.prompt(&c, &schema, "First.").await;
    let p = w.prompt(&c, &schema, "Extract number and total.").await;

    let v = w.ok(&c, "run_extraction", json!({})).await;
    assert_eq!(v["prompt_revid"], p);
    assert_eq!(v["result"], json!({"number": "A-1", "total": 12.5}));
    assert_eq!(v["status"], "proposed");
    assert_eq!(v["input_truncated"], true);
    assert_eq!(v["usage"]["input_tokens"], 50);
    provider.assert_complete();
    let req = provider.requests.lock().unwrap()[0].clone();
    assert_eq!(req.model, "test-model");
    assert_eq!(req.max_tokens, Some(2000));
    assert_eq!(req.tool_choice, ToolChoice::None);
    assert!(req.tools.is_empty());
    assert_eq!(req.response_format, Some(invoice_rf()));
    assert_eq!(req.messages[0].role, Role::System);
    assert_eq!(req.messages[0].joined_text(), "Extract number and total.");
    assert_eq!(req.messages[1].role, Role::User);
    assert_eq!(req.messages[1].joined_text(), "Invoice A-1");

    let (status, run, result): (String, Option<Uuid>, Value) =
        sqlx::query_as("SELECT status, run_id, result FROM extractions WHERE org_id = $1")
            .bind(w.a)
            .fetch_one(w.pool())
            .await
            .unwrap();
    assert_eq!((status.as_str(), run), ("proposed", c.run_id));
    assert_eq!(result["total"], 12.5);

    let g = w.ok(&c, "get_extraction_result", json!({})).await;
    assert_eq!(g["extraction"]["extraction_id"], v["extraction_id"]);
    assert_eq!(g["extraction"]["result"]["number"], "A-1");

    // An explicit prompt naming a model: run_extraction still uses the configured extraction
    // model (the agent cannot choose it).
    let provider2 = Arc::new(ScriptedProvider::new(vec![Turn::text(
        "{\"number\": \"A-1\", \"total\": 13}",
    )]));
    c.provider = provider2.clone();
    let pid = p.split(':').next().unwrap();
    let p2 = w
        .ok(
            &c,
            "update_prompt",
            json!({"prompt_id": pid, "model": "special"}),
        )
        .await["prompt_revid"]
        .clone();
    let v2 = w
        .ok(
            &c,
            "run_extraction",
            json!({"prompt_revid": p2, "document_id": w.doc_a}),
        )
        .await;
    assert_eq!(v2["result"]["total"], 13);
    assert_eq!(provider2.requests.lock().unwrap()[0].model, "test-model");
    let g = w
        .ok(&c, "get_extraction_result", json!({"document_id": w.doc_a}))
        .await;
    assert_eq!(g["extraction"]["extraction_id"], v2["extraction_id"]);
}

#[tokio::test]
async fn run_extraction_rejects_bad_results_and_foreign_ids() {
    let w = world().await;
    let mut c = w.ctx(w.a);
    c.document_id = Some(w.doc_a);
    let schema = w.schema(&c).await;

    // No prompt in this run yet.
    let m = invalid(w.call(&c, "run_extraction", json!({})).await);
    assert!(m.contains("create_prompt"), "{m}");
    let p = w.prompt(&c, &schema, "Extract.").await;

    // A result that breaks the schema: Invalid listing the problems, nothing stored.
    let provider = Arc::new(ScriptedProvider::new(vec![
        Turn::text("{\"number\": 7, \"total\": \"12,50\", \"extra\": true}"),
        Turn::text("I could not find anything."),
        Turn::Error {
            message: "HTTP 500".into(),
            retryable: true,
        },
    ]));
    c.provider = provider.clone();
    let m = invalid(
        w.call(&c, "run_extraction", json!({"prompt_revid": p}))
            .await,
    );
    assert!(m.contains("/number") && m.contains("/total"), "{m}");
    assert!(m.contains("extra"), "{m}");
    assert!(m.contains("nothing was stored"), "{m}");
    let m = invalid(
        w.call(&c, "run_extraction", json!({"prompt_revid": p}))
            .await,
    );
    assert!(m.contains("did not answer with JSON"), "{m}");
    match w
        .call(&c, "run_extraction", json!({"prompt_revid": p}))
        .await
    {
        Err(CallError::Tool(ToolError::Provider(m))) => assert!(m.contains("HTTP 500"), "{m}"),
        other => panic!("expected Provider, got {other:?}"),
    }
    provider.assert_complete();
    assert_eq!(
        w.count("SELECT count(*) FROM extractions WHERE org_id = $1", w.a)
            .await,
        0
    );

    // Another org's document or prompt: not found, and the model is never called.
    let cb = w.ctx(w.b);
    let sb = w.schema(&cb).await;
    let pb = w.prompt(&cb, &sb, "B").await;
    not_found(
        w.call(
            &c,
            "run_extraction",
            json!({"prompt_revid": p, "document_id": w.doc_b}),
        )
        .await,
    );
    not_found(
        w.call(&c, "run_extraction", json!({"prompt_revid": pb}))
            .await,
    );
    invalid(
        w.call(&c, "run_extraction", json!({"prompt_revid": "x:y"}))
            .await,
    );
    assert_eq!(provider.calls(), 3);
    assert_eq!(
        w.count(
            "SELECT count(*) FROM extractions WHERE $1::uuid IS NOT NULL",
            w.a
        )
        .await,
        0
    );
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

#[tokio::test]
async fn get_extraction_result_per_document() {
    let w = world().await;
    let c = w.ctx(w.a);
    let v = w
        .ok(&c, "get_extraction_result", json!({"document_id": w.doc_a}))
        .await;
    assert_eq!(v["extraction"], Value::Null);
    extract(&w, w.b, w.doc_b, "{\"number\": \"B\", \"total\": 1}").await;
    not_found(
        w.call(&c, "get_extraction_result", json!({"document_id": w.doc_b}))
            .await,
    );
    invalid(w.call(&c, "get_extraction_result", json!({})).await);
    invalid(
        w.call(&c, "get_extraction_result", json!({"document_id": 12}))
            .await,
    );
}

#[tokio::test]
async fn update_extraction_field_edits_and_revalidates() {
    let w = world().await;
    let mut c = w.ctx(w.a);
    c.document_id = Some(w.doc_a);
    let (id, _) = extract(&w, w.a, w.doc_a, "{\"number\": \"A-1\", \"total\": 1}").await;
    let v = w
        .ok(
            &c,
            "update_extraction_field",
            json!({"path": "/total", "value": 12.5}),
        )
        .await;
    assert_eq!(v["result"], json!({"number": "A-1", "total": 12.5}));
    let v = w
        .ok(
            &c,
            "update_extraction_field",
            json!({"path": "number", "value": "A-2", "extraction_id": id}),
        )
        .await;
    assert_eq!(v["result"]["number"], "A-2");
    let stored: Value = sqlx::query_scalar("SELECT result FROM extractions WHERE id = $1")
        .bind(id)
        .fetch_one(w.pool())
        .await
        .unwrap();
    assert_eq!(stored, json!({"number": "A-2", "total": 12.5}));

    let m = invalid(
        w.call(
            &c,
            "update_extraction_field",
            json!({"path": "total", "value": "lots"}),
        )
        .await,
    );
    assert!(
        m.contains("/total") && m.contains("nothing was changed"),
        "{m}"
    );
    invalid(
        w.call(
            &c,
            "update_extraction_field",
            json!({"path": "vendor", "value": "X"}),
        )
        .await,
    );
    invalid(
        w.call(
            &c,
            "update_extraction_field",
            json!({"path": "a..b", "value": 1}),
        )
        .await,
    );
    invalid(
        w.call(&c, "update_extraction_field", json!({"path": "total"}))
            .await,
    );
    let unchanged: Value = sqlx::query_scalar("SELECT result FROM extractions WHERE id = $1")
        .bind(id)
        .fetch_one(w.pool())
        .await
        .unwrap();
    assert_eq!(unchanged, stored);

    // Another org's extraction: not found, unchanged.
    let (idb, _) = extract(&w, w.b, w.doc_b, "{\"number\": \"B\", \"total\": 1}").await;
    not_found(
        w.call(
            &c,
            "update_extraction_field",
            json!({"path": "total", "value": 2, "extraction_id": idb}),
        )
        .await,
    );
    not_found(
        w.call(
            &c,
            "update_extraction_field",
            json!({"path": "total", "value": 2, "document_id": w.doc_b}),
        )
        .await,
    );
    let b: Value = sqlx::query_scalar("SELECT result FROM extractions WHERE id = $1")
        .bind(idb)
        .fetch_one(w.pool())
        .await
        .unwrap();
    assert_eq!(b, json!({"number": "B", "total": 1}));

    // A person accepted it: the agent cannot edit it.
    sqlx::query("UPDATE extractions SET status = 'accepted' WHERE id = $1")
        .bind(id)
        .execute(w.pool())
        .await
        .unwrap();
    conflict(
        w.call(
            &c,
            "update_extraction_field",
            json!({"path": "total", "value": 3}),
        )
        .await,
    );
}

// ---------------------------------------------------------------------------------------------
// Suggestions

#[tokio::test]
async fn create_suggestion_is_unique_per_night_and_capped() {
    let w = world().await;
    let mut c = w.ctx(w.a);
    let night = NaiveDate::from_ymd_opt(2025, 3, 9).unwrap();
    c.night = Some(night);
    c.max_suggestions = Some(2);
    let v = w
        .ok(
            &c,
            "create_suggestion",
            json!({"kind": "review_proposal", "title": "Review", "message": "Please review.",
                   "document_id": w.doc_a,
                   "proposed_action": {"tool": "update_document",
                                       "args": {"document_id": w.doc_a, "metadata": {"r": 1}}}}),
        )
        .await;
    assert_eq!(v["duplicate"], false);
    let id = uuid(&v["suggestion_id"]);
    let (subject, n, status, run, action): (String, NaiveDate, String, Option<Uuid>, Value) =
        sqlx::query_as(
            "SELECT subject, night, status, run_id, proposed_action FROM suggestions WHERE id = $1",
        )
        .bind(id)
        .fetch_one(w.pool())
        .await
        .unwrap();
    assert_eq!(subject, w.doc_a.to_string());
    assert_eq!(n, night);
    assert_eq!(status, "pending");
    assert_eq!(run, c.run_id);
    assert_eq!(action["tool"], "update_document");

    let dup = w
        .ok(
            &c,
            "create_suggestion",
            json!({"kind": "review_proposal", "title": "Again", "message": "Again.",
                   "document_id": w.doc_a}),
        )
        .await;
    assert_eq!(
        dup,
        json!({"duplicate": true, "suggestion_id": id, "night": night})
    );
    w.ok(
        &c,
        "create_suggestion",
        json!({"kind": "other", "title": "Org-wide", "message": "Something."}),
    )
    .await;
    let m = conflict(
        w.call(
            &c,
            "create_suggestion",
            json!({"kind": "tag_documents", "title": "Tag", "message": "Tag them."}),
        )
        .await,
    );
    assert!(m.contains("cap reached"), "{m}");
    assert_eq!(
        w.count("SELECT count(*) FROM suggestions WHERE org_id = $1", w.a)
            .await,
        2
    );
    // Another night has its own cap; no night means the clock's date.
    c.night = None;
    let v = w
        .ok(
            &c,
            "create_suggestion",
            json!({"kind": "tag_documents", "title": "Tag", "message": "Tag them."}),
        )
        .await;
    assert_eq!(v["night"], "2025-03-10");

    let m = invalid(
        w.call(
            &c,
            "create_suggestion",
            json!({"kind": "nag", "title": "t", "message": "m"}),
        )
        .await,
    );
    assert!(m.contains("kind"), "{m}");
    invalid(
        w.call(
            &c,
            "create_suggestion",
            json!({"kind": "other", "title": "t"}),
        )
        .await,
    );
    invalid(
        w.call(
            &c,
            "create_suggestion",
            json!({"kind": "other", "title": "t", "message": "m",
                   "proposed_action": {"tool": "rm_rf"}}),
        )
        .await,
    );
    not_found(
        w.call(
            &c,
            "create_suggestion",
            json!({"kind": "retry_failed", "title": "t", "message": "m", "document_id": w.doc_b}),
        )
        .await,
    );
    assert_eq!(
        w.count("SELECT count(*) FROM suggestions WHERE org_id = $1", w.b)
            .await,
        0
    );
    assert_eq!(
        w.count("SELECT count(*) FROM suggestions WHERE org_id = $1", w.a)
            .await,
        3
    );
}

#[tokio::test]
async fn org_overview_reports_the_orgs_own_signals() {
    let w = world().await;
    let c = w.ctx(w.a);
    let pool = w.pool();
    let set = |sql: &'static str, id: Uuid| async move {
        sqlx::query(sql).bind(id).execute(pool).await.unwrap();
    };
    let old = add_doc(pool, w.a, "old proposal", "t", w.now - Duration::days(5)).await;
    set(
        "UPDATE documents SET auto_create_status = 'proposed' WHERE id = $1",
        old,
    )
    .await;
    let recent = add_doc(pool, w.a, "recent proposal", "t", w.now - Duration::days(1)).await;
    set(
        "UPDATE documents SET auto_create_status = 'proposed' WHERE id = $1",
        recent,
    )
    .await;
    let failed = add_doc(pool, w.a, "broken", "t", w.now).await;
    set(
        "UPDATE documents SET auto_create_status = 'failed', auto_create_error = 'model timeout' \
         WHERE id = $1",
        failed,
    )
    .await;
    let tag = w
        .ok(&c, "create_tag", json!({"name": "t", "color": "#000000"}))
        .await["tag_id"]
        .clone();
    for d in [old, recent, failed] {
        w.ok(
            &c,
            "update_document",
            json!({"document_id": d, "tag_ids": [tag]}),
        )
        .await;
    }
    // Tagging moved updated_at; put the old proposal back in the past.
    sqlx::query("UPDATE documents SET updated_at = $2 WHERE id = $1")
        .bind(old)
        .bind(w.now - Duration::days(5))
        .execute(pool)
        .await
        .unwrap();
    // doc_a stays untagged; its extraction is made with schema v1, then v2 appears.
    let (ext, schema) = extract(&w, w.a, w.doc_a, "{\"number\": \"A\", \"total\": 1}").await;
    let sid = schema.split(':').next().unwrap();
    let mut rf2 = invoice_rf();
    rf2["json_schema"]["name"] = json!("invoice_v2");
    w.ok(
        &c,
        "update_schema",
        json!({"schema_id": sid, "response_format": rf2}),
    )
    .await;
    // Org B has signals of its own that must not show.
    let b_failed = add_doc(pool, w.b, "B broken", "t", w.now - Duration::days(9)).await;
    set(
        "UPDATE documents SET auto_create_status = 'failed' WHERE id = $1",
        b_failed,
    )
    .await;

    let v = w.ok(&c, "org_overview", json!({})).await;
    let s = &v["signals"];
    assert_eq!(v["documents"]["total"], 4);
    assert_eq!(
        v["documents"]["by_status"],
        json!({"none": 1, "proposed": 2, "failed": 1})
    );
    let waiting = s["proposals_waiting_over_3_days"].as_array().unwrap();
    assert_eq!(waiting.len(), 1, "{s}");
    assert_eq!(uuid(&waiting[0]["id"]), old);
    assert_eq!(waiting[0]["age_days"], 5);
    let failed_list = s["failed_auto_creates"].as_array().unwrap();
    assert_eq!(failed_list.len(), 1, "{s}");
    assert_eq!(uuid(&failed_list[0]["id"]), failed);
    assert_eq!(failed_list[0]["error"], "model timeout");
    assert_eq!(s["untagged_documents_total"], 1);
    assert_eq!(uuid(&s["untagged_documents"][0]["id"]), w.doc_a);
    let outdated = s["extractions_on_old_schema_version"].as_array().unwrap();
    assert_eq!(outdated.len(), 1, "{s}");
    assert_eq!(uuid(&outdated[0]["id"]), ext);
    assert_eq!(outdated[0]["schema_version"], 1);
    assert_eq!(outdated[0]["latest_schema_version"], 2);
    assert_eq!(v["tags"], 1);
    assert!(!v.to_string().contains(&b_failed.to_string()));
    assert!(!v.to_string().contains(&w.doc_b.to_string()));

    invalid(w.call(&c, "org_overview", json!({"org_id": w.b})).await);
    // Org B sees its own failure and nothing of A's.
    let vb = w.ok(&w.ctx(w.b), "org_overview", json!({})).await;
    assert_eq!(vb["documents"]["total"], 2);
    assert_eq!(
        vb["signals"]["failed_auto_creates"][0]["id"],
        json!(b_failed)
    );
    assert_eq!(vb["signals"]["untagged_documents_total"], 0);
    assert_eq!(vb["signals"]["untagged_documents"], json!([]));
}

// ---------------------------------------------------------------------------------------------
// Help

#[tokio::test]
async fn help_examples_are_valid_input() {
    let w = world().await;
    let c = w.ctx(w.a);
    let h = w.ok(&c, "help_schemas", json!({})).await;
    let example = h["example_response_format"].clone();
    assert_eq!(
        agentd::tools::schemas::validate_response_format(&example),
        Ok(())
    );
    assert!(
        h["guide"]
            .as_str()
            .unwrap()
            .contains("additionalProperties")
    );
    let s = w
        .ok(
            &c,
            "create_schema",
            json!({"name": "Invoice", "response_format": example}),
        )
        .await;
    let p = w.ok(&c, "help_prompts", json!({})).await;
    let content = p["example_content"].as_str().unwrap();
    assert!(p["guide"].as_str().unwrap().contains("schema_revid"));
    w.ok(
        &c,
        "create_prompt",
        json!({"name": "Invoice", "content": content, "schema_revid": s["schema_revid"]}),
    )
    .await;
    invalid(w.call(&c, "help_schemas", json!({"topic": "x"})).await);
    invalid(w.call(&c, "help_prompts", json!({"topic": "x"})).await);
}

// ---------------------------------------------------------------------------------------------
// Snapshots

#[tokio::test]
async fn snapshots_capture_the_subject_and_hide_other_orgs() {
    let w = world().await;
    let c = w.ctx(w.a);
    let tag = w
        .ok(&c, "create_tag", json!({"name": "t", "color": "#000000"}))
        .await["tag_id"]
        .clone();
    let cb = w.ctx(w.b);
    let tag_b = w
        .ok(&cb, "create_tag", json!({"name": "tb", "color": "#000000"}))
        .await["tag_id"]
        .clone();

    // update_document: changes to the document change the snapshot.
    let args = json!({"document_id": w.doc_a, "metadata": {"x": 1}});
    let s1 = w.snapshot(&c, "update_document", args.clone()).await;
    assert_eq!(s1["exists"], true);
    assert_eq!(s1["metadata"], json!({"source": "test"}));
    assert_eq!(s1, w.snapshot(&c, "update_document", args.clone()).await);
    w.ok(
        &c,
        "update_document",
        json!({"document_id": w.doc_a, "tag_ids": [tag]}),
    )
    .await;
    let s2 = w.snapshot(&c, "update_document", args.clone()).await;
    assert_ne!(s1, s2);
    assert_ne!(s1["updated_at"], s2["updated_at"]);
    let foreign = json!({"document_id": w.doc_b});
    assert_eq!(
        w.snapshot(&c, "update_document", foreign.clone()).await["exists"],
        false
    );
    assert_eq!(
        w.snapshot(&c, "delete_document", foreign.clone()).await["exists"],
        false
    );
    assert_eq!(
        w.snapshot(&c, "delete_document", json!({"document_id": w.doc_a}))
            .await["exists"],
        true
    );

    // Tags.
    let s = w
        .snapshot(&c, "create_tag", json!({"name": "new", "color": "#000000"}))
        .await;
    assert_eq!(s["exists"], false);
    let s = w
        .snapshot(&c, "create_tag", json!({"name": "T", "color": "#000000"}))
        .await;
    assert_eq!(s["exists"], true);
    assert_eq!(
        w.snapshot(&c, "create_tag", json!({"name": "tb", "color": "#000000"}))
            .await["exists"],
        false
    );
    let s = w.snapshot(&c, "delete_tag", json!({"tag_id": tag})).await;
    assert_eq!(s["document_ids"], json!([w.doc_a]));
    assert_eq!(
        w.snapshot(&c, "delete_tag", json!({"tag_id": tag_b})).await["exists"],
        false
    );

    // Schemas and prompts.
    let schema = w.schema(&c).await;
    let sid = schema.split(':').next().unwrap().to_string();
    let p = w.prompt(&c, &schema, "Extract.").await;
    let pid = p.split(':').next().unwrap().to_string();
    let sb = w.schema(&cb).await;
    let sbid = sb.split(':').next().unwrap().to_string();
    let pb = w.prompt(&cb, &sb, "B").await;
    let pbid = pb.split(':').next().unwrap().to_string();
    let s = w
        .snapshot(
            &c,
            "update_schema",
            json!({"schema_id": sid, "response_format": invoice_rf()}),
        )
        .await;
    assert_eq!(s["latest_version"], 1);
    assert_eq!(
        w.snapshot(
            &c,
            "update_schema",
            json!({"schema_id": sbid, "response_format": {}})
        )
        .await["exists"],
        false
    );
    let s = w
        .snapshot(&c, "delete_schema", json!({"schema_id": sid}))
        .await;
    assert_eq!(s["dependent_prompts"], json!([p]));
    assert_eq!(
        w.snapshot(&c, "delete_schema", json!({"schema_id": sbid}))
            .await["exists"],
        false
    );
    let s = w
        .snapshot(
            &c,
            "update_prompt",
            json!({"prompt_id": pid, "content": "x"}),
        )
        .await;
    assert_eq!(s["latest"]["prompt_revid"], p);
    assert_eq!(
        w.snapshot(
            &c,
            "update_prompt",
            json!({"prompt_id": pbid, "content": "x"})
        )
        .await["exists"],
        false
    );
    assert_eq!(
        w.snapshot(&c, "delete_prompt", json!({"prompt_id": pid}))
            .await["exists"],
        true
    );
    assert_eq!(
        w.snapshot(&c, "delete_prompt", json!({"prompt_id": pbid}))
            .await["exists"],
        false
    );

    // run_extraction: the document text hash and the prompt revid.
    let args = json!({"prompt_revid": p, "document_id": w.doc_a});
    let s = w.snapshot(&c, "run_extraction", args.clone()).await;
    assert_eq!(s["prompt"]["prompt_revid"], p);
    assert_eq!(s["document"]["text_sha256"].as_str().unwrap().len(), 64);
    // Retagging does not matter to an extraction; the text does.
    w.ok(
        &c,
        "update_document",
        json!({"document_id": w.doc_a, "tag_ids": []}),
    )
    .await;
    assert_eq!(s, w.snapshot(&c, "run_extraction", args.clone()).await);
    sqlx::query("UPDATE documents SET text = 'changed' WHERE id = $1")
        .bind(w.doc_a)
        .execute(w.pool())
        .await
        .unwrap();
    assert_ne!(s, w.snapshot(&c, "run_extraction", args).await);
    let s = w
        .snapshot(
            &c,
            "run_extraction",
            json!({"prompt_revid": pb, "document_id": w.doc_b}),
        )
        .await;
    assert_eq!(s["document"]["exists"], false);
    assert_eq!(s["prompt"]["exists"], false);
}
