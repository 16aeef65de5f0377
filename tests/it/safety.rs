//! Safety inside an org (issue 12): a hostile scripted model under `auto_create` cannot write
//! another document, its extractions or the org's artifacts (refused, or proposed when the job
//! file says so; audited either way) nor read other documents, and may still write its own.

use crate::safety_common;
use agentd::catalog::PolicyDecision;
use agentd::llm::scripted::{ScriptedProvider, Turn};
use agentd::store::runs;
use safety_common::{Org, app, call, format, last_result, org, renamed, scalar};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

fn hostile(o: &Org) -> Vec<Turn> {
    vec![
        Turn::tool(
            "1",
            "update_document",
            json!({"document_id": o.other, "metadata": {"pwned": true}}),
        ),
        Turn::tool(
            "2",
            "update_extraction_field",
            json!({"extraction_id": o.extraction, "path": "a", "value": "pwned"}),
        ),
        Turn::tool(
            "3",
            "run_extraction",
            json!({"document_id": o.other, "prompt_revid": format!("{}:1", o.prompt)}),
        ),
        Turn::tool(
            "4",
            "update_schema",
            json!({"schema_id": o.schema, "response_format": renamed("pwned")}),
        ),
        Turn::tool(
            "5",
            "update_prompt",
            json!({"prompt_id": o.prompt, "content": "pwned"}),
        ),
        Turn::tool("6", "get_ocr_text", json!({"document_id": o.other})),
        Turn::text("done"),
    ]
}

/// Nothing of the neighbour or of the org's artifacts changed.
async fn assert_untouched(o: &Org) {
    let meta: Value = scalar(
        o,
        &format!("SELECT metadata FROM documents WHERE id = '{}'", o.other),
    )
    .await;
    assert_eq!(
        meta,
        json!({"k": "v"}),
        "the neighbour's metadata is unchanged"
    );
    let result: Value = scalar(
        o,
        &format!(
            "SELECT result FROM extractions WHERE id = '{}'",
            o.extraction
        ),
    )
    .await;
    assert_eq!(
        result,
        json!({"a": "orig"}),
        "the neighbour's extraction is unchanged"
    );
    let n: i64 = scalar(
        o,
        &format!(
            "SELECT count(*) FROM extractions WHERE document_id = '{}'",
            o.other
        ),
    )
    .await;
    assert_eq!(n, 1, "no new extraction of the neighbour");
    let n: i64 = scalar(
        o,
        &format!(
            "SELECT count(*) FROM schemas WHERE schema_id = '{}'",
            o.schema
        ),
    )
    .await;
    assert_eq!(n, 1, "no new version of the org's schema");
    let n: i64 = scalar(
        o,
        &format!(
            "SELECT count(*) FROM prompts WHERE prompt_id = '{}'",
            o.prompt
        ),
    )
    .await;
    assert_eq!(n, 1, "no new version of the org's prompt");
}

#[tokio::test]
async fn a_hostile_auto_create_run_cannot_touch_its_neighbours() {
    let o = org().await;
    let p = Arc::new(ScriptedProvider::new(hostile(&o)));
    let app = app(&o, p.clone());
    let spec = app.spec("auto_create");
    let mut rs = app.run_spec(spec, o.org, o.doc.to_string(), Some(1), "go".into());
    widen(&mut rs);
    rs.document_id = Some(o.doc);
    // A scripted bare loop: no goal checks or nudges (issue 11), it ends at its text answer.
    rs.settings.goals = false;
    let out = app
        .engine(spec)
        .run(&rs, &CancellationToken::new())
        .await
        .unwrap();
    // Every turn consumed and no extra call: run_extraction on the neighbour never asked a model.
    p.assert_complete();
    assert_eq!(p.calls(), 7);
    assert_eq!(out.status, "succeeded");
    assert_untouched(&o).await;
    let audit = runs::audit_for_run(&o.db.pool, out.run_id).await.unwrap();
    let rows: Vec<(&str, &str, bool, bool)> = audit
        .iter()
        .map(|a| {
            let off = a.outcome.as_ref().map(|v| v["off_subject"] == json!(true)) == Some(true);
            (a.tool.as_str(), a.decision.as_str(), a.is_error, off)
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            ("update_document", "denied", true, true),
            ("update_extraction_field", "denied", true, true),
            ("run_extraction", "denied", true, true),
            ("update_schema", "denied", true, true),
            ("update_prompt", "denied", true, true),
            ("get_ocr_text", "denied", true, true),
        ]
    );
    let n: i64 = scalar(&o, "SELECT count(*) FROM pending_approvals").await;
    assert_eq!(n, 0);
}

