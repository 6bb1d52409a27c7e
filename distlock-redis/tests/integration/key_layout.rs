//! The exact keys and commands, as a private server's `MONITOR` sees them.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{LockManager, Token};
use distlock_conformance::kit::redis_server::Reply;
use distlock_conformance::kit::redis_server::{monitor_args, RedisServer};
use distlock_redis::redis::Script;
use distlock_redis::{RedisLockStore, RedisLockStoreBuilder, RELEASE_SCRIPT};

/// The store's scripts, as the server runs them: the fair release is the queue helpers,
/// then the script (as `scripts!` in `src/scripts.rs` joins them).
const FAIR_RELEASE_SCRIPT: &str =
    concat!(include_str!("../../src/lua/lib/queue.lua"), include_str!("../../src/lua/fair_release.lua"));
const FENCED_ACQUIRE_SCRIPT: &str = include_str!("../../src/lua/fenced_acquire.lua");

const TTL: Duration = Duration::from_millis(15_000);

/// The key that records the prefix's settings, never expiring.
const SETTINGS: &str = "neton:lock-settings";

/// Runs one acquire + release of `order:1` through the manager with prefix `neton`, and
/// returns the `MONITOR` lines of that cycle, split into the client's commands and the
/// commands run inside scripts.
async fn one_cycle(
    server: &RedisServer,
    builder: RedisLockStoreBuilder,
) -> (Vec<Vec<String>>, Vec<Vec<String>>, Token, Option<u64>) {
    let store = builder.key_prefix("neton").connect(&server.url()).await.unwrap();
    let fencing = store.fencing();
    let locks = LockManager::new(Arc::new(store));
    // Load the scripts first, so the cycle below shows plain EVALSHAs (no NOSCRIPT fallback).
    let warm = locks.try_lock("warm-up", TTL).await.unwrap().unwrap();
    assert!(warm.release().await.unwrap());

    let monitor = tokio::task::block_in_place(|| server.monitor());
    let lock = locks.try_lock("order:1", TTL).await.unwrap().unwrap();
    let (token, fence) = (lock.token().clone(), lock.fence());
    let keys_while_held = tokio::task::block_in_place(|| server.keys("neton:*"));
    let expected_keys: &[&str] = if fencing {
        &["neton:fence", "neton:fence:lock:order:1", "neton:fence:lock:warm-up", SETTINGS, "neton:lock:order:1"]
    } else {
        &[SETTINGS, "neton:lock:order:1"]
    };
    assert_eq!(keys_while_held, expected_keys, "SCAN while held");
    assert!(lock.release().await.unwrap());

    let marker = format!("marker-{}", Token::generate().as_str());
    tokio::task::block_in_place(|| server.command(&["ECHO", &marker]));
    let lines = tokio::task::block_in_place(|| monitor.lines_until(&marker, Duration::from_secs(10)));
    let mut client = Vec::new();
    let mut scripted = Vec::new();
    for line in &lines {
        let args = monitor_args(line);
        if line.contains(&marker) || args.first().is_some_and(|c| c.eq_ignore_ascii_case("scan")) {
            continue; // the test's own commands
        }
        if line.contains(" lua]") {
            scripted.push(args);
        } else {
            client.push(args);
        }
    }
    (client, scripted, token, fence)
}

fn sha(code: &str) -> String {
    Script::new(code).get_hash().to_owned()
}

fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

/// The default: `SET NX PX` and the compare-and-delete script, nothing else.
#[tokio::test(flavor = "multi_thread")]
async fn the_default_store_sends_exactly_the_frozen_commands() {
    let Some(server) = RedisServer::start_or_skip("key layout") else { return };
    let (client, scripted, token, fence) = one_cycle(&server, RedisLockStore::builder()).await;
    let token = token.as_str();
    assert_eq!(fence, None);
    assert_eq!(
        client,
        [
            owned(&["SET", "neton:lock:order:1", token, "NX", "PX", "15000"]),
            owned(&["EVALSHA", &sha(RELEASE_SCRIPT), "1", "neton:lock:order:1", token]),
        ]
    );
    assert_eq!(scripted, [owned(&["get", "neton:lock:order:1"]), owned(&["del", "neton:lock:order:1"])]);
    assert_eq!(server.keys("neton:*"), [SETTINGS], "nothing but the settings is left behind in default mode");
}

