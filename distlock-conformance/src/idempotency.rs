//! The conformance suite of idempotency stores: one `pub async fn` per promise of the
//! [`IdempotencyStore`] contract, each taking the store under test;
//! [`idempotency_suite!`](crate::idempotency_suite) expands to one `#[tokio::test]` per
//! case.
//!
//! Every case works in its own random key namespace. Cases about lapsing wait for a
//! short lease or retention (600 ms) to end on the store's clock: that expiry is what
//! they check.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use distlock_api::{LockError, LossReason, Token, Ttl};
use distlock_idempotency::{
    Claim, ClaimHandle, DynIdempotencyStore, Fingerprint, Idempotency, IdempotencyKey, IdempotencyOptions,
    IdempotencyStore, StoreClaim, StoredResponse,
};

/// A short lease or retention for the cases that wait for one to end; long enough that a
/// loaded machine's stalls do not end it early (renewal every 240 ms, lost after
/// ≈ 230 ms without one).
const SHORT: Duration = Duration::from_millis(600);
/// Longer than [`SHORT`], with room for clock drift between the test and the server.
const PAST_SHORT: Duration = Duration::from_millis(800);

/// A random namespace for one case's keys.
struct Keys(String);

impl Keys {
    fn new(case: &str) -> Self {
        Self(format!("conformance:idem:{case}:{}", uuid::Uuid::new_v4().simple()))
    }

    fn key(&self, name: &str) -> IdempotencyKey {
        IdempotencyKey::new(format!("{}:{name}", self.0)).expect("test keys are valid")
    }
}

fn fingerprint(text: &str) -> Fingerprint {
    Fingerprint::of_parts(&[text.as_bytes()])
}

fn idem(store: &Arc<DynIdempotencyStore>, options: IdempotencyOptions) -> Idempotency {
    Idempotency::with_options(Arc::clone(store), options).expect("valid options")
}

fn lease(duration: Duration) -> Ttl {
    Ttl::new(duration).expect("valid TTL")
}

#[track_caller]
fn started(claim: Claim) -> ClaimHandle {
    match claim {
        Claim::Started(handle) => handle,
        other => panic!("expected Started, got {other:?}"),
    }
}

/// A response with a status, headers and a binary body, as a handler would store it.
fn response(status: u16) -> StoredResponse {
    StoredResponse::new(status, vec![0, 1, 2, 255, b'{', b'}'])
        .with_header("content-type", "application/json")
        .with_header("x-request", vec![0xff, 0x00])
}

/// Started → complete → replay of exactly the stored response, error statuses included;
/// completing twice is refused.
pub async fn idem_started_complete_replay(store: Arc<DynIdempotencyStore>) {
    let keys = Keys::new("replay");
    let idem = Idempotency::new(Arc::clone(&store));
    for (name, status) in [("ok", 201), ("error", 500)] {
        let key = keys.key(name);
        let claim = started(idem.claim(&key, fingerprint("a")).await.unwrap());
        let token = claim.token().clone();
        assert!(claim.complete(&response(status)).await.unwrap());
        match idem.claim(&key, fingerprint("a")).await.unwrap() {
            Claim::Replay(replayed) => assert_eq!(replayed, response(status)),
            other => panic!("expected Replay, got {other:?}"),
        }
        let again = store.complete(&key, &token, &response(418), lease(Duration::from_secs(60))).await.unwrap();
        assert!(!again, "a completed record cannot be completed again");
        assert!(!store.abandon(&key, &token).await.unwrap(), "a completed record cannot be abandoned");
        assert!(matches!(idem.claim(&key, fingerprint("a")).await.unwrap(), Claim::Replay(r) if r.status == status));
    }
}