#[tokio::test]
async fn with_off_subject_propose_the_writes_wait_for_a_person() {
    let o = org().await;
    let p = Arc::new(ScriptedProvider::new(hostile(&o)));
    let app = app(&o, p.clone());
    let mut spec = app.spec("auto_create").clone();
    spec.agent.off_subject = PolicyDecision::Propose;
    let mut rs = app.run_spec(&spec, o.org, o.doc.to_string(), Some(1), "go".into());
    widen(&mut rs);
    rs.document_id = Some(o.doc);
    // A scripted bare loop: no goal checks or nudges (issue 11), it ends at its text answer.
    rs.settings.goals = false;
    let out = app
        .engine(&spec)
        .run(&rs, &CancellationToken::new())
        .await
        .unwrap();
    p.assert_complete();
    assert_untouched(&o).await;
    let audit = runs::audit_for_run(&o.db.pool, out.run_id).await.unwrap();
    let decisions: Vec<(&str, &str)> = audit
        .iter()
        .map(|a| (a.tool.as_str(), a.decision.as_str()))
        .collect();
    assert_eq!(
        decisions,
        vec![
            ("update_document", "proposed"),
            ("update_extraction_field", "proposed"),
            ("run_extraction", "proposed"),
            ("update_schema", "proposed"),
            ("update_prompt", "proposed"),
            // Reading another document is never proposed: it is off.
            ("get_ocr_text", "denied"),
        ]
    );
    let tools: Vec<String> = sqlx::query_scalar(
        "SELECT tool FROM pending_approvals WHERE status = 'pending' ORDER BY created_at, tool",
    )
    .fetch_all(&o.db.pool)
    .await
    .unwrap();
    assert_eq!(tools.len(), 5, "{tools:?}");
}

#[tokio::test]
async fn the_run_may_still_write_its_own_document_and_artifacts() {
    let o = org().await;
    let turns = vec![
        Turn::tool("1", "update_document", json!({"metadata": {"seen": true}})),
        Turn::tool(
            "2",
            "create_schema",
            json!({"name": "Mine", "response_format": format()}),
        ),
        Turn::Dynamic(|req| {
            let id = last_result(req)["schema_id"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            call(
                "update_schema",
                json!({"schema_id": id, "response_format": renamed("mine2")}),
            )
        }),
        Turn::text("done"),
    ];
    let p = Arc::new(ScriptedProvider::new(turns));
    let app = app(&o, p.clone());
    let spec = app.spec("auto_create");
    let mut rs = app.run_spec(spec, o.org, o.doc.to_string(), Some(1), "go".into());
    widen(&mut rs);
    rs.document_id = Some(o.doc);
    // A scripted bare loop: no goal checks or nudges (issue 11), it ends at its text answer.
    rs.settings.goals = false;
    let out = app
        .engine(spec)
        .run(&rs, &CancellationToken::new())
        .await
        .unwrap();
    p.assert_complete();
    let audit = runs::audit_for_run(&o.db.pool, out.run_id).await.unwrap();
    assert!(
        audit
            .iter()
            .all(|a| a.decision == "auto_approved" && !a.is_error),
        "{audit:?}"
    );
    let meta: Value = scalar(
        &o,
        &format!("SELECT metadata FROM documents WHERE id = '{}'", o.doc),
    )
    .await;
    assert_eq!(meta["seen"], json!(true));
    let n: i64 = scalar(
        &o,
        &format!(
            "SELECT count(*) FROM schemas WHERE run_id = '{}'",
            out.run_id
        ),
    )
    .await;
    assert_eq!(n, 2, "the run's own schema got a second version");
}

/// The scope must hold even where a deployment offers every write tool to auto_create (its own
/// job file offers only what the job needs), with the goal tracking (nudges) off: these runs
/// test the scope, not the road to a proposal.
fn widen(rs: &mut agentd::agent::RunSpec) {
    for t in [
        "list_documents",
        "update_document",
        "list_prompts",
        "update_schema",
        "update_prompt",
        "run_extraction",
        "update_extraction_field",
        "delete_document",
    ] {
        if !rs.policy.allow.iter().any(|a| a == t) {
            rs.policy.allow.push(t.to_string());
        }
    }
    rs.settings.goals = false;
}
