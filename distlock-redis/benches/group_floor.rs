//! Lock groups on Redis against their floor, side by side in one run: what a two-name
//! group cycle and a read-lock cycle cost through the store and through the manager,
//! beside a single-key lock cycle, and beside the least a group kept in sorted sets with
//! per-holder leases must send — a **raw minimal** script pair written for this benchmark
//! (`TIME`, one `EXISTS` over the names, `ZADD` + `PEXPIRE` per name; then `ZREM` per name
//! and `PUBLISH`), with no owner, fence, permits, queue or writer preference. (The store
//! writes a group of free names as strings instead, with fewer calls than that pair: the
//! pair is now the sorted sets' floor, no longer the store's.)
//!
//! ```text
//! scripts/test.sh cargo bench -p distlock-redis --bench group_floor
//! DISTLOCK_BENCH_ROUNDS=15 scripts/test.sh cargo bench -p distlock-redis --bench group_floor
//! ```
//!
//! The variants take turns cycle by cycle (`kit::bench::interleaved_cycles`). Ratios are
//! against the store's single-key cycle (median round, and the median of the per-round
//! ratios). With `DISTLOCK_FLOOR_VARIANT=<index>` (0–7, in the order printed)
//! it runs only that variant, `DISTLOCK_FLOOR_CYCLES` cycles, and prints nothing: for
//! counting the server's instructions under `valgrind --tool=callgrind` (BENCHMARKS.md,
//! "Redis lock groups: a lease key per group").

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{
    DynLockStore, GroupLockStore, GroupMember, GroupRequest, LockGroup, LockKey, LockManager, LockMode, LockStore,
    StoreKey, StoreMember, Token, Ttl,
};
use distlock_conformance::kit::bench::{interleaved_cycles, on_worker, report_against_first, rounds};
use distlock_redis::redis::{self, aio::ConnectionManager};
use distlock_redis::RedisLockStore;

const CYCLES: u64 = 1_000;
const TTL: Duration = Duration::from_secs(30);

const NAMES: [&str; 8] = [
    "store: single-key lock",
    "store: two-name group",
    "store: read lock",
    "manager: single-key lock",
    "manager: two-name group",
    "manager: read lock",
    "raw minimal two-name group",
    "raw minimal read lock",
];

/// The least a grant of free names with per-holder leases sends.
const MIN_ACQUIRE: &str = r#"
local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
if redis.call("EXISTS", unpack(KEYS)) > 0 then
    return -1
end
local score = string.format("%d", now + tonumber(ARGV[2]))
for i = 1, #KEYS do
    redis.call("ZADD", KEYS[i], score, ARGV[1])
    redis.call("PEXPIRE", KEYS[i], ARGV[2])
end
return 0
"#;

/// The least a release that wakes waiters sends.
const MIN_RELEASE: &str = r#"
local freed = 0
for i = 1, #KEYS do
    freed = freed + redis.call("ZREM", KEYS[i], ARGV[1])
end
redis.call("PUBLISH", ARGV[2], table.concat(KEYS, "\n"))
return freed
"#;

struct Bench {
    store: RedisLockStore,
    locks: LockManager,
    conn: ConnectionManager,
    token: Token,
    ttl: Ttl,
    single: StoreKey,
    pair: Vec<StoreMember>,
    read: Vec<StoreMember>,
    pair_group: LockGroup,
    read_group: LockGroup,
    raw_pair: [String; 2],
    channel: String,
    acquire: redis::Script,
    release: redis::Script,
}

impl Bench {
    async fn raw_cycle(&self, keys: &[String]) {
        let mut conn = self.conn.clone();
        let mut acquire = self.acquire.prepare_invoke();
        for key in keys {
            acquire.key(key);
        }
        acquire.arg(self.token.as_str()).arg(TTL.as_millis().to_string());
        let granted: i64 = acquire.invoke_async(&mut conn).await.expect("raw acquire");
        assert_eq!(granted, 0, "free");
        let mut release = self.release.prepare_invoke();
        for key in keys {
            release.key(key);
        }
        release.arg(self.token.as_str()).arg(&self.channel);
        let freed: i64 = release.invoke_async(&mut conn).await.expect("raw release");
        assert_eq!(usize::try_from(freed).ok(), Some(keys.len()));
    }

