//! Values attached to leases on one server, as a private server sees them: the value key
//! beside the lock key, acquire, extend and release sending exactly what they send without
//! values, and the clean-up of a value key whose lease ended.

use std::time::Duration;

use distlock_api::{LeaseValue, LeaseValueStore, LockKey, LockStore, StoreKey, Token, Ttl};
use distlock_conformance::kit::redis_server::{monitor_args, RedisServer, Reply};
use distlock_redis::redis::Script;
use distlock_redis::{RedisLockStore, RELEASE_SCRIPT};

const TTL: Duration = Duration::from_millis(15_000);
const SETTINGS: &str = "neton:lock-settings";
const LOCK: &str = "neton:lock:order:1";
const VALUE: &str = "neton:value:lock:order:1";
/// The scripts as the server runs them (`scripts!` in `src/scripts.rs` joins the files).
const EXTEND_SCRIPT: &str = include_str!("../../src/lua/extend.lua");
const SET_VALUE_SCRIPT: &str = include_str!("../../src/lua/set_value.lua");
const INSPECT_VALUE_SCRIPT: &str =
    concat!(include_str!("../../src/lua/lib/fence.lua"), include_str!("../../src/lua/inspect_value.lua"));

fn ttl() -> Ttl {
    Ttl::new(TTL).unwrap()
}

fn key(name: &str) -> StoreKey {
    LockKey::new(name).unwrap().to_store_key()
}

fn value(text: &str) -> LeaseValue {
    LeaseValue::new(text).unwrap()
}

fn sha(code: &str) -> String {
    Script::new(code).get_hash().to_owned()
}

fn owned(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}

/// A default-settings store with prefix `neton` whose scripts are loaded (a warm-up cycle
/// on another key), so what follows shows plain `EVALSHA`s.
async fn warm_store(server: &RedisServer) -> RedisLockStore {
    let store = RedisLockStore::builder().key_prefix("neton").connect(&server.url()).await.unwrap();
    let (warm, token) = (key("warm-up"), Token::generate());
    assert!(store.try_acquire(&warm, &token, ttl()).await.unwrap().is_acquired());
    assert!(store.extend(&warm, &token, ttl()).await.unwrap());
    assert!(store.set_value(&warm, &token, &value("w")).await.unwrap());
    assert!(store.inspect_value(&warm).await.unwrap().is_some());
    assert!(store.release(&warm, &token).await.unwrap());
    assert!(store.inspect_value(&warm).await.unwrap().is_none());
    store
}

/// The client's commands and the commands scripts ran, up to a marker sent last.
fn commands_until_marker(
    server: &RedisServer,
    monitor: &distlock_conformance::kit::redis_server::Monitor,
) -> (Vec<Vec<String>>, Vec<Vec<String>>) {
    let marker = format!("marker-{}", Token::generate().as_str());
    server.command(&["ECHO", &marker]);
    let lines = monitor.lines_until(&marker, Duration::from_secs(10));
    let (mut client, mut scripted) = (Vec::new(), Vec::new());
    for line in lines.iter().filter(|line| !line.contains(&marker)) {
        if line.contains(" lua]") {
            scripted.push(monitor_args(line));
        } else {
            client.push(monitor_args(line));
        }
    }
    (client, scripted)
}

