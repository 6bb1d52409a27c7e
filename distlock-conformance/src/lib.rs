//! The conformance suite every distlock store runs, and the test kit.
//!
//! [`cases`] holds one `pub async fn` per promise of the
//! [`LockStore`](distlock_api::LockStore) contract, each taking the store under test as
//! an `Arc<DynLockStore>`. [`conformance_suite!`] expands to one `#[tokio::test]` per
//! case for a store factory, so a failure names its case and the other cases still run.
//! Every store runs every case, from one list: a case that needs an optional ability —
//! lock groups ([`LockStore::groups`](distlock_api::LockStore::groups)), a fair queue,
//! fencing, release notifications, listing — asks the store for it
//! ([`capabilities`](distlock_api::LockStore::capabilities), `groups()`, a first `list`)
//! and, on a store without it, checks what the store promises instead (group calls and
//! listing refused with [`LockError::Unsupported`](distlock_api::LockError::Unsupported),
//! waiters that barge, no fences, polling) — a case is never left out by hand, and never
//! passes without checking something. A new store gets the whole suite with one macro
//! call in its `tests/` folder:
//!
//! ```ignore
//! use std::sync::Arc;
//! use distlock_api::DynLockStore;
//!
//! async fn store() -> Option<Arc<DynLockStore>> {
//!     // `None` skips (printing why), unless DISTLOCK_REQUIRE_SERVICES=1 made the kit panic.
//!     let url = distlock_conformance::kit::redis_url("redis conformance")?;
//!     Some(Arc::new(distlock_redis::RedisLockStore::connect(&url).await.expect("connect")))
//! }
//!
//! distlock_conformance::conformance_suite!(store);
//! ```
//!
//! The calling crate needs `tokio` (features `macros`, `rt-multi-thread`) as a
//! dev-dependency. Every case uses its own random key namespace, so cases run in parallel
//! against one server without flushing it.
//!
//! [`kit`] has what store tests need beyond the cases: server URLs from the environment,
//! child processes to `kill -9`, and per-store fault hooks. [`counting`] has store
//! wrappers that count calls or lose answers.
#![warn(missing_docs, missing_debug_implementations, unreachable_pub)]
#![allow(clippy::missing_panics_doc)]

pub mod cases;
pub mod counting;
pub mod idempotency;
pub mod kit;

