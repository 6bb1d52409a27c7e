//! Every public entry point that takes a `Duration` or a URL, fed edge values and random
//! ones on every store: each call returns a typed error (`InvalidOptions`, `Config`, or
//! `Store` from a server that refused) or works, and never panics — not in the call, not
//! in a background task it starts. No error, and no parsed URL or store, ever shows the
//! URL's password.
//!
//! The generator is a seeded xorshift, so a failure can be replayed:
//! `DISTLOCK_FUZZ_SEED=<seed printed by the failing run> cargo nextest run -p distlock
//! --all-features fuzz_inputs::`. Every problem found is listed with its exact input.
#![cfg(all(feature = "memory", feature = "redis", feature = "postgres"))]

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, Once};
use std::time::Duration;

use distlock::api::waiters::{deadline_after, KeyState, WaiterRegistry};
use distlock::memory::MemoryLockStore;
use distlock::postgres::{PostgresLockStore, PostgresUrl, PurgeOptions, MAX_ACQUIRE_TIMEOUT, MIN_PURGE_HORIZON};
use distlock::redis::{RedisLockStore, RedisLockStoreBuilder, RedisUrl};
use distlock::{DynLockStore, LockError, LockKey, LockManager, LockOptions, LockStore, Token, Ttl};
use distlock_conformance::kit;
use tokio::task::JoinSet;

// ---------------------------------------------------------------------------------------
// The generator, the panic watch and the problem list.
// ---------------------------------------------------------------------------------------

/// xorshift64*: small, deterministic, good enough to pick inputs.
struct Rng(u64);

impl Rng {
    fn from_env(test: &str) -> Self {
        let seed = std::env::var("DISTLOCK_FUZZ_SEED")
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0x5EED_D157_10C4_2024);
        eprintln!("{test}: DISTLOCK_FUZZ_SEED={seed}");
        Self(seed.max(1))
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }

    fn pick_str(&mut self, items: &[&'static str]) -> &'static str {
        items[self.below(items.len())]
    }

    fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }

    fn duration(&mut self) -> Duration {
        let nanos = (self.next() % 1_000_000_000) as u32;
        match self.below(7) {
            0 => Duration::from_nanos(self.next() % 1_000),
            1 => Duration::from_nanos(self.next() % 1_000_000),
            2 => Duration::from_nanos(self.next() % 1_000_000_000),
            3 => Duration::new(self.next() % 1_000, nanos),
            4 => Duration::new(self.next() % 100_000_000, nanos),
            5 => Duration::from_millis(self.next()),
            _ => Duration::new(self.next(), nanos),
        }
    }
}

/// Panics anywhere in this test's thread — including background tasks of a
/// current-thread runtime (release listeners, renewal watchdogs, purgers), whose panics
/// never reach the caller — are recorded here.
static PANICS: Mutex<Vec<(Option<String>, String)>> = Mutex::new(Vec::new());

fn watch_panics() {
    static HOOK: Once = Once::new();
    HOOK.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let thread = std::thread::current().name().map(str::to_owned);
            PANICS.lock().unwrap_or_else(|e| e.into_inner()).push((thread, info.to_string()));
            default(info);
        }));
    });
}

fn panics_on_this_thread() -> Vec<String> {
    let me = std::thread::current().name().map(str::to_owned);
    PANICS
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .iter()
        .filter(|(thread, _)| *thread == me)
        .map(|(_, message)| message.clone())
        .collect()
}

/// Fails the test with every problem found (and every panic seen on this thread).
fn report(test: &str, mut problems: Vec<String>) {
    problems.extend(panics_on_this_thread().into_iter().map(|p| format!("a panic: {p}")));
    if !problems.is_empty() {
        let total = problems.len();
        problems.truncate(40);
        for problem in &mut problems {
            if let Some((cut, _)) = problem.char_indices().nth(600) {
                problem.truncate(cut);
                problem.push('…');
            }
        }
        panic!("{test}: {total} problem(s) (first {}):\n  {}", problems.len(), problems.join("\n  "));
    }
}

/// Tasks run concurrently, each labelled with its input; a panic is a problem naming it.
#[derive(Default)]
struct Batch {
    tasks: JoinSet<Result<(), String>>,
    labels: HashMap<tokio::task::Id, String>,
}

impl Batch {
    fn spawn(&mut self, label: String, task: impl Future<Output = Result<(), String>> + Send + 'static) {
        let handle = self.tasks.spawn(task);
        self.labels.insert(handle.id(), label);
    }

    async fn finish(mut self, problems: &mut Vec<String>) {
        while let Some(joined) = self.tasks.join_next_with_id().await {
            match joined {
                Ok((_, Ok(()))) => {}
                Ok((id, Err(problem))) => problems.push(format!("{}: {problem}", self.labels[&id])),
                Err(err) if err.is_panic() => {
                    problems.push(format!("{}: PANICKED: {}", self.labels[&err.id()], panic_text(err.into_panic())));
                }
                Err(err) => problems.push(format!("{}: task failed: {err}", self.labels[&err.id()])),
            }
        }
    }
}

fn panic_text(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "<non-string panic>".to_owned())
}

// ---------------------------------------------------------------------------------------
// Durations.
// ---------------------------------------------------------------------------------------

fn edge_durations() -> Vec<Duration> {
    let ms = Duration::from_millis(1);
    let ns = Duration::from_nanos(1);
    vec![
        Duration::ZERO,
        ns,
        Duration::from_micros(1),
        Duration::from_micros(999),
        ms,
        ms + ns,
        Duration::from_millis(50),
        Duration::from_secs(1),
        Duration::from_millis(u64::from(u32::MAX)),
        Duration::from_secs(3600) + ns, // just over the Redis timeouts' and PostgreSQL acquire timeout's cap
        MAX_ACQUIRE_TIMEOUT - ns,
        MIN_PURGE_HORIZON - ns,
        MIN_PURGE_HORIZON + ns,
        RedisLockStore::MAX_WAIT + ns,
        Ttl::MAX - ms,
        Ttl::MAX,
        Ttl::MAX + ms,
        LockOptions::MAX_WAIT - ns,
        LockOptions::MAX_WAIT + ns,
        Duration::from_nanos(u64::MAX),
        Duration::from_secs(u64::MAX / 1_000),
        Duration::from_secs(u64::MAX),
        Duration::MAX,
        Duration::new(u64::MAX, 999_999_999),
    ]
}

