#![doc = include_str!("../README.md")]
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![deny(rustdoc::broken_intra_doc_links)]

// Layers: connect → retry (its timeout error); query → identifier;
// template → identifier; inflight → kept; handed, identifier, kept, listing and retry are
// leaves.
pub mod connect;
pub mod handed;
pub mod identifier;
pub mod inflight;
pub mod kept;
pub mod listing;
pub mod query;
pub mod retry;
pub mod template;

pub use connect::NoConnection;
pub use handed::HandedTokens;
pub use identifier::{Identifier, IdentifierRules};
pub use inflight::{Attempt, InFlight};
pub use kept::{Checkout, KeptConnections};
pub use retry::{ConnectTimedOut, Retry};