/// Fair waiting with notifications: the acquire is still `SET NX PX`; the release is one
/// script that begins with the compare-and-delete, publishes the release, and looks for
/// a queue of waiters (none here, so nothing else runs).
#[tokio::test(flavor = "multi_thread")]
async fn fair_mode_acquires_with_set_nx_px_and_releases_with_one_script() {
    let Some(server) = RedisServer::start_or_skip("key layout, fair") else { return };
    let builder = RedisLockStore::builder().fair_queue(true).release_notifications(true);
    let (client, scripted, token, fence) = one_cycle(&server, builder).await;
    let token = token.as_str();
    assert_eq!(fence, None);
    let (key, queue, queue_ttl) = ("neton:lock:order:1", "neton:queue:lock:order:1", "neton:queue-ttl:lock:order:1");
    assert_eq!(
        client,
        [
            owned(&["SET", key, token, "NX", "PX", "15000"]),
            owned(&["EVALSHA", &sha(FAIR_RELEASE_SCRIPT), "3", key, queue, queue_ttl, token, "neton:released"]),
        ]
    );
    assert_eq!(
        scripted,
        [
            owned(&["get", key]),
            owned(&["del", key]),
            owned(&["exists", queue]),
            owned(&["publish", "neton:released", key]),
        ]
    );
    assert_eq!(server.keys("neton:*"), [SETTINGS], "nothing but the settings is left behind");
}

#[tokio::test(flavor = "multi_thread")]
async fn fencing_mode_sets_the_token_and_draws_from_one_counter_in_one_script() {
    let Some(server) = RedisServer::start_or_skip("key layout, fencing") else { return };
    let (client, scripted, token, fence) = one_cycle(&server, RedisLockStore::builder().fencing(true)).await;
    let token = token.as_str();
    assert_eq!(fence, Some(2), "one counter for the store: warm-up got 1");
    let holder_fence = format!("2:{token}");
    assert_eq!(
        client,
        [
            owned(&[
                "EVALSHA",
                &sha(FENCED_ACQUIRE_SCRIPT),
                "3",
                "neton:lock:order:1",
                "neton:fence",
                "neton:fence:lock:order:1",
                token,
                "15000"
            ]),
            owned(&["EVALSHA", &sha(RELEASE_SCRIPT), "1", "neton:lock:order:1", token]),
        ]
    );
    assert_eq!(
        scripted,
        [
            owned(&["set", "neton:lock:order:1", token, "NX", "PX", "15000"]),
            owned(&["incr", "neton:fence"]),
            owned(&["set", "neton:fence:lock:order:1", &holder_fence, "PX", "15000"]),
            owned(&["get", "neton:lock:order:1"]),
            owned(&["del", "neton:lock:order:1"]),
        ]
    );
    // Memory stays bounded: besides the one counter, every key left expires with its lease.
    let left = server.keys("neton:*");
    assert_eq!(left, ["neton:fence", "neton:fence:lock:order:1", "neton:fence:lock:warm-up", SETTINGS]);
    assert_eq!(server.command(&["PTTL", "neton:fence"]), Reply::Int(-1), "the counter never expires");
    for key in &left[1..3] {
        let pttl = server.command(&["PTTL", key]).as_int().unwrap();
        assert!((1..=15_000).contains(&pttl), "{key} expires with its lease: PTTL {pttl}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_release_after_script_flush_resends_eval_and_publishes_again() {
    let Some(server) = RedisServer::start_or_skip("key layout, NOSCRIPT release") else { return };
    // Without the queue: the pipelined PUBLISH (with the queue it is inside the script).
    let builder = RedisLockStore::builder().key_prefix("neton").release_notifications(true);
    let store = builder.connect(&server.url()).await.unwrap();
    let locks = LockManager::new(Arc::new(store));
    // The first release loads the script (SCRIPT LOAD); the flush then makes it unknown.
    let warm = locks.try_lock("warm-up", TTL).await.unwrap().unwrap();
    assert!(warm.release().await.unwrap());
    let lock = locks.try_lock("order:1", TTL).await.unwrap().unwrap();
    let token = lock.token().as_str().to_owned();
    server.script_flush();
    let monitor = tokio::task::block_in_place(|| server.monitor());
    assert!(lock.release().await.unwrap());
    let marker = format!("marker-{}", Token::generate().as_str());
    tokio::task::block_in_place(|| server.command(&["ECHO", &marker]));
    let lines = tokio::task::block_in_place(|| monitor.lines_until(&marker, Duration::from_secs(10)));
    let client: Vec<Vec<String>> = lines
        .iter()
        .filter(|line| !line.contains(" lua]") && !line.contains(&marker))
        .map(|line| {
            let mut args = monitor_args(line);
            if args[0] == "EVAL" {
                args[1] = "<script>".to_owned(); // MONITOR escapes the script's bytes
            }
            args
        })
        .collect();
    // The NOSCRIPT'd EVALSHA deleted nothing (its PUBLISH is a spurious wake-up); the EVAL
    // did, and its own PUBLISH follows it.
    assert_eq!(
        client,
        [
            owned(&["EVALSHA", &sha(RELEASE_SCRIPT), "1", "neton:lock:order:1", &token]),
            owned(&["PUBLISH", "neton:released", "neton:lock:order:1"]),
            owned(&["EVAL", "<script>", "1", "neton:lock:order:1", &token]),
            owned(&["PUBLISH", "neton:released", "neton:lock:order:1"]),
        ]
    );
    assert_eq!(server.keys("neton:*"), [SETTINGS]);
}
