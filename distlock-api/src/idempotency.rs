//! The contract of idempotency stores: [`IdempotencyStore`], the atomic primitives each
//! backend implements (memory, Redis and PostgreSQL in their store crates), and the types
//! of its signatures. The manager that works on any store — validation, tokens, renewal,
//! metrics — and the HTTP layer are in `distlock-idempotency`.

// Layers, each importing only those listed before it: `key`, `fingerprint` and
// `response` are leaves; `store` is the contract.
mod fingerprint;
mod key;
mod response;
mod store;

pub use fingerprint::{normalise_json, Fingerprint};
pub use key::IdempotencyKey;
pub use response::StoredResponse;
pub use store::{Completion, DynIdempotencyStore, IdempotencyStore, StoreClaim};
