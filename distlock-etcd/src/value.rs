//! [`LeaseValueStore`] on etcd: a lease's value is a second key beside the lock key, on
//! the lock key's lease, tagged with the holder's token.
//!
//! A lock `order:1` held by token `T` on lease `L` is `{prefix}/lock:order:1 = T` (lease
//! `L`); its value `v` is `{prefix}/value/lock:order:1 = "T\nv"` (lease `L`). The value
//! key ends with the lease (expiry, revoke), a release deletes it with the lock key, and
//! an extension that moves the lock key to a new lease moves it along. A value key is
//! read as the holder's only when it is on the lock key's lease and names the lock key's
//! token, so one left behind by anything else never shows with another holder.

use distlock_api::{
    async_trait, BoxError, LeaseValue, LeaseValueStore, LockError, LockInfo, StoreKey, Token, ValuedHolder,
};
use etcd_client::{Compare, CompareOp, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse};

use crate::store::{fence_of, is_lease_not_found, token_of, EtcdLockStore, BACKEND};

/// How many times `set_value` tries when the lock key moves to another lease (an
/// extension with another TTL) between its read and its write.
const SET_ATTEMPTS: usize = 3;

/// Between the token and the value in a value key: never part of a token.
const TAG_SEPARATOR: char = '\n';

/// The value key's content: the holder's token, the separator, the value.
fn tagged(token: &Token, value: &LeaseValue) -> String {
    format!("{}{TAG_SEPARATOR}{}", token.as_str(), value.as_str())
}

/// The value of a value key read beside `lock`: `Some` only when it is on the lock's
/// lease and tagged with `token`, the lock's holder.
fn value_of(found: &KeyValue, lock: &KeyValue, token: &Token) -> Result<Option<LeaseValue>, BoxError> {
    if found.lease() != lock.lease() {
        return Ok(None);
    }
    let malformed = "the lease's value is not a token and a value";
    let text = std::str::from_utf8(found.value()).map_err(|_| malformed)?;
    let Some((tag, value)) = text.split_once(TAG_SEPARATOR) else { return Err(malformed.into()) };
    if tag != token.as_str() {
        return Ok(None);
    }
    Ok(Some(LeaseValue::new(value)?))
}

/// The first key of a `Get` among a transaction's answers, by the get's position.
fn got(answer: &etcd_client::TxnResponse, position: usize) -> Option<KeyValue> {
    let mut gets = answer.op_responses().into_iter().filter_map(|op| match op {
        TxnOpResponse::Get(get) => Some(get.kvs().first().cloned()),
        _ => None,
    });
    gets.nth(position).flatten()
}

#[async_trait]
impl LeaseValueStore for EtcdLockStore {
    async fn set_value(&self, key: &StoreKey, token: &Token, value: &LeaseValue) -> Result<bool, LockError> {
        let etcd_key = self.etcd_key(key);
        let value_key = self.value_key(key);
        let content = tagged(token, value);
        let mut kv = self.client().kv_client();
        // The lock key names the lease the value goes on.
        let mut lock = self.call("set_value", Some(key), kv.get(etcd_key.as_str(), None)).await?.kvs().first().cloned();
        for _ in 0..SET_ATTEMPTS {
            let lease = match &lock {
                Some(found) if found.value() == token.as_str().as_bytes() => found.lease(),
                _ => return Ok(false),
            };
            let txn = Txn::new()
                .when([
                    Compare::value(etcd_key.as_str(), CompareOp::Equal, token.as_str()),
                    Compare::lease(etcd_key.as_str(), CompareOp::Equal, lease),
                ])
                .and_then([TxnOp::put(value_key.as_str(), content.as_str(), Some(PutOptions::new().with_lease(lease)))])
                .or_else([TxnOp::get(etcd_key.as_str(), None)]);
            // The lease ended after the read: the key goes with it, and nothing was put.
            let request = async {
                match kv.txn(txn).await {
                    Ok(answer) => Ok(Some(answer)),
                    Err(err) if is_lease_not_found(&err) => Ok(None),
                    Err(err) => Err(err),
                }
            };
            let Some(answer) = self.call("set_value", Some(key), request).await? else { return Ok(false) };
            if answer.succeeded() {
                return Ok(true);
            }
            lock = got(&answer, 0);
        }
        Err(LockError::store(
            BACKEND,
            "set_value",
            Some(key.lock_key()),
            "the lock moved to another lease during every attempt",
        ))
    }

    async fn inspect_value(&self, key: &StoreKey) -> Result<Option<ValuedHolder>, LockError> {
        let txn = Txn::new().and_then([TxnOp::get(self.etcd_key(key), None), TxnOp::get(self.value_key(key), None)]);
        let mut kv = self.client().kv_client();
        let answer = self.call("inspect_value", Some(key), kv.txn(txn)).await?;
        let Some(lock) = got(&answer, 0) else { return Ok(None) };
        let fail = |cause: BoxError| LockError::store(BACKEND, "inspect_value", Some(key.lock_key()), cause);
        let token = token_of(&lock).map_err(|cause| fail(cause.into()))?;
        let value = match got(&answer, 1) {
            Some(found) => value_of(&found, &lock, &token).map_err(fail)?,
            None => None,
        };
        let Some((left, _)) = self.lease_left("inspect_value", key, lock.lease()).await? else { return Ok(None) };
        let holder = LockInfo::new(token, fence_of(lock.create_revision()), left);
        Ok(Some(ValuedHolder::new(holder, value)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_never_mix_with_a_token() {
        let token = Token::generate();
        let value = LeaseValue::new("line\nbreak").unwrap();
        let text = tagged(&token, &value);
        assert!(!token.as_str().contains(TAG_SEPARATOR));
        let (tag, rest) = text.split_once(TAG_SEPARATOR).unwrap();
        assert_eq!((tag, rest), (token.as_str(), "line\nbreak"));
    }
}
