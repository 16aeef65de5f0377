//! The schemas tools: create (full and compact forms), validate, versions and delete.

use super::*;

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
