//! `distlock list` against real Redis and PostgreSQL servers, and on memory://.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use distlock::{
    DistributedLock, DynLockStore, GroupAcquire, GroupRequest, LockKey, LockManager, LockMode, OwnerId, QueuedAttempt,
    StoreKey, StoreMember, Token, Ttl,
};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader};

const TTL: Duration = Duration::from_secs(60);

/// Locks held by this test process under a fresh namespace, through the library.
struct Held {
    namespace: String,
    locks: Vec<DistributedLock>,
}

impl Held {
    async fn take(url: &str, test: &str, names: &[&str]) -> Self {
        let namespace = key(test);
        let manager = LockManager::new(distlock::connect(url).await.expect("connect"));
        let mut locks = Vec::new();
        for name in names {
            locks.push(manager.lock(&format!("{namespace}:{name}"), TTL).await.expect("lock"));
        }
        Self { namespace, locks }
    }

    fn pattern(&self) -> String {
        format!("{}:*", self.namespace)
    }

    async fn release(self) {
        for lock in self.locks {
            assert!(lock.release().await.expect("release"));
        }
    }
}

async fn list(url: &str, args: &[&str]) -> std::process::Output {
    let mut all = vec!["list"];
    all.extend_from_slice(args);
    let out = output(distlock(Some(url), &all)).await;
    assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    out
}

async fn table_shows_key_mode_owner_ttl_and_fence_sorted_by_key(url: &str) {
    let held = Held::take(url, "list-table", &["b", "a", "c:1"]).await;
    let other = Held::take(url, "list-table-other", &["a"]).await;
    let out = list(url, &["--match", &held.pattern()]).await;
    let table = stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 5, "header, 3 rows, summary:\n{table}");
    assert!(lines[0].starts_with("KEY") && lines[0].contains("MODE") && lines[0].contains("FENCE"), "{table}");
    let ns = &held.namespace;
    for (line, (name, lock)) in
        lines[1..4].iter().zip([("a", &held.locks[1]), ("b", &held.locks[0]), ("c:1", &held.locks[2])])
    {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(fields[0], format!("{ns}:{name}"), "sorted by key:\n{table}");
        assert_eq!(fields[1], "exclusive", "{table}");
        assert_eq!(fields[2].len(), 8, "an 8-digit owner:\n{table}");
        let fence = lock.fence().map_or_else(|| "-".to_owned(), |fence| fence.to_string());
        assert_eq!(fields[4], fence, "{table}");
        assert!(!line.contains(lock.token().as_str()), "a token in the table:\n{table}");
        assert!(!table.contains(&lock.token().as_str()[..8]), "a token's prefix in the table:\n{table}");
    }
    assert_eq!(lines[4], "3 locks held");
    assert!(!table.contains(&other.namespace), "a key outside the pattern:\n{table}");

    let out = list(url, &["--match", &held.pattern(), "--show-tokens"]).await;
    let shown = stdout(&out);
    for lock in &held.locks {
        assert!(shown.contains(lock.token().as_str()), "--show-tokens:\n{shown}");
    }
    let out = list(url, &["--match", &format!("{ns}:?"), "--limit", "1"]).await;
    let limited = stdout(&out);
    assert!(limited.contains(&format!("{ns}:a")) && !limited.contains(&format!("{ns}:b")), "{limited}");
    assert!(limited.contains("1 of 2 locks held shown"), "{limited}");
    held.release().await;
    other.release().await;
}