/// The edge values and `random` random ones.
fn durations(rng: &mut Rng, random: usize) -> Vec<Duration> {
    let mut all = edge_durations();
    all.extend((0..random).map(|_| rng.duration()));
    all
}

fn ceil_millis(d: Duration) -> u128 {
    d.as_nanos().div_ceil(1_000_000)
}

/// What a manager call must answer for `options` and `ttl`: the validation's own error,
/// or success.
fn expected(options: &LockOptions, ttl: Duration) -> Result<(), String> {
    match options.validate(ttl) {
        Ok(_) => Ok(()),
        Err(err @ LockError::InvalidOptions { .. }) => Err(err.to_string()),
        Err(other) => Err(format!("UNEXPECTED validate error kind {other:?}")),
    }
}

/// Compares a call's outcome (`Ok(())` = the call worked) with the expectation.
fn check(expected: &Result<(), String>, got: Result<(), LockError>) -> Result<(), String> {
    match (expected, got) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(want), Err(err @ LockError::InvalidOptions { .. })) if *want == err.to_string() => Ok(()),
        (Ok(()), Err(err)) => Err(format!("expected success, got {err:?}")),
        (Err(want), Ok(())) => Err(format!("expected InvalidOptions ({want}), got success")),
        (Err(want), Err(err)) => Err(format!("expected InvalidOptions ({want}), got {err:?}")),
    }
}

/// No I/O: `Ttl::new`, `LockOptions::validate` with every setter, the waiter registry's
/// deadlines and `PurgeOptions`.
#[tokio::test]
async fn durations_into_pure_functions() {
    watch_panics();
    let mut rng = Rng::from_env("durations_into_pure_functions");
    let all = durations(&mut rng, 40);
    let mut problems = Vec::new();
    for &d in &all {
        let outcome = std::panic::catch_unwind(|| Ttl::new(d));
        match outcome {
            Err(payload) => problems.push(format!("Ttl::new({d:?}) PANICKED: {}", panic_text(payload))),
            Ok(Ok(ttl)) if d.is_zero() || d > Ttl::MAX => problems.push(format!("Ttl::new({d:?}) accepted: {ttl:?}")),
            Ok(Ok(ttl)) if u128::from(ttl.as_millis()) != ceil_millis(d) || ttl.as_millis() == 0 => {
                problems.push(format!(
                    "Ttl::new({d:?}) = {} ms, want {} (rounded up)",
                    ttl.as_millis(),
                    ceil_millis(d)
                ));
            }
            Ok(Ok(_)) => {}
            Ok(Err(LockError::InvalidOptions { .. })) if d.is_zero() || d > Ttl::MAX => {}
            Ok(Err(err)) => problems.push(format!("Ttl::new({d:?}): {err:?}")),
        }
        for ttl in [Duration::from_secs(2), *rng.pick(&all), d] {
            for options in setter_cases(d, &mut rng, &all) {
                match std::panic::catch_unwind(|| options.validate(ttl)) {
                    Err(payload) => {
                        problems.push(format!("{options:?}.validate({ttl:?}) PANICKED: {}", panic_text(payload)))
                    }
                    Ok(Err(LockError::InvalidOptions { .. })) => {}
                    Ok(Err(err)) => {
                        problems.push(format!("{options:?}.validate({ttl:?}): not InvalidOptions: {err:?}"))
                    }
                    Ok(Ok(valid)) => {
                        // A renewal must come before `lost()` fires: shorter than the TTL
                        // minus the loss margin (`InvalidOptions::RenewInterval`'s rule), and
                        // no more often than `Renewal::MIN_INTERVAL`, for `auto_renew()` as
                        // for `renew_every(..)`.
                        let window = valid.ttl.as_duration().saturating_sub(valid.loss_margin);
                        let bad = valid.ttl.as_duration().is_zero()
                            || valid.loss_margin >= valid.ttl.as_duration()
                            || valid.wait.is_some_and(|w| w > LockOptions::MAX_WAIT)
                            || valid.renew_every.is_some_and(|e| e < distlock::Renewal::MIN_INTERVAL || e >= window);
                        if bad {
                            problems.push(format!("{options:?}.validate({ttl:?}) accepted an unusable {valid:?}"));
                        }
                    }
                }
            }
        }
        let before = tokio::time::Instant::now();
        match std::panic::catch_unwind(|| deadline_after(d)) {
            Err(payload) => problems.push(format!("deadline_after({d:?}) PANICKED: {}", panic_text(payload))),
            Ok(deadline) if deadline < before => problems.push(format!("deadline_after({d:?}) is in the past")),
            Ok(_) => {}
        }
        let purge = std::panic::catch_unwind(|| PurgeOptions::new().every(d).older_than(d));
        match purge {
            Err(payload) => problems.push(format!("PurgeOptions({d:?}) PANICKED: {}", panic_text(payload))),
            Ok(options) => {
                if options.get_every().is_zero() || options.get_older_than() < MIN_PURGE_HORIZON {
                    problems.push(format!("PurgeOptions every/older_than({d:?}) = {options:?}: below the minimum"));
                }
            }
        }
    }

    // The shared waiter registry every notifying store uses: any `max`, listening or not.
    let mut batch = Batch::default();
    for &d in &all {
        for (listening, state) in [
            (true, KeyState::Free),
            (true, KeyState::Held { expires_in: None }),
            (true, KeyState::Held { expires_in: Some(d) }),
            (false, KeyState::Held { expires_in: None }),
        ] {
            batch.spawn(format!("WaiterRegistry::wait(max={d:?}, listening={listening}, {state:?})"), async move {
                let registry = WaiterRegistry::new();
                registry.set_listening(listening);
                let wait = registry.wait("lock:fuzz", d, || async move { Ok(state) });
                match tokio::time::timeout(Duration::from_millis(20), wait).await {
                    Ok(Err(err)) => Err(format!("error {err:?}")),
                    Ok(Ok(_)) | Err(_) => Ok(()),
                }
            });
        }
    }
    batch.finish(&mut problems).await;
    report("durations_into_pure_functions", problems);
}

