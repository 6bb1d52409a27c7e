//! `Faulty`: a wrapped store and its faults, and how one call runs under them. The
//! `LockStore` and `GroupLockStore` impls (`store.rs`, `groups.rs`) are built on it.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use distlock_api::{LockError, LockStore, StoreKey};

use crate::faults::{Failure, Faults, Plan};
use crate::op::Op;

/// The wrapped store and the faults set on it.
#[derive(Debug)]
pub(crate) struct Faulty<S> {
    pub(crate) inner: Arc<S>,
    pub(crate) faults: Faults,
}

impl<S: LockStore> Faulty<S> {
    /// Runs one call of `op` on `key` (`forward` is the wrapped store's call) with the
    /// faults set now.
    pub(crate) async fn call<T, Fut>(&self, op: Op, key: Option<&StoreKey>, forward: Fut) -> Result<T, LockError>
    where
        Fut: Future<Output = Result<T, LockError>>,
    {
        self.run(op, key, self.faults.plan(op), forward).await
    }

    /// A wait for a release ([`Op::WaitForRelease`], [`Op::WaitForChange`]): `wait` (the
    /// wrapped store's wait), or, when the plan drops the notification, a plain sleep of
    /// `max`.
    pub(crate) async fn wait(
        &self,
        op: Op,
        key: Option<&StoreKey>,
        max: Duration,
        wait: impl Future<Output = Result<(), LockError>> + Send,
    ) -> Result<(), LockError> {
        let plan = self.faults.plan(op);
        let wait = async {
            if plan.drop_notification {
                tokio::time::sleep(max).await;
                Ok(())
            } else {
                wait.await
            }
        };
        self.run(op, key, plan, wait).await
    }

    /// Runs one call of `op` according to `plan`: delay, then fail without calling the
    /// wrapped store, or call it (and fail after). Counted when it returns.
    async fn run<T, Fut>(&self, op: Op, key: Option<&StoreKey>, plan: Plan, forward: Fut) -> Result<T, LockError>
    where
        Fut: Future<Output = Result<T, LockError>>,
    {
        if !plan.delay.is_zero() {
            tokio::time::sleep(plan.delay).await;
        }
        let result = match plan.failure {
            Some(Failure::Before) => Err(Plan::error(self.inner.backend(), op, key, Failure::Before)),
            Some(Failure::After) => {
                // The outcome is discarded: the caller only learns that the reply was lost.
                let _ = forward.await;
                Err(Plan::error(self.inner.backend(), op, key, Failure::After))
            }
            None => forward.await,
        };
        self.faults.returned(op);
        result
    }
}
