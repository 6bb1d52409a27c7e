//! Values attached to leases ([`LeaseValueStore`]): what leader election publishes.
//!
//! The values live in a table beside the lease table, `<table>_values (key, token, fence,
//! value, written_at)`, one row per key, stamped with the token and fence of the lease it
//! belongs to. The lease statements never touch it, so acquire, release and extend cost
//! what they cost without values, and a lease table made without it keeps working: the
//! table is created on first use (when the store creates its schema), as the queue table
//! is.
//!
//! A value is written only while its lease is live and read only through a join with
//! the live lease on token and fence, so a value left by an earlier lease of the key (a
//! release, an expiry, a hand-over to a waiter, a purged row re-created: each draws a new
//! fence) is never returned, and a release or an acquisition has nothing to delete.

use distlock_api::{async_trait, LeaseValue, LeaseValueStore, LockError, StoreKey, Token, ValuedHolder};
use distlock_sql::listing::lock_info;

use crate::error::{SchemaProblem, UnexpectedAnswer};
use crate::store::PostgresLockStore;

/// One row of `values/inspect.sql`: `(token, fence, µs left, value)`.
type ValuedRow = (Option<String>, i64, i64, Option<String>);

impl PostgresLockStore {
    /// Makes sure the table of lease values exists, once per store (and its clones):
    /// creates it when the store creates its schema, under the schema lock; otherwise
    /// fails naming it. A failure is not remembered: the next call checks again.
    async fn values_ready(&self, operation: &'static str, key: &StoreKey) -> Result<(), LockError> {
        self.values_state()
            .get_or_try_init(|| async {
                let sql = &self.statements().values;
                let exists: bool = self
                    .retrying(operation, || sqlx::query_scalar(&sql.exists).fetch_one(self.pool()))
                    .await
                    .map_err(|error| self.fail(operation, key, error))?;
                if exists {
                    return Ok(());
                }
                if !self.creates_schema() {
                    return Err(self.fail(
                        operation,
                        key,
                        SchemaProblem(format!(
                            "table {} of lease values does not exist (create_schema is off, so the store creates \
                             nothing: run the statement of `Statements::values_ddl` as the owner)",
                            sql.table
                        )),
                    ));
                }
                let create = async {
                    let mut tx = self.begin_schema_change().await?;
                    sqlx::query(&sql.create).execute(&mut *tx).await?;
                    tx.commit().await
                };
                create.await.map_err(|error| self.fail(operation, key, error))
            })
            .await
            .map(|_| ())
    }

    /// Whether the table of lease values exists (for the purge, which skips it otherwise
    /// and never creates it).
    pub(crate) async fn has_values_table(&self) -> Result<bool, distlock_api::BoxError> {
        if self.values_state().initialized() {
            return Ok(true);
        }
        let exists = &self.statements().values.exists;
        self.retrying("purge", || sqlx::query_scalar(exists).fetch_one(self.pool())).await
    }
}

#[async_trait]
impl LeaseValueStore for PostgresLockStore {
    /// One `INSERT … SELECT` from the live lease of `token` (by the server's
    /// `clock_timestamp()`) `… ON CONFLICT (key) DO UPDATE`, stamped with the lease's
    /// token and fence (run again on another connection when its connection was lost:
    /// writing the same value twice is harmless). The first call of a store creates the
    /// table of values if it is missing (see "Values attached to leases" in the crate
    /// documentation).
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] (operation `"set_value"`) when the statement fails, or when
    /// the table is missing and the store may not create it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the statement either committed or did not.
    async fn set_value(&self, key: &StoreKey, token: &Token, value: &LeaseValue) -> Result<bool, LockError> {
        const OPERATION: &str = "set_value";
        self.values_ready(OPERATION, key).await?;
        let set = &self.statements().values.set;
        let done = self
            .retrying(OPERATION, || {
                sqlx::query(set).bind(key.as_str()).bind(token.as_str()).bind(value.as_str()).execute(self.pool())
            })
            .await
            .map_err(|error| self.fail(OPERATION, key, error))?;
        Ok(done.rows_affected() == 1)
    }

    /// One `SELECT` of the live lease `LEFT JOIN` its value (same key, token and fence);
    /// the time left is computed on the server.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] (operation `"inspect_value"`) when the statement fails, or
    /// when the table is missing and the store may not create it.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads (the first call may create the table, in a transaction
    /// that commits or not).
    async fn inspect_value(&self, key: &StoreKey) -> Result<Option<ValuedHolder>, LockError> {
        const OPERATION: &str = "inspect_value";
        self.values_ready(OPERATION, key).await?;
        let inspect = &self.statements().values.inspect;
        let row = self
            .retrying(OPERATION, || {
                sqlx::query_as::<_, ValuedRow>(inspect).bind(key.as_str()).fetch_optional(self.pool())
            })
            .await
            .map_err(|error| self.fail(OPERATION, key, error))?;
        let Some((Some(token), fence, micros_left, value)) = row else {
            return Ok(None);
        };
        let holder =
            lock_info(&token, fence, micros_left).map_err(|what| self.fail(OPERATION, key, UnexpectedAnswer(what)))?;
        let value = value
            .map(LeaseValue::new)
            .transpose()
            .map_err(|error| self.fail(OPERATION, key, UnexpectedAnswer(format!("a stored value: {error}"))))?;
        Ok(Some(ValuedHolder::new(holder, value)))
    }
}