/// The option settings a duration can go into, alone and in random company.
fn setter_cases(d: Duration, rng: &mut Rng, all: &[Duration]) -> Vec<LockOptions> {
    let base = LockOptions::new();
    let mut random = base.wait(*rng.pick(all)).retry_interval(*rng.pick(all));
    random = match rng.below(3) {
        0 => random,
        1 => random.auto_renew(),
        _ => random.renew_every(*rng.pick(all)),
    };
    if rng.one_in(2) {
        random = random.loss_margin(*rng.pick(all));
    }
    vec![
        base.wait(d),
        base.retry_interval(d),
        base.wait(Duration::from_millis(20)).retry_interval(d),
        base.wait(Duration::ZERO).retry_interval(d),
        base.renew_every(d),
        base.auto_renew(),
        base.loss_margin(d),
        base.loss_margin(d).auto_renew(),
        base.loss_margin(d).renew_every(d / 2),
        base.renew_at_half_ttl(),
        base.loss_margin(d).renew_at_half_ttl(),
        random,
    ]
}

/// Which manager call.
#[derive(Debug, Clone, Copy)]
enum Call {
    TryLock,
    Lock,
    WithLock,
}

const CALLS: [Call; 3] = [Call::TryLock, Call::Lock, Call::WithLock];

/// Runs `call` on a free key and releases what it took: `Ok(())` when it worked.
async fn call_free(
    locks: &LockManager,
    call: Call,
    key: &str,
    ttl: Duration,
    options: Option<&LockOptions>,
) -> Result<(), LockError> {
    let renewing = options.is_some_and(|o| o.renewal != distlock::Renewal::Off);
    let lock = match (call, options) {
        (Call::TryLock, None) => locks.try_lock(key, ttl).await?,
        (Call::TryLock, Some(options)) => locks.try_lock_opts(key, ttl, options).await?,
        (Call::Lock, None) => Some(locks.lock(key, ttl).await?),
        (Call::Lock, Some(options)) => Some(locks.lock_opts(key, ttl, options).await?),
        (Call::WithLock, options) => {
            let block = || async { Ok::<_, LockError>(42) };
            let outcome = match options {
                None => locks.with_lock(key, ttl, block).await,
                Some(options) => locks.with_lock_opts(key, ttl, options, block).await,
            };
            return match outcome {
                Ok(42) => Ok(()),
                // A lease of a few ms, renewed, may be lost before the block is polled.
                Err(LockError::LeaseLost { .. }) if renewing => Ok(()),
                Ok(other) => Err(LockError::Config { message: format!("the block's 42 came back as {other}") }),
                Err(err) => Err(err),
            };
        }
    };
    let Some(lock) = lock else {
        return Err(LockError::NotAcquired { key: format!("{key} (free, yet not acquired)") });
    };
    // `false` is fine: a lease of 1 ms may be gone already.
    lock.release().await.map(drop)
}

