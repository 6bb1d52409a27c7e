//! The wrapped store's lease values, with faults: what [`FaultyStore::values`] returns.
//!
//! [`FaultyStore::values`]: distlock_api::LockStore::values

use async_trait::async_trait;
use distlock_api::{LeaseValue, LeaseValueStore, LockError, LockStore, StoreKey, Token, ValuedHolder};

use crate::faulty::Faulty;
use crate::op::Op;

impl<S: LockStore> Faulty<S> {
    /// The wrapped store's values. `FaultyStore::values` hands out `self` only when they
    /// exist, so the error is a safeguard.
    fn inner_values(&self, op: Op) -> Result<&dyn LeaseValueStore, LockError> {
        self.inner.values().ok_or(LockError::Unsupported { backend: self.inner.backend(), operation: op.as_str() })
    }
}

#[async_trait]
impl<S: LockStore> LeaseValueStore for Faulty<S> {
    async fn set_value(&self, key: &StoreKey, token: &Token, value: &LeaseValue) -> Result<bool, LockError> {
        let values = self.inner_values(Op::SetValue)?;
        self.call(Op::SetValue, Some(key), values.set_value(key, token, value)).await
    }

    async fn inspect_value(&self, key: &StoreKey) -> Result<Option<ValuedHolder>, LockError> {
        let values = self.inner_values(Op::InspectValue)?;
        self.call(Op::InspectValue, Some(key), values.inspect_value(key)).await
    }
}
