//! The documents tools: reads, filters, updates, deletes, NUL bytes and big documents.

use super::*;

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