/// A store's every duration-taking entry point: the lock calls with a TTL and every option
/// setter, `extend`, and `wait_for_release` on free and held keys.
async fn store_durations(store: Arc<DynLockStore>, test: &str, rng: &mut Rng, random: usize) -> Vec<String> {
    let locks = LockManager::new(Arc::clone(&store));
    let all = durations(rng, random);
    let run = Token::generate().short().to_owned();
    let mut next_key = 0_u64;
    let mut fresh_key = move || {
        next_key += 1;
        format!("fuzz:{run}:{next_key}")
    };
    let mut problems = Vec::new();

    // Free keys: the TTL of the short forms, and every setter of the `_opts` forms.
    let mut batch = Batch::default();
    for &ttl in &all {
        for call in CALLS {
            let (locks, key) = (locks.clone(), fresh_key());
            let want = expected(&LockOptions::new(), ttl);
            batch.spawn(format!("{call:?}(ttl={ttl:?})"), async move {
                let got = tokio::time::timeout(Duration::from_secs(15), call_free(&locks, call, &key, ttl, None)).await;
                check(&want, got.map_err(|_| "hung on a free key".to_owned())?)
            });
        }
    }
    for &d in &all {
        let ttls = [Duration::from_secs(2), *rng.pick(&all)];
        for ttl in ttls {
            for options in setter_cases(d, rng, &all) {
                for call in CALLS {
                    let (locks, key) = (locks.clone(), fresh_key());
                    let want = expected(&options, ttl);
                    batch.spawn(format!("{call:?}_opts(ttl={ttl:?}, {options:?})"), async move {
                        let call = call_free(&locks, call, &key, ttl, Some(&options));
                        let got = tokio::time::timeout(Duration::from_secs(15), call).await;
                        check(&want, got.map_err(|_| "hung on a free key".to_owned())?)
                    });
                }
            }
        }
    }
    batch.finish(&mut problems).await;

    // A held key: waiting with every wait and retry interval, cancelled after a moment.
    let held_key = fresh_key();
    let holder = match locks.try_lock(&held_key, Duration::from_secs(60)).await {
        Ok(Some(lock)) => lock,
        other => {
            problems.push(format!("{test}: could not take the held key: {other:?}"));
            return problems;
        }
    };
    let mut batch = Batch::default();
    for &d in &all {
        let cases = [
            LockOptions::new().wait(d),
            LockOptions::new().wait(Duration::from_millis(30)).retry_interval(d),
            LockOptions::new().wait(d).retry_interval(d),
            LockOptions::new().wait(d).retry_interval(*rng.pick(&all)),
        ];
        for options in cases {
            for call in CALLS {
                let (locks, key) = (locks.clone(), held_key.clone());
                let want = expected(&options, Duration::from_secs(2));
                batch.spawn(format!("{call:?}_opts on a held key ({options:?})"), async move {
                    let ttl = Duration::from_secs(2);
                    let attempt = async {
                        match call {
                            Call::TryLock => locks.try_lock_opts(&key, ttl, &options).await.map(|l| l.is_some()),
                            Call::Lock => locks.lock_opts(&key, ttl, &options).await.map(|_| true),
                            Call::WithLock => {
                                locks.with_lock_opts(&key, ttl, &options, || async { Ok::<_, LockError>(true) }).await
                            }
                        }
                    };
                    match (want, tokio::time::timeout(Duration::from_millis(60), attempt).await) {
                        // Still waiting: the wait is long. Cancelling it is part of the test.
                        (Ok(()), Err(_)) => Ok(()),
                        (Ok(()), Ok(Ok(false) | Err(LockError::NotAcquired { .. }))) => Ok(()),
                        (Ok(()), Ok(Ok(true))) => Err("took a key another owner holds".to_owned()),
                        (Ok(()), Ok(Err(err))) => Err(format!("expected to wait, got {err:?}")),
                        (Err(want), Err(_)) => Err(format!("expected InvalidOptions ({want}) at once, it waited")),
                        (Err(want), Ok(got)) => check(&Err(want), got.map(drop)),
                    }
                });
            }
        }
        // The store primitive itself, on a held and a free key.
        for (key, held) in [(held_key.clone(), true), (fresh_key(), false)] {
            let store = Arc::clone(&store);
            batch.spawn(format!("wait_for_release(held={held}, max={d:?})"), async move {
                let key = LockKey::new(key).map_err(|e| e.to_string())?.to_store_key();
                match tokio::time::timeout(Duration::from_millis(60), store.wait_for_release(&key, d)).await {
                    Ok(Ok(())) | Err(_) => Ok(()),
                    Ok(Err(err)) => Err(format!("error {err:?}")),
                }
            });
        }
        // `DistributedLock::extend`.
        let (locks, key) = (locks.clone(), fresh_key());
        batch.spawn(format!("extend({d:?})"), async move {
            let want = Ttl::new(d).map(drop).map_err(|e| e.to_string());
            let lock = match locks.try_lock(&key, Duration::from_secs(10)).await {
                Ok(Some(lock)) => lock,
                other => return Err(format!("could not take a free key: {other:?}")),
            };
            let got = match lock.extend(d).await {
                Ok(true) => Ok(()),
                Ok(false) => Err(LockError::Config { message: "extend of a live lease answered false".to_owned() }),
                Err(err) => Err(err),
            };
            let _ = lock.release().await;
            check(&want, got)
        });
    }
    batch.finish(&mut problems).await;
    if let Err(err) = holder.release().await {
        problems.push(format!("release of the held key: {err:?}"));
    }
    locks.flush_releases().await;
    problems
}

#[tokio::test]
async fn durations_on_the_memory_store() {
    watch_panics();
    let mut rng = Rng::from_env("durations_on_the_memory_store");
    let problems = store_durations(Arc::new(MemoryLockStore::new()), "memory", &mut rng, 12).await;
    report("durations_on_the_memory_store", problems);
}

fn private_prefix() -> String {
    format!("fuzz-{}", Token::generate().short())
}

#[tokio::test]
async fn durations_on_the_redis_store() {
    watch_panics();
    let Some(url) = kit::redis_url("durations_on_the_redis_store") else { return };
    let mut rng = Rng::from_env("durations_on_the_redis_store");
    let store = RedisLockStore::builder().key_prefix(private_prefix()).connect(&url).await.expect("connect");
    let problems = store_durations(Arc::new(store), "redis", &mut rng, 8).await;
    report("durations_on_the_redis_store", problems);
}

/// A private schema on the test server, dropped at the end.
struct PrivateSchema {
    admin_url: String,
    name: String,
}

impl PrivateSchema {
    fn new(admin_url: &str) -> Self {
        Self { admin_url: admin_url.to_owned(), name: kit::postgres_server::random_identifier("fuzz") }
    }

    async fn drop_it(self) {
        kit::postgres_server::execute(&self.admin_url, &format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name))
            .await;
    }
}

async fn postgres_store(url: &str, schema: &PrivateSchema) -> PostgresLockStore {
    let store = PostgresLockStore::builder().schema(&schema.name).unlogged(true).connect(url).await.expect("connect");
    store.ensure_schema().await.expect("ensure_schema");
    store
}

#[tokio::test]
async fn durations_on_the_postgres_store() {
    watch_panics();
    let Some(url) = kit::postgres_url("durations_on_the_postgres_store") else { return };
    let mut rng = Rng::from_env("durations_on_the_postgres_store");
    let schema = PrivateSchema::new(&url);
    let store = postgres_store(&url, &schema).await;
    let problems = store_durations(Arc::new(store), "postgres", &mut rng, 4).await;
    schema.drop_it().await;
    report("durations_on_the_postgres_store", problems);
}

