//! The names of the metrics the idempotency layer records (feature `metrics`), in the
//! house naming of the lock metrics ([`distlock_api::metric_names`]).
//!
//! Every metric carries a `backend` label. Keys and fingerprints are never labels (nor
//! logged).
//!
//! | metric | kind | labels | what it counts |
//! |---|---|---|---|
//! | `distlock_idempotency_claim_total` | counter | `backend`, `outcome` = `started` / `replayed` / `in_progress` / `mismatch` / `error` | claims, by answer |
//! | `distlock_idempotency_conflict_total` | counter | `backend`, `reason` = `in_progress` / `mismatch` | claims that found the key in use |
//! | `distlock_idempotency_replay_total` | counter | `backend` | claims answered with a stored result |
//! | `distlock_idempotency_completion_total` | counter | `backend`, `outcome` = `stored` / `lost` / `error` | completions: stored, refused because the claim had lapsed, or failed |

/// Counter `distlock_idempotency_claim_total{backend, outcome}`.
pub const CLAIM_TOTAL: &str = "distlock_idempotency_claim_total";
/// Counter `distlock_idempotency_conflict_total{backend, reason}`.
pub const CONFLICT_TOTAL: &str = "distlock_idempotency_conflict_total";
/// Counter `distlock_idempotency_replay_total{backend}`.
pub const REPLAY_TOTAL: &str = "distlock_idempotency_replay_total";
/// Counter `distlock_idempotency_completion_total{backend, outcome}`.
pub const COMPLETION_TOTAL: &str = "distlock_idempotency_completion_total";

/// Registers a description and unit for every idempotency metric with the installed
/// recorder (Prometheus `# HELP`). Optional: metrics are recorded either way.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    use metrics::{describe_counter, Unit};
    describe_counter!(CLAIM_TOTAL, Unit::Count, "Idempotency claims, by answer.");
    describe_counter!(CONFLICT_TOTAL, Unit::Count, "Idempotency claims that found the key in use, by reason.");
    describe_counter!(REPLAY_TOTAL, Unit::Count, "Idempotency claims answered with a stored result.");
    describe_counter!(COMPLETION_TOTAL, Unit::Count, "Idempotency completions, by outcome.");
}
