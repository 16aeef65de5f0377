//! Defence in depth in the database (issue 12): foreign keys that include `org_id` refuse a row
//! that references another organisation's row, and the application role the docs recommend
//! (granted by `agentd_grant_app`) runs agentd but cannot disable the audit trigger or rewrite
//! audit rows.

use crate::common;
use agentd::app::App;
use agentd::catalog::Catalog;
use agentd::clock::{SharedClock, SystemClock};
use common::{TestDb, wait_until};
use sqlx::postgres::PgPoolOptions;
use sqlx::{Connection, PgConnection, PgPool};
use std::sync::Arc;
use uuid::Uuid;

async fn org(pool: &PgPool, name: &str) -> Uuid {
    agentd::store::orgs::ensure(pool, name).await.unwrap().id
}

fn sql_state(e: &sqlx::Error) -> Option<String> {
    e.as_database_error()
        .and_then(|d| d.code())
        .map(|c| c.to_string())
}

#[tokio::test]
async fn foreign_keys_refuse_a_reference_to_another_orgs_row() {
    let db = TestDb::new().await;
    let (a, b) = (org(&db.pool, "a").await, org(&db.pool, "b").await);
    let doc_b = Uuid::now_v7();
    sqlx::query("INSERT INTO documents (id, org_id, name, text) VALUES ($1, $2, 'b.txt', 'x')")
        .bind(doc_b)
        .bind(b)
        .execute(&db.pool)
        .await
        .unwrap();
    let schema_b = Uuid::now_v7();
    sqlx::query(
        "INSERT INTO schemas (schema_id, version, org_id, name, response_format, status)
         VALUES ($1, 1, $2, 's', '{}', 'proposed')",
    )
    .bind(schema_b)
    .bind(b)
    .execute(&db.pool)
    .await
    .unwrap();
    let prompt = |org: Uuid| {
        sqlx::query(
            "INSERT INTO prompts (prompt_id, version, org_id, name, content, schema_id, schema_version, status)
             VALUES ($1, 1, $2, 'p', 'c', $3, 1, 'proposed')",
        )
        .bind(Uuid::now_v7())
        .bind(org)
        .bind(schema_b)
        .execute(&db.pool)
    };
    let extraction = |org: Uuid| {
        sqlx::query(
            "INSERT INTO extractions (id, org_id, document_id, prompt_id, prompt_version, schema_id,
                                      schema_version, result, status)
             VALUES ($1, $2, $3, $4, 1, $5, 1, '{}', 'proposed')",
        )
        .bind(Uuid::now_v7())
        .bind(org)
        .bind(doc_b)
        .bind(Uuid::now_v7())
        .bind(schema_b)
        .execute(&db.pool)
    };
    let suggestion = |org: Uuid| {
        sqlx::query(
            "INSERT INTO suggestions (id, org_id, kind, subject, night, title, message, document_id)
             VALUES ($1, $2, 'k', $1::text, '2026-11-22', 't', 'm', $3)",
        )
        .bind(Uuid::now_v7())
        .bind(org)
        .bind(doc_b)
        .execute(&db.pool)
    };
    // Org a's rows pointing at org b's schema and document are refused...
    for (what, r) in [
        ("prompt → schema", prompt(a).await),
        ("extraction → document", extraction(a).await),
        ("suggestion → document", suggestion(a).await),
    ] {
        let e = r.expect_err(what);
        assert_eq!(sql_state(&e).as_deref(), Some("23503"), "{what}: {e}");
    }
    // ... the same rows inside org b are fine.
    prompt(b).await.unwrap();
    extraction(b).await.unwrap();
    suggestion(b).await.unwrap();
    // And moving a row to another org is refused too.
    let e = sqlx::query("UPDATE extractions SET org_id = $1")
        .bind(a)
        .execute(&db.pool)
        .await
        .unwrap_err();
    assert_eq!(sql_state(&e).as_deref(), Some("23503"), "{e}");
    // Deleting org b's document still cascades to its extractions and unlinks suggestions.
    sqlx::query("DELETE FROM documents WHERE id = $1")
        .bind(doc_b)
        .execute(&db.pool)
        .await
        .unwrap();
    let (ex, linked): (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM extractions), (SELECT count(*) FROM suggestions WHERE document_id IS NOT NULL)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((ex, linked), (0, 0));
}

/// A login role created for one test (roles are cluster-wide), dropped at the end.
struct AppRole {
    name: String,
    url: String,
    db_url: String,
}

