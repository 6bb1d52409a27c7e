//! A store connected with a plain `redis://host` URL sends exactly the frozen single-node
//! wire, as a private server's `MONITOR` sees it: `SET key token NX PX ttl` for every
//! acquisition attempt (first and waiting ones alike) with the retry interval between a
//! waiter's attempts, `SCRIPT LOAD` of the compare-and-delete script before its first
//! `EVALSHA`, `EVALSHA` of that script for every release, and `EVAL` after `NOSCRIPT`.

use std::sync::Arc;
use std::time::Duration;

use distlock_api::{LockManager, LockOptions, Token};
use distlock_conformance::kit::redis_server::{monitor_args, Monitor, RedisServer};
use distlock_redis::{RedisLockStore, RELEASE_SCRIPT};

const TTL: Duration = Duration::from_millis(15_000);
const RETRY: Duration = Duration::from_millis(100);
/// The SHA-1 of the release script, the text of the specification byte for byte.
const RELEASE_SHA: &str = "1ba2f9e56bb45f8f43d57b282bfe8c31bcf2a2e2";

/// One command as `MONITOR` saw it: when (the server's clock, seconds), its arguments,
/// and whether a script ran it.
#[derive(Debug)]
struct Seen {
    at: f64,
    args: Vec<String>,
    scripted: bool,
}

fn seen(line: &str) -> Seen {
    let at = line.split_whitespace().next().and_then(|at| at.parse().ok()).unwrap_or(f64::NAN);
    Seen { at, args: monitor_args(line), scripted: line.contains(" lua]") }
}

/// Every command up to `marker` (an `ECHO` the test sends last), the marker left out.
fn until_marker(server: &RedisServer, monitor: &Monitor) -> Vec<Seen> {
    let marker = format!("marker-{}", Token::generate().as_str());
    tokio::task::block_in_place(|| server.command(&["ECHO", &marker]));
    let lines = tokio::task::block_in_place(|| monitor.lines_until(&marker, Duration::from_secs(10)));
    lines.iter().filter(|line| !line.contains(&marker)).map(|line| seen(line)).collect()
}

/// Whether `args` is `SET key <token> NX PX 15000` (a 36-character token).
fn is_set_nx_px(args: &[String], key: &str) -> bool {
    matches!(args, [set, k, token, nx, px, ttl]
        if set == "SET" && k == key && token.len() == 36 && nx == "NX" && px == "PX" && ttl == "15000")
}

