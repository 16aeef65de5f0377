//! Two writers at once (review #23): the second waits for the first and then succeeds on what
//! the first committed, instead of failing or duplicating.

use super::*;

/// Calls `first` in a transaction left open, then `second` in its own transaction on another
/// task; commits the first once the second waits on a lock (or has finished without waiting,
/// which is the bug these tests catch). Returns both results, after both committed.
async fn overlapping(
    w: &World,
    c: &Ctx,
    first: (&'static str, Value),
    second: (&'static str, Value),
) -> (Value, Result<Value, CallError>) {
    let mut tx1 = w.pool().begin().await.unwrap();
    let mut ctx = tool_ctx(c, &mut tx1);
    let one = builtin_registry()
        .execute(&mut ctx, first.0, &first.1)
        .await
        .unwrap_or_else(|e| panic!("{}: {e:?}", first.0));
    drop(ctx);
    let (pool, c2) = (w.pool().clone(), c.clone());
    let task = tokio::spawn(async move {
        let mut tx2 = pool.begin().await.unwrap();
        let mut ctx = tool_ctx(&c2, &mut tx2);
        let r = builtin_registry()
            .execute(&mut ctx, second.0, &second.1)
            .await;
        drop(ctx);
        tx2.commit().await.unwrap();
        r
    });
    let waiting = "SELECT count(*) FROM pg_stat_activity
                    WHERE datname = current_database() AND wait_event_type = 'Lock'";
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !task.is_finished() {
        let n: i64 = sqlx::query_scalar(waiting)
            .fetch_one(w.pool())
            .await
            .unwrap();
        if n > 0 || tokio::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    tx1.commit().await.unwrap();
    (one, task.await.unwrap())
}

#[tokio::test]
async fn concurrent_updates_of_a_schema_or_prompt_make_consecutive_versions() {
    let w = world().await;
    let c = w.ctx(w.a);
    let schema = w.schema(&c).await;
    let id = schema.split(':').next().unwrap().to_string();
    let described = |what: &str| {
        let mut rf = invoice_rf();
        rf["json_schema"]["schema"]["properties"]["number"]["description"] = json!(what);
        json!({"schema_id": id, "response_format": rf})
    };
    let (one, two) = overlapping(
        &w,
        &c,
        ("update_schema", described("one")),
        ("update_schema", described("two")),
    )
    .await;
    let two = two.expect("the second update waits and follows the first");
    assert_eq!(one["schema_revid"], format!("{id}:2"));
    assert_eq!(two["schema_revid"], format!("{id}:3"));

    let prompt = w.prompt(&c, &schema, "Extract.").await;
    let pid = prompt.split(':').next().unwrap().to_string();
    let (one, two) = overlapping(
        &w,
        &c,
        (
            "update_prompt",
            json!({"prompt_id": pid, "content": "One."}),
        ),
        (
            "update_prompt",
            json!({"prompt_id": pid, "content": "Two."}),
        ),
    )
    .await;
    let two = two.expect("the second update waits and follows the first");
    assert_eq!(one["prompt_revid"], format!("{pid}:2"));
    assert_eq!(two["prompt_revid"], format!("{pid}:3"));
}

#[tokio::test]
async fn tags_created_at_once_in_two_cases_are_one_tag() {
    let w = world().await;
    let c = w.ctx(w.a);
    let (one, two) = overlapping(
        &w,
        &c,
        ("create_tag", json!({"name": "Urgent", "color": "#ff0000"})),
        ("create_tag", json!({"name": "urgent", "color": "#00ff00"})),
    )
    .await;
    let two = two.expect("the second create returns the first tag");
    assert_eq!(two["existing"], true, "{two}");
    assert_eq!(two["tag_id"], one["tag_id"]);
    let n = w
        .count(
            "SELECT count(*) FROM tags WHERE org_id = $1 AND lower(name) = 'urgent'",
            w.a,
        )
        .await;
    assert_eq!(n, 1);
}
