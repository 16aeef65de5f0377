//! Harness of the HTTP API tests: a real server on a real port (127.0.0.1:0) over a fresh
//! database, driven with reqwest; orgs and keys made the way `agentd orgs create` makes them.
#![allow(dead_code)]

use crate::common::{self, TestDb};
use agentd::api::{Role, create_key};
use agentd::app::App;
use agentd::clock::{ManualClock, SharedClock};
use agentd::store::{api_keys, documents};
use chrono::{SubsecRound, Utc};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use std::sync::Arc;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

/// A running API over its own database.
pub struct Api {
    pub db: TestDb,
    pub app: App,
    pub clock: Arc<ManualClock>,
    pub base: String,
    pub http: reqwest::Client,
    stop: CancellationToken,
}

impl Drop for Api {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// An answer: status, headers and the JSON body (Null when empty or not JSON).
pub struct Answer {
    pub status: StatusCode,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Answer {
    /// Asserts a problem detail with this status (and field, when given).
    pub fn problem(&self, status: u16, field: Option<&str>) {
        self.problem_in("", status, field)
    }

    /// [`Answer::problem`], naming the request in the failure message.
    pub fn problem_in(&self, what: &str, status: u16, field: Option<&str>) {
        let b = &self.body;
        assert_eq!(self.status.as_u16(), status, "{what}: {b}");
        let ct = self.headers["content-type"].to_str().unwrap();
        assert_eq!(ct, "application/problem+json", "{what}: {b}");
        assert_eq!(b["status"], json!(status), "{what}: {b}");
        for k in ["type", "title", "detail"] {
            assert!(b[k].is_string(), "{what}: problem without {k}: {b}");
        }
        if let Some(f) = field {
            assert_eq!(b["field"], json!(f), "{what}: {b}");
        }
    }
}

impl Api {
    /// Starts the API (manual clock at now, offline provider).
    pub async fn start() -> Api {
        Self::start_with(|_| {}).await
    }

    /// [`Api::start`] with the service config changed by `configure` first.
    pub async fn start_with(configure: impl FnOnce(&mut agentd::config::Config)) -> Api {
        let db = TestDb::new().await;
        let clock = ManualClock::new(Utc::now().trunc_subsecs(6));
        let mut app = common::app(&db, clock.clone() as SharedClock);
        let mut config = (*app.config).clone();
        configure(&mut config);
        app.config = Arc::new(config);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let stop = CancellationToken::new();
        tokio::spawn(agentd::api::serve(
            listener,
            None,
            app.clone(),
            stop.clone(),
        ));
        Api {
            db,
            app,
            clock,
            base,
            http: reqwest::Client::new(),
            stop,
        }
    }

    /// A new org and a key of `role` for it.
    pub async fn org(&self, name: &str, role: Role) -> (Uuid, String) {
        let org = api_keys::create_org(&self.db.pool, name)
            .await
            .unwrap()
            .expect("new org");
        (org, self.key(org, role).await)
    }

    /// Another key for `org`.
    pub async fn key(&self, org: Uuid, role: Role) -> String {
        create_key(&self.db.pool, org, role, Utc::now())
            .await
            .unwrap()
            .1
    }

    /// Sends a request; `body` is sent as JSON when given.
    pub async fn call(
        &self,
        method: &str,
        path: &str,
        key: Option<&str>,
        body: Option<Value>,
    ) -> Answer {
        let mut req = self.http.request(
            Method::from_bytes(method.as_bytes()).unwrap(),
            format!("{}{path}", self.base),
        );
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        answer(req).await
    }

    /// Sends raw bytes with a content type and extra headers.
    pub async fn raw(
        &self,
        method: &str,
        path: &str,
        key: &str,
        content_type: &str,
        body: Vec<u8>,
        headers: &[(&str, &str)],
    ) -> Answer {
        let mut req = self
            .http
            .request(
                Method::from_bytes(method.as_bytes()).unwrap(),
                format!("{}{path}", self.base),
            )
            .bearer_auth(key)
            .header("content-type", content_type)
            .body(body);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        answer(req).await
    }

    /// A document inserted directly (no API), for tests that need one.
    pub async fn doc(&self, org: Uuid, name: &str) -> Uuid {
        let mut conn = self.db.pool.acquire().await.unwrap();
        documents::insert(
            &mut conn,
            org,
            name,
            Some("Invoice Number: INV-1\nTotal: 12.50\n"),
            &json!({}),
            Utc::now(),
        )
        .await
        .unwrap()
    }

    /// Proposes `update_document(args)` for `org` outside a run, with `ttl`.
    pub async fn propose(&self, org: Uuid, args: Value, ttl: chrono::Duration) -> Uuid {
        let env = self.app.tool_env(self.app.spec("proactive_suggestion"));
        let tool = self.app.registry.get("update_document").unwrap().clone();
        let mut tx = self.db.pool.begin().await.unwrap();
        let now = agentd::clock::Clock::now(self.clock.as_ref());
        let mut ctx = env.ctx(&mut tx, org, None, "agent:test".into(), now);
        let origin = agentd::approvals::ProposalOrigin {
            call_id: None,
            suggestion_id: None,
            ttl,
            repropose: false,
            chain: None,
            rationale: None,
        };
        let id = agentd::approvals::propose(&mut ctx, tool.as_ref(), &args, origin)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        id
    }

    /// A count from SQL.
    pub async fn count(&self, sql: &str) -> i64 {
        sqlx::query_scalar(sqlx::AssertSqlSafe(sql.to_string()))
            .fetch_one(&self.db.pool)
            .await
            .unwrap()
    }
}

async fn answer(req: reqwest::RequestBuilder) -> Answer {
    let res = req.send().await.expect("the API answers");
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.bytes().await.unwrap();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Answer {
        status,
        headers,
        body,
    }
}
