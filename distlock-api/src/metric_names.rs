//! The names of the metrics distlock records (feature `metrics`).
//!
//! Every metric carries a `backend` label (`"memory"`, `"redis"`, `"postgres"`…). Lock
//! keys and tokens are never labels: keys are unbounded and tokens are secrets.
//!
//! | metric | kind | labels | what it counts |
//! |---|---|---|---|
//! | `distlock_acquire_total` | counter | `backend`, `outcome` = `acquired` / `contended` / `error` | acquisition calls that reached the store, by how they ended (`contended`: still held when the wait ran out) |
//! | `distlock_contention_total` | counter | `backend` | acquisition calls that found the key held at least once (whether they then got it by waiting or gave up) |
//! | `distlock_release_total` | counter | `backend`, `outcome` = `released` / `not_held` / `error` | releases: explicit, after `with_lock`, and background releases of dropped handles and cancelled acquisitions |
//! | `distlock_renew_failure_total` | counter | `backend` | renewal attempts of the watchdog that did not confirm the lease (store error, not held, or no answer before the deadline) |
//! | `distlock_lease_lost_total` | counter | `backend` | leases found lost while their handle lived ([`DistributedLock::lost`](crate::DistributedLock::lost)) |
//! | `distlock_wait_seconds` | histogram | `backend` | time spent acquiring, until acquired, given up or failed |
//! | `distlock_hold_seconds` | histogram | `backend` | time from acquisition until the handle was released or dropped (not recorded for [`leak`](crate::DistributedLock::leak)ed handles) |

/// Counter `distlock_acquire_total{backend, outcome}`.
pub const ACQUIRE_TOTAL: &str = "distlock_acquire_total";
/// Counter `distlock_contention_total{backend}`.
pub const CONTENTION_TOTAL: &str = "distlock_contention_total";
/// Counter `distlock_release_total{backend, outcome}`.
pub const RELEASE_TOTAL: &str = "distlock_release_total";
/// Counter `distlock_renew_failure_total{backend}`.
pub const RENEW_FAILURE_TOTAL: &str = "distlock_renew_failure_total";
/// Counter `distlock_lease_lost_total{backend}`.
pub const LEASE_LOST_TOTAL: &str = "distlock_lease_lost_total";
/// Histogram `distlock_wait_seconds{backend}`, in seconds.
pub const WAIT_SECONDS: &str = "distlock_wait_seconds";
/// Histogram `distlock_hold_seconds{backend}`, in seconds.
pub const HOLD_SECONDS: &str = "distlock_hold_seconds";

/// Registers a description and unit for every distlock metric with the installed
/// recorder, for exporters that publish them (Prometheus `# HELP`). Optional: metrics are
/// recorded whether or not this is called.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn describe_metrics() {
    use metrics::{describe_counter, describe_histogram, Unit};
    describe_counter!(ACQUIRE_TOTAL, Unit::Count, "Lock acquisition calls that reached the store, by outcome.");
    describe_counter!(CONTENTION_TOTAL, Unit::Count, "Lock acquisition calls that found the key held at least once.");
    describe_counter!(RELEASE_TOTAL, Unit::Count, "Lock releases (explicit and background), by outcome.");
    describe_counter!(RENEW_FAILURE_TOTAL, Unit::Count, "Lease renewal attempts that did not confirm the lease.");
    describe_counter!(LEASE_LOST_TOTAL, Unit::Count, "Leases lost while their handle was alive.");
    describe_histogram!(WAIT_SECONDS, Unit::Seconds, "Time spent acquiring a lock, until acquired or given up.");
    describe_histogram!(HOLD_SECONDS, Unit::Seconds, "Time a lock was held, from acquisition to release or drop.");
}
