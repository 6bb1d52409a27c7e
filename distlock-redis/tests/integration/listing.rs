//! `list` on Redis: `SCAN` (never `KEYS`) over the store's own namespace, at scale and
//! beside keys the store did not write.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, KeyPattern, ListCursor, LockError, LockManager, LockStore, Token};
use distlock_conformance::cases::{list_all, list_at_scale};
use distlock_conformance::kit::redis_server::{monitor_args, RedisServer, Reply};
use distlock_redis::redis::{self, Script};
use distlock_redis::RedisLockStore;

const TTL: Duration = Duration::from_secs(60);

/// The server's count of calls of `command` (`INFO commandstats`), 0 when never called.
fn calls(server: &RedisServer, command: &str) -> u64 {
    let Reply::Bulk(Some(info)) = server.command(&["INFO", "commandstats"]) else { panic!("INFO commandstats") };
    let info = String::from_utf8_lossy(&info).into_owned();
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |calls| calls.parse().expect("a number of calls"))
}

/// 100,000 held keys (written with the store's layout through a pipeline) beside 20,000
/// other keys: the listing finds every one in many `SCAN` pages, sends no `KEYS`, and an
/// acquire + release on the same server stays fast meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_many_held_keys_without_blocking() {
    const COUNT: usize = 100_000;
    let Some(server) = RedisServer::start_or_skip("redis listing at scale") else { return };
    let store = RedisLockStore::builder().key_prefix("scale").connect(&server.url()).await.unwrap();
    let conn = store.connection_manager().clone();
    let fill = |prefix: &'static str, count: usize| {
        let mut conn = conn.clone();
        async move {
            for batch in (0..count).collect::<Vec<_>>().chunks(5_000) {
                let mut pipe = redis::pipe();
                for i in batch {
                    let token = Token::generate();
                    pipe.cmd("SET").arg(format!("{prefix}:{i}")).arg(token.as_str()).arg("PX").arg(300_000).ignore();
                }
                let () = pipe.query_async(&mut conn).await.expect("fill");
            }
        }
    };
    let started = std::time::Instant::now();
    fill("scale:lock:held", COUNT).await;
    fill("other:lock:held", COUNT / 5).await;
    let filled = started.elapsed();
    let (keys_before, scans_before, scripts_before) =
        (calls(&server, "keys"), calls(&server, "scan"), calls(&server, "evalsha"));

    let limit = 1_000;
    let store: Arc<DynLockStore> = Arc::new(store);
    let stats = list_at_scale(Arc::clone(&store), "held", COUNT, limit, Duration::from_secs(2)).await;
    eprintln!(
        "redis: listed {COUNT} held keys (of {} in the database) in {:?}: {} pages of limit {limit}, \
         slowest page {:?}; {} acquire + release cycles meanwhile, slowest {:?} (filled in {filled:?})",
        COUNT + COUNT / 5,
        stats.elapsed,
        stats.pages,
        stats.slowest_page,
        stats.probe_cycles,
        stats.slowest_probe,
    );
    assert_eq!(calls(&server, "keys"), keys_before, "the listing sent KEYS");
    let scans = calls(&server, "scan") - scans_before;
    assert!(scans >= stats.pages as u64, "{scans} SCANs for {} pages", stats.pages);
    // Redis's whole keyspace is 120,000 keys: SCAN … COUNT 1000 needs about 120 calls.
    assert!(stats.pages >= 100, "{} pages", stats.pages);
    // The holders are read at most 500 keys per script run (the probe's scripts add more).
    let scripts = calls(&server, "evalsha") - scripts_before;
    assert!(scripts >= (COUNT / 500) as u64, "{scripts} list scripts for {COUNT} keys");
}