/// After connecting with unusual settings, a waiter on a held key still wakes when it is
/// released (the store says it notifies), and nothing in the background panics.
async fn lock_cycle_and_wake(store: Arc<DynLockStore>, notify_expected: bool) -> Result<(), String> {
    let locks = LockManager::new(Arc::clone(&store));
    let key = format!("fuzz:wake:{}", Token::generate().short());
    let lock = match locks.try_lock(&key, Duration::from_secs(30)).await {
        Ok(Some(lock)) => lock,
        other => return Err(format!("lock on a free key: {other:?}")),
    };
    if !notify_expected {
        return lock.release().await.map(drop).map_err(|e| format!("release: {e:?}"));
    }
    if !store.capabilities().release_notifications {
        return Err("the store does not report release notifications".to_owned());
    }
    let store_key = lock.store_key().clone();
    let waiter = {
        let store = Arc::clone(&store);
        tokio::spawn(async move { store.wait_for_release(&store_key, Duration::from_secs(20)).await })
    };
    // Whether the waiter registered before or after, it must end soon after the release:
    // by the notification, or by seeing the key free.
    lock.release().await.map_err(|e| format!("release: {e:?}"))?;
    match tokio::time::timeout(Duration::from_secs(5), waiter).await {
        Err(_) => Err("a waiter on a released key slept on (notifications broken)".to_owned()),
        Ok(Err(join)) if join.is_panic() => {
            Err(format!("wait_for_release PANICKED: {}", panic_text(join.into_panic())))
        }
        Ok(Err(join)) => Err(format!("wait_for_release task: {join}")),
        Ok(Ok(Err(err))) => Err(format!("wait_for_release: {err:?}")),
        Ok(Ok(Ok(()))) => Ok(()),
    }
}

/// Below this, a timeout may legitimately expire before a loaded machine's server answers.
const TIMEOUT_TOO_SHORT_TO_ANSWER: Duration = Duration::from_secs(1);

#[tokio::test]
async fn durations_into_the_redis_builder() {
    watch_panics();
    let Some(url) = kit::redis_url("durations_into_the_redis_builder") else { return };
    let mut rng = Rng::from_env("durations_into_the_redis_builder");
    let mut problems = Vec::new();
    // One connect at a time, so that a short timeout is not spent queueing behind others.
    for d in durations(&mut rng, 4) {
        for setting in ["response_timeout", "connect_timeout"] {
            let url = url.clone();
            let mut batch = Batch::default();
            batch.spawn(format!("RedisLockStoreBuilder::{setting}({d:?})"), async move {
                let builder = RedisLockStore::builder().key_prefix(private_prefix()).release_notifications(true);
                let builder = match setting {
                    "response_timeout" => builder.response_timeout(d),
                    _ => builder.connect_timeout(d),
                };
                let config = builder.connection_manager_config();
                if config.response_timeout().is_some_and(|t| t > RedisLockStoreBuilder::MAX_TIMEOUT)
                    || config.connection_timeout().is_some_and(|t| t > RedisLockStoreBuilder::MAX_TIMEOUT)
                {
                    return Err(format!("connection_manager_config keeps a timeout over MAX_TIMEOUT: {config:?}"));
                }
                let connected = tokio::time::timeout(Duration::from_secs(20), builder.connect(&url))
                    .await
                    .map_err(|_| "connect hung".to_owned())?;
                match connected {
                    Err(LockError::Config { .. }) if d.is_zero() => Ok(()),
                    Err(err) if d.is_zero() => Err(format!("a zero timeout must be a Config error, got {err:?}")),
                    Ok(_) if d.is_zero() => Err("a zero timeout was accepted".to_owned()),
                    Err(LockError::Store { .. }) if d < TIMEOUT_TOO_SHORT_TO_ANSWER => Ok(()),
                    Err(err) => Err(format!("connect: {err:?}")),
                    Ok(store) => {
                        let cycle = lock_cycle_and_wake(Arc::new(store), d >= TIMEOUT_TOO_SHORT_TO_ANSWER);
                        match (cycle.await, d < TIMEOUT_TOO_SHORT_TO_ANSWER) {
                            (Ok(()), _) | (Err(_), true) => Ok(()),
                            (Err(problem), false) => Err(problem),
                        }
                    }
                }
            });
            batch.finish(&mut problems).await;
        }
    }
    report("durations_into_the_redis_builder", problems);
}

#[tokio::test]
async fn durations_into_the_postgres_builder_purge_and_purger() {
    watch_panics();
    let Some(url) = kit::postgres_url("durations_into_the_postgres_builder_purge_and_purger") else { return };
    let mut rng = Rng::from_env("durations_into_the_postgres_builder_purge_and_purger");
    let all = durations(&mut rng, 4);
    let schema = PrivateSchema::new(&url);
    let store = postgres_store(&url, &schema).await;
    let mut problems = Vec::new();

    // `acquire_timeout`: one at a time, each connect opens a small pool.
    for &d in &all {
        let label = format!("PostgresLockStoreBuilder::acquire_timeout({d:?})");
        let url = url.clone();
        let name = schema.name.clone();
        let mut batch = Batch::default();
        batch.spawn(label, async move {
            let builder =
                PostgresLockStore::builder().schema(name).unlogged(true).max_connections(2).acquire_timeout(d);
            let connected = tokio::time::timeout(Duration::from_secs(20), builder.connect(&url))
                .await
                .map_err(|_| "connect hung".to_owned())?;
            let out_of_range = d.is_zero() || d > MAX_ACQUIRE_TIMEOUT;
            match connected {
                Err(LockError::Config { .. }) if out_of_range => Ok(()),
                Err(err) if out_of_range => Err(format!("expected a Config error, got {err:?}")),
                Ok(_) if out_of_range => Err("an out-of-range acquire timeout was accepted".to_owned()),
                Err(LockError::Store { .. }) if d < TIMEOUT_TOO_SHORT_TO_ANSWER => Ok(()),
                Err(err) => Err(format!("connect: {err:?}")),
                Ok(store) => {
                    let cycle = lock_cycle_and_wake(Arc::new(store), d >= TIMEOUT_TOO_SHORT_TO_ANSWER);
                    match (cycle.await, d < TIMEOUT_TOO_SHORT_TO_ANSWER) {
                        (Ok(()), _) | (Err(_), true) => Ok(()),
                        (Err(problem), false) => Err(problem),
                    }
                }
            }
        });
        batch.finish(&mut problems).await;
    }

    // `purge(older_than)` and `spawn_purger(PurgeOptions { every, older_than })`.
    let mut batch = Batch::default();
    for &d in &all {
        let store = store.clone();
        batch.spawn(format!("purge({d:?})"), async move {
            match tokio::time::timeout(Duration::from_secs(20), store.purge(d)).await {
                Err(_) => Err("purge hung".to_owned()),
                Ok(Ok(_)) => Ok(()),
                Ok(Err(err)) => Err(format!("{err:?}")),
            }
        });
    }
    batch.finish(&mut problems).await;
    let mut purgers = Vec::new();
    for &every in &all {
        let older_than = *rng.pick(&all);
        let options = PurgeOptions::new().every(every).older_than(older_than);
        match store.spawn_purger(options) {
            Ok(handle) => purgers.push((options, handle)),
            Err(err) => problems.push(format!("spawn_purger({options:?}): {err:?}")),
        }
    }
    // Let them tick (a purger of 1 ms purges many times meanwhile).
    tokio::time::sleep(Duration::from_millis(100)).await;
    for (options, handle) in purgers {
        let shown = format!("{handle:?}");
        if !shown.contains("finished: false") {
            problems.push(format!("spawn_purger({options:?}): the task ended on its own: {shown}"));
        }
        handle.stop().await;
    }
    schema.drop_it().await;
    report("durations_into_the_postgres_builder_purge_and_purger", problems);
}

