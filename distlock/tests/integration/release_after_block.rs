//! A release that fails after the block of `with_lock` / `with_lock_group_opts` is logged
//! at `warn` and never replaces the block's result: the block's `Ok` value, and its own
//! `Err`, come back unchanged.
//!
//! Single keys and lock groups fail through `distlock::testing::FaultyStore`. In both,
//! only the release after the block fails: the manager's retry in the background
//! then frees the lock, so each test also shows that nothing is left held.
#![cfg(all(feature = "memory", feature = "testing"))]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use distlock::memory::MemoryLockStore;
use distlock::testing::{Faults, FaultyStore, Op};
use distlock::{GroupMember, LockError, LockGroup, LockManager, LockOptions};
use tracing::field::{Field, Visit};
use tracing::Level;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

const TTL: Duration = Duration::from_secs(30);

/// The block's own error type, as an application would have.
#[derive(Debug, PartialEq)]
enum AppError {
    Lock(String),
    Domain(&'static str),
}

impl From<LockError> for AppError {
    fn from(err: LockError) -> Self {
        AppError::Lock(err.to_string())
    }
}

// ---------------------------------------------------------------------------------------
// Capturing events.
// ---------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Event {
    level: Level,
    message: String,
    fields: BTreeMap<String, String>,
}

#[derive(Default)]
struct Fields(Event);

impl Default for Event {
    fn default() -> Self {
        Self { level: Level::TRACE, message: String::new(), fields: BTreeMap::new() }
    }
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let value = format!("{value:?}");
        if field.name() == "message" {
            self.0.message = value;
        } else {
            self.0.fields.insert(field.name().to_owned(), value);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.message = value.to_owned();
        } else {
            self.0.fields.insert(field.name().to_owned(), value.to_owned());
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let mut text = value.to_string();
        let mut source = value.source();
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        self.0.fields.insert(field.name().to_owned(), text);
    }
}

#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Event>>>);

impl<S: tracing::Subscriber> Layer<S> for Collector {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        fields.0.level = *event.metadata().level();
        self.0.lock().unwrap().push(fields.0);
    }
}

/// Runs `test` on a current-thread runtime (background releases log into the same place)
/// and returns the events at `warn` and above.
fn warnings_of(test: impl Future<Output = ()>) -> Vec<Event> {
    let collector = Collector::default();
    let subscriber =
        tracing_subscriber::registry().with(collector.clone()).with(tracing_subscriber::filter::LevelFilter::TRACE);
    tracing::subscriber::with_default(subscriber, || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(test);
    });
    let events = collector.0.lock().unwrap().clone();
    events.into_iter().filter(|event| event.level <= Level::WARN).collect()
}

/// The one warning of a failed release of `key` after a block.
fn assert_one_release_warning(warnings: &[Event], key: &str, message: &str) {
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    let warning = &warnings[0];
    assert_eq!(warning.level, Level::WARN);
    assert!(warning.message.contains(message), "{warning:#?}");
    assert_eq!(warning.fields.get("lock.key").map(String::as_str), Some(key), "{warning:#?}");
    assert_eq!(warning.fields.get("backend").map(String::as_str), Some("memory"), "{warning:#?}");
    let error = warning.fields.get("error").map(String::as_str).unwrap_or_default();
    assert!(error.contains("release") && error.contains("injected"), "the cause is logged: {warning:#?}");
}

// ---------------------------------------------------------------------------------------
// Single keys: FaultyStore.
// ---------------------------------------------------------------------------------------

const SINGLE_WARNING: &str = "failed to release lock after the block";

/// A manager over a fault-injecting memory store whose next release fails.
fn failing_release() -> (LockManager, distlock::testing::Faults) {
    let store = FaultyStore::new(MemoryLockStore::new());
    let faults = store.faults();
    faults.fail_next(Op::Release, 1);
    (LockManager::new(Arc::new(store)), faults)
}

#[test]
fn with_lock_returns_the_blocks_value_when_the_release_fails() {
    let warnings = warnings_of(async {
        let (locks, faults) = failing_release();
        let outcome = locks.with_lock("after:ok", TTL, || async { Ok::<_, AppError>("the block's value") }).await;
        assert_eq!(outcome, Ok("the block's value"));
        assert!(faults.calls(Op::Release) >= 1, "the release was attempted");
        // The lock is not left behind: the background retry frees it.
        locks.flush_releases().await;
        assert!(locks.try_lock("after:ok", TTL).await.unwrap().is_some(), "the retry freed the key");
    });
    assert_one_release_warning(&warnings, "after:ok", SINGLE_WARNING);
}

