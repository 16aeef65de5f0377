//! The PostgreSQL server the benchmarks run against.

use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use std::time::Duration;

/// The PostgreSQL server the benchmarks use; each part gets its own database on it.
#[derive(Clone)]
pub struct Server {
    pub opts: PgConnectOptions,
    admin: PgPool,
}

impl Server {
    /// Connects to the administration database of `url`.
    pub async fn connect(url: &str) -> anyhow::Result<Self> {
        // agentd's own connection defaults (no TLS over loopback), as the service uses them.
        let opts = agentd::db::connect_options(url)
            .map_err(|e| anyhow::anyhow!("--server-url {url:?}: {e}"))?;
        let admin = PgPoolOptions::new()
            .max_connections(2)
            .connect_with(opts.clone())
            .await
            .map_err(|e| anyhow::anyhow!("--server-url: cannot connect to {url}: {e}"))?;
        Ok(Self { opts, admin })
    }

    /// Drops (terminating its sessions) and re-creates database `name`.
    pub async fn recreate(&self, name: &str) -> anyhow::Result<()> {
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&self.admin)
        .await?;
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
            .execute(&self.admin)
            .await?;
        Ok(())
    }

    /// Drops database `name`.
    pub async fn drop_db(&self, name: &str) -> anyhow::Result<()> {
        assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'));
        sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&self.admin)
        .await?;
        Ok(())
    }

    /// A pool on database `name`.
    pub async fn pool(&self, name: &str, max: u32) -> anyhow::Result<PgPool> {
        Ok(PgPoolOptions::new()
            .max_connections(max)
            .acquire_timeout(Duration::from_secs(30))
            .connect_with(self.opts.clone().database(name))
            .await?)
    }

    /// A fresh database `name` with agentd's migrations applied.
    pub async fn agentd_db(&self, name: &str, max: u32) -> anyhow::Result<PgPool> {
        self.recreate(name).await?;
        let pool = self.pool(name, max).await?;
        agentd::db::migrate(&pool).await?;
        Ok(pool)
    }

    /// The administration pool (database statistics, `pg_stat_activity`).
    pub fn admin(&self) -> &PgPool {
        &self.admin
    }

    /// Transactions committed in database `name` so far (`pg_stat_database.xact_commit`).
    pub async fn xact_commit(&self, name: &str) -> anyhow::Result<i64> {
        Ok(
            sqlx::query_scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = $1")
                .bind(name)
                .fetch_one(&self.admin)
                .await?,
        )
    }
}
