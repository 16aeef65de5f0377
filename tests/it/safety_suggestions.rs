//! Safety inside an org (issue 12), continued: a suggestion's proposed action obeys the
//! allow-list, the policy and the suggestion's document; accepting a document activates exactly
//! what is recorded on it; error text is stored without NUL and bounded.

use crate::safety_common;
use agentd::catalog::PolicyDecision;
use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::store::extractions::ExtractionSource;
use agentd::store::prompts::PromptFields;
use agentd::store::runs;
use chrono::Utc;
use safety_common::{app, format, org, scalar};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

#[tokio::test]
async fn a_suggestions_action_obeys_allow_list_policy_and_its_document() {
    let o = org().await;
    let sug = |kind: &str, doc: Uuid, action: Value| {
        Turn::tool(
            kind,
            "create_suggestion",
            json!({"kind": kind, "title": "t", "message": "m", "document_id": doc,
                   "proposed_action": action}),
        )
    };
    let turns = vec![
        // Not in the nightly job's allow-list.
        sug(
            "review_proposal",
            o.doc,
            json!({"tool": "delete_prompt", "args": {"prompt_id": o.prompt}}),
        ),
        // In the allow-list but denied by this test's policy override.
        sug(
            "retry_failed",
            o.doc,
            json!({"tool": "create_tag", "args": {"name": "x", "color": "#112233"}}),
        ),
        // Allowed, but on another document than the suggestion's.
        sug(
            "tag_documents",
            o.doc,
            json!({"tool": "update_document", "args": {"document_id": o.other, "metadata": {"x": 1}}}),
        ),
        // The control: allowed, on the suggestion's own document.
        sug(
            "other",
            o.doc,
            json!({"tool": "update_document", "args": {"metadata": {"x": 1}}}),
        ),
        Turn::text("done"),
    ];
    let p = Arc::new(ScriptedProvider::new(turns));
    let app = app(&o, p.clone());
    let spec = app.spec("proactive_suggestion");
    let mut rs = app.run_spec(spec, o.org, "night".into(), Some(1), "go".into());
    rs.night = Some(Utc::now().date_naive());
    rs.policy
        .overrides
        .insert("create_tag".into(), PolicyDecision::Deny);
    let out = app
        .engine(spec)
        .run(&rs, &CancellationToken::new())
        .await
        .unwrap();
    p.assert_complete();
    let audit = runs::audit_for_run(&o.db.pool, out.run_id).await.unwrap();
    let errors: Vec<Option<String>> = audit
        .iter()
        .map(|a| {
            a.outcome
                .as_ref()
                .and_then(|v| v["proposed_action_error"].as_str().map(str::to_string))
        })
        .collect();
    assert_eq!(audit.len(), 4);
    assert!(
        errors[0]
            .as_deref()
            .unwrap()
            .contains("not one of the tools"),
        "{errors:?}"
    );
    assert!(
        errors[1]
            .as_deref()
            .unwrap()
            .contains("denies `create_tag`"),
        "{errors:?}"
    );
    assert!(
        errors[2].as_deref().unwrap().contains(&o.other.to_string()),
        "{errors:?}"
    );
    assert_eq!(errors[3], None);
    let approvals: Vec<(String, Value)> =
        sqlx::query_as("SELECT tool, args FROM pending_approvals")
            .fetch_all(&o.db.pool)
            .await
            .unwrap();
    assert_eq!(approvals.len(), 1, "{approvals:?}");
    assert_eq!(approvals[0].0, "update_document");
    assert_eq!(approvals[0].1["document_id"], json!(o.doc));
    let n: i64 = scalar(&o, "SELECT count(*) FROM suggestions").await;
    assert_eq!(n, 4, "the suggestions themselves stand");
}