impl AppRole {
    async fn create(db: &TestDb) -> Self {
        let name = format!("agentd_app_{}", &Uuid::new_v4().simple().to_string()[..12]);
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "CREATE ROLE {name} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE; \
             GRANT CONNECT ON DATABASE {} TO {name}; SELECT agentd_grant_app('{name}')",
            db.name
        )))
        .execute(&db.pool)
        .await
        .unwrap();
        let url = db.url.replacen("://postgres@", &format!("://{name}@"), 1);
        assert_ne!(url, db.url, "the test URL names the postgres user");
        Self {
            name,
            url,
            db_url: db.url.clone(),
        }
    }

    async fn drop_role(self) {
        let mut c = PgConnection::connect(&self.db_url).await.unwrap();
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP OWNED BY {0}; DROP ROLE {0}",
            self.name
        )))
        .execute(&mut c)
        .await
        .unwrap();
    }
}

#[tokio::test]
async fn the_app_role_cannot_disable_the_audit_trigger_or_rewrite_audit_rows() {
    let db = TestDb::new().await;
    let role = AppRole::create(&db).await;
    let org = org(&db.pool, "acme").await;
    let mut app_conn = PgConnection::connect(&role.url).await.unwrap();
    let who: (String, bool) = sqlx::query_as(
        "SELECT current_user::text, (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)",
    )
    .fetch_one(&mut app_conn)
    .await
    .unwrap();
    assert_eq!(who, (role.name.clone(), false));
    // It appends and reads audit rows.
    sqlx::query(
        "INSERT INTO audit_events (org_id, actor, tool, category, decision) VALUES ($1, 'agent', 'get_document', 'read', 'auto_approved')",
    )
    .bind(org)
    .execute(&mut app_conn)
    .await
    .unwrap();
    let n: i64 = sqlx::query_scalar("SELECT count(*) FROM audit_events")
        .fetch_one(&mut app_conn)
        .await
        .unwrap();
    assert_eq!(n, 1);
    // It cannot switch the append-only trigger off, drop it, or get around it.
    for sql in [
        "ALTER TABLE audit_events DISABLE TRIGGER audit_events_no_update",
        "ALTER TABLE audit_events DISABLE TRIGGER ALL",
        "DROP TRIGGER audit_events_no_update ON audit_events",
        "DROP FUNCTION audit_events_append_only() CASCADE",
        "UPDATE audit_events SET decision = 'human_approved'",
        "DELETE FROM audit_events",
        "TRUNCATE audit_events",
        "SET session_replication_role = replica",
    ] {
        let e = sqlx::raw_sql(sql).execute(&mut app_conn).await.unwrap_err();
        assert_eq!(sql_state(&e).as_deref(), Some("42501"), "{sql}: {e}");
    }
    let decision: String = sqlx::query_scalar("SELECT decision FROM audit_events")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(decision, "auto_approved", "the audit row is unchanged");
    app_conn.close().await.unwrap();

    // agentd itself runs as this role: a worker takes an upload to a proposal.
    let pool = PgPoolOptions::new()
        .max_connections(10)
        .connect(&role.url)
        .await
        .unwrap();
    agentd::db::migrate(&pool)
        .await
        .expect("nothing to migrate: the role needs no DDL");
    let mut app = App::new(
        pool.clone(),
        Arc::new(SystemClock) as SharedClock,
        common::test_config(),
        Catalog::builtin(&agentd::known_tool_names()).unwrap(),
    );
    app.provider = Arc::new(agentd::llm::offline::OfflineProvider::default());
    let (doc, _) = agentd::documents::add_document(
        &app,
        org,
        "inv.txt",
        "Invoice Number: INV-77\nTotal Due: 1,250.00\nCustomer: Blue Fox\n",
        true,
    )
    .await
    .unwrap();
    let (w, stop) = common::start_worker(&app, "auto_create", None).await;
    wait_until(60, "the document is proposed", || async {
        let s: String =
            sqlx::query_scalar("SELECT auto_create_status FROM documents WHERE id = $1")
                .bind(doc)
                .fetch_one(&db.pool)
                .await
                .unwrap();
        s == "proposed"
    })
    .await;
    stop.cancel();
    w.join().await;
    let audited: i64 =
        sqlx::query_scalar("SELECT count(*) FROM audit_events WHERE run_id IS NOT NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert!(
        audited > 0,
        "the run's tool calls were audited by the app role"
    );
    pool.close().await;
    role.drop_role().await;
}

