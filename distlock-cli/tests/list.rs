//! `distlock list` against real Redis and PostgreSQL servers, and on memory://.

#[macro_use]
mod common;

use std::process::Stdio;
use std::time::Duration;

use common::*;
use distlock::{DistributedLock, LockManager};
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

all_stores!(
    table_shows_key_mode_owner_ttl_and_fence_sorted_by_key,
    json_has_every_field_and_no_token_unless_asked,
    watch_refreshes_until_interrupted,
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
