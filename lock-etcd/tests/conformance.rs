//! The shared conformance suite against the real etcd at `DISTLOCK_ETCD_URL` (one node,
//! started by `scripts/test.sh`). Every case uses its own random keys.

use std::sync::Arc;

use distlock_api::DynLockStore;

async fn store() -> Option<Arc<DynLockStore>> {
    let url = distlock_conformance::kit::etcd_url("etcd conformance")?;
    Some(Arc::new(distlock_etcd::EtcdLockStore::connect(&url).await.expect("connect")))
}

distlock_conformance::__conformance_tests!(store;
    acquire_conflict_release_reacquire,
    not_reentrant,
    distinct_keys_are_independent,
    keys_are_case_sensitive,
    odd_keys_round_trip,
    foreign_token_cannot_release,
    foreign_token_cannot_extend,
    second_release_returns_false,
    expired_lease_can_be_taken_over,
    extend_keeps_the_lock_past_its_ttl,
    waiter_acquires_after_release,
    waiter_gives_up_at_deadline,
    waiting_is_not_a_busy_loop,
    waiter_wakes_on_release_not_by_polling,
    fair_waiters_are_served_in_arrival_order,
    a_crashed_waiter_stalls_the_queue_only_for_its_place,
    a_cancelled_waiter_leaves_the_queue,
    only_fair_waiters_queue,
    wait_on_a_free_key_returns_at_once,
    with_lock_releases_on_ok,
    with_lock_releases_on_err,
    with_lock_releases_on_panic,
    with_lock_not_acquired_when_busy,
    contended_counter_is_exact,
    dropped_handle_is_freed_promptly,
    cancelled_acquire_leaves_nothing,
    bad_input_is_rejected_before_any_store_call,
    tokens_are_unique,
    inspect_reports_the_holder,
    fences_strictly_increase,
    many_keys_held_at_once,
    renewal_keeps_a_short_lease_alive,
    stolen_lease_fires_lost,
    lost_fires_at_the_deadline_without_renewal,
    dropping_a_renewing_handle_is_safe,
    with_lock_stops_the_block_when_the_lease_is_lost,
    reentrant_scope_nests_and_counts,
    reentrant_scope_is_not_shared_with_spawned_tasks,
    reentrant_scope_survives_any_drop_order,
    reentrant_scope_and_panics,
    reentrant_scope_shares_renewal_and_loss,
    list_reports_held_locks,
    list_filters_by_pattern,
    list_skips_released_and_expired_leases,
    list_pages_through_many_keys,
);
