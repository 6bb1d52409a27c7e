//! What an operator sees in the logs during an outage: a store failure while acquiring is
//! one `warn` with its cause per failed call; the clean-up of an acquisition whose outcome
//! is unknown stays at `debug` (and is not counted as a release); a dropped handle whose
//! background release fails is a `warn`; the axum mapping logs the 5xx answers it gives;
//! and no token ever reaches a log line.
//!
//! The faults come from a wrapper store that fails on purpose (these tests are about the
//! manager's logging, not about a store) and, for Redis, from a private `redis-server`
//! that the test kills.
#![cfg(feature = "memory")]

use crate::common;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::Buffer;
use distlock::memory::MemoryLockStore;
use distlock::{
    Acquire, Capabilities, DynLockStore, GroupLockStore, KeyPattern, LeaseValueStore, ListCursor, ListPage, LockError,
    LockInfo, LockManager, LockOptions, LockStore, QueueStore, StoreKey, Token, Ttl,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use metrics_util::MetricKind;
use tracing::field::{Field, Visit};
use tracing::Level;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

// ---------------------------------------------------------------------------------------
// Capturing events, formatted output and metrics.
// ---------------------------------------------------------------------------------------

/// One event as the subscriber saw it.
#[derive(Debug, Clone)]
struct Event {
    level: Level,
    target: String,
    message: String,
    fields: BTreeMap<String, String>,
}

impl Event {
    fn field(&self, name: &str) -> Option<&str> {
        self.fields.get(name).map(String::as_str)
    }

    /// Everything the event says, for "does it mention …" checks.
    fn text(&self) -> String {
        format!("{} {:?}", self.message, self.fields)
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    fields: BTreeMap<String, String>,
}

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let value = format!("{value:?}");
        if field.name() == "message" {
            self.message = value;
        } else {
            self.fields.insert(field.name().to_owned(), value);
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message = value.to_owned();
        } else {
            self.fields.insert(field.name().to_owned(), value.to_owned());
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
        self.fields.insert(field.name().to_owned(), text);
    }
}

/// A layer that keeps every event.
#[derive(Clone, Default)]
struct Collector(Arc<Mutex<Vec<Event>>>);

impl<S: tracing::Subscriber> Layer<S> for Collector {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let metadata = event.metadata();
        self.0.lock().unwrap().push(Event {
            level: *metadata.level(),
            target: metadata.target().to_owned(),
            message: fields.message,
            fields: fields.fields,
        });
    }
}

/// A counter's name, labels and value.
type Counter = (String, Vec<(String, String)>, u64);

/// What a test logged and counted.
struct Captured {
    events: Vec<Event>,
    /// The formatted output of every event and span, as a log file would hold it.
    output: String,
    /// `(name, labels, value)` of every counter.
    counters: Vec<Counter>,
}

impl Captured {
    fn at(&self, level: Level) -> Vec<&Event> {
        self.events.iter().filter(|e| e.level == level).collect()
    }

    /// Events at `warn` or `error`: what an operator is shown.
    fn alarming(&self) -> Vec<&Event> {
        self.events.iter().filter(|e| e.level <= Level::WARN).collect()
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.counters
            .iter()
            .filter(|(n, l, _)| n == name && labels.iter().all(|(k, v)| l.iter().any(|(lk, lv)| lk == k && lv == v)))
            .map(|(.., value)| value)
            .sum()
    }

    /// No token, whole or abbreviated, anywhere in the output or in any event.
    fn assert_no_token(&self, tokens: &[Token]) {
        assert!(!tokens.is_empty(), "the test took no token to look for");
        for token in tokens {
            for shown in [token.as_str(), token.short()] {
                assert!(!self.output.contains(shown), "token {shown} in the log output:\n{}", self.output);
                for event in &self.events {
                    assert!(!event.text().contains(shown), "token {shown} in {event:?}");
                }
            }
        }
    }

    fn dump(&self) -> String {
        self.events.iter().map(|e| format!("{} {} {}\n", e.level, e.target, e.text())).collect()
    }
}

