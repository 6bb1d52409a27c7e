//! The wrapped store's fair queue, with faults: what [`FaultyStore::queue`] returns.
//!
//! [`FaultyStore::queue`]: distlock_api::LockStore::queue

use std::time::Duration;

use async_trait::async_trait;
use distlock_api::{Acquire, LockError, LockStore, QueueStore, QueuedAttempt, StoreKey, Token, WaitingPlace};

use crate::faulty::Faulty;
use crate::op::Op;

impl<S: LockStore> Faulty<S> {
    /// The wrapped store's queue. `FaultyStore::queue` hands out `self` only when it
    /// exists, so the error is a safeguard.
    fn inner_queue(&self, op: Op) -> Result<&dyn QueueStore, LockError> {
        self.inner.queue().ok_or(LockError::Unsupported { backend: self.inner.backend(), operation: op.as_str() })
    }
}

#[async_trait]
impl<S: LockStore> QueueStore for Faulty<S> {
    /// A queued attempt is an [`Op::Acquire`].
    async fn try_acquire_queued(&self, attempt: QueuedAttempt<'_>) -> Result<Acquire, LockError> {
        let queue = self.inner_queue(Op::Acquire)?;
        self.call(Op::Acquire, Some(attempt.key), queue.try_acquire_queued(attempt)).await
    }

    fn queues_in_first_attempt(&self) -> bool {
        self.inner.queue().is_some_and(QueueStore::queues_in_first_attempt)
    }

    /// A queued waiter's wait is an [`Op::WaitForRelease`].
    async fn wait_for_turn(&self, key: &StoreKey, token: &Token, max: Duration) -> Result<(), LockError> {
        let queue = self.inner_queue(Op::WaitForRelease)?;
        self.wait(Op::WaitForRelease, Some(key), max, queue.wait_for_turn(key, token, max)).await
    }

    async fn queue_len(&self, key: &StoreKey) -> Result<usize, LockError> {
        let queue = self.inner_queue(Op::QueueLen)?;
        self.call(Op::QueueLen, Some(key), queue.queue_len(key)).await
    }

    async fn queue_places(&self, key: &StoreKey) -> Result<Vec<WaitingPlace>, LockError> {
        let queue = self.inner_queue(Op::QueuePlaces)?;
        self.call(Op::QueuePlaces, Some(key), queue.queue_places(key)).await
    }
}