#[tokio::test]
async fn accepting_a_document_activates_exactly_what_is_recorded_on_it() {
    use agentd::store::auto_create::{self, Proposed};
    let o = org().await;
    let run = Uuid::now_v7();
    let now = Utc::now();
    let mut c = o.db.pool.acquire().await.unwrap();
    let v1 = agentd::store::schemas::create(&mut c, o.org, "Mine", &format(), Some(run), now)
        .await
        .unwrap();
    let mut f2 = format();
    f2["json_schema"]["name"] = json!("v2");
    let v2 =
        agentd::store::schemas::create_version(&mut c, o.org, v1.schema_id, &f2, Some(run), now)
            .await
            .unwrap()
            .unwrap();
    let f = PromptFields {
        name: "Mine".into(),
        content: "Extract a.".into(),
        schema_id: v2.schema_id,
        schema_version: v2.version,
        model: None,
        tag_ids: vec![],
    };
    let p = agentd::store::prompts::create(&mut c, o.org, &f, Some(run), now)
        .await
        .unwrap();
    let src = |doc| ExtractionSource {
        document_id: doc,
        prompt_id: p.prompt_id,
        prompt_version: p.version,
        schema_id: v2.schema_id,
        schema_version: v2.version,
    };
    let early = agentd::store::extractions::insert(
        &mut c,
        o.org,
        src(o.doc),
        &json!({"a": "1"}),
        &[],
        Some(run),
        now,
    )
    .await
    .unwrap();
    let recorded = agentd::store::extractions::insert(
        &mut c,
        o.org,
        src(o.doc),
        &json!({"a": "2"}),
        &[],
        Some(run),
        now,
    )
    .await
    .unwrap();
    let arts = Proposed {
        proposed_schema_id: Some(v2.schema_id),
        proposed_schema_version: Some(v2.version),
        proposed_prompt_id: Some(p.prompt_id),
        proposed_prompt_version: Some(p.version),
        proposed_extraction_id: Some(recorded.id),
    };
    auto_create::set_proposed(&mut c, o.org, o.doc, run, &arts, now)
        .await
        .unwrap();
    auto_create::accept(&mut c, o.org, o.doc, run, now)
        .await
        .unwrap();
    let st = |sql: String| {
        let pool = o.db.pool.clone();
        async move {
            sqlx::query_scalar::<_, String>(sqlx::AssertSqlSafe(sql))
                .fetch_one(&pool)
                .await
                .unwrap()
        }
    };
    let sid = v1.schema_id;
    assert_eq!(
        st(format!(
            "SELECT status FROM schemas WHERE schema_id = '{sid}' AND version = 2"
        ))
        .await,
        "active"
    );
    assert_eq!(
        st(format!(
            "SELECT status FROM schemas WHERE schema_id = '{sid}' AND version = 1"
        ))
        .await,
        "proposed"
    );
    assert_eq!(
        st(format!(
            "SELECT status FROM prompts WHERE prompt_id = '{}'",
            p.prompt_id
        ))
        .await,
        "active"
    );
    assert_eq!(
        st(format!(
            "SELECT status FROM extractions WHERE id = '{}'",
            recorded.id
        ))
        .await,
        "accepted"
    );
    assert_eq!(
        st(format!(
            "SELECT status FROM extractions WHERE id = '{}'",
            early.id
        ))
        .await,
        "proposed"
    );
}

#[tokio::test]
async fn error_text_with_nul_is_stored_cleaned_and_truncated() {
    let o = org().await;
    let mut c = o.db.pool.acquire().await.unwrap();
    let run = runs::create_run(
        &mut c,
        &runs::NewRun {
            id: Uuid::now_v7(),
            org_id: o.org,
            kind: "auto_create",
            subject: "x",
            job_id: None,
            provider: "scripted",
            model: "m",
            started_at: Utc::now(),
        },
    )
    .await
    .unwrap();
    let error = format!("bad\0answer {}", "x".repeat(10_000));
    assert!(
        runs::finish_run(
            &o.db.pool,
            run.id,
            runs::RunStatus::Failed,
            Some("error"),
            None,
            Some(&error),
            Utc::now()
        )
        .await
        .unwrap()
    );
    agentd::store::auto_create::set_status(
        &o.db.pool,
        o.org,
        o.doc,
        agentd::store::states::AutoCreateStatus::Failed,
        None,
        Some(&error),
        Utc::now(),
    )
    .await
    .unwrap();
    let stored = runs::get_run(&o.db.pool, run.id)
        .await
        .unwrap()
        .unwrap()
        .error
        .unwrap();
    assert!(
        stored.starts_with("badanswer xxx") && stored.ends_with("[truncated]"),
        "{}",
        &stored[..40]
    );
    assert!(stored.chars().count() < 2_100);
    let doc_err: String = scalar(
        &o,
        &format!(
            "SELECT auto_create_error FROM documents WHERE id = '{}'",
            o.doc
        ),
    )
    .await;
    assert_eq!(doc_err, stored);
}
