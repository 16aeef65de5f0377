//! Approval snapshots: they capture the subject and hide other orgs.

use super::*;

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
    assert_ne!(s1["tag_ids"], s2["tag_ids"]);
    assert!(
        s2.get("updated_at").is_none() && s2.get("auto_create_status").is_none(),
        "only what the action depends on (issue 33): {s2}"
    );
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
    // Deleting a tag also untags prompts: its snapshot names them (review #14c).
    sqlx::query("UPDATE prompts SET tag_ids = ARRAY[$1::uuid] WHERE prompt_id = $2::uuid")
        .bind(tag.to_string().trim_matches('"').to_string())
        .bind(&pid)
        .execute(w.pool())
        .await
        .unwrap();
    let s = w.snapshot(&c, "delete_tag", json!({"tag_id": tag})).await;
    assert_eq!(s["prompt_ids"], json!([pid]));
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
