//! The acquisition engine behind every lock call: one waiting loop, one handle core, one
//! drop guard. A single key is a one-member target to it (sent to the store through the
//! single-lock primitives, so its wire is unchanged); a group is another. Renewal, the
//! lost signal, fairness, reentrancy, metrics and tracing live here once.
//!
//! Modules, leaves first — each imports only those before it:
//! `target` (every call to the store) → `state` (shared state, background releases) →
//! `guard` (the drop guard) → `lease` (deadline, lost signal, renewal loop) → `hold`
//! (the handle core) → `reentrant` (scopes) → `acquire` (the waiting loop).

mod acquire;
mod guard;
mod hold;
mod lease;
mod reentrant;
mod state;
mod target;

pub(crate) use acquire::{Acquisition, DefaultWait};
pub(crate) use hold::Hold;
pub use lease::{LeaseWatch, LEASE_LOST_TARGET};
pub use reentrant::{in_reentrant_scope, reentrant_scope};
pub(crate) use state::{Engine, EngineRef, EngineRefs};
pub(crate) use target::{groups, Plan, Target};
