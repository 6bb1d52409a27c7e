//! `LockStore::list`: what is held, filtered by a key pattern, page by page.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DistributedLock, DynLockStore, HeldLock, KeyPattern, ListCursor, LockError, LockManager, LockMode};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::{manager, Keys, LONG_TTL};

/// More pages than this in one listing means the cursor never completes.
const MAX_PAGES: usize = 1_000_000;

/// Everything one listing returned, page by page until its cursor completed.
#[derive(Debug, Default)]
pub struct Listing {
    /// Every lock of every page, in the order listed.
    pub locks: Vec<HeldLock>,
    /// How many pages (calls of `list`) it took.
    pub pages: usize,
    /// The most locks one page held.
    pub largest_page: usize,
    /// The longest one page took.
    pub slowest_page: Duration,
}

impl Listing {
    /// The listed keys and how often each was listed.
    pub fn counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for lock in &self.locks {
            *counts.entry(lock.key.as_str().to_owned()).or_insert(0) += 1;
        }
        counts
    }

    /// The listed keys, each once.
    pub fn keys(&self) -> BTreeSet<String> {
        self.counts().into_keys().collect()
    }
}

/// Lists every held lock matching `pattern`, `limit` keys per page, until the cursor
/// completes.
///
/// # Panics
///
/// When `list` fails, or the listing takes more than a million pages.
pub async fn list_all(store: &DynLockStore, pattern: &KeyPattern, limit: usize) -> Listing {
    let mut listing = Listing::default();
    let mut cursor: Option<ListCursor> = None;
    loop {
        let started = Instant::now();
        let page = store.list(pattern, cursor.as_ref(), limit).await.expect("list");
        listing.slowest_page = listing.slowest_page.max(started.elapsed());
        listing.pages += 1;
        listing.largest_page = listing.largest_page.max(page.locks.len());
        listing.locks.extend(page.locks);
        match page.next {
            None => return listing,
            Some(next) => {
                assert_ne!(cursor.as_ref(), Some(&next), "the cursor did not move");
                cursor = Some(next);
            }
        }
        assert!(listing.pages < MAX_PAGES, "the listing of {pattern} did not complete");
    }
}

/// Whether the store lists its locks. Listing has no capability flag: a store that
/// cannot list keeps the trait's default, which refuses every call with
/// [`LockError::Unsupported`] naming the store and `"list"`; that refusal (and nothing
/// else) is what such a store is held to.
async fn lists(store: &DynLockStore) -> bool {
    match store.list(&KeyPattern::all(), None, 1).await {
        Ok(_) => true,
        Err(LockError::Unsupported { backend, operation: "list" }) if backend == store.backend() => false,
        Err(err) => panic!("list failed: {err}"),
    }
}

/// Whether the store lists in key order, each key once (all but Redis, whose `SCAN` may
/// return a key twice, in hash-table order).
fn lists_in_key_order(store: &DynLockStore) -> bool {
    // The Redis family (single node, cluster, Redlock) lists in `SCAN` order.
    !(store.backend().starts_with("redis") || store.backend() == "redlock")
}

fn pattern(keys: &Keys, glob: &str) -> KeyPattern {
    KeyPattern::new(keys.key(glob)).expect("valid pattern")
}

/// Held locks are listed with their holder: the token, exclusive mode, the fence (on
/// stores that fence) and the time left, as `inspect` reports them.
pub async fn list_reports_held_locks(store: Arc<DynLockStore>) {
    if !lists(&store).await {
        return;
    }
    let keys = Keys::new("list-held");
    let locks = manager(&store);
    let long = locks.lock(&keys.key("long"), LONG_TTL).await.unwrap();
    let short_ttl = Duration::from_secs(10);
    let short = locks.lock(&keys.key("short"), short_ttl).await.unwrap();

    let listing = list_all(&*store, &pattern(&keys, "*"), 100).await;
    assert_eq!(listing.keys(), BTreeSet::from([keys.key("long"), keys.key("short")]), "{listing:?}");
    for (lock, ttl) in [(&long, LONG_TTL), (&short, short_ttl)] {
        let held = listing.locks.iter().find(|held| held.key == *lock.key()).expect("listed");
        let [holder] = held.holders.as_slice() else { panic!("one holder expected: {held:?}") };
        assert_eq!(&holder.token, lock.token());
        assert_eq!(holder.mode, LockMode::Exclusive);
        assert_eq!(holder.fence, lock.fence(), "the listed fence is the holder's");
        assert!(holder.ttl_left <= ttl, "{:?} left of a {ttl:?} lease", holder.ttl_left);
        assert!(holder.ttl_left > ttl - Duration::from_secs(8), "{:?} left of a {ttl:?} lease", holder.ttl_left);
        let inspected = store.inspect(lock.store_key()).await.unwrap().expect("held");
        assert_eq!((&inspected.token, inspected.fence), (&holder.token, holder.fence));
    }
    assert!(long.release().await.unwrap());
    assert!(short.release().await.unwrap());
}