// ---------------------------------------------------------------------------------------
// URLs.
// ---------------------------------------------------------------------------------------

/// The password of every generated URL. It appears only where a password goes (or, in
/// URLs without a scheme, in `user:password@host`); no output may ever contain it, plain
/// or percent-encoded.
const MARKER: &str = "pw_SECRET_42";
const MARKER_WORD: &str = "SECRET";

fn leaks(text: &str) -> bool {
    text.contains(MARKER_WORD)
}

/// Where the test servers are (`host:port`), to aim some URLs at them.
struct Targets {
    redis: Option<String>,
    postgres: Option<String>,
    schema: String,
}

fn authority(url: &str) -> Option<String> {
    let rest = url.split_once("://")?.1;
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    Some(authority.rsplit_once('@').map_or(authority, |(_, host)| host).to_owned())
}

const SCHEMES: &[&str] = &[
    "",
    "redis://",
    "redis://",
    "rediss://",
    "valkey://",
    "Redis://",
    "unix://",
    "redis+unix://",
    "postgres://",
    "postgres://",
    "postgresql://",
    "POSTGRES://",
    "memory://",
    "http://",
    "mysql://",
    "redis:",
    "redis:/",
    "postgres:",
    "://",
    "r\u{e9}dis://",
    "re dis://",
    "1redis://",
    "zk://",
];

const USERINFO: &[&str] = &[
    "",
    "",
    "user@",
    "user:@",
    "user:pw_SECRET_42@",
    ":pw_SECRET_42@",
    "user:pw%5FSECRET%5F42@",
    "us%40er:pw_SECRET_42@",
    "user:pw_SECRET_42:more@",
    "\u{fc}:pw_SECRET_42@",
    "user:pw_SECRET_42@@",
    "default:pw_SECRET_42%2F%3F%23@",
];

const ODD_HOSTS: &[&str] = &[
    "127.0.0.1:99999999999999999999",
    "127.0.0.1:65536",
    "127.0.0.1:-1",
    "127.0.0.1:",
    "127.0.0.1:0x10",
    "\u{8ba2}\u{5355}.example:6379",
    "host\u{0}name",
    "ho\nst",
    "",
    "[::1",
    "%31%32%37.0.0.1:1",
    "127.0.0.1:1:2",
    "h\u{7f}",
];

/// Hosts that answer at once: nothing listens on port 1.
const DEAD_HOSTS: &[&str] = &["127.0.0.1:1", "[::1]:1", "localhost:1"];

const PATHS: &[&str] = &[
    "",
    "",
    "/",
    "/0",
    "/15",
    "/4294967296",
    "/99999999999999999999",
    "/db",
    "/postgres",
    "//",
    "/%2F",
    "/0/extra",
    "/\u{7}",
    "/\u{fc}",
];

const PARAM_NAMES: &[&str] = &[
    "prefix",
    "fencing",
    "notifications",
    "protocol",
    "db",
    "user",
    "schema",
    "table",
    "sequence",
    "unlogged",
    "create",
    "sslmode",
    "application_name",
    "options",
    "statement-cache-capacity",
    "bogus",
    "Prefix",
    "",
    "options[x]",
    "next",
    "%70refix",
    "pre%00fix",
    "\u{fc}",
];

const PARAM_VALUES: &[&str] = &[
    "",
    "x",
    "true",
    "false",
    "TRUE",
    "1",
    "resp3",
    "http://x",
    "http://user:pw@x/?a=b",
    "%",
    "%zz",
    "%00",
    "%E8%AE%A2",
    "a b",
    "\u{fc}",
    "\n",
    "\u{0}",
    "x=y",
    "-c search_path=x",
    "require",
    "1bad",
];

/// Parameters that take the password: their value is always the marker.
const PASSWORD_PARAMS: &[&str] = &["password", "pass"];

