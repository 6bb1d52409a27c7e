//! The one drop guard: whatever the store may hold for a token — an attempt in flight, a
//! place in a queue, a held lease — is released in the background when its guard is
//! dropped armed, without I/O inside `Drop`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use super::state::{Cleanup, Engine, EngineRef};
use super::target::Target;
use crate::token::Token;

/// Releases `target` for `token` in the background when dropped while armed.
///
/// An acquisition creates it (disarmed) with its token, arms it before each attempt is
/// sent and keeps it armed while it waits in the store's queue; the handle of the lock it
/// takes keeps the same guard, armed until the lease is released or leaked.
#[derive(Debug)]
pub(crate) struct DropGuard {
    engine: Arc<EngineRef>,
    target: Target,
    token: Token,
    armed: AtomicBool,
    why: Cleanup,
}

impl DropGuard {
    /// A disarmed guard of an acquisition of `target` by `token`.
    pub(crate) fn new(engine: Arc<EngineRef>, target: Target, token: Token) -> Self {
        Self { engine, target, token, armed: AtomicBool::new(false), why: Cleanup::UnknownAcquire }
    }

    /// The guard of a handle: the lease is the user's now.
    pub(crate) fn held(mut self) -> Self {
        self.why = Cleanup::DroppedHandle;
        self
    }

    pub(crate) fn arm(&self) {
        self.armed.store(true, Ordering::Release);
    }

    pub(crate) fn disarm(&self) {
        self.armed.store(false, Ordering::Release);
    }

    pub(crate) fn engine(&self) -> &Arc<Engine> {
        self.engine.engine()
    }

    pub(crate) fn target(&self) -> &Target {
        &self.target
    }

    pub(crate) fn token(&self) -> &Token {
        &self.token
    }
}

impl Drop for DropGuard {
    fn drop(&mut self) {
        if self.armed.load(Ordering::Acquire) {
            self.engine().release_in_background(self.target.clone(), self.token.clone(), self.why);
        }
    }
}
