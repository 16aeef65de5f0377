//! The registry (every tool listed with closed parameters, savepoints) and the help tools'
//! examples, which must be valid input.

use super::*;

#[test]
fn registry_has_every_tool_with_closed_parameters() {
    let r = builtin_registry();
    let expected = [
        ("get_document", Category::Read),
        ("get_ocr_text", Category::Read),
        ("list_documents", Category::Read),
        ("update_document", Category::Write),
        ("delete_document", Category::Destructive),
        ("get_schema", Category::Read),
        ("list_schemas", Category::Read),
        ("validate_schema", Category::Read),
        ("create_schema", Category::Write),
        ("update_schema", Category::Write),
        ("delete_schema", Category::Destructive),
        ("get_prompt", Category::Read),
        ("list_prompts", Category::Read),
        ("create_prompt", Category::Write),
        ("update_prompt", Category::Write),
        ("delete_prompt", Category::Destructive),
        ("list_tags", Category::Read),
        ("create_tag", Category::Write),
        ("delete_tag", Category::Destructive),
        ("get_extraction_result", Category::Read),
        ("run_extraction", Category::Write),
        ("update_extraction_field", Category::Write),
        ("org_overview", Category::Read),
        ("create_suggestion", Category::Write),
        ("help_schemas", Category::Read),
        ("help_prompts", Category::Read),
    ];
    assert_eq!(r.names().len(), expected.len(), "{:?}", r.names());
    for (name, cat) in expected {
        let t = r.get(name).unwrap_or_else(|| panic!("{name} missing"));
        assert_eq!(t.category(), cat, "{name}");
        let p = t.parameters();
        assert!(jsonschema::draft7::meta::is_valid(&p), "{name}: {p}");
        assert_eq!(p["type"], "object", "{name}");
        assert_eq!(p["additionalProperties"], false, "{name}");
        assert!(p["required"].is_array(), "{name}");
        assert!(!t.description().is_empty());
    }
}

/// A call runs on a savepoint of the step's transaction (sqlx nested transaction): a failure
/// undoes the call's writes and nothing else; the step's transaction goes on and commits.
#[tokio::test]
async fn a_savepoint_undoes_only_the_failed_calls_writes() {
    let w = world().await;
    let c = w.ctx(w.a);
    let r = builtin_registry();
    let tag = |name: &str| json!({"name": name, "color": "#112233"});
    let mut tx = w.pool().begin().await.unwrap();
    let mut ctx = tool_ctx(&c, &mut tx);
    r.execute(&mut ctx, "create_tag", &tag("outer"))
        .await
        .unwrap();
    let undone = ctx
        .savepoint(async |c| {
            r.execute(c, "create_tag", &tag("undone")).await?;
            Err::<Value, CallError>(CallError::BadJson("fails after writing".into()))
        })
        .await
        .unwrap();
    assert!(undone.is_err());
    let kept = ctx
        .savepoint(async |c| r.execute(c, "create_tag", &tag("kept")).await)
        .await
        .unwrap();
    assert_eq!(kept.unwrap()["name"], "kept");
    drop(ctx);
    tx.commit().await.unwrap();
    let names: Vec<String> =
        sqlx::query_scalar("SELECT name FROM tags WHERE org_id = $1 ORDER BY name")
            .bind(w.a)
            .fetch_all(w.pool())
            .await
            .unwrap();
    assert_eq!(names, ["kept", "outer"]);
}

#[tokio::test]
async fn help_examples_are_valid_input() {
    let w = world().await;
    let c = w.ctx(w.a);
    let h = w.ok(&c, "help_schemas", json!({})).await;
    let example = h["example_response_format"].clone();
    assert_eq!(
        agentd::tools::schemas::validate_response_format(&example),
        Ok(())
    );
    assert!(
        h["guide"]
            .as_str()
            .unwrap()
            .contains("additionalProperties")
    );
    let s = w
        .ok(
            &c,
            "create_schema",
            json!({"name": "Invoice", "response_format": example}),
        )
        .await;
    let p = w.ok(&c, "help_prompts", json!({})).await;
    let content = p["example_content"].as_str().unwrap();
    assert!(p["guide"].as_str().unwrap().contains("schema_revid"));
    w.ok(
        &c,
        "create_prompt",
        json!({"name": "Invoice", "content": content, "schema_revid": s["schema_revid"]}),
    )
    .await;
    invalid(w.call(&c, "help_schemas", json!({"topic": "x"})).await);
    invalid(w.call(&c, "help_prompts", json!({"topic": "x"})).await);
}

/// A handler that panics on the input it is given (a bug meeting an unforeseen input).
struct Panics;

#[async_trait::async_trait]
impl agentd::tools::Tool for Panics {
    fn name(&self) -> &'static str {
        "panics"
    }
    fn description(&self) -> &'static str {
        "panics on any input"
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"text": {"type": "string"}}})
    }
    fn category(&self) -> Category {
        Category::Read
    }
    async fn call(&self, _ctx: &mut ToolCtx<'_>, args: Value) -> Result<Value, ToolError> {
        let text = args["text"].as_str().unwrap_or_default().to_string();
        // The byte slicing the review found (N1), on purpose.
        Ok(json!(&text[..4]))
    }
    fn targets(&self, _args: &Value) -> Vec<agentd::tools::Target> {
        vec![]
    }
    fn calls_model(&self) -> bool {
        false
    }
    fn follow_up(&self, _args: &Value, _result: &Value) -> Option<agentd::tools::FollowUp> {
        None
    }
    async fn prepare(
        &self,
        _ctx: &mut ToolCtx<'_>,
        _args: &Value,
    ) -> agentd::tools::Declared<agentd::tools::ModelCall> {
        None
    }
    async fn apply(
        &self,
        _ctx: &mut ToolCtx<'_>,
        _args: &Value,
        _answer: (&Value, &CompletionResponse),
    ) -> Result<Value, ToolError> {
        Err(ToolError::Invalid("not a model tool".into()))
    }
    async fn snapshot(
        &self,
        _ctx: &mut ToolCtx<'_>,
        _args: &Value,
    ) -> agentd::tools::Declared<Value> {
        None
    }
}

/// Review item 3 of issue 29: a handler that panics fails that one call as a tool error the
/// model can read (naming the tool, not quoting the input); the caller's transaction goes on.
#[tokio::test]
async fn a_panicking_handler_fails_the_call_not_the_caller() {
    let w = world().await;
    let mut r = builtin_registry();
    r.register(Arc::new(Panics));
    let c = w.ctx(w.a);
    let mut tx = w.pool().begin().await.unwrap();
    let mut ctx = tool_ctx(&c, &mut tx);
    let e = r
        .execute(&mut ctx, "panics", &json!({"text": "DE１２ABCD"}))
        .await
        .unwrap_err();
    drop(ctx);
    assert!(
        matches!(e, CallError::Panicked(ref t) if t == "panics"),
        "{e:?}"
    );
    assert!(!e.to_string().contains("ABCD"), "{e}");
    let one: i32 = sqlx::query_scalar("SELECT 1")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    assert_eq!(one, 1, "the transaction is still usable");
}
