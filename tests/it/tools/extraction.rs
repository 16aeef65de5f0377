//! The extraction tools: run_extraction against a scripted model, results per document and
//! field edits that must still match the schema.

use super::*;

fn fenced_answer(req: &CompletionRequest) -> Result<CompletionResponse, LlmError> {
    Ok(CompletionResponse {
        message: Message::text(
            Role::Assistant,
            "```json\n{\"number\": \"A-1\", \"total\": 12.5}\n```",
        ),
        usage: Usage {
            input_tokens: 50,
            output_tokens: 10,
            ..Default::default()
        },
        finish: FinishReason::EndTurn,
        model: req.model.clone(),
    })
}

#[tokio::test]
async fn run_extraction_calls_the_model_and_stores_a_proposed_result() {
    let w = world().await;
    let provider = Arc::new(ScriptedProvider::new(vec![Turn::Dynamic(fenced_answer)]));
    let mut c = w.ctx(w.a);
    c.provider = provider.clone();
    c.document_id = Some(w.doc_a);
    c.excerpt_chars = 11;
    let schema = w.schema(&c).await;
    // An older prompt of another run, then two of this run: the latest of this run is used.
    let other_run = Ctx {
        run_id: Some(Uuid::new_v4()),
        ..c.clone()
    };
    w.prompt(&other_run, &schema, "Other run.").await;
    w.prompt(&c, &schema, "First.").await;
    let p = w.prompt(&c, &schema, "Extract number and total.").await;

    let v = w.ok(&c, "run_extraction", json!({})).await;
    assert_eq!(v["prompt_revid"], p);
    assert_eq!(v["result"], json!({"number": "A-1", "total": 12.5}));
    assert_eq!(v["status"], "proposed");
    assert_eq!(v["input_truncated"], true);
    assert_eq!(v["usage"]["input_tokens"], 50);
    provider.assert_complete();
    let req = provider.requests.lock().unwrap()[0].clone();
    assert_eq!(req.model, "test-model");
    assert_eq!(req.max_tokens, Some(2000));
    assert_eq!(req.tool_choice, ToolChoice::None);
    assert!(req.tools.is_empty());
    assert_eq!(req.response_format, Some(invoice_rf()));
    assert_eq!(req.messages[0].role, Role::System);
    assert_eq!(req.messages[0].joined_text(), "Extract number and total.");
    assert_eq!(req.messages[1].role, Role::User);
    assert_eq!(req.messages[1].joined_text(), "Invoice A-1");

    let (status, run, result): (String, Option<Uuid>, Value) =
        sqlx::query_as("SELECT status, run_id, result FROM extractions WHERE org_id = $1")
            .bind(w.a)
            .fetch_one(w.pool())
            .await
            .unwrap();
    assert_eq!((status.as_str(), run), ("proposed", c.run_id));
    assert_eq!(result["total"], 12.5);

    let g = w.ok(&c, "get_extraction_result", json!({})).await;
    assert_eq!(g["extraction"]["extraction_id"], v["extraction_id"]);
    assert_eq!(g["extraction"]["result"]["number"], "A-1");

    // An explicit prompt naming a model: run_extraction still uses the configured extraction
    // model (the agent cannot choose it).
    let provider2 = Arc::new(ScriptedProvider::new(vec![Turn::text(
        "{\"number\": \"A-1\", \"total\": 13}",
    )]));
    c.provider = provider2.clone();
    let pid = p.split(':').next().unwrap();
    let p2 = w
        .ok(
            &c,
            "update_prompt",
            json!({"prompt_id": pid, "model": "special"}),
        )
        .await["prompt_revid"]
        .clone();
    let v2 = w
        .ok(
            &c,
            "run_extraction",
            json!({"prompt_revid": p2, "document_id": w.doc_a}),
        )
        .await;
    // 13 is not in the document, which reads 12.5 under its total: the value the document
    // reads is filled in, and the result says what the answer was.
    assert_eq!(v2["result"]["total"], 12.5);
    assert_eq!(v2["filled_from_document"][0]["field"], "total", "{v2}");
    assert_eq!(v2["filled_from_document"][0]["was"], 13, "{v2}");
    assert_eq!(provider2.requests.lock().unwrap()[0].model, "test-model");
    let g = w
        .ok(&c, "get_extraction_result", json!({"document_id": w.doc_a}))
        .await;
    assert_eq!(g["extraction"]["extraction_id"], v2["extraction_id"]);
}