/// No function that runs as its owner (SECURITY DEFINER) may be executed by PUBLIC (review D4):
/// a login with no grants at all is refused `agentd_purge_history`, and the application role
/// (granted by `agentd_grant_app`) still calls it.
#[tokio::test]
async fn no_security_definer_function_is_executable_by_public_or_a_role_without_grants() {
    let db = TestDb::new().await;
    let definers: Vec<(String, bool)> = sqlx::query_as(
        "SELECT p.oid::regprocedure::text, has_function_privilege('public', p.oid, 'EXECUTE')
           FROM pg_proc p
          WHERE p.pronamespace = current_schema()::regnamespace AND p.prosecdef
          ORDER BY 1",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert!(
        definers
            .iter()
            .any(|(f, _)| f.starts_with("agentd_purge_history(")),
        "{definers:?}"
    );
    let public: Vec<&String> = definers.iter().filter(|d| d.1).map(|d| &d.0).collect();
    assert!(public.is_empty(), "executable by PUBLIC: {public:?}");

    // A login that may connect (PUBLIC's default) and nothing else.
    let stranger = format!(
        "agentd_nobody_{}",
        &Uuid::new_v4().simple().to_string()[..12]
    );
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
        "CREATE ROLE {stranger} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE"
    )))
    .execute(&db.pool)
    .await
    .unwrap();
    let url = db
        .url
        .replacen("://postgres@", &format!("://{stranger}@"), 1);
    let mut c = PgConnection::connect(&url).await.unwrap();
    let e = sqlx::query_scalar::<_, i64>(
        "SELECT agentd_purge_history('audit_events', 'infinity', 1000000000)",
    )
    .fetch_one(&mut c)
    .await
    .unwrap_err();
    assert_eq!(sql_state(&e).as_deref(), Some("42501"), "{e}");
    c.close().await.unwrap();
    sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP ROLE {stranger}")))
        .execute(&db.pool)
        .await
        .unwrap();

    let role = AppRole::create(&db).await;
    let mut app = PgConnection::connect(&role.url).await.unwrap();
    let n: i64 = sqlx::query_scalar("SELECT agentd_purge_history('audit_events', now(), 1000)")
        .fetch_one(&mut app)
        .await
        .unwrap();
    assert_eq!(n, 0, "the app role may call it");
    app.close().await.unwrap();
    role.drop_role().await;
}

/// Time-based retention (review #10) runs as this role too: it cannot delete audit rows or
/// provider calls itself, even with the purge's setting, and `agentd_purge_history` removes only
/// rows older than the owner's floor (30 days) whatever cutoff it is given.
#[tokio::test]
async fn the_app_role_purges_old_audit_rows_only_through_the_function_and_never_recent_ones() {
    let db = TestDb::new().await;
    let role = AppRole::create(&db).await;
    let org = org(&db.pool, "acme").await;
    let mut c = PgConnection::connect(&role.url).await.unwrap();
    for (table, days) in [
        ("audit_events", 400),
        ("audit_events", 3),
        ("provider_calls", 400),
        ("provider_calls", 3),
    ] {
        let sql = if table == "audit_events" {
            "INSERT INTO audit_events (org_id, actor, tool, category, decision, created_at)
             VALUES ($1, 'agent', 'get_document', 'read', 'auto_approved', now() - make_interval(days => $2))"
        } else {
            "INSERT INTO provider_calls (org_id, provider, model, outcome, created_at)
             VALUES ($1, 'offline', 'm', 'answered', now() - make_interval(days => $2))"
        };
        sqlx::query(sql)
            .bind(org)
            .bind(days)
            .execute(&mut c)
            .await
            .unwrap();
    }
    sqlx::raw_sql("SET agentd.history_purge = 'on'")
        .execute(&mut c)
        .await
        .unwrap();
    for sql in ["DELETE FROM audit_events", "DELETE FROM provider_calls"] {
        let e = sqlx::raw_sql(sql).execute(&mut c).await.unwrap_err();
        assert_eq!(sql_state(&e).as_deref(), Some("42501"), "{sql}: {e}");
    }
    for table in ["audit_events", "provider_calls"] {
        let n: i64 =
            sqlx::query_scalar("SELECT agentd_purge_history($1, now() + interval '1 year', 1000)")
                .bind(table)
                .fetch_one(&mut c)
                .await
                .unwrap();
        assert_eq!(n, 1, "{table}: only the 400-day-old row");
    }
    let left: (i64, i64) = sqlx::query_as(
        "SELECT (SELECT count(*) FROM audit_events), (SELECT count(*) FROM provider_calls)",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    assert_eq!(left, (1, 1));
    c.close().await.unwrap();
    role.drop_role().await;
}
