//! `kill -9` of a process holding a read lock frees only its permit, after its TTL, while
//! another reader keeps renewing its own; on Redis and PostgreSQL, through `connect(url)`.
#![cfg(all(feature = "redis", feature = "postgres"))]

use std::time::{Duration, Instant};

use distlock::{GroupMember, LockGroup, LockManager, LockOptions};
use distlock_conformance::kit::child::{self, ChildProcess};

const CHILD_TTL: Duration = Duration::from_secs(2);

fn read(key: &str) -> LockGroup {
    LockGroup::single(GroupMember::shared(key).unwrap()).unwrap()
}

/// A store URL with a namespace of its own (a Redis key prefix, a PostgreSQL schema).
fn private_url(base: &str, name: &str) -> String {
    let separator = if base.contains('?') { '&' } else { '?' };
    if base.starts_with("redis") {
        format!("{base}{separator}prefix={name}:")
    } else {
        format!("{base}{separator}schema={name}&create=true")
    }
}

/// The child: takes a renewing read lock, announces its token, waits to be killed.
#[tokio::test(flavor = "multi_thread")]
async fn child_entry_holds_a_read_lock() {
    let Some(url) = child::role_arg("reader") else { return };
    let locks = LockManager::new(distlock::connect(&url).await.unwrap());
    let options = LockOptions::new().auto_renew();
    let held =
        locks.try_lock_group_opts(&read("report"), CHILD_TTL, &options).await.unwrap().expect("a free read lock");
    child::announce(&format!("READING {}", held.token().as_str()));
    child::park().await;
}

fn killed_reader_frees_only_its_permit(base: &str) {
    let name = format!("kill9_{}", distlock::Token::generate().as_str().replace('-', "")[..12].to_owned());
    let url = private_url(base, &name);
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    let locks = runtime.block_on(async { LockManager::new(distlock::connect(&url).await.unwrap()) });
    // The parent's own reader, renewed all along.
    let options = LockOptions::new().auto_renew();
    let mine = runtime
        .block_on(locks.try_lock_group_opts(&read("report"), Duration::from_millis(900), &options))
        .unwrap()
        .unwrap();

    let mut reader = ChildProcess::spawn("group_kill9::child_entry_holds_a_read_lock", "reader", &url);
    let line = reader.wait_for_line("READING ", Duration::from_secs(60));
    let child_token = distlock::Token::parse(line.trim_start_matches("READING ")).unwrap();
    runtime.block_on(async {
        let holders = locks.holders("report").await.unwrap();
        assert_eq!(holders.len(), 2, "{holders:?}");
    });
    reader.kill9();
    let killed_at = Instant::now();

    runtime.block_on(async {
        // The dead reader's hold lasts its TTL (no one renews it), then goes; ours stays.
        let deadline = killed_at + CHILD_TTL + Duration::from_secs(10);
        loop {
            let holders = locks.holders("report").await.unwrap();
            if !holders.iter().any(|holder| holder.token == child_token) {
                assert_eq!(holders.len(), 1, "{holders:?}");
                assert_eq!(&holders[0].token, mine.token(), "the live reader's hold went too");
                break;
            }
            assert!(Instant::now() < deadline, "the killed reader's hold never expired");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(!mine.is_lost(), "the live reader lost its lease");
        // A writer waits for the live reader only.
        let write = LockGroup::single(GroupMember::exclusive("report").unwrap()).unwrap();
        assert!(locks.try_lock_group(&write, Duration::from_secs(5)).await.unwrap().is_none());
        mine.release().await.unwrap();
        let writer =
            locks.try_lock_group(&write, Duration::from_secs(5)).await.unwrap().expect("free after the last reader");
        writer.release().await.unwrap();
    });
}

#[test]
fn redis_killed_reader_frees_only_its_permit() {
    let Some(url) = distlock_conformance::kit::redis_url("kill -9 of a reader on redis") else { return };
    killed_reader_frees_only_its_permit(&url);
}

#[test]
fn postgres_killed_reader_frees_only_its_permit() {
    let Some(url) = distlock_conformance::kit::postgres_url("kill -9 of a reader on postgres") else { return };
    killed_reader_frees_only_its_permit(&url);
}