#[tokio::test]
async fn run_extraction_rejects_bad_results_and_foreign_ids() {
    let w = world().await;
    let mut c = w.ctx(w.a);
    c.document_id = Some(w.doc_a);
    let schema = w.schema(&c).await;

    // No prompt in this run yet.
    let m = invalid(w.call(&c, "run_extraction", json!({})).await);
    assert!(m.contains("create_prompt"), "{m}");
    let p = w.prompt(&c, &schema, "Extract.").await;

    // A result that breaks the schema: Invalid listing the problems, nothing stored.
    let provider = Arc::new(ScriptedProvider::new(vec![
        Turn::text("{\"number\": 7, \"total\": \"12,50\", \"extra\": true}"),
        Turn::text("I could not find anything."),
        Turn::Error {
            message: "HTTP 500".into(),
            retryable: true,
        },
    ]));
    c.provider = provider.clone();
    let m = invalid(
        w.call(&c, "run_extraction", json!({"prompt_revid": p}))
            .await,
    );
    assert!(m.contains("/number") && m.contains("/total"), "{m}");
    assert!(m.contains("extra"), "{m}");
    assert!(m.contains("nothing was stored"), "{m}");
    let m = invalid(
        w.call(&c, "run_extraction", json!({"prompt_revid": p}))
            .await,
    );
    assert!(m.contains("did not answer with JSON"), "{m}");
    match w
        .call(&c, "run_extraction", json!({"prompt_revid": p}))
        .await
    {
        Err(CallError::Tool(ToolError::Provider(m))) => assert!(m.contains("HTTP 500"), "{m}"),
        other => panic!("expected Provider, got {other:?}"),
    }
    provider.assert_complete();
    assert_eq!(
        w.count("SELECT count(*) FROM extractions WHERE org_id = $1", w.a)
            .await,
        0
    );

    // Another org's document or prompt: not found, and the model is never called.
    let cb = w.ctx(w.b);
    let sb = w.schema(&cb).await;
    let pb = w.prompt(&cb, &sb, "B").await;
    not_found(
        w.call(
            &c,
            "run_extraction",
            json!({"prompt_revid": p, "document_id": w.doc_b}),
        )
        .await,
    );
    not_found(
        w.call(&c, "run_extraction", json!({"prompt_revid": pb}))
            .await,
    );
    invalid(
        w.call(&c, "run_extraction", json!({"prompt_revid": "x:y"}))
            .await,
    );
    assert_eq!(provider.calls(), 3);
    assert_eq!(
        w.count(
            "SELECT count(*) FROM extractions WHERE $1::uuid IS NOT NULL",
            w.a
        )
        .await,
        0
    );
}

#[tokio::test]
async fn get_extraction_result_per_document() {
    let w = world().await;
    let c = w.ctx(w.a);
    let v = w
        .ok(&c, "get_extraction_result", json!({"document_id": w.doc_a}))
        .await;
    assert_eq!(v["extraction"], Value::Null);
    extract(&w, w.b, w.doc_b, "{\"number\": \"B\", \"total\": 1}").await;
    not_found(
        w.call(&c, "get_extraction_result", json!({"document_id": w.doc_b}))
            .await,
    );
    invalid(w.call(&c, "get_extraction_result", json!({})).await);
    invalid(
        w.call(&c, "get_extraction_result", json!({"document_id": 12}))
            .await,
    );
}

#[tokio::test]
async fn update_extraction_field_edits_and_revalidates() {
    let w = world().await;
    let mut c = w.ctx(w.a);
    c.document_id = Some(w.doc_a);
    let (id, _) = extract(&w, w.a, w.doc_a, "{\"number\": \"A-1\", \"total\": 1}").await;
    let v = w
        .ok(
            &c,
            "update_extraction_field",
            json!({"path": "/total", "value": 12.5}),
        )
        .await;
    assert_eq!(v["result"], json!({"number": "A-1", "total": 12.5}));
    let v = w
        .ok(
            &c,
            "update_extraction_field",
            json!({"path": "number", "value": "A-2", "extraction_id": id}),
        )
        .await;
    assert_eq!(v["result"]["number"], "A-2");
    let stored: Value = sqlx::query_scalar("SELECT result FROM extractions WHERE id = $1")
        .bind(id)
        .fetch_one(w.pool())
        .await
        .unwrap();
    assert_eq!(stored, json!({"number": "A-2", "total": 12.5}));

    let m = invalid(
        w.call(
            &c,
            "update_extraction_field",
            json!({"path": "total", "value": "lots"}),
        )
        .await,
    );
    assert!(
        m.contains("/total") && m.contains("nothing was changed"),
        "{m}"
    );
    invalid(
        w.call(
            &c,
            "update_extraction_field",
            json!({"path": "vendor", "value": "X"}),
        )
        .await,
    );
    invalid(
        w.call(
            &c,
            "update_extraction_field",
            json!({"path": "a..b", "value": 1}),
        )
        .await,
    );
    invalid(
        w.call(&c, "update_extraction_field", json!({"path": "total"}))
            .await,
    );
    let unchanged: Value = sqlx::query_scalar("SELECT result FROM extractions WHERE id = $1")
        .bind(id)
        .fetch_one(w.pool())
        .await
        .unwrap();
    assert_eq!(unchanged, stored);

    // Another org's extraction: not found, unchanged.
    let (idb, _) = extract(&w, w.b, w.doc_b, "{\"number\": \"B\", \"total\": 1}").await;
    not_found(
        w.call(
            &c,
            "update_extraction_field",
            json!({"path": "total", "value": 2, "extraction_id": idb}),
        )
        .await,
    );
    not_found(
        w.call(
            &c,
            "update_extraction_field",
            json!({"path": "total", "value": 2, "document_id": w.doc_b}),
        )
        .await,
    );
    let b: Value = sqlx::query_scalar("SELECT result FROM extractions WHERE id = $1")
        .bind(idb)
        .fetch_one(w.pool())
        .await
        .unwrap();
    assert_eq!(b, json!({"number": "B", "total": 1}));

    // A person accepted it: the agent cannot edit it.
    sqlx::query("UPDATE extractions SET status = 'accepted' WHERE id = $1")
        .bind(id)
        .execute(w.pool())
        .await
        .unwrap();
    conflict(
        w.call(
            &c,
            "update_extraction_field",
            json!({"path": "total", "value": 3}),
        )
        .await,
    );
}
