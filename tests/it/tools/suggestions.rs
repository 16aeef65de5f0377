//! The suggestions tools: create_suggestion's uniqueness and cap, org_overview's signals.

use super::*;

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

/// One step of a nightly run suggesting an action on `doc`, as the loop runs it: the
/// `create_suggestion` call, then (after `pause`) the follow-up proposal's snapshot, which locks
/// the document; one transaction, started after `start_after`.
async fn suggest_then_snapshot(
    pool: &PgPool,
    c: &Ctx,
    doc: Uuid,
    start_after: std::time::Duration,
    pause: std::time::Duration,
) -> Result<(), String> {
    tokio::time::sleep(start_after).await;
    let mut tx = pool.begin().await.map_err(|e| e.to_string())?;
    let mut ctx = tool_ctx(c, &mut tx);
    let action = json!({"document_id": doc, "metadata": {"tagged": true}});
    let args = json!({"kind": "tag_documents", "title": "Tag it", "message": "Untagged.",
                      "document_id": doc,
                      "proposed_action": {"tool": "update_document", "args": action}});
    builtin_registry()
        .execute(&mut ctx, "create_suggestion", &args)
        .await
        .map_err(|e| format!("create_suggestion: {e:?}"))?;
    tokio::time::sleep(pause).await;
    let tool = builtin_registry().get("update_document").unwrap().clone();
    tool.snapshot(&mut ctx, &action)
        .await
        .unwrap_or_else(|| Err(ToolError::Invalid("no snapshot".into())))
        .map_err(|e| format!("snapshot: {e:?}"))?;
    drop(ctx);
    tx.commit().await.map_err(|e| e.to_string())
}

#[tokio::test]
async fn two_nights_suggesting_an_action_on_one_document_do_not_deadlock() {
    // Found by the chaos suite (`agentd bench chaos`): the suggestion's insert takes a share lock
    // on its document (the foreign key), the proposal's snapshot then locks the row; two
    // nightly runs (two nights, one document) each held the share lock and waited for the
    // other's — PostgreSQL ended one with "deadlock detected", every attempt, until dead.
    let w = world().await;
    let mut first = w.ctx(w.a);
    first.night = NaiveDate::from_ymd_opt(2025, 3, 8);
    let mut second = w.ctx(w.a);
    second.night = NaiveDate::from_ymd_opt(2025, 3, 9);
    let ms = std::time::Duration::from_millis;
    let (a, b) = tokio::join!(
        suggest_then_snapshot(w.pool(), &first, w.doc_a, ms(0), ms(600)),
        suggest_then_snapshot(w.pool(), &second, w.doc_a, ms(200), ms(0)),
    );
    assert!(a.is_ok() && b.is_ok(), "first: {a:?}; second: {b:?}");
    assert_eq!(
        w.count("SELECT count(*) FROM suggestions WHERE org_id = $1", w.a)
            .await,
        2
    );
}