async fn json_has_every_field_and_no_token_unless_asked(url: &str) {
    let held = Held::take(url, "list-json", &["x", "y%"]).await;
    let out = list(url, &["--match", &held.pattern(), "--format", "json"]).await;
    let text = stdout(&out);
    assert_eq!(text.lines().count(), 1, "one document on one line:\n{text}");
    let listing: serde_json::Value = serde_json::from_str(&text).expect("JSON");
    assert_eq!(listing["match"], held.pattern());
    assert_eq!(listing["total"], 2);
    let locks = listing["locks"].as_array().expect("locks");
    assert_eq!(locks.len(), 2, "{listing:#}");
    let mut owners = Vec::new();
    for (row, lock) in locks.iter().zip(&held.locks) {
        assert_eq!(row["key"], lock.key().as_str(), "{listing:#}");
        assert_eq!(row["mode"], "exclusive");
        let left = row["ttl_left_ms"].as_u64().expect("ttl_left_ms");
        assert!(left > 0 && left <= 60_000, "{row}");
        assert_eq!(row["fence"].as_u64(), lock.fence(), "{row}");
        assert!(row.get("token").is_none(), "{row}");
        owners.push(row["owner"].as_str().expect("owner").to_owned());
        assert!(!text.contains(lock.token().as_str()) && !text.contains(&lock.token().as_str()[..8]), "{text}");
    }
    assert_ne!(owners[0], owners[1], "two holders are told apart");

    let out = list(url, &["--match", &held.pattern(), "--format", "json", "--show-tokens"]).await;
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    for (row, lock) in listing["locks"].as_array().expect("locks").iter().zip(&held.locks) {
        assert_eq!(row["token"], lock.token().as_str(), "{row}");
    }
    // `%` is literal, `?` one character.
    let ns = &held.namespace;
    for (pattern, expected) in [(format!("{ns}:y%"), 1), (format!("{ns}:?"), 1), (format!("{ns}:%"), 0)] {
        let out = list(url, &["--match", &pattern, "--format", "json"]).await;
        let listing: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
        assert_eq!(listing["total"], expected, "{pattern}: {listing}");
    }
    held.release().await;
}

async fn watch_refreshes_until_interrupted(url: &str) {
    let held = Held::take(url, "list-watch", &["w"]).await;
    for format in ["table", "json"] {
        let mut command =
            distlock(Some(url), &["list", "--match", &held.pattern(), "--watch", "100ms", "--format", format]);
        command.stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn distlock list --watch");
        let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
        let mut refreshes = 0;
        while refreshes < 2 {
            let line = tokio::time::timeout(TIMEOUT, lines.next_line())
                .await
                .expect("a refresh in time")
                .expect("read")
                .expect("distlock list --watch ended early");
            if format == "table" && line.starts_with("--- ") {
                refreshes += 1;
            } else if format == "json" {
                let listing: serde_json::Value = serde_json::from_str(&line).expect("one JSON document per line");
                assert_eq!(listing["total"], 1, "{listing}");
                refreshes += 1;
            } else {
                assert!(line.contains(&held.namespace) || line.starts_with("KEY") || line == "1 lock held", "{line}");
            }
        }
        let pid = Pid::from_raw(i32::try_from(child.id().expect("running")).expect("pid"));
        kill(pid, Signal::SIGINT).expect("Ctrl-C");
        let status = tokio::time::timeout(TIMEOUT, child.wait()).await.expect("exit after Ctrl-C").expect("wait");
        assert_eq!(status.code(), Some(0), "{format}: a clean exit on Ctrl-C");
    }
    // `distlock list --watch | head -n 1`: when the reader goes away, so does distlock.
    let mut command = distlock(Some(url), &["list", "--match", &held.pattern(), "--watch", "50ms", "--format", "json"]);
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
    let mut child = command.spawn().expect("spawn distlock list --watch");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = tokio::time::timeout(TIMEOUT, lines.next_line()).await.expect("a listing in time").expect("read");
    assert!(first.is_some_and(|line| line.starts_with('{')));
    drop(lines);
    let status = tokio::time::timeout(TIMEOUT, child.wait()).await.expect("exit once stdout is closed").expect("wait");
    assert_eq!(status.code(), Some(0), "a closed stdout ends --watch quietly");
    held.release().await;
}

/// A store URL that keeps a fair queue of waiters: Redis with `?fair=true`, on a key
/// prefix of its own (a prefix's clients agree on the setting).
fn fair(url: &str) -> String {
    if url.starts_with("redis://") {
        format!("{}/?fair=true&prefix=distlock-list-{}", url.trim_end_matches('/'), uuid::Uuid::new_v4().simple())
    } else {
        url.to_owned()
    }
}

/// Group holds and waiting places, taken with the store's primitives so that the places
/// stay put while the CLI reads them.
struct Waiting {
    store: Arc<DynLockStore>,
    namespace: String,
    /// The single lock, held by the library.
    single: DistributedLock,
    /// Its queued waiter, when the store keeps a queue.
    queued: Option<Token>,
    /// The read holds of `rw`: (token, owner).
    readers: Vec<(Token, OwnerId)>,
    /// The waiting writer of `rw`.
    writer: Token,
}