/// A pattern selects keys: `*` and `?` are wildcards (`?` one character, also a
/// multi-byte one); `%`, `_`, `[`, `]`, `^`, `-` and `\`-escaped `*`, `?`, `\` match
/// themselves, although they are special in Redis globs or SQL `LIKE`.
pub async fn list_filters_by_pattern(store: Arc<DynLockStore>) {
    if !lists(&store).await {
        return;
    }
    let keys = Keys::new("list-filter");
    let locks = manager(&store);
    let names =
        ["50%", "50_", "50x", "500", "[a]", "a", "*star", "xstar", "q?", "qq", "é1", "ü1", r"back\slash", "a-b^c", "b"];
    let mut held = Vec::new();
    for name in names {
        held.push(locks.lock(&keys.key(name), LONG_TTL).await.unwrap());
    }
    let cases: &[(&str, &[&str])] = &[
        ("50%", &["50%"]),
        ("50_", &["50_"]),
        ("50?", &["50%", "50_", "50x", "500"]),
        ("[a]", &["[a]"]),
        (r"\*star", &["*star"]),
        ("*star", &["*star", "xstar"]),
        (r"q\?", &["q?"]),
        ("?1", &["é1", "ü1"]),
        (r"back\\slash", &[r"back\slash"]),
        ("a-b^c", &["a-b^c"]),
        ("nothing*", &[]),
        ("*", &names),
    ];
    for (glob, expected) in cases {
        let listing = list_all(&*store, &pattern(&keys, glob), 100).await;
        let expected: BTreeSet<String> = expected.iter().map(|name| keys.key(name)).collect();
        assert_eq!(listing.keys(), expected, "pattern {glob:?}");
    }
    // A pattern without the namespace sees these keys among others'.
    let everything = list_all(&*store, &KeyPattern::all(), 1_000).await;
    assert!(everything.keys().contains(&keys.key("50%")), "`*` did not list a held key");
    for lock in held {
        assert!(lock.release().await.unwrap());
    }
}