/// A mangled URL, and whether connecting to it is safe (it fails before any I/O, goes to
/// a port where nothing listens, or to a test server).
fn mangled_url(rng: &mut Rng, targets: &Targets) -> (String, bool) {
    let scheme = *rng.pick(SCHEMES);
    let lower = scheme.to_ascii_lowercase();
    let redis_family = ["redis://", "rediss://", "valkey://"].contains(&lower.as_str());
    let unix_family = ["unix://", "redis+unix://"].contains(&lower.as_str());
    let postgres_family = ["postgres://", "postgresql://"].contains(&lower.as_str());
    let memory = lower == "memory://";
    let mut url = String::from(scheme);
    url.push_str(rng.pick_str(USERINFO));

    let real = if redis_family && lower != "rediss://" {
        targets.redis.as_deref()
    } else if postgres_family {
        targets.postgres.as_deref()
    } else {
        None
    };
    let (host, host_is_safe) = match rng.below(5) {
        0 | 1 => (*rng.pick(DEAD_HOSTS), true),
        2 => match real {
            Some(real) => (real, true),
            None => (*rng.pick(DEAD_HOSTS), true),
        },
        _ => (*rng.pick(ODD_HOSTS), false),
    };
    let mut rest = String::from(host);
    rest.push_str(rng.pick_str(PATHS));

    let mut params = Vec::new();
    for _ in 0..rng.below(5) {
        let name = if rng.one_in(8) { *rng.pick(PASSWORD_PARAMS) } else { *rng.pick(PARAM_NAMES) };
        if PASSWORD_PARAMS.contains(&name) {
            params.push(format!("{name}={MARKER}"));
            continue;
        }
        let value = match name {
            // Only this test's own schema may ever be created on the real server.
            "schema" if rng.one_in(2) => targets.schema.as_str(),
            "schema" => *rng.pick(&["", "1bad", "a b", "%00", "x;drop"]),
            _ => *rng.pick(PARAM_VALUES),
        };
        match rng.below(10) {
            0 => params.push(name.to_owned()),
            1 => params.push(format!("{name}={value}={value}")),
            _ => params.push(format!("{name}={value}")),
        }
        if rng.one_in(6) {
            params.push(params[params.len() - 1].clone()); // duplicated
        }
    }
    let pg_to_real = postgres_family && host == targets.postgres.as_deref().unwrap_or("-");
    if pg_to_real && !params.iter().any(|p| p.starts_with("schema")) {
        params.push(format!("schema={}", targets.schema));
    }
    if !params.is_empty() || rng.one_in(8) {
        rest.push_str(if rng.one_in(10) { "??" } else { "?" });
        rest.push_str(&params.join(if rng.one_in(10) { "&&" } else { "&" }));
        if rng.one_in(10) {
            rest.push('&');
        }
    }
    rest.push_str(rng.pick_str(&["", "", "", "#", "#frag", "#insecure", "#x?y=z"]));

    // Damage after the password, so that it stays a password.
    let mut unsafe_damage = false;
    if rng.one_in(4) {
        let boundaries: Vec<usize> = (0..=rest.len()).filter(|&i| rest.is_char_boundary(i)).collect();
        let at = *rng.pick(&boundaries);
        match rng.below(3) {
            0 => rest.truncate(at),
            1 => rest.insert_str(
                at,
                rng.pick_str(&["\u{0}", "\r\n", "\t", " ", "\u{fffd}", "\u{1f512}", "%", "@", "#", "?", "/"]),
            ),
            _ => {
                let copy = rest[at..].to_owned();
                rest.push_str(&copy);
            }
        }
        unsafe_damage = true;
    }
    url.push_str(&rest);

    // `connect` is safe when it cannot reach the network, or only reaches safe places.
    let known_scheme = redis_family || unix_family || postgres_family || memory;
    let safe = !known_scheme || memory || (host_is_safe && !unsafe_damage && !unix_family);
    // Connection parameters that move the connection elsewhere are left to parsing.
    let moves = params.iter().any(|p| ["host", "hostaddr", "port", "sslrootcert"].iter().any(|n| p.starts_with(n)));
    (url, safe && !moves)
}

fn seen_urls(rng: &mut Rng, targets: &Targets, count: usize) -> Vec<(String, bool)> {
    let mut urls: Vec<(String, bool)> = [
        "user:pw_SECRET_42@host/db?next=http://x",
        "pw_SECRET_42@host://x",
        "redis://:pw_SECRET_42@127.0.0.1:1/0?prefix=a&bogus=1",
        "postgres://app:pw_SECRET_42@127.0.0.1:1/db?bogus=1",
        "redis://:pw_SECRET_42@127.0.0.1:1/0?prefix=",
        "redis://user:pw_SECRET_42@127.0.0.1:1/0#frag",
        "postgres://app:pw_SECRET_42@127.0.0.1:1/db?password=pw_SECRET_42&sslmode=bogus",
        "redis+unix:///tmp/none.sock?pass=pw_SECRET_42&db=x",
        "redis:user:pw_SECRET_42@127.0.0.1:1",
        "postgres:user:pw_SECRET_42@127.0.0.1:1/db",
    ]
    .iter()
    .map(|url| ((*url).to_owned(), !url.starts_with("redis+unix")))
    .collect();
    // Well-formed ones to the test servers, which connect (PostgreSQL's trust
    // authentication ignores the password; Redis refuses one it does not need).
    if let Some(real) = &targets.redis {
        urls.push((format!("redis://{real}/0?prefix=fuzz-url&fencing=true"), true));
        urls.push((format!("redis://:{MARKER}@{real}/0?prefix=fuzz-url"), true));
    }
    if let Some(real) = &targets.postgres {
        let schema = &targets.schema;
        urls.push((format!("postgres://postgres@{real}/postgres?schema={schema}&unlogged=true"), true));
        urls.push((format!("postgres://postgres:{MARKER}@{real}/postgres?schema={schema}&table=t2"), true));
        urls.push((format!("postgresql://postgres@{real}/postgres?password={MARKER}&schema={schema}"), true));
    }
    urls.extend((0..count).map(|_| mangled_url(rng, targets)));
    urls
}

fn targets(schema: String) -> Targets {
    let redis = std::env::var("DISTLOCK_REDIS_URL").ok().and_then(|u| authority(&u));
    let postgres = std::env::var("DISTLOCK_POSTGRES_URL").ok().and_then(|u| authority(&u));
    Targets { redis, postgres, schema }
}