impl Waiting {
    async fn take(url: &str) -> Self {
        let store = distlock::connect(url).await.expect("connect");
        let namespace = key("list-waiting");
        let single =
            LockManager::new(Arc::clone(&store)).lock(&format!("{namespace}:single"), TTL).await.expect("lock");
        let ttl = Ttl::new(TTL).unwrap();
        let queued = match store.queue() {
            Some(queue) => {
                let token = Token::generate();
                let attempt = QueuedAttempt { key: single.store_key(), token: &token, ttl, place: ttl };
                assert!(!queue.try_acquire_queued(attempt).await.expect("queue").is_acquired());
                Some(token)
            }
            None => None,
        };
        let groups = store.groups().expect("groups");
        let rw = LockKey::new(format!("{namespace}:rw")).unwrap().to_store_key();
        let mut readers = Vec::new();
        for instance in ["one", "two"] {
            let (token, owner) = (Token::generate(), OwnerId::new("app", instance).unwrap());
            let members = [StoreMember::new(rw.clone(), LockMode::Shared, None)];
            let granted = groups.try_acquire_group(GroupRequest::new(&members, &token, &owner, ttl, None, None));
            assert!(matches!(granted.await.expect("read"), GroupAcquire::Acquired { .. }));
            readers.push((token, owner));
        }
        let writer = Token::generate();
        let members = [StoreMember::new(rw, LockMode::Exclusive, None)];
        let owner = OwnerId::new("app", "three").unwrap();
        let blocked = groups.try_acquire_group(GroupRequest::new(&members, &writer, &owner, ttl, Some(ttl), None));
        assert!(matches!(blocked.await.expect("wait"), GroupAcquire::Blocked { .. }));
        Self { store, namespace, single, queued, readers, writer }
    }

    fn rw(&self) -> StoreKey {
        LockKey::new(format!("{}:rw", self.namespace)).unwrap().to_store_key()
    }

    async fn release(self) {
        let groups = self.store.groups().expect("groups");
        groups.withdraw_intents(&[self.rw()], &self.writer).await.expect("withdraw");
        for (token, _) in &self.readers {
            assert_eq!(groups.release_group(&[self.rw()], token).await.expect("release"), 1);
        }
        if let Some(token) = &self.queued {
            self.store.release(self.single.store_key(), token).await.expect("leave the queue");
        }
        assert!(self.single.release().await.expect("release"));
    }
}