/// 32 concurrent claims of one key: exactly one runs; the others see it in progress or
/// replay its result.
pub async fn idem_concurrent_duplicates_run_once(store: Arc<DynIdempotencyStore>) {
    const N: usize = 32;
    let keys = Keys::new("concurrent");
    let key = keys.key("k");
    let idem = Idempotency::new(Arc::clone(&store));
    let runs = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(tokio::sync::Barrier::new(N));
    let tasks: Vec<_> = (0..N)
        .map(|_| {
            let (idem, key, runs, barrier) = (idem.clone(), key.clone(), Arc::clone(&runs), Arc::clone(&barrier));
            tokio::spawn(async move {
                barrier.wait().await;
                match idem.claim(&key, fingerprint("same")).await.unwrap() {
                    Claim::Started(claim) => {
                        runs.fetch_add(1, Ordering::SeqCst);
                        tokio::task::yield_now().await;
                        assert!(claim.complete(&response(200)).await.unwrap());
                        "started"
                    }
                    Claim::InProgress { .. } => "in progress",
                    Claim::Replay(replayed) => {
                        assert_eq!(replayed, response(200));
                        "replay"
                    }
                    other => panic!("unexpected {other:?}"),
                }
            })
        })
        .collect();
    let mut outcomes = Vec::new();
    for task in tasks {
        outcomes.push(task.await.unwrap());
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1, "{outcomes:?}");
    assert_eq!(outcomes.iter().filter(|o| **o == "started").count(), 1);
    assert!(matches!(idem.claim(&key, fingerprint("same")).await.unwrap(), Claim::Replay(_)));
}

/// The same key with another fingerprint is a mismatch carrying the first fingerprint,
/// while running and after completion.
pub async fn idem_mismatch_reports_stored_fingerprint(store: Arc<DynIdempotencyStore>) {
    let keys = Keys::new("mismatch");
    let key = keys.key("k");
    let idem = Idempotency::new(store);
    let claim = started(idem.claim(&key, fingerprint("first")).await.unwrap());
    let stored = fingerprint("first");
    assert!(
        matches!(idem.claim(&key, fingerprint("second")).await.unwrap(), Claim::Mismatch { stored: s } if s == stored)
    );
    assert!(claim.complete(&response(200)).await.unwrap());
    assert!(
        matches!(idem.claim(&key, fingerprint("second")).await.unwrap(), Claim::Mismatch { stored: s } if s == stored)
    );
}

/// A running claim answers in progress with the time left on its lease.
pub async fn idem_in_progress_reports_time_left(store: Arc<DynIdempotencyStore>) {
    let keys = Keys::new("in-progress");
    let key = keys.key("k");
    let idem = idem(&store, IdempotencyOptions::new().lease(Duration::from_secs(20)).renew(false));
    let claim = started(idem.claim(&key, fingerprint("a")).await.unwrap());
    match idem.claim(&key, fingerprint("a")).await.unwrap() {
        Claim::InProgress { retry_after } => {
            assert!(retry_after > Duration::from_secs(10) && retry_after <= Duration::from_secs(20), "{retry_after:?}");
        }
        other => panic!("expected InProgress, got {other:?}"),
    }
    assert!(claim.abandon().await.unwrap());
}

/// A claim whose lease lapsed is taken over by the next request; the first request's
/// late completion is refused and the newer result stays.
pub async fn idem_lapsed_claim_taken_over_and_stale_completion_refused(store: Arc<DynIdempotencyStore>) {
    let keys = Keys::new("lapsed");
    let key = keys.key("k");
    let idem = idem(&store, IdempotencyOptions::new().lease(SHORT).renew(false));
    let old = started(idem.claim(&key, fingerprint("a")).await.unwrap());
    tokio::time::sleep(PAST_SHORT).await;
    let new = started(idem.claim(&key, fingerprint("a")).await.unwrap());
    assert!(!old.complete(&response(500)).await.unwrap(), "a lapsed claim must not complete");
    assert!(new.complete(&response(201)).await.unwrap());
    assert!(matches!(idem.claim(&key, fingerprint("a")).await.unwrap(), Claim::Replay(r) if r.status == 201));
}

/// A request that crashed (its claim dropped, never completed) blocks retries until its
/// lease ends; then the next retry runs.
pub async fn idem_crashed_claim_is_retried_after_its_lease(store: Arc<DynIdempotencyStore>) {
    let keys = Keys::new("crashed");
    let key = keys.key("k");
    let idem = idem(&store, IdempotencyOptions::new().lease(SHORT));
    drop(started(idem.claim(&key, fingerprint("a")).await.unwrap()));
    assert!(matches!(idem.claim(&key, fingerprint("a")).await.unwrap(), Claim::InProgress { .. }));
    tokio::time::sleep(PAST_SHORT).await;
    let retry = started(idem.claim(&key, fingerprint("a")).await.unwrap());
    assert!(retry.complete(&response(200)).await.unwrap());
}