/// Runs `test` on a current-thread runtime (so background tasks log and count into the
/// same place) with a subscriber at `trace` and a local metrics recorder.
fn capture(test: impl Future<Output = ()>) -> Captured {
    let collector = Collector::default();
    let buffer = Buffer::default();
    let subscriber = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(buffer.clone())
                .with_ansi(false)
                .with_span_events(tracing_subscriber::fmt::format::FmtSpan::FULL),
        )
        .with(collector.clone())
        .with(tracing_subscriber::filter::LevelFilter::TRACE);
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    tracing::subscriber::with_default(subscriber, || {
        metrics::with_local_recorder(&recorder, || {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(test);
        });
    });
    let counters = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .filter(|(key, ..)| key.kind() == MetricKind::Counter)
        .map(|(key, _, _, value)| {
            let labels = key.key().labels().map(|l| (l.key().to_owned(), l.value().to_owned())).collect();
            let DebugValue::Counter(value) = value else { unreachable!("filtered on counters") };
            (key.key().name().to_owned(), labels, value)
        })
        .collect();
    let events = collector.0.lock().unwrap().clone();
    let output = buffer.text();
    Captured { events, output, counters }
}

// ---------------------------------------------------------------------------------------
// A store that fails on purpose, and remembers every token it was given.
// ---------------------------------------------------------------------------------------

/// The driver error the faulty store reports.
const CAUSE: &str = "connection reset by the test's faulty store";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AcquireFault {
    None,
    /// The lease is taken, then an error is returned: the outcome is unknown to the caller.
    FailAfterTaking,
    /// The lease is taken, then the answer never comes (the caller gives up).
    HangAfterTaking,
}

#[derive(Debug)]
struct Faulty {
    inner: Arc<DynLockStore>,
    acquire: Mutex<AcquireFault>,
    fail_release: AtomicBool,
    tokens: Mutex<Vec<Token>>,
}

impl Faulty {
    fn new(inner: Arc<DynLockStore>) -> Arc<Self> {
        Arc::new(Self {
            inner,
            acquire: Mutex::new(AcquireFault::None),
            fail_release: AtomicBool::new(false),
            tokens: Mutex::default(),
        })
    }

    fn over_memory() -> Arc<Self> {
        Self::new(Arc::new(MemoryLockStore::new()))
    }

    fn set_acquire(&self, fault: AcquireFault) {
        *self.acquire.lock().unwrap() = fault;
    }

    fn tokens(&self) -> Vec<Token> {
        self.tokens.lock().unwrap().clone()
    }

    fn fault(&self, operation: &'static str, key: &StoreKey) -> LockError {
        let cause = std::io::Error::new(std::io::ErrorKind::ConnectionReset, CAUSE);
        LockError::store(self.inner.backend(), operation, Some(key.lock_key()), cause)
    }
}

#[distlock::async_trait]
impl LockStore for Faulty {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }

    /// Without the inner store's queue: every attempt goes through `try_acquire`.
    fn capabilities(&self) -> Capabilities {
        self.inner.capabilities().with_fair_queue(false)
    }

    fn queue(&self) -> Option<&dyn QueueStore> {
        None
    }

    fn groups(&self) -> Option<&dyn GroupLockStore> {
        None
    }

    fn values(&self) -> Option<&dyn LeaseValueStore> {
        None
    }

    async fn try_acquire(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<Acquire, LockError> {
        self.tokens.lock().unwrap().push(token.clone());
        let fault = *self.acquire.lock().unwrap();
        let outcome = self.inner.try_acquire(key, token, ttl).await;
        match fault {
            AcquireFault::None => outcome,
            AcquireFault::FailAfterTaking => Err(self.fault("acquire", key)),
            AcquireFault::HangAfterTaking => std::future::pending().await,
        }
    }

    async fn release(&self, key: &StoreKey, token: &Token) -> Result<bool, LockError> {
        if self.fail_release.load(Ordering::SeqCst) {
            return Err(self.fault("release", key));
        }
        self.inner.release(key, token).await
    }

    async fn extend(&self, key: &StoreKey, token: &Token, ttl: Ttl) -> Result<bool, LockError> {
        self.inner.extend(key, token, ttl).await
    }

    async fn inspect(&self, key: &StoreKey) -> Result<Option<LockInfo>, LockError> {
        self.inner.inspect(key).await
    }

    async fn wait_for_release(&self, key: &StoreKey, max: Duration) -> Result<(), LockError> {
        self.inner.wait_for_release(key, max).await
    }

    async fn list(
        &self,
        pattern: &KeyPattern,
        cursor: Option<&ListCursor>,
        limit: usize,
    ) -> Result<ListPage, LockError> {
        self.inner.list(pattern, cursor, limit).await
    }
}

