//! `distlock elect`, `distlock leader` and `distlock schedule` across processes, on real
//! servers: a graceful hand-over, a killed leader replaced within its TTL, a paused leader
//! fenced out by term, observers that see every term in order, and scheduled firings that
//! run once each across five processes whose clocks disagree.

use std::time::{Duration, Instant};

use crate::common::*;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// The store URL with the settings an election needs: Redis fences only when asked, and
/// serves waiters in order and wakes them at a release only when asked (under a prefix
/// of the test's own, as every client of a prefix must use the same settings).
fn election_url(url: &str) -> String {
    if url.starts_with("redis") {
        let separator = if url.contains('?') { '&' } else { '?' };
        let prefix = uuid::Uuid::new_v4().simple();
        format!("{url}{separator}fencing=true&fair=true&notifications=true&prefix=elect-{prefix}")
    } else {
        url.to_owned()
    }
}

/// A candidate whose command prints its term, then waits for its stdin to close.
fn candidate(url: &str, name: &str, value: &str, extra: &[&str]) -> Running {
    let mut args = vec!["elect", name, "--value", value];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--", "sh", "-c", r#"echo "$DISTLOCK_TERM $DISTLOCK_VALUE"; read line || true"#]);
    Running::start(url, &args)
}

/// The term the candidate's command printed with its value.
async fn term_of(candidate: &mut Running, value: &str) -> u64 {
    let line = candidate.line().await;
    let (term, printed) = line.split_once(' ').unwrap_or_else(|| panic!("`{line}`"));
    assert_eq!(printed, value, "{line}");
    term.parse().unwrap_or_else(|_| panic!("DISTLOCK_TERM: `{line}`"))
}