async fn groups_and_waiting_places_are_listed_with_their_age(url: &str) {
    let url = &fair(url);
    let taken = Waiting::take(url).await;
    let ns = &taken.namespace;
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let out = list(url, &["--match", &format!("{ns}:*"), "--format", "json"]).await;
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let locks = listing["locks"].as_array().expect("locks");
    assert_eq!(listing["total"], 3, "{listing:#}");
    assert_eq!((locks[0]["key"].as_str(), locks[0]["kind"].as_str()), (Some(&*format!("{ns}:rw")), Some("group")));
    let mut owner_ids: Vec<&str> = locks[..2].iter().map(|row| row["owner_id"].as_str().expect("owner_id")).collect();
    owner_ids.sort_unstable();
    assert_eq!(owner_ids, ["app@one", "app@two"], "{listing:#}");
    assert!(locks[..2].iter().all(|row| row["mode"] == "shared" && row["ttl_left_ms"].as_u64() > Some(0)));
    assert_eq!((locks[2]["kind"].as_str(), locks[2]["owner_id"].as_str()), (Some("lock"), None), "{listing:#}");
    let waiting = listing["waiting"].as_array().expect("waiting");
    let expected = if taken.queued.is_some() { 2 } else { 1 };
    assert_eq!((waiting.len(), listing["total_waiting"].as_u64()), (expected, Some(expected as u64)), "{listing:#}");
    for place in waiting {
        let waited = place["waited_ms"].as_u64().expect("waited_ms");
        assert!((1_000..60_000).contains(&waited), "{place}");
        assert!(place["place_left_ms"].as_u64().is_some_and(|left| left > 0 && left <= 60_000), "{place}");
        assert_eq!(place["mode"], "exclusive");
        assert!(place.get("token").is_none(), "{place}");
    }
    let group_place = waiting.iter().find(|place| place["kind"] == "group").expect("the waiting writer");
    assert_eq!(group_place["key"].as_str(), Some(&*format!("{ns}:rw")));
    if let Some(queued) = &taken.queued {
        let queue_place = waiting.iter().find(|place| place["kind"] == "lock").expect("the queued waiter");
        assert_eq!(queue_place["key"].as_str(), Some(&*format!("{ns}:single")));
        assert!(!out.stdout.windows(36).any(|window| window == queued.as_str().as_bytes()), "a token in the JSON");
    }

    let out = list(url, &["--match", &format!("{ns}:*")]).await;
    let table = stdout(&out);
    assert!(table.contains("3 locks held") && table.contains(&format!("{expected} waiting")), "{table}");
    let header = table.lines().find(|line| line.starts_with("WAITING")).expect("a table of waiters");
    assert!(header.contains("WAITED") && header.contains("PLACE LEFT"), "{table}");
    let rw = format!("{ns}:rw");
    let writer = table
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|fields| fields.len() > 4 && fields[0] == rw && fields[1] == "group")
        .unwrap_or_else(|| panic!("no waiting writer:\n{table}"));
    assert!(writer[4].ends_with("ms") && writer[4] >= "1000ms", "waited {}:\n{table}", writer[4]);

    let out = output(distlock(Some(url), &["inspect", &format!("{ns}:rw"), "--format", "json"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let inspection: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(inspection["waiting_groups"], 1, "{inspection:#}");
    let places = inspection["places"].as_array().expect("places");
    assert_eq!(places.len(), 1, "{inspection:#}");
    assert_eq!((places[0]["kind"].as_str(), places[0]["mode"].as_str()), (Some("group"), Some("exclusive")));
    assert!(places[0]["waited_ms"].as_u64().is_some_and(|waited| waited >= 1_000), "{inspection:#}");
    let out = output(distlock(Some(url), &["inspect", &format!("{ns}:rw")])).await;
    let table = stdout(&out);
    assert!(table.contains(&format!("{ns}:rw: 2 holders, 1 waiting")) && table.contains("WAITED"), "{table}");
    taken.release().await;
}

all_stores!(
    table_shows_key_mode_owner_ttl_and_fence_sorted_by_key,
    json_has_every_field_and_no_token_unless_asked,
    watch_refreshes_until_interrupted,
    groups_and_waiting_places_are_listed_with_their_age,
);

/// Fencing on Redis: the listed fence is the holder's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fencing_mode_lists_fences() {
    let Some(url) = distlock_conformance::kit::redis_url("list::redis_fencing_mode_lists_fences") else { return };
    let url = format!("{url}?fencing=true&prefix=distlock-cli-list-fencing");
    let held = Held::take(&url, "list-fencing", &["f"]).await;
    let out = list(&url, &["--match", &held.pattern(), "--format", "json"]).await;
    let listing: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(listing["locks"][0]["fence"].as_u64(), held.locks[0].fence(), "{listing}");
    assert!(held.locks[0].fence().is_some());
    held.release().await;
}

#[tokio::test]
async fn memory_lists_nothing_and_says_why() {
    let out = output(distlock(Some("memory://"), &["list"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), "no locks held (match *)\n");
    assert!(stderr(&out).contains("memory://") && stderr(&out).contains("empty"), "{}", stderr(&out));
}

#[tokio::test]
async fn bad_patterns_intervals_and_missing_stores_are_usage_errors() {
    for (store, args) in [
        (Some("redis://127.0.0.1:1"), &["list", "--match", "a\\"][..]),
        (Some("redis://127.0.0.1:1"), &["list", "--match", ""]),
        (Some("redis://127.0.0.1:1"), &["list", "--watch", "0s"]),
        (Some("redis://127.0.0.1:1"), &["list", "--page-size", "0"]),
        (Some("redis://127.0.0.1:1"), &["list", "--format", "yaml"]),
        (None, &["list"]),
    ] {
        let out = output(distlock(store, args)).await;
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}: {}", stderr(&out));
    }
    let out = output(distlock(Some("redis://127.0.0.1:1"), &["list"])).await;
    assert_eq!(out.status.code(), Some(69), "{}", stderr(&out));
}