/// Parsing only: `RedisUrl::parse` and `PostgresUrl::parse` never panic and never show
/// the password, in their errors or in the parsed URL's `Display` / `Debug`.
#[test]
fn urls_into_the_parsers() {
    watch_panics();
    let mut rng = Rng::from_env("urls_into_the_parsers");
    let targets = targets("fuzz_unused".to_owned());
    let mut problems = Vec::new();
    for (url, _) in seen_urls(&mut rng, &targets, 6_000) {
        match std::panic::catch_unwind(|| RedisUrl::parse(&url)) {
            Err(payload) => problems.push(format!("RedisUrl::parse({url:?}) PANICKED: {}", panic_text(payload))),
            Ok(Ok(parsed)) => {
                let (shown, debug) = (parsed.to_string(), format!("{parsed:?}"));
                if leaks(&shown) || leaks(&debug) {
                    problems.push(format!("RedisUrl::parse({url:?}) shows the password: {shown} / {debug}"));
                }
            }
            Ok(Err(err)) => check_error(&mut problems, "RedisUrl::parse", &url, &err, true),
        }
        match std::panic::catch_unwind(|| PostgresUrl::parse(&url)) {
            Err(payload) => problems.push(format!("PostgresUrl::parse({url:?}) PANICKED: {}", panic_text(payload))),
            Ok(Ok(parsed)) => {
                let debug = format!("{parsed:?}");
                if leaks(&debug) {
                    problems.push(format!("PostgresUrl::parse({url:?}) shows the password: {debug}"));
                }
            }
            Ok(Err(err)) => check_error(&mut problems, "PostgresUrl::parse", &url, &err, true),
        }
    }
    report("urls_into_the_parsers", problems);
}

fn check_error(problems: &mut Vec<String>, what: &str, url: &str, err: &LockError, config_only: bool) {
    let (shown, debug) = (err.to_string(), format!("{err:?}"));
    if leaks(&shown) || leaks(&debug) {
        problems.push(format!("{what}({url:?}) error shows the password: {shown} / {debug}"));
    }
    let allowed = match err {
        LockError::Config { .. } => true,
        LockError::Store { .. } => !config_only,
        _ => false,
    };
    if !allowed {
        problems.push(format!("{what}({url:?}): unexpected error kind {debug}"));
    }
}

/// `distlock::connect` with the URLs that reach nothing or only the test servers: a typed
/// error or a store, quickly, never a panic, never the password.
#[tokio::test]
async fn urls_into_connect() {
    watch_panics();
    let mut rng = Rng::from_env("urls_into_connect");
    let postgres_admin = kit::postgres_url("urls_into_connect");
    let _ = kit::redis_url("urls_into_connect");
    let schema = postgres_admin.as_deref().map(PrivateSchema::new);
    let targets = targets(schema.as_ref().map_or_else(|| "fuzz_unused".to_owned(), |s| s.name.clone()));
    // TLS URLs too: this workspace builds `redis` without TLS (the peers that turned on
    // its rustls are a workspace of their own, `distlock-bench-peers`), so they must give a typed
    // error; with TLS they would try a handshake with servers that speak none.
    let urls: Vec<(String, bool)> = seen_urls(&mut rng, &targets, 900).into_iter().filter(|(_, safe)| *safe).collect();
    let (to_postgres, others): (Vec<_>, Vec<_>) = urls.into_iter().map(|(url, _)| url).partition(|url| {
        targets.postgres.as_deref().is_some_and(|real| url.contains(real))
            && url.to_ascii_lowercase().starts_with("postgres")
    });
    let mut problems = Vec::new();
    let tried = (to_postgres.len(), others.len());
    let outcomes: Arc<Mutex<HashMap<&'static str, usize>>> = Arc::default();
    // The real PostgreSQL one at a time (each creates its layout in the private schema).
    let to_postgres = to_postgres.into_iter().take(40).map(|url| vec![url]);
    let others: Vec<Vec<String>> = others.chunks(48).map(<[String]>::to_vec).collect();
    for chunk in to_postgres.chain(others) {
        let mut batch = Batch::default();
        for url in chunk {
            let outcomes = Arc::clone(&outcomes);
            batch.spawn(format!("connect({url:?})"), async move {
                let connected = tokio::time::timeout(Duration::from_secs(20), distlock::connect(&url))
                    .await
                    .map_err(|_| "connect hung".to_owned())?;
                let mut problems = Vec::new();
                let outcome = match &connected {
                    Ok(store) => store.backend(),
                    Err(LockError::Config { .. }) => "Config",
                    Err(LockError::Store { .. }) => "Store",
                    Err(_) => "other",
                };
                *outcomes.lock().unwrap().entry(outcome).or_default() += 1;
                match connected {
                    Ok(store) => {
                        let debug = format!("{store:?}");
                        if leaks(&debug) {
                            problems.push(format!("the store's Debug shows the password: {debug}"));
                        }
                    }
                    Err(err) => check_error(&mut problems, "connect", &url, &err, false),
                }
                if problems.is_empty() {
                    Ok(())
                } else {
                    Err(problems.join("; "))
                }
            });
        }
        batch.finish(&mut problems).await;
    }
    let outcomes = outcomes.lock().unwrap().clone();
    eprintln!(
        "urls_into_connect: {} URLs to the test PostgreSQL (at most 40 tried), {} others: {outcomes:?}",
        tried.0, tried.1
    );
    for (backend, configured) in [("redis", targets.redis.is_some()), ("postgres", targets.postgres.is_some())] {
        if configured && !outcomes.contains_key(backend) {
            problems.push(format!("no URL connected to the test {backend} server: the generator lost its aim"));
        }
    }
    if let Some(schema) = schema {
        schema.drop_it().await;
    }
    report("urls_into_connect", problems);
}