    async fn store_group_cycle(&self, members: &[StoreMember]) {
        let request = GroupRequest::new(members, &self.token, self.locks.owner(), self.ttl, None, None);
        assert!(matches!(
            self.store.try_acquire_group(request).await.expect("acquire"),
            distlock_api::GroupAcquire::Acquired { .. }
        ));
        let keys: Vec<StoreKey> = members.iter().map(|member| member.key.clone()).collect();
        assert_eq!(self.store.release_group(&keys, &self.token).await.expect("release"), keys.len());
    }

    async fn cycles(&self, variant: usize, cycles: u64) {
        for _ in 0..cycles {
            match variant {
                0 => {
                    let acquired = self.store.try_acquire(&self.single, &self.token, self.ttl).await.expect("acquire");
                    assert!(acquired.is_acquired());
                    assert!(self.store.release(&self.single, &self.token).await.expect("release"));
                }
                1 => self.store_group_cycle(&self.pair).await,
                2 => self.store_group_cycle(&self.read).await,
                3 => {
                    let held = self.locks.try_lock("floor:single", TTL).await.expect("lock").expect("free");
                    assert!(held.release().await.expect("release"));
                }
                4 | 5 => {
                    let group = if variant == 4 { &self.pair_group } else { &self.read_group };
                    let held = self.locks.try_lock_group(group, TTL).await.expect("group").expect("free");
                    held.release().await.expect("release");
                }
                6 => self.raw_cycle(&self.raw_pair).await,
                _ => self.raw_cycle(&self.raw_pair[..1]).await,
            }
        }
    }
}

fn store_key(name: &str) -> StoreKey {
    LockKey::new(name).expect("key").to_store_key()
}

fn main() {
    let url = std::env::var("DISTLOCK_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let rounds = rounds(9);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(on_worker(async move {
        let client = redis::Client::open(url.as_str()).expect("DISTLOCK_REDIS_URL");
        let config = RedisLockStore::builder().connection_manager_config();
        let conn = ConnectionManager::new_with_config(client.clone(), config).await.expect("connect");
        let prefix = format!("dlfloor-{}", Token::generate().as_str());
        let store = RedisLockStore::builder()
            .key_prefix(&prefix)
            .notification_client(client)
            .build(conn.clone())
            .expect("store");
        let locks = LockManager::new(Arc::new(store.clone()) as Arc<DynLockStore>);
        let member = |name: &str, mode| StoreMember::new(store_key(name), mode, None);
        let bench = Bench {
            locks,
            conn,
            token: Token::generate(),
            ttl: Ttl::new(TTL).expect("ttl"),
            single: store_key("floor:single"),
            pair: vec![member("floor:a", LockMode::Exclusive), member("floor:b", LockMode::Exclusive)],
            read: vec![member("floor:a", LockMode::Shared)],
            pair_group: LockGroup::new([
                GroupMember::exclusive("floor:a").expect("key"),
                GroupMember::exclusive("floor:b").expect("key"),
            ])
            .expect("group"),
            read_group: LockGroup::single(GroupMember::shared("floor:a").expect("key")).expect("group"),
            raw_pair: [format!("{prefix}:raw:{{floor:a}}:h"), format!("{prefix}:raw:{{floor:b}}:h")],
            channel: format!("{prefix}:raw-released"),
            acquire: redis::Script::new(MIN_ACQUIRE),
            release: redis::Script::new(MIN_RELEASE),
            store,
        };
        let number = |name: &str| std::env::var(name).ok().and_then(|value| value.parse::<u64>().ok());
        if let Some(variant) = number("DISTLOCK_FLOOR_VARIANT") {
            let cycles = number("DISTLOCK_FLOOR_CYCLES").unwrap_or(CYCLES);
            bench.cycles(usize::try_from(variant).unwrap_or(usize::MAX), cycles).await;
            return;
        }
        println!("distlock-redis lock groups against their floor, {url}: {rounds} rounds, median round");
        let variants: Vec<usize> = (0..NAMES.len()).collect();
        let samples = interleaved_cycles(&variants, rounds, CYCLES, |variant| bench.cycles(variant, 1)).await;
        #[allow(clippy::cast_precision_loss)]
        let medians = report_against_first(
            &format!("one task, {CYCLES} uncontended cycles/round, taking turns cycle by cycle"),
            "µs/cycle",
            CYCLES as f64,
            &NAMES,
            &samples,
        );
        println!(
            "  manager: two-name group ÷ manager: single-key lock {:.3}×, read lock ÷ single-key lock {:.3}×",
            medians[4] / medians[3],
            medians[5] / medians[3]
        );
    }));
}
