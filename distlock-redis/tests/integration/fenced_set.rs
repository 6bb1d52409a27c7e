//! `fenced_set` on the real Redis at `DISTLOCK_REDIS_URL`: a holder paused past its lease
//! cannot overwrite what the next holder wrote. Every case uses its own random keys. Its
//! wire, on a private server: `EVALSHA` of the script, `EVAL` after `NOSCRIPT`.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::LockManager;
use distlock_conformance::kit::postgres_server::random_identifier;
use distlock_conformance::kit::redis_server::{monitor_args, RedisServer};
use distlock_redis::redis::{AsyncCommands, Script};
use distlock_redis::{fenced_set, FencedSet, RedisLockStore};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holders_late_write_is_refused() {
    let Some(url) = distlock_conformance::kit::redis_url("fenced_set") else { return };
    let prefix = random_identifier("fenced");
    let store = RedisLockStore::builder().key_prefix(prefix.as_str()).fencing(true).connect(&url).await.unwrap();
    let mut conn = store.connection_manager().clone();
    let locks = LockManager::new(Arc::new(store));
    let resource = format!("{prefix}:resource");

    let first = locks.try_lock("report", Duration::from_millis(300)).await.unwrap().expect("first lock");
    let first_fence = first.fence().expect("fencing mode");
    // Paused: neither releases nor renews.
    let _ = first.leak();
    // Waits (retrying) until the first lease has expired.
    let second = locks.lock("report", Duration::from_secs(30)).await.unwrap();
    let second_fence = second.fence().expect("fencing mode");
    assert!(second_fence > first_fence);

    assert_eq!(fenced_set(&mut conn, &resource, second_fence, "second").await.unwrap(), FencedSet::Written);
    assert_eq!(
        fenced_set(&mut conn, &resource, first_fence, "first").await.unwrap(),
        FencedSet::Refused { current_fence: second_fence }
    );
    let value: String = conn.hget(&resource, "value").await.unwrap();
    assert_eq!(value, "second", "the late write changed nothing");
    // The same fence may write again.
    assert_eq!(fenced_set(&mut conn, &resource, second_fence, "again").await.unwrap(), FencedSet::Written);
    assert!(second.release().await.unwrap());
    let _: () = conn.del(&resource).await.unwrap();
}

#[tokio::test]
async fn fences_compare_as_64_bit_numbers() {
    let Some(url) = distlock_conformance::kit::redis_url("fenced_set") else { return };
    let store = RedisLockStore::connect(&url).await.unwrap();
    let mut conn = store.connection_manager().clone();
    let resource = random_identifier("fenced_numbers");
    // Past 2^53, where Lua's doubles would round, and across a change of digit count.
    let high = u64::MAX - 1;
    assert_eq!(fenced_set(&mut conn, &resource, 9, "a").await.unwrap(), FencedSet::Written);
    assert_eq!(fenced_set(&mut conn, &resource, 10, "b").await.unwrap(), FencedSet::Written);
    assert_eq!(fenced_set(&mut conn, &resource, 9, "c").await.unwrap(), FencedSet::Refused { current_fence: 10 });
    assert_eq!(fenced_set(&mut conn, &resource, high, "d").await.unwrap(), FencedSet::Written);
    assert_eq!(
        fenced_set(&mut conn, &resource, high - 1, "e").await.unwrap(),
        FencedSet::Refused { current_fence: high }
    );
    assert_eq!(fenced_set(&mut conn, &resource, u64::MAX, "f").await.unwrap(), FencedSet::Written);
    let _: () = conn.del(&resource).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_are_sent_with_evalsha_and_eval_after_noscript() {
    let Some(server) = RedisServer::start_or_skip("fenced_set wire") else { return };
    let store = RedisLockStore::connect(&server.url()).await.unwrap();
    let mut conn = store.connection_manager().clone();
    let resource = random_identifier("fenced_wire");
    let sha = Script::new(include_str!("../../src/lua/fenced_set.lua")).get_hash().to_owned();
    assert_eq!(fenced_set(&mut conn, &resource, 5, "a").await.unwrap(), FencedSet::Written);
    tokio::task::block_in_place(|| server.script_flush());
    let monitor = tokio::task::block_in_place(|| server.monitor());
    assert_eq!(fenced_set(&mut conn, &resource, 6, "b").await.unwrap(), FencedSet::Written);
    assert_eq!(fenced_set(&mut conn, &resource, 7, "c").await.unwrap(), FencedSet::Written);
    let marker = random_identifier("marker");
    tokio::task::block_in_place(|| server.command(&["ECHO", &marker]));
    let lines = tokio::task::block_in_place(|| monitor.lines_until(&marker, Duration::from_secs(10)));
    let sent: Vec<Vec<String>> = lines
        .iter()
        .filter(|line| !line.contains(" lua]") && !line.contains(&marker))
        .map(|line| monitor_args(line))
        .map(|args| if args[0] == "EVAL" { [&args[..1], &args[2..]].concat() } else { args })
        .collect();
    let owned = |args: &[&str]| args.iter().map(|arg| (*arg).to_owned()).collect::<Vec<_>>();
    // The flushed script: EVALSHA answered NOSCRIPT, EVAL ran it (and the server keeps it
    // again), so the next write is a plain EVALSHA.
    assert_eq!(
        sent,
        [
            owned(&["EVALSHA", &sha, "1", &resource, "6", "b"]),
            owned(&["EVAL", "1", &resource, "6", "b"]),
            owned(&["EVALSHA", &sha, "1", &resource, "7", "c"]),
        ]
    );
}