const TTL: Duration = Duration::from_secs(30);
const RELEASE_TOTAL: &str = distlock::metric_names::RELEASE_TOTAL;

fn is_store_error(result: &Result<impl std::fmt::Debug, LockError>) -> bool {
    matches!(result, Err(LockError::Store { .. }))
}

// ---------------------------------------------------------------------------------------
// Acquisition failures.
// ---------------------------------------------------------------------------------------

#[test]
fn a_store_failure_while_acquiring_is_one_warning_with_its_cause_per_failed_call() {
    let store = Faulty::over_memory();
    let keys: Vec<String> = (0..6).map(|i| format!("logs:acquire:{i}")).collect();
    let captured = capture({
        let (store, keys) = (Arc::clone(&store), keys.clone());
        async move {
            store.set_acquire(AcquireFault::FailAfterTaking);
            let locks = LockManager::new(store.clone());
            let waiting = LockOptions::new().wait(Duration::from_secs(5)).retry_interval(Duration::from_millis(10));
            let block = || async { Ok::<_, LockError>(()) };
            assert!(is_store_error(&locks.try_lock(&keys[0], TTL).await));
            assert!(is_store_error(&locks.lock(&keys[1], TTL).await));
            assert!(is_store_error(&locks.with_lock(&keys[2], TTL, block).await));
            assert!(is_store_error(&locks.try_lock_opts(&keys[3], TTL, &waiting).await));
            assert!(is_store_error(&locks.lock_opts(&keys[4], TTL, &waiting).await));
            assert!(is_store_error(&locks.with_lock_opts(&keys[5], TTL, &waiting, block).await));
            // The clean-up of the six leases of unknown outcome (they do exist: the store
            // took them before failing).
            locks.flush_releases().await;
            store.set_acquire(AcquireFault::None);
            for key in &keys {
                let lock = locks.try_lock(key, TTL).await.unwrap();
                assert!(lock.is_some(), "the clean-up freed {key}");
                lock.unwrap().release().await.unwrap();
            }
        }
    });
    let warnings = captured.at(Level::WARN);
    assert_eq!(warnings.len(), 6, "one warning per failed call:\n{}", captured.dump());
    assert!(captured.at(Level::ERROR).is_empty(), "{}", captured.dump());
    for key in &keys {
        let about_key: Vec<_> = warnings.iter().filter(|e| e.field("lock.key") == Some(key.as_str())).collect();
        assert_eq!(about_key.len(), 1, "one failed call on {key}:\n{}", captured.dump());
        for warning in about_key {
            let error = warning.field("error").unwrap_or_default();
            assert!(error.contains(CAUSE), "the warning carries the cause: {warning:?}");
            assert!(warning.text().contains("acqui"), "the warning says what failed: {warning:?}");
        }
    }
    if cfg!(feature = "metrics") {
        assert_eq!(captured.counter(RELEASE_TOTAL, &[]), 6, "only the six releases the test asked for count");
        assert_eq!(captured.counter(RELEASE_TOTAL, &[("outcome", "released")]), 6);
    }
    captured.assert_no_token(&store.tokens());
}