/// A completed result is replayed for the retention time, then the key runs again.
pub async fn idem_results_expire_after_retention(store: Arc<DynIdempotencyStore>) {
    let keys = Keys::new("retention");
    let key = keys.key("k");
    let idem = idem(&store, IdempotencyOptions::new().retention(SHORT));
    assert!(started(idem.claim(&key, fingerprint("a")).await.unwrap()).complete(&response(200)).await.unwrap());
    assert!(matches!(idem.claim(&key, fingerprint("a")).await.unwrap(), Claim::Replay(_)));
    tokio::time::sleep(PAST_SHORT).await;
    // Expired, so another fingerprint is no mismatch either.
    let again = started(idem.claim(&key, fingerprint("b")).await.unwrap());
    assert!(again.abandon().await.unwrap());
}

/// Renewal keeps a claim alive well past its lease; the claim completes.
pub async fn idem_renewal_keeps_a_claim_alive(store: Arc<DynIdempotencyStore>) {
    let keys = Keys::new("renewal");
    let key = keys.key("k");
    let idem = idem(&store, IdempotencyOptions::new().lease(SHORT));
    let claim = started(idem.claim(&key, fingerprint("a")).await.unwrap());
    tokio::time::sleep(SHORT * 3).await;
    assert!(!claim.is_lost());
    assert!(matches!(idem.claim(&key, fingerprint("a")).await.unwrap(), Claim::InProgress { .. }));
    assert!(claim.complete(&response(200)).await.unwrap());
}

/// A claim removed behind its holder's back fires `lost` at the next renewal.
pub async fn idem_stolen_claim_fires_lost(store: Arc<DynIdempotencyStore>) {
    let keys = Keys::new("stolen");
    let key = keys.key("k");
    let idem = idem(&store, IdempotencyOptions::new().lease(SHORT));
    let claim = started(idem.claim(&key, fingerprint("a")).await.unwrap());
    assert!(store.abandon(&key, claim.token()).await.unwrap());
    let reason = tokio::time::timeout(Duration::from_secs(5), claim.lost()).await.expect("lost fires");
    assert_eq!(reason, LossReason::NotHeld);
    assert!(!claim.complete(&response(200)).await.unwrap());
}

/// Abandoning frees the key at once; a claim retried with the same token (a lost
/// answer) is started again, another token is not.
pub async fn idem_abandon_and_retried_claims(store: Arc<DynIdempotencyStore>) {
    let keys = Keys::new("abandon");
    let key = keys.key("k");
    let idem = Idempotency::new(Arc::clone(&store));
    assert!(started(idem.claim(&key, fingerprint("a")).await.unwrap()).abandon().await.unwrap());
    let token = Token::generate();
    let ttl = lease(Duration::from_secs(20));
    assert_eq!(store.claim(&key, &fingerprint("a"), &token, ttl).await.unwrap(), StoreClaim::Started);
    assert_eq!(store.claim(&key, &fingerprint("a"), &token, ttl).await.unwrap(), StoreClaim::Started);
    let other = store.claim(&key, &fingerprint("a"), &Token::generate(), ttl).await.unwrap();
    assert!(matches!(other, StoreClaim::InProgress { .. }), "{other:?}");
    assert!(store.renew(&key, &token, ttl).await.unwrap());
    assert!(!store.renew(&key, &Token::generate(), ttl).await.unwrap());
    assert!(!store.abandon(&key, &Token::generate()).await.unwrap());
    assert!(store.abandon(&key, &token).await.unwrap());
    assert!(!store.renew(&key, &token, ttl).await.unwrap());
    // Keys are independent and case-sensitive.
    let upper = IdempotencyKey::new(key.as_str().to_uppercase()).unwrap();
    assert_eq!(store.claim(&key, &fingerprint("a"), &token, ttl).await.unwrap(), StoreClaim::Started);
    assert_eq!(store.claim(&upper, &fingerprint("a"), &token, ttl).await.unwrap(), StoreClaim::Started);
    assert!(store.abandon(&key, &token).await.unwrap() && store.abandon(&upper, &token).await.unwrap());
}

/// A store wrapper that counts calls, for the bad-input case.
#[derive(Debug)]
struct Counting {
    inner: Arc<DynIdempotencyStore>,
    calls: AtomicUsize,
}

