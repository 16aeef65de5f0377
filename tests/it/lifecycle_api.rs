//! The life-cycle routes over a real port: settings (every key, 422 naming the field, nothing
//! written), reject with a required reason, approve with edited arguments (422 naming
//! `arguments`; re-hashed), suggestions shown/dismiss (reason required, another org → 404).

use crate::api_support;
use agentd::api::Role;
use api_support::Api;
use chrono::Duration;
use serde_json::json;

#[tokio::test]
async fn settings_approvals_and_suggestions_over_http() {
    let api = Api::start().await;
    let (org, admin) = api.org("acme", Role::Admin).await;
    let (other, other_key) = api.org("other", Role::Admin).await;
    let k = Some(admin.as_str());

    // Settings: each bad key is a 422 naming it, and nothing is written.
    for (body, field) in [
        (json!({"timezone": "Nowhere/City"}), "timezone"),
        (json!({"nightly_hour": -1}), "nightly_hour"),
        (json!({"approval_ttl_secs": 99999999}), "approval_ttl_secs"),
        // An org chooses among the offered (priced) models; the operator's path still refuses
        // a cost cap on an unpriced model (tests/it/lifecycle.rs).
        (json!({"cost_cap_cents": 5, "model": "unpriced"}), "model"),
    ] {
        let r = api
            .call("PATCH", "/v1/settings", k, Some(body.clone()))
            .await;
        r.problem_in(&body.to_string(), 422, Some(field));
    }
    let r = api.call("GET", "/v1/settings", k, None).await;
    assert_eq!(
        (r.body["timezone"].as_str(), r.body["nightly_hour"].as_i64()),
        (Some("UTC"), Some(2))
    );
    let r = api
        .call(
            "PATCH",
            "/v1/settings",
            k,
            Some(
                json!({"timezone": "Asia/Tokyo", "nightly_hour": 4, "approval_ttl_secs": 86400,
                        "repropose_expired": true, "auto_create": false, "model": "gpt-4o-mini",
                        "cost_cap_cents": 60, "monthly_token_budget": 2000000}),
            ),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["timezone"], "Asia/Tokyo");
    assert_eq!(
        r.body["effective_token_limit"], 1_000_000,
        "60 cents at 60 cents per million"
    );
    assert_eq!(r.body["monthly_token_budget"], 2_000_000);
    assert_eq!(r.body["auto_create"], false);

    // Approvals: summary and TTL of the org; reject needs a reason.
    let doc = api.doc(org, "invoice.txt").await;
    let rej = api
        .propose(
            org,
            json!({"document_id": doc, "metadata": {"a": 1}}),
            Duration::hours(1),
        )
        .await;
    let r = api
        .call("GET", &format!("/v1/approvals/{rej}"), k, None)
        .await;
    assert_eq!(
        r.body["summary"], "Update document 'invoice.txt': metadata",
        "{}",
        r.body
    );
    assert_eq!(r.body["edited"], false);
    let created =
        chrono::DateTime::parse_from_rfc3339(r.body["created_at"].as_str().unwrap()).unwrap();
    let expires =
        chrono::DateTime::parse_from_rfc3339(r.body["expires_at"].as_str().unwrap()).unwrap();
    assert_eq!(expires - created, Duration::days(1), "the org's TTL");
    let path = format!("/v1/approvals/{rej}/reject");
    api.call("POST", &path, k, None)
        .await
        .problem(422, Some("reason"));
    api.call("POST", &path, k, Some(json!({"reason": " "})))
        .await
        .problem(422, Some("reason"));
    // Another org's approval is 404 whatever the body.
    api.call("POST", &path, Some(other_key.as_str()), None)
        .await
        .problem(404, None);
    let r = api
        .call("POST", &path, k, Some(json!({"reason": "wrong vendor"})))
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["approval"]["decision_reason"], "wrong vendor");

    // Approve with edited arguments (other arguments than the rejected ones: a repeat of a
    // rejected action is not proposed again).
    let ed = api
        .propose(
            org,
            json!({"document_id": doc, "metadata": {"a": 0}}),
            Duration::hours(1),
        )
        .await;
    let path = format!("/v1/approvals/{ed}/approve");
    let r = api
        .call(
            "POST",
            &path,
            k,
            Some(json!({"arguments": {"metadata": "x"}})),
        )
        .await;
    r.problem(422, Some("arguments"));
    let r = api
        .call(
            "POST",
            &path,
            k,
            Some(json!({"arguments": {"metadata": {"a": 2}}})),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(r.body["approval"]["status"], "executed");
    assert_eq!(r.body["approval"]["edited"], true);
    assert_eq!(
        r.body["approval"]["action"]["args"],
        json!({"document_id": doc, "metadata": {"a": 2}})
    );

    // Suggestions.
    let sid = uuid::Uuid::now_v7();
    sqlx::query("INSERT INTO suggestions (id, org_id, kind, subject, night, title, message) VALUES ($1, $2, 'other', '', '2026-01-01', 't', 'm')")
        .bind(sid).bind(org).execute(&api.db.pool).await.unwrap();
    let _ = other;
    api.call(
        "POST",
        &format!("/v1/suggestions/{sid}/shown"),
        Some(other_key.as_str()),
        None,
    )
    .await
    .problem(404, None);
    let r = api
        .call("POST", &format!("/v1/suggestions/{sid}/shown"), k, None)
        .await;
    assert_eq!(r.body["state"], "shown", "{}", r.body);
    api.call("POST", &format!("/v1/suggestions/{sid}/dismiss"), k, None)
        .await
        .problem(422, Some("reason"));
    let r = api
        .call(
            "POST",
            &format!("/v1/suggestions/{sid}/dismiss"),
            k,
            Some(json!({"reason": "not useful"})),
        )
        .await;
    assert_eq!(
        (r.body["state"].as_str(), r.body["status_reason"].as_str()),
        (Some("dismissed"), Some("not useful"))
    );
    let r = api
        .call("POST", &format!("/v1/suggestions/{sid}/shown"), k, None)
        .await;
    r.problem(409, None);
    let r = api.call("GET", "/v1/suggestions", k, None).await;
    assert_eq!(r.body["items"][0]["state"], "dismissed", "{}", r.body);
}

