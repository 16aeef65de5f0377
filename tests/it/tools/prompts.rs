//! The prompts tools: create, get, list, update (versions) and delete.

use super::*;

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
