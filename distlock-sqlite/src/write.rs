//! A write transaction: `BEGIN IMMEDIATE` on a pooled connection, in the store's turn to
//! write. Imports only the gate's turn.
//!
//! sqlx's `Transaction` is not used: begun with a statement of its own (`BEGIN
//! IMMEDIATE`), it awaits once more after SQLite has granted the transaction and before
//! the `Transaction` exists, and a caller cancelled there would leave its connection in
//! the pool inside a transaction. Here the guard exists before `BEGIN` is sent.

use sqlx::pool::PoolConnection;
use sqlx::sqlite::{Sqlite, SqliteConnection};

use crate::gate::Turn;

/// A write transaction and the store's turns to write: in the process and, when the
/// database has a gate, on the host. It ends with [`commit`](Self::commit) or
/// [`rollback`](Self::rollback); dropped while open (an error, a cancelled caller), it
/// closes its connection, which rolls the transaction back whatever was sent last.
pub(crate) struct Write<'a> {
    // Field order is drop order: the connection is handed back (or closed) before the
    // turns are let go.
    conn: PoolConnection<Sqlite>,
    /// Whether `BEGIN` may have been sent without a `COMMIT` or `ROLLBACK` that
    /// completed.
    open: bool,
    _host_turn: Option<Turn>,
    _turn: tokio::sync::MutexGuard<'a, ()>,
}

impl<'a> Write<'a> {
    /// Sends `BEGIN IMMEDIATE` on `conn` (SQLite's write lock, waited for through its
    /// `busy_timeout`), holding the turns until the transaction ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped before it completes, the connection is closed.
    pub(crate) async fn begin(
        conn: PoolConnection<Sqlite>,
        turn: tokio::sync::MutexGuard<'a, ()>,
        host_turn: Option<Turn>,
    ) -> Result<Self, sqlx::Error> {
        let mut write = Self { conn, open: true, _host_turn: host_turn, _turn: turn };
        sqlx::query("BEGIN IMMEDIATE").execute(write.conn()).await?;
        Ok(write)
    }

    /// The transaction's connection.
    pub(crate) fn conn(&mut self) -> &mut SqliteConnection {
        &mut self.conn
    }

    /// Commits the transaction.
    pub(crate) async fn commit(mut self) -> Result<(), sqlx::Error> {
        sqlx::query("COMMIT").execute(self.conn()).await?;
        self.open = false;
        Ok(())
    }

    /// Rolls the transaction back (a write that found nothing to change); when that
    /// fails, the connection is closed instead.
    pub(crate) async fn rollback(mut self) {
        match sqlx::query("ROLLBACK").execute(self.conn()).await {
            Ok(_) => self.open = false,
            Err(error) => tracing::debug!(%error, "a rollback failed; closing its connection"),
        }
    }
}

impl Drop for Write<'_> {
    fn drop(&mut self) {
        if self.open {
            self.conn.close_on_drop();
        }
    }
}