#[test]
fn the_release_script_is_the_specifications_text() {
    assert_eq!(distlock_redis::redis::Script::new(RELEASE_SCRIPT).get_hash(), RELEASE_SHA);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_plain_url_sends_set_nx_px_and_the_release_script_only() {
    let Some(server) = RedisServer::start_or_skip("frozen wire") else { return };
    let store = RedisLockStore::connect(&server.url()).await.unwrap();
    let capabilities = distlock_api::LockStore::capabilities(&store);
    assert!(!capabilities.fair_queue && !capabilities.release_notifications && !capabilities.fencing);
    let locks = LockManager::new(Arc::new(store));
    let monitor = tokio::task::block_in_place(|| server.monitor());

    // An uncontended cycle.
    let lock = locks.try_lock("order:1", TTL).await.unwrap().expect("a free key");
    let first_token = lock.token().as_str().to_owned();
    assert!(lock.release().await.unwrap());

    // A contended wait: the waiter tries, finds the key held, pauses the retry interval,
    // tries again… until the holder releases.
    let holder = locks.try_lock("order:2", TTL).await.unwrap().expect("a free key");
    let waiter = tokio::spawn({
        let locks = locks.clone();
        async move {
            let options = LockOptions::new().wait(Duration::from_secs(30)).retry_interval(RETRY);
            let lock = locks.lock_opts("order:2", TTL, &options).await.expect("the waiter's turn");
            let token = lock.token().as_str().to_owned();
            assert!(lock.release().await.unwrap());
            token
        }
    });
    // Let the waiter find the key held a few times: read the monitor until its third
    // attempt (the holder's SET was the first SET of order:2).
    let mut before_release = Vec::new();
    let mut attempts = 0;
    while attempts < 4 {
        let line = tokio::task::block_in_place(|| monitor.next_line(Duration::from_secs(10)))
            .expect("the waiter keeps trying");
        let command = seen(&line);
        if is_set_nx_px(&command.args, "distlock:lock:order:2") {
            attempts += 1;
        }
        before_release.push(command);
    }
    assert!(holder.release().await.unwrap());
    let waiter_token = waiter.await.unwrap();

    let mut commands = before_release;
    commands.extend(until_marker(&server, &monitor));
    let (client, scripted): (Vec<&Seen>, Vec<&Seen>) = commands.iter().partition(|command| !command.scripted);

    // Only the frozen commands, the script loaded once before its first EVALSHA.
    let load = client.iter().position(|c| c.args.first().is_some_and(|a| a == "SCRIPT")).expect("a SCRIPT LOAD");
    assert_eq!(client[load].args[1], "LOAD");
    assert!(client[..load].iter().all(|c| c.args[0] == "SET"), "SCRIPT LOAD before the first EVALSHA: {client:#?}");
    for command in &client {
        let args = &command.args;
        let frozen = match args[0].as_str() {
            "SET" => is_set_nx_px(args, "distlock:lock:order:1") || is_set_nx_px(args, "distlock:lock:order:2"),
            "SCRIPT" => std::ptr::eq(*command, client[load]),
            "EVALSHA" => args.len() == 5 && args[1] == RELEASE_SHA && args[2] == "1",
            _ => false,
        };
        assert!(frozen, "not a command of the frozen wire: {args:?}");
    }
    // Every release is the script on its own key and token.
    let releases: Vec<&[String]> = client.iter().filter(|c| c.args[0] == "EVALSHA").map(|c| &c.args[3..]).collect();
    let holder_token = &client.iter().find(|c| is_set_nx_px(&c.args, "distlock:lock:order:2")).unwrap().args[2];
    assert_eq!(
        releases,
        [
            ["distlock:lock:order:1".to_owned(), first_token],
            ["distlock:lock:order:2".to_owned(), holder_token.clone()],
            ["distlock:lock:order:2".to_owned(), waiter_token.clone()],
        ]
    );
    assert!(scripted.iter().all(|c| matches!(c.args[0].as_str(), "get" | "del")), "{scripted:#?}");

    // The waiter's attempts are all SET NX PX, the retry interval apart.
    let waits: Vec<f64> = client
        .iter()
        .filter(|c| is_set_nx_px(&c.args, "distlock:lock:order:2") && c.args[2] == waiter_token)
        .map(|c| c.at)
        .collect();
    assert!(waits.len() >= 4, "the waiter tried {} times", waits.len());
    for pair in waits.windows(2) {
        let gap = pair[1] - pair[0];
        // The server's clock in µs; the pause is at least the retry interval (a margin
        // of 5 ms for the client's and the server's clocks).
        assert!(gap >= RETRY.as_secs_f64() - 0.005, "attempts {gap:.4} s apart, retry interval {RETRY:?}: {waits:?}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn after_noscript_the_release_is_sent_with_eval_once() {
    let Some(server) = RedisServer::start_or_skip("frozen wire, NOSCRIPT") else { return };
    let locks = LockManager::new(Arc::new(RedisLockStore::connect(&server.url()).await.unwrap()));
    let cycle = || async {
        let lock = locks.try_lock("order:1", TTL).await.unwrap().expect("a free key");
        assert!(lock.release().await.unwrap());
    };
    cycle().await;
    server.script_flush();
    let monitor = tokio::task::block_in_place(|| server.monitor());
    cycle().await;
    cycle().await;
    let client: Vec<String> = until_marker(&server, &monitor)
        .into_iter()
        .filter(|command| !command.scripted)
        .map(|command| command.args[0].clone())
        .collect();
    // The flushed script: EVALSHA answered NOSCRIPT, EVAL ran it (and the server keeps
    // it again), so the next release is a plain EVALSHA. No second SCRIPT LOAD.
    assert_eq!(client, ["SET", "EVALSHA", "EVAL", "SET", "EVALSHA"]);
}

#[tokio::test(flavor = "multi_thread")]
async fn clients_of_one_prefix_must_share_its_settings() {
    let Some(server) = RedisServer::start_or_skip("frozen wire, shared settings") else { return };
    let url = server.url();
    let plain = RedisLockStore::connect(&url).await.unwrap();
    assert_eq!(
        server.command(&["GET", "distlock:lock-settings"]).as_text().as_deref(),
        Some("fencing=false&fences=counter&notifications=false&fair=false")
    );
    // The same settings, by URL or by builder: accepted.
    RedisLockStore::connect(&format!("{url}/?fair=false")).await.unwrap();
    RedisLockStore::builder().fencing(false).connect(&url).await.unwrap();
    // Others: refused, naming the key and both settings.
    for other in [format!("{url}/?fair=true"), format!("{url}/?notifications=true"), format!("{url}/?fencing=true")] {
        let err = RedisLockStore::connect(&other).await.unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, distlock_api::LockError::Config { .. }), "{other}: {err}");
        assert!(message.contains("distlock:lock-settings") && message.contains("fair=false"), "{message}");
    }
    // Another prefix is another set of clients.
    let fair = RedisLockStore::connect(&format!("{url}/?prefix=fair&fair=true&notifications=true")).await.unwrap();
    let capabilities = distlock_api::LockStore::capabilities(&fair);
    assert!(capabilities.fair_queue && capabilities.release_notifications);
    // The empty prefix: bare keys, its own record.
    let bare = RedisLockStore::connect(&format!("{url}/?prefix=")).await.unwrap();
    let locks = LockManager::new(Arc::new(bare));
    let lock = locks.try_lock("split:7", TTL).await.unwrap().expect("a free key");
    assert_eq!(server.command(&["GET", "lock:split:7"]).as_text().as_deref(), Some(lock.token().as_str()));
    assert!(server.command(&["GET", "lock-settings"]).as_text().is_some());
    assert!(lock.release().await.unwrap());
    drop(plain);
}
