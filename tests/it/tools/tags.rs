//! The tags tools: idempotent create, list and delete per org.

use super::*;

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