/// A held lock with a value: the lock key is written only by the frozen `SET NX PX`, extend
/// and release scripts; the value is one more key, `<token>:<value>` without expiry, kept
/// by an extend; the release leaves it, and the next read deletes it.
#[tokio::test(flavor = "multi_thread")]
async fn a_value_lives_beside_the_lock_and_leaves_its_commands_alone() {
    let Some(server) = RedisServer::start_or_skip("lease values") else { return };
    let store = warm_store(&server).await;
    let (key, token) = (key("order:1"), Token::generate());
    let t = token.as_str();
    let monitor = tokio::task::block_in_place(|| server.monitor());

    assert!(store.try_acquire(&key, &token, ttl()).await.unwrap().is_acquired());
    assert!(store.set_value(&key, &token, &value("10.0.0.7:8080")).await.unwrap());
    assert!(store.extend(&key, &token, ttl()).await.unwrap());
    let seen = store.inspect_value(&key).await.unwrap().expect("held");
    assert_eq!((seen.holder.token.as_str(), seen.holder.fence), (t, None));
    assert_eq!(seen.value.as_ref().map(LeaseValue::as_str), Some("10.0.0.7:8080"));
    assert!(store.release(&key, &token).await.unwrap());

    let (client, scripted) = tokio::task::block_in_place(|| commands_until_marker(&server, &monitor));
    assert_eq!(
        client,
        [
            owned(&["SET", LOCK, t, "NX", "PX", "15000"]),
            owned(&["EVALSHA", &sha(SET_VALUE_SCRIPT), "2", LOCK, VALUE, t, "10.0.0.7:8080"]),
            owned(&["EVALSHA", &sha(EXTEND_SCRIPT), "1", LOCK, t, "15000"]),
            owned(&["EVALSHA", &sha(INSPECT_VALUE_SCRIPT), "2", LOCK, VALUE]),
            owned(&["EVALSHA", &sha(RELEASE_SCRIPT), "1", LOCK, t]),
        ]
    );
    let tagged = format!("{t}:10.0.0.7:8080");
    assert_eq!(
        scripted,
        [
            owned(&["get", LOCK]),
            owned(&["set", VALUE, &tagged]),
            owned(&["get", LOCK]),
            owned(&["pexpire", LOCK, "15000"]),
            owned(&["get", LOCK]),
            owned(&["get", VALUE]),
            owned(&["pttl", LOCK]),
            owned(&["get", LOCK]),
            owned(&["del", LOCK]),
        ]
    );

    // The release script is the frozen one: the value key outlives the lease…
    assert_eq!(server.keys("neton:*"), [SETTINGS, VALUE]);
    assert_eq!(server.command(&["PTTL", VALUE]), Reply::Int(-1), "a value key has no expiry");
    // …is never reported again, and the next read deletes it.
    assert!(store.inspect_value(&key).await.unwrap().is_none());
    assert_eq!(server.keys("neton:*"), [SETTINGS], "the read after the release deleted the value key");
}

/// A value key left by an ended lease is hidden from the key's next holder and deleted by
/// the next read; a refused `set_value` writes nothing.
#[tokio::test(flavor = "multi_thread")]
async fn a_value_left_by_an_ended_lease_is_deleted_by_the_next_read() {
    let Some(server) = RedisServer::start_or_skip("lease values, clean-up") else { return };
    let store = warm_store(&server).await;
    let key = key("order:1");

    // Released, then taken by another token.
    let (first, second) = (Token::generate(), Token::generate());
    assert!(store.try_acquire(&key, &first, ttl()).await.unwrap().is_acquired());
    assert!(store.set_value(&key, &first, &value("first")).await.unwrap());
    assert!(store.release(&key, &first).await.unwrap());
    assert!(store.try_acquire(&key, &second, ttl()).await.unwrap().is_acquired());
    let monitor = tokio::task::block_in_place(|| server.monitor());
    assert!(!store.set_value(&key, &first, &value("late")).await.unwrap());
    let (_, scripted) = tokio::task::block_in_place(|| commands_until_marker(&server, &monitor));
    assert_eq!(scripted, [owned(&["get", LOCK])], "a refused set_value only reads");
    let left = server.command(&["GET", VALUE]).as_text();
    assert_eq!(left, Some(format!("{}:first", first.as_str())), "the ended lease's value key, untouched");
    let seen = store.inspect_value(&key).await.unwrap().expect("held");
    assert_eq!((&seen.holder.token, seen.value), (&second, None));
    assert_eq!(server.keys("neton:*"), [SETTINGS, LOCK], "the read deleted the ended lease's value key");
    assert!(store.release(&key, &second).await.unwrap());

    // Expired, nobody holding the key.
    let third = Token::generate();
    let short = Ttl::new(Duration::from_millis(500)).unwrap();
    assert!(store.try_acquire(&key, &third, short).await.unwrap().is_acquired());
    assert!(store.set_value(&key, &third, &value("third")).await.unwrap());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    while server.command(&["EXISTS", LOCK]) != Reply::Int(0) {
        assert!(tokio::time::Instant::now() < deadline, "the lease never expired");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(server.keys("neton:*"), [SETTINGS, VALUE], "the lease expired, its value key did not");
    assert!(store.inspect_value(&key).await.unwrap().is_none());
    assert_eq!(server.keys("neton:*"), [SETTINGS]);
}