/// `distlock leader NAME --format json`.
async fn leader(url: &str, name: &str) -> serde_json::Value {
    let out = output(distlock(Some(url), &["leader", name, "--format", "json"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("leader --format json")
}

/// Waits until `count` candidates wait in line for the election's lock.
async fn waiting(url: &str, name: &str, count: u64) {
    let key = format!("election:{name}");
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let out = output(distlock(Some(url), &["inspect", &key, "--json"])).await;
        let shown: serde_json::Value = serde_json::from_slice(&out.stdout).expect("inspect --json");
        if shown["waiting"] == count {
            return;
        }
        assert!(Instant::now() < deadline, "{count} candidates never waited: {shown}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn signal(running: &Running, signal: Signal) {
    kill(Pid::from_raw(running.pid()), signal).expect("signal distlock");
}

/// The leader's command gets the term; `leader` shows it; a second candidate waits; on
/// SIGTERM the leader's command is stopped, the lead resigned and the second candidate
/// leads at once with a greater term; when it ends, nobody leads.
async fn sigterm_hands_the_lead_over(url: &str) {
    let url = &election_url(url);
    let name = key("handover");
    let mut first = candidate(url, &name, "a:1", &[]);
    let first_term = term_of(&mut first, "a:1").await;
    let shown = leader(url, &name).await;
    assert_eq!((shown["term"].as_u64(), shown["value"].as_str()), (Some(first_term), Some("a:1")), "{shown}");

    let mut second = candidate(url, &name, "b:1", &[]);
    waiting(url, &name, 1).await;
    let resigned_at = Instant::now();
    signal(&first, Signal::SIGTERM);
    let second_term = term_of(&mut second, "b:1").await;
    let handover = resigned_at.elapsed();
    assert!(second_term > first_term, "term {second_term} after {first_term}");
    assert!(handover < Duration::from_secs(5), "the hand-over took {handover:?}, as long as a lease");
    let (status, errors) = first.finish().await;
    assert_eq!(status, 143, "the leader's command was stopped by SIGTERM: {errors}");
    let shown = leader(url, &name).await;
    assert_eq!((shown["term"].as_u64(), shown["value"].as_str()), (Some(second_term), Some("b:1")), "{shown}");

    second.close_stdin();
    let (status, errors) = second.finish().await;
    assert_eq!(status, 0, "{errors}");
    assert_eq!(leader(url, &name).await["state"], "none");
}

/// After `kill -9` of the leading distlock, its command dies with it and the next
/// candidate leads within the TTL plus a retry, not at once (the lease was not released).
async fn a_killed_leader_is_replaced_within_its_ttl(url: &str) {
    let url = &election_url(url);
    let name = key("killed");
    let ttl = ["--ttl", "2s", "--kill-grace", "200ms"];
    let mut first = candidate(url, &name, "a", &ttl);
    let first_term = term_of(&mut first, "a").await;
    let mut second = candidate(url, &name, "b", &ttl);
    waiting(url, &name, 1).await;
    let killed_at = Instant::now();
    signal(&first, Signal::SIGKILL);
    let second_term = term_of(&mut second, "b").await;
    let failover = killed_at.elapsed();
    assert!(second_term > first_term);
    // The store rounds leases up to whole seconds on etcd; a retry is 50 ms.
    assert!(failover < Duration::from_secs(5), "the fail-over took {failover:?}");
    second.close_stdin();
    assert_eq!(second.finish().await.0, 0);
}

/// A leader whose distlock is stopped (SIGSTOP) past its lease is fenced out: its command
/// is killed before the next leader's starts, so a resource that keeps the highest term
/// it has seen never sees an older term after a newer one; resumed, it exits 76.
async fn a_paused_leader_is_fenced_out_by_term(url: &str) {
    let url = &election_url(url);
    let name = key("paused");
    let dir = TempDir::new("paused");
    let writes = dir.path("writes");
    let writer = format!(r#"while :; do echo "$DISTLOCK_TERM" >> {writes}; sleep 0.02; done"#);
    let args = |value: &'static str| {
        vec!["elect", &name, "--value", value, "--ttl", "2s", "--kill-grace", "200ms", "--", "sh", "-c", &writer]
            .into_iter()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let first_args = args("a");
    let first = Running::start(url, &first_args.iter().map(String::as_str).collect::<Vec<_>>());
    let deadline = Instant::now() + TIMEOUT;
    while std::fs::read_to_string(&writes).unwrap_or_default().is_empty() {
        assert!(Instant::now() < deadline, "the first leader never wrote");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let second_args = args("b");
    let second = Running::start(url, &second_args.iter().map(String::as_str).collect::<Vec<_>>());
    waiting(url, &name, 1).await;
    signal(&first, Signal::SIGSTOP);
    // The second leader writes once the paused lease expired.
    let first_term: u64 = std::fs::read_to_string(&writes).unwrap().lines().next().unwrap().parse().unwrap();
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let terms: Vec<u64> =
            std::fs::read_to_string(&writes).unwrap().lines().filter_map(|l| l.parse().ok()).collect();
        if terms.iter().filter(|term| **term > first_term).count() >= 5 {
            break;
        }
        assert!(Instant::now() < deadline, "the second candidate never led");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    signal(&first, Signal::SIGCONT);
    let (status, errors) = first.finish().await;
    assert_eq!(status, LEASE_LOST, "{errors}");
    signal(&second, Signal::SIGTERM);
    let _ = second.finish().await;
    let terms: Vec<u64> = std::fs::read_to_string(&writes).unwrap().lines().filter_map(|l| l.parse().ok()).collect();
    assert!(terms.windows(2).all(|pair| pair[0] <= pair[1]), "an older term wrote after a newer one: {terms:?}");
    assert!(terms.first() < terms.last(), "{terms:?}");
}

/// The next line `leader --watch` printed; its stderr when it ended instead.
async fn watched(watch: &mut Running) -> String {
    match tokio::time::timeout(TIMEOUT, watch.lines.next_line()).await {
        Ok(Ok(Some(line))) => line,
        other => {
            let errors = watch.stderr_line_with("").await;
            panic!("`leader --watch` printed nothing more ({other:?}): {errors}")
        }
    }
}

/// `leader --watch` prints nobody, then each leader in term order, then nobody.
async fn leader_watch_prints_every_term_in_order(url: &str) {
    let url = &election_url(url);
    let name = key("watch");
    let mut watch = Running::start(url, &["leader", &name, "--watch"]);
    assert_eq!(watched(&mut watch).await, format!("{name}: no leader"));
    let mut first = candidate(url, &name, "a", &[]);
    let first_term = term_of(&mut first, "a").await;
    let line = watched(&mut watch).await;
    assert!(line.starts_with(&format!("{name}: term {first_term}, value a, ")), "{line}");
    let mut second = candidate(url, &name, "b", &[]);
    waiting(url, &name, 1).await;
    first.close_stdin();
    let second_term = term_of(&mut second, "b").await;
    let line = watched(&mut watch).await;
    assert!(line.starts_with(&format!("{name}: term {second_term}, value b, ")), "{line}");
    second.close_stdin();
    assert_eq!(watched(&mut watch).await, format!("{name}: no leader"));
    assert_eq!(first.finish().await.0, 0);
    assert_eq!(second.finish().await.0, 0);
    signal(&watch, Signal::SIGINT);
    assert_eq!(watch.finish().await.0, 0);
}

/// Candidates in three processes lead in the order they started waiting.
async fn candidates_lead_in_the_order_they_came(url: &str) {
    let url = &election_url(url);
    let name = key("order");
    let mut leader = candidate(url, &name, "c0", &[]);
    let mut term = term_of(&mut leader, "c0").await;
    let mut waiting_candidates = Vec::new();
    for n in 1..=3 {
        waiting_candidates.push(candidate(url, &name, &format!("c{n}"), &[]));
        waiting(url, &name, n).await;
    }
    for (n, mut next) in waiting_candidates.into_iter().enumerate() {
        leader.close_stdin();
        assert_eq!(leader.finish().await.0, 0);
        let next_term = term_of(&mut next, &format!("c{}", n + 1)).await;
        assert!(next_term > term, "term {next_term} after {term}");
        (leader, term) = (next, next_term);
    }
    leader.close_stdin();
    assert_eq!(leader.finish().await.0, 0);
}

/// On a store that does not fence (Redis by default), `elect` is a usage error that says
/// how to turn fencing on, and nothing runs.
#[tokio::test]
async fn elect_without_fencing_is_refused() {
    let Some(url) = distlock_conformance::kit::redis_url("election::elect_without_fencing_is_refused") else { return };
    let out = output(distlock(Some(&url), &["elect", &key("unfenced"), "--", "sh", "-c", "echo ran"])).await;
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
    assert!(stderr(&out).contains("fencing=true"), "{}", stderr(&out));
    assert_eq!(stdout(&out), "");
}

/// Every case on Redis, PostgreSQL, MySQL/MariaDB and etcd (private servers) and on a
/// fresh SQLite file.
macro_rules! election_cases {
    ($($case:ident),* $(,)?) => {
        all_stores!($($case),*);
        store_tests!(mysql, mysql_url, [$($case),*]);
        store_tests!(etcd, etcd_url, [$($case),*]);
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let dir = super::TempDir::new(stringify!($case));
                    super::$case(&format!("sqlite://{}", dir.path("locks.db"))).await;
                }
            )*
        }
    };
}

election_cases!(
    sigterm_hands_the_lead_over,
    a_killed_leader_is_replaced_within_its_ttl,
    a_paused_leader_is_fenced_out_by_term,
    leader_watch_prints_every_term_in_order,
    candidates_lead_in_the_order_they_came,
);