/// Exactly the commands of the store's layout: `SCAN` with the prefix's glob and the
/// page's `COUNT`, then the read-only list script on the keys found (one run for up to
/// 500 keys).
#[tokio::test(flavor = "multi_thread")]
async fn listing_sends_scan_with_the_prefix_and_the_list_script() {
    let Some(server) = RedisServer::start_or_skip("redis listing commands") else { return };
    let store = RedisLockStore::builder().key_prefix("neton").connect(&server.url()).await.unwrap();
    let locks = LockManager::new(Arc::new(store.clone()));
    let one = locks.lock("order:1", TTL).await.unwrap();
    let two = locks.lock("order:2", TTL).await.unwrap();
    let invoice = locks.lock("invoice:1", TTL).await.unwrap();
    // Loads the script, so the listing below shows a plain EVALSHA.
    let _ = store.list(&KeyPattern::all(), None, 10).await.unwrap();

    let monitor = tokio::task::block_in_place(|| server.monitor());
    let page = store.list(&KeyPattern::new("order:*").unwrap(), None, 10).await.unwrap();
    let marker = format!("marker-{}", Token::generate().as_str());
    tokio::task::block_in_place(|| server.command(&["ECHO", &marker]));
    let lines = tokio::task::block_in_place(|| monitor.lines_until(&marker, Duration::from_secs(10)));
    let client: Vec<Vec<String>> = lines
        .iter()
        .filter(|line| !line.contains(" lua]") && !line.contains(&marker))
        .map(|line| monitor_args(line))
        .collect();
    assert_eq!(page.next, None, "a small keyspace is one SCAN");
    let mut listed: Vec<&str> = page.locks.iter().map(|lock| lock.key.as_str()).collect();
    listed.sort_unstable();
    assert_eq!(listed, ["order:1", "order:2"]);
    assert_eq!(client.len(), 2, "{client:?}");
    assert_eq!(client[0], ["SCAN", "0", "MATCH", "neton:lock:order:*", "COUNT", "10"]);
    // The list script as the server runs it: the fence helper, then the script (as `scripts!`
    // in `src/scripts.rs` joins them).
    let list = concat!(include_str!("../../src/lua/lib/fence.lua"), include_str!("../../src/lua/list.lua"));
    let sha = Script::new(list).get_hash().to_owned();
    let script = &client[1];
    assert_eq!(script[..3], ["EVALSHA".to_owned(), sha, "2".to_owned()], "{script:?}");
    let mut keys = script[3..5].to_vec();
    keys.sort_unstable();
    assert_eq!(keys, ["neton:lock:order:1", "neton:lock:order:2"]);
    assert_eq!(script[5..], ["2"], "ARGV[1] = the number of lock keys");
    for lock in [one, two, invoice] {
        assert!(lock.release().await.unwrap());
    }
}

/// Only this store's locks are listed: not its fencing counter or fence keys, not keys
/// of another prefix, not what another program wrote under its namespace (a hash, a
/// string without expiry, a string that is not a token); the fence is the holder's.
#[tokio::test(flavor = "multi_thread")]
async fn listing_skips_what_the_store_did_not_write() {
    let Some(store) = common::shared_store("listing foreign keys", RedisLockStore::builder().fencing(true)).await
    else {
        return;
    };
    let prefix = store.key_prefix().to_owned();
    let locks = LockManager::new(Arc::new(store.clone()));
    let held = locks.lock("job:1", TTL).await.unwrap();
    let released = locks.lock("job:2", TTL).await.unwrap();
    assert!(released.release().await.unwrap(), "its fence key stays until it expires");
    let lock_key = |key: &str| format!("{prefix}:lock:{key}");
    let _: i64 = common::raw(&store, &["HSET", &lock_key("job:hash"), "f", "v"]).await;
    let _: () = common::raw(&store, &["SET", &lock_key("job:forever"), Token::generate().as_str()]).await;
    let _: () = common::raw(&store, &["SET", &lock_key("job:text"), "not a token", "PX", "60000"]).await;
    let long = "x".repeat(1_000);
    let _: () = common::raw(&store, &["SET", &lock_key("job:long"), &long, "PX", "60000"]).await;
    let other = format!("{prefix}x:lock:job:3");
    let _: () = common::raw(&store, &["SET", &other, Token::generate().as_str(), "PX", "60000"]).await;

    for pattern in ["*", "job:*"] {
        let listing = list_all(&store, &KeyPattern::new(pattern).unwrap(), 3).await;
        let [lock] = listing.locks.as_slice() else { panic!("{pattern}: {listing:?}") };
        assert_eq!(lock.key.as_str(), "job:1");
        assert_eq!(&lock.holders[0].token, held.token());
        assert_eq!(lock.holders[0].fence, held.fence());
        assert!(held.fence().is_some());
    }
    assert!(held.release().await.unwrap());
    let _: i64 = common::raw(&store, &["DEL", &other]).await;
    common::cleanup(&store).await;
}

/// A cursor the store cannot have issued is a configuration error, before any I/O.
#[tokio::test]
async fn a_foreign_cursor_is_refused() {
    let Some(store) = common::shared_store("listing cursor", RedisLockStore::builder()).await else { return };
    let err = store.list(&KeyPattern::all(), Some(&ListCursor::new("lock:a")), 10).await.unwrap_err();
    assert!(matches!(err, LockError::Config { .. }), "{err}");
}