#[test]
fn with_lock_returns_the_blocks_error_when_the_release_fails() {
    let warnings = warnings_of(async {
        let (locks, faults) = failing_release();
        let options = LockOptions::new().wait(Duration::from_secs(1));
        let outcome = locks
            .with_lock_opts("after:err", TTL, &options, || async {
                Err::<(), _>(AppError::Domain("the block's error"))
            })
            .await;
        assert_eq!(outcome, Err(AppError::Domain("the block's error")));
        assert!(faults.calls(Op::Release) >= 1, "the release was attempted");
        locks.flush_releases().await;
        assert!(locks.try_lock("after:err", TTL).await.unwrap().is_some(), "the retry freed the key");
    });
    assert_one_release_warning(&warnings, "after:err", SINGLE_WARNING);
}

// ---------------------------------------------------------------------------------------
// Lock groups: a faulty memory store whose next group releases fail.
// ---------------------------------------------------------------------------------------

/// Groups and single keys share the one `with_lock` path, and its warning.
const GROUP_WARNING: &str = SINGLE_WARNING;

fn group() -> LockGroup {
    LockGroup::new([GroupMember::exclusive("after:group:a").unwrap(), GroupMember::shared("after:group:b").unwrap()])
        .unwrap()
}

/// A manager over a store whose next `fail_releases` group releases fail, and its faults.
fn group_release_failing(fail_releases: usize) -> (LockManager, Faults) {
    let store = FaultyStore::new(MemoryLockStore::new());
    let faults = store.faults();
    faults.fail_next(Op::ReleaseGroup, fail_releases);
    (LockManager::new(Arc::new(store)), faults)
}

#[test]
fn with_lock_group_returns_the_blocks_value_when_the_release_fails() {
    let warnings = warnings_of(async {
        let (locks, faults) = group_release_failing(1);
        let outcome =
            locks.with_lock_group_opts(&group(), TTL, &LockOptions::new(), || async { Ok::<_, AppError>(42) }).await;
        assert_eq!(outcome, Ok(42));
        assert_eq!(faults.calls(Op::ReleaseGroup), 1, "the release was attempted");
        // Not left behind: the background retry frees the group.
        locks.flush_releases().await;
        assert!(locks.try_lock_group(&group(), TTL).await.unwrap().is_some(), "the retry freed the group");
    });
    assert_one_release_warning(&warnings, "after:group:a", GROUP_WARNING);
}

#[test]
fn with_lock_group_returns_the_blocks_error_when_the_release_fails() {
    let warnings = warnings_of(async {
        let (locks, faults) = group_release_failing(1);
        let outcome = locks
            .with_lock_group_opts(&group(), TTL, &LockOptions::new(), || async {
                Err::<(), _>(AppError::Domain("the block's error"))
            })
            .await;
        assert_eq!(outcome, Err(AppError::Domain("the block's error")));
        assert_eq!(faults.calls(Op::ReleaseGroup), 1, "the release was attempted");
        // Not left behind: the background retry frees the group.
        locks.flush_releases().await;
        assert!(locks.try_lock_group(&group(), TTL).await.unwrap().is_some(), "the retry freed the group");
    });
    assert_one_release_warning(&warnings, "after:group:a", GROUP_WARNING);
}

/// The faulty store is faithful when it does not fail: the same block releases the group, so
/// the tests above see the release failure and nothing else.
#[test]
fn with_lock_group_releases_through_the_wrapper_when_nothing_fails() {
    let warnings = warnings_of(async {
        let (locks, faults) = group_release_failing(0);
        let outcome =
            locks.with_lock_group_opts(&group(), TTL, &LockOptions::new(), || async { Ok::<_, AppError>(()) }).await;
        assert_eq!(outcome, Ok(()));
        assert_eq!(faults.calls(Op::ReleaseGroup), 1);
        let again = locks.try_lock_group(&group(), TTL).await.unwrap();
        assert!(again.is_some(), "the group was released");
    });
    assert!(warnings.is_empty(), "{warnings:#?}");
}
