//! SQL for budget reservations: reserve before a provider call (atomically against the org's
//! limit), settle with the real usage after.

use super::sql;
use chrono::{DateTime, Utc};
use sqlx::{PgConnection, PgPool};
use uuid::Uuid;

/// The answer to a reservation request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reservation {
    /// The org has no budget: nothing to reserve.
    Unlimited,
    /// `tokens` are held under `id` until settled or `expires_at`.
    Held { id: Uuid, tokens: i64 },
    /// Used + reserved + estimate would pass the limit: do not call.
    Refused {
        used: i64,
        reserved: i64,
        limit: i64,
    },
}

/// Reserves `tokens` for `org_id` if `used + unexpired reservations + tokens <= limit`. The org's
/// budget row is locked (and rolled over to `now`'s period) for the check, so concurrent callers
/// are serialised and cannot overshoot together.
pub async fn reserve(
    pool: &PgPool,
    org_id: Uuid,
    tokens: i64,
    now: DateTime<Utc>,
    ttl: chrono::Duration,
) -> sqlx::Result<Reservation> {
    let period = super::runs::period_of(now);
    // A reservation lost with the database server is harmless (it only holds room): no flush.
    let mut tx = super::agent_loop::begin_unflushed(pool).await?;
    let row: Option<(i64, i64)> = sqlx::query_as(
        "UPDATE org_budgets
            SET tokens_used = CASE WHEN period_start >= $2 THEN tokens_used ELSE 0 END,
                period_start = GREATEST(period_start, $2)
          WHERE org_id = $1
      RETURNING tokens_used, monthly_limit",
    )
    .bind(org_id)
    .bind(period)
    .fetch_optional(&mut *tx)
    .await?;
    let Some((used, limit)) = row else {
        return Ok(Reservation::Unlimited);
    };
    let reserved: i64 = sqlx::query_scalar(
        "SELECT COALESCE(sum(tokens), 0)::bigint FROM budget_reservations
          WHERE org_id = $1 AND expires_at > $2",
    )
    .bind(org_id)
    .bind(now)
    .fetch_one(&mut *tx)
    .await?;
    if used.saturating_add(reserved).saturating_add(tokens) > limit {
        tx.rollback().await?;
        return Ok(Reservation::Refused {
            used,
            reserved,
            limit,
        });
    }
    let id = Uuid::now_v7();
    sqlx::query("DELETE FROM budget_reservations WHERE org_id = $1 AND expires_at <= $2")
        .bind(org_id)
        .bind(now)
        .execute(&mut *tx)
        .await?;
    sqlx::query(
        "INSERT INTO budget_reservations (id, org_id, tokens, created_at, expires_at)
         VALUES ($1, $2, $3, $4, $5)",
    )
    .bind(id)
    .bind(org_id)
    .bind(tokens)
    .bind(now)
    .bind(now + ttl)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;
    Ok(Reservation::Held { id, tokens })
}

/// Drops a reservation (settled or abandoned).
pub async fn release(conn: &mut PgConnection, r: &Reservation) -> sqlx::Result<()> {
    if let Reservation::Held { id, .. } = r {
        sql::execute(conn, "DELETE FROM budget_reservations WHERE id = $1", id).await?;
    }
    Ok(())
}