#[async_trait]
impl IdempotencyStore for Counting {
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
    async fn claim(&self, k: &IdempotencyKey, f: &Fingerprint, t: &Token, l: Ttl) -> Result<StoreClaim, LockError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.claim(k, f, t, l).await
    }
    async fn renew(&self, k: &IdempotencyKey, t: &Token, l: Ttl) -> Result<bool, LockError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.renew(k, t, l).await
    }
    async fn complete(&self, k: &IdempotencyKey, t: &Token, r: &StoredResponse, l: Ttl) -> Result<bool, LockError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.complete(k, t, r, l).await
    }
    async fn abandon(&self, k: &IdempotencyKey, t: &Token) -> Result<bool, LockError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.abandon(k, t).await
    }
}

/// Bad keys and options are typed errors raised before the store is called.
pub async fn idem_bad_input_is_rejected_before_any_store_call(store: Arc<DynIdempotencyStore>) {
    let counting = Arc::new(Counting { inner: store, calls: AtomicUsize::new(0) });
    let dyn_store: Arc<DynIdempotencyStore> = counting.clone();
    for bad in [String::new(), "a\0b".to_owned(), "line\nbreak".to_owned(), "x".repeat(513)] {
        let err = IdempotencyKey::new(bad.clone()).unwrap_err();
        assert!(matches!(err, LockError::InvalidKey { .. }), "{bad:?}: {err}");
    }
    assert!(IdempotencyKey::new("x".repeat(512)).is_ok());
    for options in [
        IdempotencyOptions::new().lease(Duration::ZERO),
        IdempotencyOptions::new().retention(Duration::ZERO),
        IdempotencyOptions::new().retention(Ttl::MAX * 2),
    ] {
        let err = Idempotency::with_options(Arc::clone(&dyn_store), options).unwrap_err();
        assert!(matches!(err, LockError::InvalidOptions { .. }), "{options:?}: {err}");
    }
    // Sub-millisecond leases round up, never down to "no expiry".
    let idem = Idempotency::with_options(dyn_store, IdempotencyOptions::new().lease(Duration::from_micros(10)));
    assert_eq!(idem.unwrap().lease(), Duration::from_millis(1));
    assert_eq!(counting.calls.load(Ordering::SeqCst), 0);
}

/// The lease of the claim a child process holds when it is killed.
pub const KILL9_LEASE: Duration = Duration::from_secs(1);

/// The child side of [`killed_claimer_lapses_after_its_lease`]: claims `key` on `store`
/// (renewing, lease [`KILL9_LEASE`]), announces `CLAIMED` and waits to be killed.
pub async fn claim_and_park(store: Arc<DynIdempotencyStore>, key: &str) -> ! {
    let idem = idem(&store, IdempotencyOptions::new().lease(KILL9_LEASE));
    let claim = started(idem.claim(&IdempotencyKey::new(key).expect("key"), fingerprint("a")).await.unwrap());
    crate::kit::child::announce("CLAIMED");
    let _held = claim;
    crate::kit::child::park().await
}

/// `kill -9` of a process in the middle of its operation (`child`, running
/// [`claim_and_park`] on `key`): its claim, renewed while it lived, blocks retries until
/// the lease ends; then the next retry runs.
pub async fn killed_claimer_lapses_after_its_lease(
    store: Arc<DynIdempotencyStore>,
    mut child: crate::kit::child::ChildProcess,
    key: &str,
) {
    child.wait_for_line("CLAIMED", Duration::from_secs(60));
    // Past several renewals: the living child still holds the claim.
    tokio::time::sleep(KILL9_LEASE * 2).await;
    let idem = Idempotency::new(store);
    let key = IdempotencyKey::new(key).expect("key");
    assert!(matches!(idem.claim(&key, fingerprint("a")).await.unwrap(), Claim::InProgress { .. }));
    child.kill9();
    let killed_at = tokio::time::Instant::now();
    loop {
        match idem.claim(&key, fingerprint("a")).await.unwrap() {
            Claim::Started(claim) => return assert!(claim.complete(&response(200)).await.unwrap()),
            Claim::InProgress { retry_after } => {
                assert!(killed_at.elapsed() < KILL9_LEASE * 5, "the claim never lapsed");
                tokio::time::sleep(retry_after.max(Duration::from_millis(10))).await;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}
