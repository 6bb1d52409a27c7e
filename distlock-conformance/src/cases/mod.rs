//! The conformance cases: one `pub async fn` per promise, each taking the store under test.
//!
//! Every case works in its own random key namespace, so cases run in parallel against
//! one server without flushing it. Timing bounds are generous: these check behaviour,
//! benchmarks measure speed.

mod basics;
mod cleanup;
mod contention;
mod election;
mod fairness;
mod groups;
mod input;
mod jobs;
mod listing;
mod places;
mod reentrant;
mod renewal;
mod scale;
mod tokens;
mod ttl;
mod values;
mod waiting;
mod with_lock;

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockKey, LockManager, StoreKey};

pub use basics::{
    acquire_conflict_release_reacquire, distinct_keys_are_independent, foreign_token_cannot_extend,
    foreign_token_cannot_release, keys_are_case_sensitive, not_reentrant, odd_keys_round_trip,
    second_release_returns_false,
};
pub use cleanup::{cancelled_acquire_leaves_nothing, dropped_handle_is_freed_promptly};
pub use contention::contended_counter_is_exact;
pub use election::{
    election_candidates_lead_in_arrival_order, election_leader_learns_of_a_lost_lead,
    election_observer_sees_every_change_in_order, election_resign_hands_over_to_the_next_candidate,
};
pub use fairness::{
    a_cancelled_waiter_leaves_the_queue, a_crashed_waiter_stalls_the_queue_only_for_its_place,
    fair_waiters_are_served_in_arrival_order, only_fair_waiters_queue,
};
pub use groups::{
    group_bad_input_is_rejected, group_cancelled_waiter_leaves_its_places, group_crashed_reader_expires_alone,
    group_dropped_handle_is_released, group_failed_attempt_leaves_nothing, group_fences_strictly_increase,
    group_high_permit_count, group_holders_only_reader_ignores_waiting_writers, group_later_waiter_stays_behind,
    group_many_readers_one_writer, group_permits_change_is_seen_by_the_next_grant,
    group_release_owner_frees_only_that_owner, group_release_twice_is_an_error, group_renewal_and_loss,
    group_seed_permits_one_reader_one_writer, group_semaphore_bounds_concurrency, group_semaphore_max_count,
    group_semaphore_waiters_are_served_in_arrival_order, group_waiters_are_served_in_arrival_order,
    group_waiting_groups_do_not_deadlock, group_writer_beats_later_readers,
};
pub use input::bad_input_is_rejected_before_any_store_call;
pub use jobs::{job_each_firing_runs_once, job_missed_firings_are_reported_once};
pub use listing::{
    list_all, list_at_scale, list_filters_by_pattern, list_pages_through_many_keys, list_reports_held_locks,
    list_skips_released_and_expired_leases, Listing, ScaleListing,
};
pub use places::{
    group_listing_reports_holders_and_waiting_places, queue_places_report_waiters_in_arrival_order_with_their_age,
};
pub use reentrant::{
    reentrant_scope_and_panics, reentrant_scope_is_not_shared_with_spawned_tasks, reentrant_scope_nests_and_counts,
    reentrant_scope_shares_renewal_and_loss, reentrant_scope_survives_any_drop_order,
};
pub use renewal::{
    dropping_a_renewing_handle_is_safe, lost_fires_at_the_deadline_without_renewal,
    partition_fires_lost_before_the_ttl, renewal_keeps_a_short_lease_alive, stolen_lease_fires_lost,
    with_lock_stops_the_block_when_the_lease_is_lost,
};
pub use scale::{many_keys_held_at_once, tokens_are_unique};
pub use tokens::{fences_strictly_increase, inspect_reports_the_holder};
pub use ttl::{expired_lease_can_be_taken_over, extend_keeps_the_lock_past_its_ttl};
pub use values::{lease_value_belongs_to_its_lease, lease_value_ends_with_an_expired_lease};
pub use waiting::{
    wait_on_a_free_key_returns_at_once, waiter_acquires_after_release, waiter_gives_up_at_deadline,
    waiter_wakes_on_release_not_by_polling, waiting_is_not_a_busy_loop,
};
pub use with_lock::{
    with_lock_not_acquired_when_busy, with_lock_releases_on_err, with_lock_releases_on_ok, with_lock_releases_on_panic,
};

/// A long TTL: the lease never expires during a case unless the case says so.
pub(crate) const LONG_TTL: Duration = Duration::from_secs(30);
/// The retry interval used by waiting cases.
pub(crate) const RETRY: Duration = Duration::from_millis(20);

/// A random namespace for one case's keys.
#[derive(Debug, Clone)]
pub(crate) struct Keys(String);

impl Keys {
    pub(crate) fn new(case: &str) -> Self {
        Self(format!("conformance:{case}:{}", uuid::Uuid::new_v4().simple()))
    }

    /// A namespace for a lock-group case: on a store whose groups' names must share a
    /// hash tag ([`Capabilities::group_hash_tag`](distlock_api::Capabilities::group_hash_tag),
    /// Redis Cluster), the case's part is the tag (`conformance:{case:uuid}:name`), so
    /// every name of the case can be in one group; elsewhere the same as [`Keys::new`].
    pub(crate) fn for_groups(case: &str, store: &DynLockStore) -> Self {
        if store.capabilities().group_hash_tag {
            Self(format!("conformance:{{{case}:{}}}", uuid::Uuid::new_v4().simple()))
        } else {
            Self::new(case)
        }
    }

    pub(crate) fn key(&self, name: &str) -> String {
        format!("{}:{name}", self.0)
    }

    pub(crate) fn store_key(&self, name: &str) -> StoreKey {
        LockKey::new(self.key(name)).expect("test keys are valid").to_store_key()
    }
}

/// Polls `count` (a store-side figure) until it is `expected`, for at most 10 s; `what`
/// names the figure in the failure.
pub(crate) async fn count_reaches<F, Fut>(what: &str, expected: usize, mut count: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = usize>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let now = count().await;
        if now == expected {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what} is {now}, expected {expected}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

pub(crate) fn manager(store: &Arc<DynLockStore>) -> LockManager {
    LockManager::new(Arc::clone(store))
}