/// Review N13: the operator's limits are ceilings the org's own admin key cannot lift, and an
/// org chooses its model only from the models the service offers; the operator can do both.
#[tokio::test]
async fn an_org_key_cannot_lift_the_operators_limits_or_pick_any_model() {
    let api = Api::start().await;
    let (org, admin) = api.org("acme", Role::Admin).await;
    let k = Some(admin.as_str());
    let operator = |patch: serde_json::Value| {
        let app = api.app.clone();
        async move {
            let p: agentd::org_settings::Patch = serde_json::from_value(patch).unwrap();
            let now = app.clock.now();
            let by = agentd::org_settings::SetBy::Operator;
            agentd::org_settings::apply(&app.pool, &app.config, org, &p, now, by)
                .await
                .unwrap();
        }
    };
    operator(json!({"monthly_token_budget": 1000, "cost_cap_cents": 50})).await;
    for (body, field) in [
        (
            json!({"monthly_token_budget": null}),
            "monthly_token_budget",
        ),
        (
            json!({"monthly_token_budget": 1001}),
            "monthly_token_budget",
        ),
        (json!({"cost_cap_cents": null}), "cost_cap_cents"),
        (json!({"cost_cap_cents": 51}), "cost_cap_cents"),
        (json!({"model": "gpt-5-ultra-expensive"}), "model"),
    ] {
        api.call("PATCH", "/v1/settings", k, Some(body.clone()))
            .await
            .problem_in(&body.to_string(), 422, Some(field));
    }
    let s = api.call("GET", "/v1/settings", k, None).await.body;
    assert_eq!(
        (
            s["monthly_token_budget"].clone(),
            s["cost_cap_cents"].clone(),
            s["model"].clone()
        ),
        (json!(1000), json!(50), serde_json::Value::Null),
        "nothing was written"
    );
    // Lowering, and a model the service offers, are the org's to choose (here the configured
    // model; a price in the built-in table alone is not an offer: `gpt-4.1-mini` is refused).
    api.call(
        "PATCH",
        "/v1/settings",
        k,
        Some(json!({"model": "gpt-4.1-mini"})),
    )
    .await
    .problem_in("a built-in price only", 422, Some("model"));
    let r = api
        .call(
            "PATCH",
            "/v1/settings",
            k,
            Some(
                json!({"monthly_token_budget": 900, "cost_cap_cents": 40, "model": "gpt-4o-mini"}),
            ),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.body);
    // The operator may lift them again.
    operator(json!({"monthly_token_budget": null, "cost_cap_cents": null,
                    "model": "a-model-only-operators-set"}))
    .await;
    let s = api.call("GET", "/v1/settings", k, None).await.body;
    assert_eq!(s["monthly_token_budget"], serde_json::Value::Null);
    assert_eq!(s["model"], "a-model-only-operators-set");
}
