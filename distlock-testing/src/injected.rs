//! `InjectedFault`: the cause of every error a [`FaultyStore`](crate::FaultyStore) makes up.

use std::error::Error;
use std::fmt;

use distlock_api::LockError;

use crate::op::Op;

/// The cause inside a [`LockError::Store`] that a fault made up, as opposed to one the
/// store really returned.
///
/// The error around it names the wrapped store's backend, the operation and the key,
/// exactly like a real store failure, so the application sees what it would see in
/// production; a test can tell the two apart with [`InjectedFault::of`]:
///
/// ```
/// use distlock::LockError;
/// use distlock::testing::InjectedFault;
///
/// fn is_injected(err: &LockError) -> bool {
///     InjectedFault::of(err).is_some()
/// }
/// # let real = LockError::store("redis", "acquire", Some("k"), "connection refused");
/// # assert!(!is_injected(&real));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InjectedFault {
    op: Op,
    reached_store: bool,
}

impl InjectedFault {
    pub(crate) const fn new(op: Op, reached_store: bool) -> Self {
        Self { op, reached_store }
    }

    /// The injected fault behind `err`, when `err` is a [`LockError::Store`] that a
    /// [`FaultyStore`](crate::FaultyStore) made up.
    pub fn of(err: &LockError) -> Option<&InjectedFault> {
        err.cause()?.downcast_ref::<InjectedFault>()
    }

    /// The operation that failed.
    pub fn op(&self) -> Op {
        self.op
    }

    /// Whether the wrapped store performed the operation before the error was returned
    /// ([`Faults::lose_next_replies`](crate::Faults::lose_next_replies)), rather than
    /// never seeing it ([`Faults::fail_next`](crate::Faults::fail_next),
    /// [`Faults::fail_all`](crate::Faults::fail_all)).
    pub fn reached_store(&self) -> bool {
        self.reached_store
    }
}

impl fmt::Display for InjectedFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.reached_store {
            f.write_str("injected fault: the store performed the operation, but its reply was lost")
        } else {
            f.write_str("injected fault: the operation never reached the store")
        }
    }
}

impl Error for InjectedFault {}
