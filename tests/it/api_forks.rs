//! `POST /v1/runs/{id}/fork` and `/adopt` over a real port (issue 50, items 2 and 4): another
//! org's run is 404, a key below reviewer 403, a step below 1 or a bad model 422 naming the
//! field, a step past the run's last 409 naming `from_step` (the request conflicts with this
//! run, not with the schema), a run still running or of a kind that cannot be forked 409; a fork made
//! reads back with its parent and step, and the parent is unchanged.

use crate::api_support::Api;
use agentd::api::Role;
use agentd::store::runs::{self, NewRun, RunStatus};
use chrono::Utc;
use serde_json::json;
use uuid::Uuid;

/// A run of `org` of `kind` about `subject` with two checkpoints (a call and its result),
/// ended with `status` (or left running).
async fn stored_run(api: &Api, org: Uuid, kind: &str, subject: &str, status: RunStatus) -> Uuid {
    let mut conn = api.db.pool.acquire().await.unwrap();
    let id = Uuid::now_v7();
    let now = Utc::now();
    runs::create_run(
        &mut conn,
        &NewRun {
            id,
            org_id: org,
            kind,
            subject,
            job_id: None,
            provider: "scripted",
            model: "m1",
            started_at: now,
        },
    )
    .await
    .unwrap();
    let answer = json!({"response": {"message": {"role": "assistant", "content": [
        {"type": "tool_use", "id": "r1.0", "name": "get_document", "arguments": "{}"}]},
        "usage": {"input_tokens": 10, "output_tokens": 2}, "finish": "tool_use", "model": "m1"},
        "summary": false, "v": 1});
    let result = json!({"call_id": "r1.0", "tool": "get_document", "content": "{}",
        "is_error": false, "decision": "auto_approved", "v": 1});
    for (seq, kind, call, payload) in [
        (0, "llm_response", None, answer),
        (1, "tool_result", Some("r1.0"), result),
    ] {
        sqlx::query(
            "INSERT INTO agent_steps (run_id, seq, kind, call_id, payload, created_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
        )
        .bind(id)
        .bind(seq)
        .bind(kind)
        .bind(call)
        .bind(payload)
        .bind(now)
        .execute(&mut *conn)
        .await
        .unwrap();
    }
    if status != RunStatus::Running {
        runs::finish_run(
            &mut *conn,
            id,
            status,
            Some("completed"),
            Some("done"),
            None,
            now,
        )
        .await
        .unwrap();
    }
    id
}

#[tokio::test]
async fn fork_errors_are_problems_naming_the_field_and_a_fork_reads_back_with_its_parent() {
    let api = Api::start().await;
    let (org, reviewer) = api.org("acme", Role::Reviewer).await;
    let uploader = api.key(org, Role::Uploader).await;
    let (_, stranger) = api.org("other", Role::Admin).await;
    let doc = api.doc(org, "invoice.txt").await;
    let ended = stored_run(
        &api,
        org,
        "auto_create",
        &doc.to_string(),
        RunStatus::Succeeded,
    )
    .await;
    let path = format!("/v1/runs/{ended}/fork");
    let call = |key: &str, body: serde_json::Value| {
        let (path, key) = (path.clone(), key.to_string());
        let api = &api;
        async move { api.call("POST", &path, Some(&key), Some(body)).await }
    };
    // Another org's run does not exist for it; a key below reviewer may not fork.
    call(&stranger, json!({"from_step": 1}))
        .await
        .problem_in("another org", 404, Some("id"));
    call(&uploader, json!({"from_step": 1}))
        .await
        .problem_in("uploader", 403, None);
    // Steps past the last (the run has 2), none, or not a number.
    let past = call(&reviewer, json!({"from_step": 3})).await;
    past.problem_in("past the last step", 409, Some("from_step"));
    assert_eq!(past.body["steps"], json!(2), "{}", past.body);
    call(&reviewer, json!({"from_step": 0}))
        .await
        .problem_in("step 0", 422, Some("from_step"));
    call(&reviewer, json!({"from_step": "two"}))
        .await
        .problem_in("a string", 422, None);
    call(&reviewer, json!({"from_step": 1, "model": "\u{7}"}))
        .await
        .problem_in("a control character", 422, Some("model"));
    call(&reviewer, json!({"from_step": 1, "instructions": " "}))
        .await
        .problem_in("blank instructions", 422, Some("instructions"));
    call(&reviewer, json!({"from_step": 1, "steps": 2}))
        .await
        .problem_in("an unknown field", 422, None);
    // A run still running, and a kind that cannot be forked, are conflicts naming the run.
    let running = stored_run(
        &api,
        org,
        "proactive_suggestion",
        "2026-12-01",
        RunStatus::Running,
    )
    .await;
    let r = api
        .call(
            "POST",
            &format!("/v1/runs/{running}/fork"),
            Some(&reviewer),
            Some(json!({"from_step": 1})),
        )
        .await;
    r.problem_in("running", 409, Some("id"));
    assert_eq!(r.body["run_status"], json!("running"));
    let sweep = stored_run(&api, org, "approval_expiry", "sweep", RunStatus::Succeeded).await;
    api.call(
        "POST",
        &format!("/v1/runs/{sweep}/fork"),
        Some(&reviewer),
        Some(json!({"from_step": 1})),
    )
    .await
    .problem_in("approval_expiry", 409, Some("id"));
    // Nothing was made by any of them.
    assert_eq!(api.count("SELECT count(*) FROM run_forks").await, 0);
    // A fork: 202, a new run with the first step copied, its parent and step named.
    let before: serde_json::Value = api
        .call("GET", &format!("/v1/runs/{ended}"), Some(&reviewer), None)
        .await
        .body;
    let made = call(
        &reviewer,
        json!({"from_step": 1, "model": "m2", "instructions": "Try again."}),
    )
    .await;
    assert_eq!(made.status.as_u16(), 202, "{}", made.body);
    assert_eq!(made.body["status"], json!("running"));
    assert_eq!(made.body["model"], json!("m2"));
    let fork = made.body["run_id"].as_str().unwrap().to_string();
    let read = api
        .call("GET", &format!("/v1/runs/{fork}"), Some(&reviewer), None)
        .await;
    assert_eq!(read.body["run"]["parent_run_id"], json!(ended.to_string()));
    assert_eq!(read.body["run"]["parent_step"], json!(1));
    assert_eq!(read.body["steps"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        read.body["steps"][0]["payload"],
        before["steps"][0]["payload"]
    );
    let after = api
        .call("GET", &format!("/v1/runs/{ended}"), Some(&reviewer), None)
        .await
        .body;
    assert_eq!(after, before, "the parent is unchanged");
    // The fork is running: its document has a run in progress, so a second fork waits.
    call(&reviewer, json!({"from_step": 1}))
        .await
        .problem_in("busy document", 409, Some("id"));
    // Adopt: another org's fork is 404, a run that is no fork or a fork still running 409.
    let adopt = |run: &str, key: &str| {
        let (path, key) = (format!("/v1/runs/{run}/adopt"), key.to_string());
        let api = &api;
        async move { api.call("POST", &path, Some(&key), None).await }
    };
    adopt(&fork, &stranger)
        .await
        .problem_in("adopt, another org", 404, Some("id"));
    adopt(&ended.to_string(), &reviewer)
        .await
        .problem_in("adopt, not a fork", 409, Some("id"));
    let r = adopt(&fork, &reviewer).await;
    r.problem_in("adopt, running", 409, Some("id"));
    assert_eq!(r.body["run_status"], json!("running"));
}