/// Released and expired leases are not listed.
pub async fn list_skips_released_and_expired_leases(store: Arc<DynLockStore>) {
    if !lists(&store).await {
        return;
    }
    let keys = Keys::new("list-gone");
    let locks = manager(&store);
    let held = locks.lock(&keys.key("held"), LONG_TTL).await.unwrap();
    let released = locks.lock(&keys.key("released"), LONG_TTL).await.unwrap();
    assert!(released.release().await.unwrap());
    let expiring = locks.lock(&keys.key("expired"), Duration::from_millis(200)).await.unwrap();
    let expired_key = expiring.store_key().clone();
    let _ = expiring.leak();
    // Expiry sends no signal: look until the store itself says the lease is over.
    let deadline = Instant::now() + Duration::from_secs(10);
    while store.inspect(&expired_key).await.unwrap().is_some() {
        assert!(Instant::now() < deadline, "the 200 ms lease did not expire within 10 s");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let listing = list_all(&*store, &pattern(&keys, "*"), 100).await;
    assert_eq!(listing.keys(), BTreeSet::from([keys.key("held")]), "{listing:?}");
    assert!(held.release().await.unwrap());
    assert!(list_all(&*store, &pattern(&keys, "*"), 100).await.locks.is_empty(), "a released key is listed");
}

const MANY: usize = 2_500;
const PAGE: usize = 100;
const WORKERS: usize = 16;

/// Acquires `{keys}:{i}` for every `i < count` with [`WORKERS`] tasks.
async fn acquire_numbered(locks: &LockManager, keys: &Keys, count: usize) -> Vec<DistributedLock> {
    let mut tasks = JoinSet::new();
    for worker in 0..WORKERS {
        let (locks, keys) = (locks.clone(), keys.clone());
        tasks.spawn(async move {
            let mut held = Vec::new();
            for i in (worker..count).step_by(WORKERS) {
                held.push(locks.lock(&keys.key(&i.to_string()), LONG_TTL * 10).await.unwrap());
            }
            held
        });
    }
    let mut all = Vec::with_capacity(count);
    while let Some(held) = tasks.join_next().await {
        all.extend(held.unwrap());
    }
    all
}

/// 2,500 held keys listed 100 at a time: every key at least once (exactly once, in key
/// order and at most 100 per page, on the stores that list in key order), and the cursor
/// completes. After the release nothing is listed.
pub async fn list_pages_through_many_keys(store: Arc<DynLockStore>) {
    if !lists(&store).await {
        return;
    }
    let keys = Keys::new("list-many");
    let locks = manager(&store);
    let held = acquire_numbered(&locks, &keys, MANY).await;
    let listing = list_all(&*store, &pattern(&keys, "*"), PAGE).await;
    let counts = listing.counts();
    let expected: BTreeSet<String> = (0..MANY).map(|i| keys.key(&i.to_string())).collect();
    assert_eq!(counts.keys().cloned().collect::<BTreeSet<_>>(), expected, "not every held key was listed");
    if lists_in_key_order(&*store) {
        let listed: Vec<&str> = listing.locks.iter().map(|lock| lock.key.as_str()).collect();
        assert!(listed.windows(2).all(|pair| pair[0] < pair[1]), "not in key order, or a key listed twice");
        assert!(listing.largest_page <= PAGE, "a page of {} locks with limit {PAGE}", listing.largest_page);
        assert!(listing.pages >= MANY / PAGE, "{} pages for {MANY} keys", listing.pages);
    } else {
        let twice = counts.values().filter(|&&n| n > 1).count();
        assert!(twice < MANY / 10, "{twice} keys listed more than once");
    }
    let tokens: BTreeMap<&str, &str> = held.iter().map(|lock| (lock.key().as_str(), lock.token().as_str())).collect();
    for lock in &listing.locks {
        assert_eq!(Some(&lock.holders[0].token.as_str()), tokens.get(lock.key.as_str()), "{}", lock.key);
    }
    // A narrower pattern over the same keys: `1*` is 1, 10–19, 100–199, 1000–1999.
    let ones = list_all(&*store, &pattern(&keys, "1*"), PAGE).await;
    assert_eq!(ones.keys().len(), 1 + 10 + 100 + 1000, "pattern 1*");
    for lock in held {
        assert!(lock.release().await.unwrap());
    }
    assert!(list_all(&*store, &pattern(&keys, "*"), PAGE).await.locks.is_empty(), "released keys are listed");
}

/// What [`list_at_scale`] measured.
#[derive(Debug, Clone)]
pub struct ScaleListing {
    /// How long the whole listing took.
    pub elapsed: Duration,
    /// How many pages it took.
    pub pages: usize,
    /// The longest one page took.
    pub slowest_page: Duration,
    /// Acquire + release cycles of another key completed while the listing ran.
    pub probe_cycles: usize,
    /// The slowest of those cycles.
    pub slowest_probe: Duration,
}

/// Lists `count` held keys `{namespace}:0` … that the caller put in the store (the
/// fastest way it has, in the store's own layout, with leases of a few minutes) while
/// another task takes and releases `{namespace}-probe` in a loop. Checks that every key
/// is listed, that the listing took many bounded pages (never one long operation), and
/// that the store kept serving the probe meanwhile: no probe cycle took longer than
/// `max_probe`.
///
/// # Panics
///
/// When a check fails.
pub async fn list_at_scale(
    store: Arc<DynLockStore>,
    namespace: &str,
    count: usize,
    limit: usize,
    max_probe: Duration,
) -> ScaleListing {
    let probing = Arc::new(AtomicBool::new(true));
    let probe = tokio::spawn({
        let (locks, probing) = (manager(&store), Arc::clone(&probing));
        let key = format!("{namespace}-probe");
        async move {
            let (mut cycles, mut slowest) = (0, Duration::ZERO);
            while probing.load(Ordering::SeqCst) || cycles == 0 {
                let started = Instant::now();
                let lock = locks.try_lock(&key, LONG_TTL).await.unwrap().expect("the probe key is free");
                assert!(lock.release().await.unwrap());
                slowest = slowest.max(started.elapsed());
                cycles += 1;
            }
            (cycles, slowest)
        }
    });
    let pattern = KeyPattern::new(format!("{namespace}:*")).expect("valid pattern");
    let started = Instant::now();
    let listing = list_all(&*store, &pattern, limit).await;
    let elapsed = started.elapsed();
    probing.store(false, Ordering::SeqCst);
    let (probe_cycles, slowest_probe) = probe.await.expect("the probe task");

    let counts = listing.counts();
    assert_eq!(counts.len(), count, "{} of {count} held keys listed", counts.len());
    for i in (0..count).step_by(997) {
        assert!(counts.contains_key(&format!("{namespace}:{i}")), "{namespace}:{i} not listed");
    }
    assert!(
        listing.pages >= count / (limit * 2),
        "{count} keys in {} pages of limit {limit}: pages are not bounded",
        listing.pages
    );
    assert!(slowest_probe <= max_probe, "an acquire + release took {slowest_probe:?} during the listing");
    ScaleListing { elapsed, pages: listing.pages, slowest_page: listing.slowest_page, probe_cycles, slowest_probe }
}