#[test]
fn cleaning_up_an_acquisition_of_unknown_outcome_is_debug_not_a_failed_release() {
    let store = Faulty::over_memory();
    let captured = capture({
        let store = Arc::clone(&store);
        async move {
            let locks = LockManager::new(store.clone());
            // 1. The store fails after taking the lease; the clean-up fails too.
            store.set_acquire(AcquireFault::FailAfterTaking);
            store.fail_release.store(true, Ordering::SeqCst);
            assert!(is_store_error(&locks.try_lock("logs:unknown:failed", TTL).await));
            locks.flush_releases().await;
            // 2. The caller gives up on an acquisition that never answers; the clean-up works.
            store.set_acquire(AcquireFault::HangAfterTaking);
            store.fail_release.store(false, Ordering::SeqCst);
            let cancelled = tokio::time::timeout(Duration::from_millis(20), locks.try_lock("logs:unknown:hung", TTL));
            assert!(cancelled.await.is_err(), "the acquisition never answers");
            locks.flush_releases().await;
            // 3. The same, and the clean-up fails.
            store.fail_release.store(true, Ordering::SeqCst);
            let cancelled =
                tokio::time::timeout(Duration::from_millis(20), locks.try_lock("logs:unknown:hung-failed", TTL));
            assert!(cancelled.await.is_err());
            locks.flush_releases().await;
        }
    });
    // Only the failed call of case 1 is news for the operator.
    let alarming = captured.alarming();
    assert_eq!(alarming.len(), 1, "only the failed acquisition warns:\n{}", captured.dump());
    assert_eq!(alarming[0].field("lock.key"), Some("logs:unknown:failed"));
    assert!(alarming[0].text().contains("acqui"), "{:?}", alarming[0]);
    // Each clean-up left a trace for developers, with the cause when it failed.
    for (key, failed) in
        [("logs:unknown:failed", true), ("logs:unknown:hung", false), ("logs:unknown:hung-failed", true)]
    {
        let debug: Vec<_> =
            captured.at(Level::DEBUG).into_iter().filter(|e| e.field("lock.key") == Some(key)).collect();
        assert!(!debug.is_empty(), "no debug trace of the clean-up of {key}:\n{}", captured.dump());
        if failed {
            assert!(
                debug.iter().any(|e| e.field("error").is_some_and(|error| error.contains(CAUSE))),
                "the failed clean-up of {key} keeps its cause at debug:\n{}",
                captured.dump()
            );
        }
    }
    if cfg!(feature = "metrics") {
        assert_eq!(
            captured.counter(RELEASE_TOTAL, &[]),
            0,
            "a clean-up is not a release the user asked for: {:?}",
            captured.counters
        );
    }
    captured.assert_no_token(&store.tokens());
}

// ---------------------------------------------------------------------------------------
// Releases of dropped handles.
// ---------------------------------------------------------------------------------------

#[test]
fn a_dropped_handle_whose_background_release_fails_is_a_warning() {
    let store = Faulty::over_memory();
    let captured = capture({
        let store = Arc::clone(&store);
        async move {
            let locks = LockManager::new(store.clone());
            let fine = locks.try_lock("logs:dropped:fine", TTL).await.unwrap().unwrap();
            let doomed = locks.try_lock("logs:dropped:doomed", TTL).await.unwrap().unwrap();
            drop(fine);
            locks.flush_releases().await;
            store.fail_release.store(true, Ordering::SeqCst);
            drop(doomed);
            locks.flush_releases().await;
        }
    });
    let alarming = captured.alarming();
    assert_eq!(alarming.len(), 1, "one warning, for the failed release:\n{}", captured.dump());
    let warning = alarming[0];
    assert_eq!(warning.level, Level::WARN);
    assert_eq!(warning.field("lock.key"), Some("logs:dropped:doomed"));
    assert!(warning.field("error").is_some_and(|e| e.contains(CAUSE)), "with its cause: {warning:?}");
    if cfg!(feature = "metrics") {
        assert_eq!(captured.counter(RELEASE_TOTAL, &[("outcome", "error")]), 1, "{:?}", captured.counters);
        assert_eq!(captured.counter(RELEASE_TOTAL, &[("outcome", "released")]), 1, "{:?}", captured.counters);
    }
    captured.assert_no_token(&store.tokens());
}

// ---------------------------------------------------------------------------------------
// A real outage: a private Redis server, killed.
// ---------------------------------------------------------------------------------------

