//! `agentd demo` on a fresh database (offline provider): the printed report states the whole
//! mission — proposals made by auto-create, the nightly job's suggestions and pending approvals
//! with their reasons, one approval stale after a data change, one expired past the org's TTL,
//! one executed; the first night's run, which waited for those decisions, ended `capped` at the
//! TTL, and the next night's waits, is approved and goes on to its end — and the database holds
//! exactly what it says. A second run (another org) is checked through `--json`.

use crate::common;
use common::TestDb;
use serde_json::{Value, json};
use std::process::{Command, Output};
use uuid::Uuid;

fn demo(db: &TestDb, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_agentd"))
        .arg("demo")
        .args(args)
        .env("DATABASE_URL", &db.url)
        .env("AGENTD_HTTP__ADDR", "")
        .env_remove("OPENAI_API_KEY")
        .env_remove("OPENAI_BASE_URL")
        .output()
        .expect("run agentd demo");
    assert!(
        out.status.success(),
        "agentd demo failed: {}\n{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    out
}

async fn scalar(db: &TestDb, sql: &str, org: Uuid) -> i64 {
    sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
        .bind(org)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

async fn statuses(db: &TestDb, org: Uuid) -> Vec<String> {
    sqlx::query_scalar(
        "SELECT status FROM pending_approvals WHERE org_id = $1 ORDER BY created_at, id",
    )
    .bind(org)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

async fn events(db: &TestDb, org: Uuid) -> Vec<(String, i64)> {
    sqlx::query_as(
        "SELECT type, count(*) FROM agentd_events WHERE org_id = $1 GROUP BY type ORDER BY type",
    )
    .bind(org)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn the_demo_reports_the_whole_mission_and_the_database_agrees() {
    let db = TestDb::new().await;
    let out = demo(&db, &[]);
    let text = String::from_utf8(out.stdout).unwrap();
    let org: Uuid = sqlx::query_scalar("SELECT id FROM orgs WHERE name = 'demo'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert!(
        text.contains(&format!("org demo ({org}), provider offline")),
        "{text}"
    );

    // 1. auto-create: four proposals.
    assert!(
        text.contains("1. Auto-create on 4 sample documents"),
        "{text}"
    );
    assert_eq!(text.matches("  auto-create: proposed").count(), 4, "{text}");
    let proposed = scalar(
        &db,
        "SELECT count(*) FROM documents WHERE org_id = $1 AND auto_create_status = 'proposed'",
        org,
    )
    .await;
    assert_eq!(proposed, 4);

    // 1b. a reviewer refines the first proposal: the instructions, the proposal before and after.
    assert!(
        text.contains("1b. A reviewer refines invoice.txt's proposal: \"Rename total to total_due"),
        "{text}"
    );
    let line = |prefix: &str| {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line {prefix:?} in\n{text}"))
            .to_string()
    };
    let (before, after) = (line("  before: schema "), line("  after:  schema "));
    assert!(
        before.contains(" total,") || before.ends_with(" total"),
        "{before}"
    );
    assert!(
        after.contains("total_due") && after.contains("payment_reference"),
        "{after}"
    );
    assert!(
        before.contains(":1: ") && after.contains(":2: "),
        "{before}\n{after}"
    );

    // 2. the nightly job: suggestions, and approvals that each carry a reason.
    assert!(
        text.contains("2. The nightly job (proactive_suggestion #"),
        "{text}"
    );
    let first_night = scalar(
        &db,
        "SELECT count(*) FROM suggestions WHERE org_id = $1
            AND night = (SELECT min(night) FROM suggestions WHERE org_id = $1)",
        org,
    )
    .await;
    assert!(first_night >= 1);
    assert!(
        text.contains(&format!("  suggestions ({first_night}):")),
        "{text}"
    );
    let suggestions = scalar(
        &db,
        "SELECT count(*) FROM suggestions WHERE org_id = $1",
        org,
    )
    .await;
    let all = statuses(&db, org).await;
    let approvals = all[..3].to_vec();
    assert!(
        text.contains("  pending approvals (3), each with its reason:"),
        "{text}"
    );
    let rationales: Vec<(Option<String>, Option<String>)> = sqlx::query_as(
        "SELECT rationale, summary FROM pending_approvals WHERE org_id = $1 ORDER BY created_at LIMIT 3",
    )
    .bind(org)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    for (why, summary) in &rationales {
        let (why, summary) = (why.as_deref().unwrap(), summary.as_deref().unwrap());
        assert!(
            text.contains(&format!("      why: {why}")),
            "{why} in\n{text}"
        );
        assert!(text.contains(summary), "{summary} in\n{text}");
    }

    // 3. later: one stale (its data changed), one expired (past the org's TTL), one executed.
    assert_eq!(approvals, vec!["stale", "expired", "executed"]);
    assert!(
        text.contains("approval_expiry sweep: 1 stale, 0 expired"),
        "{text}"
    );
    assert!(
        text.contains("approval_expiry sweep: 0 stale, 1 expired"),
        "{text}"
    );
    assert!(text.contains("(changed: metadata)"), "{text}");
    // 3b. the first night's run waited through step 3 and ended at the TTL; the next night's
    // waited for its proposals, every one approved, and went on with them.
    let second: Vec<String> = all[3..].to_vec();
    assert!(!second.is_empty(), "the next night proposed");
    assert!(second.iter().all(|s| s == "executed"), "{second:?}");
    assert!(
        text.contains("3b. A run that waits for its decisions and goes on"),
        "{text}"
    );
    assert!(text.contains("capped (approval_ttl)"), "{text}");
    assert!(
        text.contains(&format!(
            "People decided its proposals: {} approved and executed",
            second.len()
        )),
        "{text}"
    );
    let nightly_runs: Vec<(String, Option<String>, i64)> = sqlx::query_as(
        "SELECT r.status, r.stop_reason, (SELECT count(*) FROM agent_loop_marks m
                 WHERE m.run_id = r.id AND m.kind IN ('waiting', 'decided'))
           FROM agent_runs r WHERE r.org_id = $1 AND r.kind = 'proactive_suggestion'
          ORDER BY r.started_at",
    )
    .bind(org)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        nightly_runs,
        vec![
            ("capped".into(), Some("approval_ttl".into()), 1),
            ("succeeded".into(), Some("completed".into()), 2)
        ]
    );
    let acted = scalar(
        &db,
        "SELECT count(*) FROM suggestions WHERE org_id = $1 AND status = 'acted'",
        org,
    )
    .await;
    assert_eq!(
        acted,
        1 + second.len() as i64,
        "the executed approvals' suggestions are acted"
    );
    let tagged = scalar(
        &db,
        "SELECT count(*) FROM documents WHERE org_id = $1 AND cardinality(tag_ids) = 1",
        org,
    )
    .await;
    assert_eq!(
        tagged,
        1 + second.len() as i64,
        "only the approved actions ran"
    );

    // 4. the events, as written, each type once per cause.
    let steps = scalar(
        &db,
        "SELECT count(*) FROM agent_steps s JOIN agent_runs r ON r.id = s.run_id
          WHERE r.org_id = $1 AND s.kind IN ('llm_response', 'tool_model', 'tool_result')",
        org,
    )
    .await;
    assert!(steps > 0);
    let n = second.len() as i64;
    let want = vec![
        ("approval.created".to_string(), 3 + n),
        ("approval.decided".to_string(), 1 + n),
        ("approval.expired".to_string(), 1),
        ("approval.stale".to_string(), 1),
        // Four uploads and the refine.
        ("proposal.ready".to_string(), 5),
        // The four uploads' runs, the refine's and the two nightly ones (each once, across its
        // wait); a step per checkpoint.
        ("run.finished".to_string(), 7),
        ("run.started".to_string(), 7),
        ("run.step".to_string(), steps),
        ("suggestion.created".to_string(), suggestions),
    ];
    assert_eq!(events(&db, org).await, want);
    let line: String = want
        .iter()
        .map(|(k, n)| format!("{k} {n}"))
        .collect::<Vec<_>>()
        .join(", ");
    assert!(
        text.contains(&format!("  by type: {line}")),
        "{line} in\n{text}"
    );

    // Again, on the same database: a fresh org, the same story, as JSON.
    let out = demo(&db, &["--json"]);
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(r["org"]["name"], "demo-2");
    let org2 = Uuid::parse_str(r["org"]["id"].as_str().unwrap()).unwrap();
    assert_eq!(r["documents"].as_array().unwrap().len(), 4);
    assert_eq!(r["refine"]["after"]["auto_create_status"], "proposed");
    assert_eq!(r["nightly"]["job"]["state"], "succeeded");
    assert_eq!(r["nightly"]["approvals"].as_array().unwrap().len(), 3);
    let after: Vec<&str> = r["later"]["approvals"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["status"].as_str().unwrap())
        .collect();
    assert_eq!(after, vec!["stale", "expired", "executed"]);
    assert_eq!(statuses(&db, org2).await[..3], after);
    let g = &r["go_on"];
    assert_eq!(g["first"]["stop_reason"], "approval_ttl");
    assert_eq!(g["waiting"]["status"], "waiting");
    assert_eq!(g["run"]["status"], "succeeded");
    assert_eq!(
        g["run"]["rounds"].as_i64().unwrap(),
        g["waiting"]["rounds"].as_i64().unwrap() + 1,
        "one round after the wait"
    );
    assert!(g["resume_job"].is_i64());
    assert_eq!(
        r["events_written"],
        json!(r["events"].as_array().unwrap().len())
    );
    assert_eq!(r["event_counts"]["approval.stale"], 1);
    assert_eq!(r["event_counts"]["approval.expired"], 1);
    assert_eq!(
        r["events"].as_array().unwrap().len() as i64,
        events(&db, org2).await.iter().map(|e| e.1).sum::<i64>()
    );
    assert_eq!(statuses(&db, org).await, all, "the first org untouched");
}
