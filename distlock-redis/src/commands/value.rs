//! Values attached to leases: one script each, on the lock key and the lock's value key
//! (the same hash slot on a Cluster). The lock key itself is never touched, so acquire,
//! release and extend send what they always send.

use std::time::Duration;

use distlock_api::{LeaseValue, LockError, LockInfo, StoreKey, Token, ValuedHolder};

use super::{Commands, Conn, Failure};
use crate::scripts::SCRIPTS;

impl Commands {
    /// `set_value.lua`: `GET` of the lock key == token, then `SET` of the value key to
    /// `<token>:<value>`.
    pub(crate) async fn set_value(
        &self,
        conn: &mut impl Conn,
        key: &StoreKey,
        token: &Token,
        value: &LeaseValue,
    ) -> Result<bool, LockError> {
        let (redis_key, value_key) = (self.layout.lock_key(key), self.layout.value_key(key));
        let written: i64 = SCRIPTS
            .set_value
            .run(conn, |cmd| {
                cmd.arg(2).arg(&redis_key).arg(&value_key).arg(token.as_str()).arg(value.as_str());
            })
            .await
            .map_err(|err| self.error("set_value", key, err))?;
        self.flag("set_value", key, written)
    }

    /// `inspect_value.lua`: the lock key's `GET` and `PTTL`, the fence key in fencing
    /// mode and the value key, in one script, which deletes a value key left by another
    /// token.
    ///
    /// # Errors
    ///
    /// [`LockError::Store`] also when the key holds something a store did not write (not a
    /// token, or no expiry) or the value is not one a store wrote.
    pub(crate) async fn inspect_value(
        &self,
        conn: &mut impl Conn,
        key: &StoreKey,
    ) -> Result<Option<ValuedHolder>, LockError> {
        let (redis_key, value_key) = (self.layout.lock_key(key), self.layout.value_key(key));
        let fence_key = self.fencing.then(|| self.layout.fence_key(key));
        let holder: Option<(String, i64, Option<u64>, Option<String>)> = SCRIPTS
            .inspect_value
            .run(conn, |cmd| {
                cmd.arg(if fence_key.is_some() { 3 } else { 2 }).arg(&redis_key).arg(&value_key);
                if let Some(fence_key) = &fence_key {
                    cmd.arg(fence_key);
                }
            })
            .await
            .map_err(|err| self.error("inspect_value", key, err))?;
        let Some((token, pttl, fence, value)) = holder else { return Ok(None) };
        let token = Token::parse(&token).map_err(|err| self.error("inspect_value", key, err))?;
        let Ok(ms) = u64::try_from(pttl) else {
            return Err(self.error("inspect_value", key, Failure(format!("the lock key has no expiry (PTTL {pttl})"))));
        };
        let value = value.map(LeaseValue::new).transpose().map_err(|err| self.error("inspect_value", key, err))?;
        Ok(Some(ValuedHolder::new(LockInfo::new(token, fence, Duration::from_millis(ms)), value)))
    }
}
