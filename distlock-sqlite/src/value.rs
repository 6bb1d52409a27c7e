//! Values attached to leases: the `LeaseValueStore` implementation, over the values
//! table beside the lease table (`value/*.sql`).

use distlock_api::{async_trait, LeaseValue, LeaseValueStore, LockError, LockInfo, StoreKey, Token, ValuedHolder};
use sqlx::Row as _;

use crate::clock::{left, now_ms};
use crate::store::{fail, SqliteLockStore, Stamp};

#[async_trait]
impl LeaseValueStore for SqliteLockStore {
    /// One autocommit `INSERT … SELECT … ON CONFLICT DO UPDATE` in the store's turn to
    /// write, like [`extend`](distlock_api::LockStore::extend): it writes the key's values
    /// row (with the lease's token and fence) only when the SELECT finds the lease row of
    /// `token` on this boot and unexpired on `CLOCK_BOOTTIME`, the check `extend` makes.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the statement either committed or did not.
    async fn set_value(&self, key: &StoreKey, token: &Token, value: &LeaseValue) -> Result<bool, LockError> {
        self.ready("set_value").await?;
        let boot = Self::boot_id()?;
        let upsert = sqlx::query(&self.inner.sql.value_set)
            .bind(key.as_str())
            .bind(token.as_str())
            .bind(boot)
            .bind(value.as_str())
            .bind(now_ms());
        Ok(self.explained(self.write_one(upsert).await).await.map_err(fail("set_value", key))? == 1)
    }

    /// One `SELECT` of the key's lease row joined with the values row of the same token
    /// and fence, so a value left by an earlier lease of the key is never reported; the
    /// lease counts as [`inspect`](distlock_api::LockStore::inspect) counts it (this
    /// boot, unexpired, and with liveness its holder process not gone).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    async fn inspect_value(&self, key: &StoreKey) -> Result<Option<ValuedHolder>, LockError> {
        self.ready("inspect_value").await?;
        let boot = Self::boot_id()?;
        let row = sqlx::query(&self.inner.sql.value_select).bind(key.as_str()).fetch_optional(&self.inner.pool).await;
        let row = self.explained(row).await.map_err(fail("inspect_value", key))?;
        let fail = fail::<sqlx::Error>("inspect_value", key);
        let now = now_ms();
        let Some(row) = row else { return Ok(None) };
        let stamp = Stamp::of(&row).map_err(&fail)?;
        if !stamp.in_force(boot, now, self.liveness()) {
            return Ok(None);
        }
        let unexpected = |what: &str| fail(sqlx::Error::Protocol(what.to_owned()));
        let token: String = row.try_get("token").map_err(&fail)?;
        let token = Token::parse(&token).map_err(|_| unexpected("a lease row holds a malformed token"))?;
        let fence: i64 = row.try_get("fence").map_err(&fail)?;
        let value: Option<String> = row.try_get("value").map_err(&fail)?;
        let value = value
            .map(|value| LeaseValue::new(value).map_err(|_| unexpected("a values row holds a malformed value")))
            .transpose()?;
        let holder = LockInfo::new(token, u64::try_from(fence).ok(), left(now, stamp.expires_ms));
        Ok(Some(ValuedHolder::new(holder, value)))
    }
}
