//! The connection a tool step runs on. A step that writes (a write tool, a proposal, a model's
//! answer applied) runs in a transaction with its audit row and checkpoint. A step that only
//! reads — a read tool the policy runs unasked, or a call refused before it runs — writes
//! nothing but the audit row and checkpoint, which are one statement: it needs no transaction,
//! and saves the `BEGIN` and `COMMIT` round trips (issue 18: the step overhead).

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, PgPool, Postgres, Transaction};
use std::ops::{Deref, DerefMut};

pub(super) enum StepConn {
    /// Everything until [`StepConn::commit`] is one transaction.
    Tx(Transaction<'static, Postgres>),
    /// Each statement is its own transaction; only the last may write.
    Plain(PoolConnection<Postgres>),
}

impl StepConn {
    /// A transaction when the step may write, else a plain connection.
    pub(super) async fn open(pool: &PgPool, writes: bool) -> sqlx::Result<Self> {
        Ok(match writes {
            true => StepConn::Tx(pool.begin().await?),
            false => StepConn::Plain(pool.acquire().await?),
        })
    }

    /// Drops what a failed call wrote: a transaction is rolled back and a new one begun.
    pub(super) async fn undo(self, pool: &PgPool) -> sqlx::Result<Self> {
        match self {
            StepConn::Tx(tx) => {
                tx.rollback().await?;
                Ok(StepConn::Tx(pool.begin().await?))
            }
            plain => Ok(plain),
        }
    }

    /// Commits the transaction (a plain connection's statements committed as they ran).
    pub(super) async fn commit(self) -> sqlx::Result<()> {
        match self {
            StepConn::Tx(tx) => tx.commit().await,
            StepConn::Plain(_) => Ok(()),
        }
    }

    /// The step as a transaction (begun now on a plain connection, which has written nothing).
    pub(super) async fn into_tx(
        self,
        pool: &PgPool,
    ) -> sqlx::Result<Transaction<'static, Postgres>> {
        match self {
            StepConn::Tx(tx) => Ok(tx),
            StepConn::Plain(conn) => {
                drop(conn);
                pool.begin().await
            }
        }
    }
}

impl From<Transaction<'static, Postgres>> for StepConn {
    fn from(tx: Transaction<'static, Postgres>) -> Self {
        StepConn::Tx(tx)
    }
}

impl Deref for StepConn {
    type Target = PgConnection;
    fn deref(&self) -> &PgConnection {
        match self {
            StepConn::Tx(tx) => tx,
            StepConn::Plain(c) => c,
        }
    }
}

impl DerefMut for StepConn {
    fn deref_mut(&mut self) -> &mut PgConnection {
        match self {
            StepConn::Tx(tx) => &mut *tx,
            StepConn::Plain(c) => &mut *c,
        }
    }
}