/// Calls `$callback!($($args)*; case, case, …)` with the name of every case in [`cases`]:
/// the one list every store runs (a case checks the abilities it needs itself). A new
/// case goes here, and so runs on every store.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_every_case {
    ($callback:ident!($($args:tt)*)) => {
        $crate::$callback!($($args)*;
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
            group_many_readers_one_writer,
            group_writer_beats_later_readers,
            group_waiters_are_served_in_arrival_order,
            group_later_waiter_stays_behind,
            group_semaphore_waiters_are_served_in_arrival_order,
            group_cancelled_waiter_leaves_its_places,
            group_semaphore_max_count,
            group_semaphore_bounds_concurrency,
            group_high_permit_count,
            group_failed_attempt_leaves_nothing,
            group_crashed_reader_expires_alone,
            group_waiting_groups_do_not_deadlock,
            group_release_twice_is_an_error,
            group_release_owner_frees_only_that_owner,
            group_seed_permits_one_reader_one_writer,
            group_holders_only_reader_ignores_waiting_writers,
            group_permits_change_is_seen_by_the_next_grant,
            group_fences_strictly_increase,
            group_renewal_and_loss,
            group_dropped_handle_is_released,
            group_bad_input_is_rejected,
            list_reports_held_locks,
            list_filters_by_pattern,
            list_skips_released_and_expired_leases,
            list_pages_through_many_keys,
            group_listing_reports_holders_and_waiting_places,
            queue_places_report_waiters_in_arrival_order_with_their_age,
            lease_value_belongs_to_its_lease,
            lease_value_ends_with_an_expired_lease,
            election_resign_hands_over_to_the_next_candidate,
            election_observer_sees_every_change_in_order,
            election_candidates_lead_in_arrival_order,
            election_leader_learns_of_a_lost_lead,
            job_each_firing_runs_once,
            job_missed_firings_are_reported_once,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __conformance_tests {
    ($factory:path; $($case:ident),* $(,)?) => {$(
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let Some(store) = $factory().await else { return };
            $crate::cases::$case(store).await;
        }
    )*};
}

/// Expands to one `#[tokio::test]` per conformance case — every case, whatever the
/// store's abilities — each calling `$factory().await` to get the store under test.
///
/// `$factory` is the path of an `async fn() -> Option<Arc<DynLockStore>>`; returning
/// `None` skips the case (use [`kit::server_url`] and friends, which refuse to skip when
/// `DISTLOCK_REQUIRE_SERVICES=1`). Call it once per store configuration, each in its own
/// module.
#[macro_export]
macro_rules! conformance_suite {
    ($factory:path) => {
        $crate::__with_every_case!(__conformance_tests!($factory));
    };
}

/// Calls `$callback!($($args)*; case, …)` with the name of every case in [`idempotency`].
#[doc(hidden)]
#[macro_export]
macro_rules! __with_every_idempotency_case {
    ($callback:ident!($($args:tt)*)) => {
        $crate::$callback!($($args)*;
            idem_started_complete_replay,
            idem_concurrent_duplicates_run_once,
            idem_mismatch_reports_stored_fingerprint,
            idem_in_progress_reports_time_left,
            idem_lapsed_claim_taken_over_and_stale_completion_refused,
            idem_crashed_claim_is_retried_after_its_lease,
            idem_results_expire_after_retention,
            idem_renewal_keeps_a_claim_alive,
            idem_stolen_claim_fires_lost,
            idem_abandon_and_retried_claims,
            idem_bad_input_is_rejected_before_any_store_call,
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __idempotency_tests {
    ($factory:path; $($case:ident),* $(,)?) => {$(
        #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $case() {
            let Some(store) = $factory().await else { return };
            $crate::idempotency::$case(store).await;
        }
    )*};
}

/// Expands to one `#[tokio::test]` per [`idempotency`] case, each calling
/// `$factory().await` — an `async fn() -> Option<Arc<DynIdempotencyStore>>` — for the
/// store under test (`None` skips, as in [`conformance_suite!`]).
#[macro_export]
macro_rules! idempotency_suite {
    ($factory:path) => {
        $crate::__with_every_idempotency_case!(__idempotency_tests!($factory));
    };
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    /// Every `.rs` file under `dir`, `target` folders left out.
    fn sources(dir: &Path) -> Vec<PathBuf> {
        let mut files = Vec::new();
        for entry in std::fs::read_dir(dir).unwrap_or_else(|err| panic!("{}: {err}", dir.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                if !path.ends_with("target")
                    && !path.file_name().is_some_and(|name| name.to_string_lossy().starts_with('.'))
                {
                    files.extend(sources(&path));
                }
            } else if path.extension().is_some_and(|ext| ext == "rs") {
                files.push(path);
            }
        }
        files
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
    }

    /// The one list holds every case — each `pub async fn` of `cases` that takes just the
    /// store — and nothing else, so a new case runs on every store.
    #[test]
    fn the_case_list_holds_every_case() {
        let here = Path::new(env!("CARGO_MANIFEST_DIR"));
        let mut cases = BTreeSet::new();
        for file in sources(&here.join("src/cases")) {
            for line in read(&file).lines() {
                let Some(rest) = line.trim_start().strip_prefix("pub async fn ") else { continue };
                if let Some((name, _)) = rest.split_once("(store: Arc<DynLockStore>)") {
                    cases.insert(name.to_owned());
                }
            }
        }
        let lib = read(&here.join("src/lib.rs"));
        let list = lib.split("macro_rules! __with_every_case").nth(1).expect("the case list");
        let list = list.split(");").next().unwrap();
        let listed: BTreeSet<String> = list
            .lines()
            .filter_map(|line| line.trim().strip_suffix(','))
            .filter(|name| name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .map(str::to_owned)
            .collect();
        assert!(cases.len() > 50, "read {} cases", cases.len());
        let unlisted: Vec<_> = cases.difference(&listed).collect();
        let unknown: Vec<_> = listed.difference(&cases).collect();
        assert!(unlisted.is_empty() && unknown.is_empty(), "not in the list: {unlisted:?}; not cases: {unknown:?}");
    }

    /// No store's tests pick cases by hand: `conformance_suite!` is the only caller of the
    /// per-case macro.
    #[test]
    fn no_store_runs_a_hand_picked_list() {
        let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let own = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
        let pickers: Vec<PathBuf> = sources(workspace)
            .into_iter()
            .filter(|file| *file != own && read(file).contains(concat!("__conformance", "_tests!")))
            .collect();
        assert!(pickers.is_empty(), "hand-picked case lists in {pickers:?}: use conformance_suite!");
    }
}