#[cfg(feature = "redis")]
#[test]
fn a_redis_outage_is_one_warning_per_failed_acquisition_and_per_lost_release() {
    use distlock_conformance::kit::redis_server::RedisServer;

    let Some(mut server) = RedisServer::start_or_skip("a_redis_outage_is_one_warning_per_failed_acquisition") else {
        return;
    };
    let url = server.url();
    let mut failures = Vec::new();
    let mut store_slot = None;
    let captured = capture(async {
        let redis = distlock::redis::RedisLockStore::builder()
            .response_timeout(Duration::from_secs(1))
            .connect_timeout(Duration::from_secs(1))
            .reconnect_retries(1)
            .connect(&url)
            .await
            .unwrap();
        let store = Faulty::new(Arc::new(redis));
        store_slot = Some(Arc::clone(&store));
        let locks = LockManager::new(store.clone());
        let held = locks.try_lock("logs:redis:held", TTL).await.unwrap().unwrap();
        server.stop();
        for key in ["logs:redis:a", "logs:redis:b"] {
            let err = locks.try_lock(key, TTL).await.expect_err("the server is down");
            assert!(matches!(err, LockError::Store { backend: "redis", .. }), "{err}");
            failures.push((key, err.report().to_string()));
        }
        drop(held);
        locks.flush_releases().await;
    });
    let store = store_slot.expect("the test ran");
    for (key, error) in &failures {
        let warnings: Vec<_> =
            captured.at(Level::WARN).into_iter().filter(|e| e.field("lock.key") == Some(*key)).collect();
        assert_eq!(warnings.len(), 1, "one warning for the failed call on {key}:\n{}", captured.dump());
        assert_eq!(warnings[0].field("error"), Some(error.as_str()), "the warning carries the whole error");
        let cause = error.split_once("`: ").map(|(_, cause)| cause.trim());
        assert!(cause.is_some_and(|c| !c.is_empty()), "the error names its cause: {error}");
    }
    let lost_release: Vec<_> =
        captured.at(Level::WARN).into_iter().filter(|e| e.field("lock.key") == Some("logs:redis:held")).collect();
    assert_eq!(lost_release.len(), 1, "the dropped handle's failed release is one warning:\n{}", captured.dump());
    assert!(lost_release[0].field("error").is_some_and(|e| e.contains("release")), "{:?}", lost_release[0]);
    assert!(captured.at(Level::ERROR).is_empty(), "{}", captured.dump());
    captured.assert_no_token(&store.tokens());
}

// ---------------------------------------------------------------------------------------
// The axum mapping.
// ---------------------------------------------------------------------------------------

#[cfg(feature = "axum")]
#[test]
fn the_axum_mapping_logs_the_5xx_answers_and_not_the_4xx() {
    use axum::http::StatusCode;
    use axum::response::IntoResponse;
    use distlock::{InvalidOptions, LossReason};

    let cases: Vec<(LockError, StatusCode, Option<Level>)> = vec![
        (LockError::NotAcquired { key: "logs:http:409".into() }, StatusCode::CONFLICT, None),
        (distlock::LockKey::new("").unwrap_err(), StatusCode::BAD_REQUEST, None),
        (LockError::InvalidToken, StatusCode::BAD_REQUEST, None),
        (
            LockError::store("redis", "acquire", Some("logs:http:503"), std::io::Error::other(CAUSE)),
            StatusCode::SERVICE_UNAVAILABLE,
            Some(Level::WARN),
        ),
        (
            LockError::LeaseLost { key: "logs:http:lost".into(), reason: LossReason::DeadlinePassed },
            StatusCode::SERVICE_UNAVAILABLE,
            Some(Level::WARN),
        ),
        (
            LockError::InvalidOptions { reason: InvalidOptions::ZeroTtl },
            StatusCode::INTERNAL_SERVER_ERROR,
            Some(Level::ERROR),
        ),
        (
            LockError::Config { message: "the test's broken configuration".into() },
            StatusCode::INTERNAL_SERVER_ERROR,
            Some(Level::ERROR),
        ),
    ];
    for (error, status, logged_at) in cases {
        let shown = error.to_string();
        let mut answered = None;
        let captured = capture(async {
            answered = Some(error.into_response().status());
        });
        assert_eq!(answered, Some(status), "{shown}");
        let alarming = captured.alarming();
        match logged_at {
            None => assert!(
                alarming.is_empty(),
                "a {status} answer is not an operator's alarm: {shown}\n{}",
                captured.dump()
            ),
            Some(level) => {
                assert_eq!(alarming.len(), 1, "one event for a {status} answer ({shown}):\n{}", captured.dump());
                assert_eq!(alarming[0].level, level, "{shown}");
                assert!(
                    alarming[0].text().contains(&shown),
                    "the event carries the whole error {shown:?}: {:?}",
                    alarming[0]
                );
                assert!(alarming[0].text().contains(status.as_str()), "and the status: {:?}", alarming[0]);
            }
        }
    }
}
