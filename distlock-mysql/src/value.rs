//! Values attached to leases: the `LeaseValueStore` implementation, over the values
//! table beside the lease table (`value/*.sql`).

use distlock_api::{async_trait, LeaseValue, LeaseValueStore, LockError, StoreKey, Token, ValuedHolder};
use distlock_sql::listing::lock_info;

use crate::error::UnexpectedAnswer;
use crate::store::{token_text, MysqlLockStore, UNKNOWN_OUTCOME};

/// One row of `value/inspect.sql`: `(token, fence, µs left, value)`.
type ValuedRow = (Option<Vec<u8>>, i64, i64, Option<Vec<u8>>);

#[async_trait]
impl LeaseValueStore for MysqlLockStore {
    /// One autocommit `INSERT … SELECT … ON DUPLICATE KEY UPDATE`: it writes the key's
    /// values row (with the lease's token and fence) only when the SELECT finds the lease
    /// row of `token` unexpired on the server's clock, which it reads with a shared lock,
    /// so the lease cannot end between the check and the write. Run again after a lost
    /// connection or as a deadlock's victim.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] (operation `"set_value"`) when the server fails, or when a
    /// run again after a lost connection found no lease (the first run may have written).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the statement either committed or did not.
    async fn set_value(&self, key: &StoreKey, token: &Token, value: &LeaseValue) -> Result<bool, LockError> {
        let mut attempts = 0;
        let done = self
            .retrying("set_value", || {
                attempts += 1;
                sqlx::query(&self.sql.set_value)
                    .bind(value.as_str().as_bytes())
                    .bind(key.as_str())
                    .bind(token.as_str())
                    .execute(&self.pool)
            })
            .await
            .map_err(|error| self.fail("set_value", key, error))?;
        if done.rows_affected() == 0 && attempts > 1 {
            return Err(self.fail("set_value", key, UNKNOWN_OUTCOME));
        }
        Ok(done.rows_affected() > 0)
    }

    /// One `SELECT`: the key's live lease row joined with the values row of the same
    /// token and fence, so a value left by an earlier lease of the key is never reported.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn inspect_value(&self, key: &StoreKey) -> Result<Option<ValuedHolder>, LockError> {
        let row = self
            .retrying("inspect_value", || {
                sqlx::query_as::<_, ValuedRow>(&self.sql.inspect_value).bind(key.as_str()).fetch_optional(&self.pool)
            })
            .await
            .map_err(|error| self.fail("inspect_value", key, error))?;
        let Some((Some(token), fence, micros_left, value)) = row else {
            return Ok(None);
        };
        let unexpected = |what: String| self.fail("inspect_value", key, UnexpectedAnswer(what));
        let holder = lock_info(token_text(&token), fence, micros_left).map_err(unexpected)?;
        let value = value
            .map(|bytes| {
                let text = String::from_utf8(bytes).map_err(|_| unexpected("a stored value is not UTF-8".into()))?;
                LeaseValue::new(text)
                    .map_err(|error| unexpected(format!("a stored value is not a lease value: {error}")))
            })
            .transpose()?;
        Ok(Some(ValuedHolder::new(holder, value)))
    }
}
