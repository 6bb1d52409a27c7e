//! Lock groups from the shell — `run --read/--write/--permits`, `inspect`, `release
//! --owner`, `permits` — with the real `distlock` binary against real Redis and PostgreSQL
//! servers (`DISTLOCK_REDIS_URL`, `DISTLOCK_POSTGRES_URL`; `DISTLOCK_REQUIRE_SERVICES=1`
//! turns a missing server into a failure).
//!
//! Holders that must overlap say so through their stdout (`in`) and stay inside until
//! the test closes their stdin: no sleep stands in for synchronisation.

use std::time::Duration;

use crate::common::*;
use distlock::{GroupLock, GroupMember, LockGroup, LockManager, LockOptions, OwnerId};
use sha2::{Digest, Sha256};

/// The command prints what it holds (one line each: key, names joined by `,`, token,
/// fence, owner), then `in`, and stays until its stdin closes.
const PRINT_AND_HOLD: &str = r#"printf '%s\n' "$DISTLOCK_KEY" "$(printf '%s' "$DISTLOCK_NAMES" | tr '\n' ',')" "$DISTLOCK_TOKEN" "$DISTLOCK_FENCE" "$DISTLOCK_OWNER"; echo in; read line || true"#;

/// The command says `in` and stays until its stdin closes.
const HOLD: &str = "echo in; read line || true";

fn group_fenced(url: &str) -> bool {
    url.starts_with("postgres")
}

/// `distlock run ARGS… -- sh -c HOLD` in the background, once it is inside.
async fn holder(url: &str, args: &[&str]) -> Running {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "sh", "-c", HOLD]);
    let mut running = Running::start(url, &all);
    let first = tokio::time::timeout(TIMEOUT, running.lines.next_line()).await;
    match first.expect("the command did not start in time").expect("read its output") {
        Some(line) => assert_eq!(line, "in", "{args:?}"),
        None => {
            let (status, stderr) = running.finish().await;
            panic!("{args:?} did not run its command (status {status}): {stderr}");
        }
    }
    running
}

/// Ends a [`holder`]: closes its stdin; its status must be 0.
async fn leave(holder: Running) {
    let mut holder = holder;
    holder.close_stdin();
    let (status, stderr) = holder.finish().await;
    assert_eq!(status, 0, "{stderr}");
}

/// `distlock run --no-wait ARGS… -- echo ran`: the status, and whether it ran.
async fn try_run(url: &str, args: &[&str]) -> (i32, bool, String) {
    let mut all = vec!["run", "--no-wait"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "echo", "ran"]);
    let out = output(distlock(Some(url), &all)).await;
    (out.status.code().expect("exited"), stdout(&out) == "ran\n", stderr(&out))
}

async fn inspect_json(url: &str, key: &str, flags: &[&str]) -> serde_json::Value {
    let mut args = vec!["inspect", key, "--format", "json"];
    args.extend_from_slice(flags);
    let out = output(distlock(Some(url), &args)).await;
    assert_eq!(out.status.code(), Some(0), "{}", crate::common::stderr(&out));
    serde_json::from_slice(&out.stdout).expect("inspect --format json prints JSON")
}

/// The group holders `inspect` shows for `key`: (mode, owner id).
async fn group_holders(url: &str, key: &str) -> Vec<(String, String)> {
    let inspection = inspect_json(url, key, &[]).await;
    let holders = inspection["holders"].as_array().expect("holders").iter();
    holders
        .filter(|holder| holder["kind"] == "group")
        .map(|holder| {
            let field = |name: &str| holder[name].as_str().expect("a string").to_owned();
            (field("mode"), field("owner_id"))
        })
        .collect()
}

/// `list`'s owner: the first 8 hex digits of the token's SHA-256.
fn fingerprint(token: &str) -> String {
    Sha256::digest(token.as_bytes()).iter().take(4).map(|byte| format!("{byte:02x}")).collect()
}

async fn manager(url: &str, owner: &str) -> LockManager {
    let store = distlock::connect(url).await.expect("connect");
    LockManager::new(store).with_owner(OwnerId::parse(owner).expect("owner id"))
}

async fn two_readers_run_at_once(url: &str) {
    let name = key("two-readers");
    let first = holder(url, &["--read", &name]).await;
    // The first is still inside (its stdin is open): the second gets in beside it.
    let second = holder(url, &["--read", &name, "--wait", "20s"]).await;
    assert_eq!(group_holders(url, &name).await.len(), 2, "two shared holders");
    leave(first).await;
    leave(second).await;
    assert_eq!(inspect_json(url, &name, &[]).await["state"], "free", "both released");
}

async fn a_writer_waits_for_readers_and_holds_back_new_ones(url: &str) {
    let name = key("writer-waits");
    let reader = holder(url, &["--read", &name]).await;
    let (status, ran, stderr) = try_run(url, &["--write", &name]).await;
    assert_eq!((status, ran), (NOT_ACQUIRED, false), "{stderr}");
    assert!(stderr.contains("not acquired") && stderr.contains(&name), "{stderr}");

    let mut writer = distlock(
        Some(url),
        &["run", "--write", &name, "--retry", "20ms", "--", "sh", "-c", "echo ran; read line || true"],
    );
    writer.env("DISTLOCK_LOG", "info");
    let mut writer = Running::spawn(writer);
    writer.stderr_line_with("waiting for it without a deadline").await;
    // Writer preference: while the writer waits, a new reader waits behind it.
    let (status, ran, stderr) = try_run(url, &["--read", &name]).await;
    assert_eq!((status, ran), (NOT_ACQUIRED, false), "a new reader gets in ahead of a waiting writer: {stderr}");
    assert!(writer.child.try_wait().expect("try_wait").is_none(), "the writer still waits");

    leave(reader).await;
    assert_eq!(writer.line().await, "ran", "the writer ran once the reader left");
    let holders = group_holders(url, &name).await;
    assert!(holders.len() == 1 && holders[0].0 == "exclusive", "{holders:?}");
    let (status, ran, stderr) = try_run(url, &["--read", &name, "-E", "3"]).await;
    assert_eq!((status, ran), (3, false), "no reader beside the writer (-E): {stderr}");
    leave(writer).await;
    let (status, ran, stderr) = try_run(url, &["--read", &name]).await;
    assert_eq!((status, ran), (0, true), "{stderr}");
}

async fn a_group_of_read_and_write_names_is_all_or_nothing(url: &str) {
    let (a, b, c) = (key("group-a"), key("group-b"), key("group-c"));
    let args = ["run", "--read", &a, "--write", &b, "--owner", "cli-test@group", "--", "sh", "-c", PRINT_AND_HOLD];
    let mut group = Running::start(url, &args);
    assert_eq!(group.line().await, a, "DISTLOCK_KEY is the first name");
    assert_eq!(group.line().await, format!("{a},{b}"), "DISTLOCK_NAMES: one name a line, in order");
    let token = group.line().await;
    assert!(distlock::Token::parse(&token).is_ok(), "DISTLOCK_TOKEN: {token}");
    let fence = group.line().await;
    if group_fenced(url) {
        assert!(fence.parse::<u64>().is_ok_and(|fence| fence > 0), "DISTLOCK_FENCE is the stamp: {fence:?}");
    } else {
        assert_eq!(fence, "", "no fencing on the default Redis store");
    }
    assert_eq!(group.line().await, "cli-test@group", "DISTLOCK_OWNER");
    assert_eq!(group.line().await, "in");

    // Another reader of `a` shares it; `b` is taken exclusively.
    assert_eq!(try_run(url, &["--read", &a]).await.0, 0);
    for args in [&["--write", &a][..], &["--read", &b], &["--write", &b]] {
        let (status, ran, stderr) = try_run(url, args).await;
        assert_eq!((status, ran), (NOT_ACQUIRED, false), "{args:?}: {stderr}");
    }
    // All or nothing: `c` is free, but not taken without `b`.
    let (status, _, stderr) = try_run(url, &["--write", &c, "--read", &b]).await;
    assert_eq!(status, NOT_ACQUIRED, "{stderr}");
    assert!(stderr.contains("lock group") && stderr.contains(&c) && stderr.contains(&b), "{stderr}");
    assert_eq!(inspect_json(url, &c, &[]).await["state"], "free", "nothing of a refused group is held");
    // Group names live apart from plain locks.
    assert_eq!(try_run(url, &["--key", &b]).await.0, 0, "a plain lock of the same name is another lock");

    group.close_stdin();
    let (status, stderr) = group.finish().await;
    assert_eq!(status, 0, "{stderr}");
    for name in [&a, &b] {
        assert_eq!(inspect_json(url, name, &[]).await["state"], "free", "released after the command");
    }
}

async fn a_semaphore_of_one_permit_excludes_a_second(url: &str) {
    let pool = key("pool");
    let slot = holder(url, &["--read", &pool, "--permits", "1"]).await;
    // The first run recorded the semaphore's size with the name.
    let out = output(distlock(Some(url), &["permits", &pool, "--format", "json"])).await;
    let recorded: serde_json::Value = serde_json::from_slice(&out.stdout).expect("permits --format json");
    assert_eq!(recorded["shared"], 1, "{recorded}");
    let (status, ran, stderr) = try_run(url, &["--read", &pool, "--permits", "1"]).await;
    assert_eq!((status, ran), (NOT_ACQUIRED, false), "{stderr}");
    // A run that disagrees with the recorded size is refused, whether the slot is free or not.
    let (status, ran, stderr) = try_run(url, &["--read", &pool, "--permits", "2"]).await;
    assert_eq!((status, ran), (USAGE, false), "{stderr}");
    assert!(stderr.contains("1 recorded permits") && stderr.contains("--permits 2"), "{stderr}");
    // Without --permits, the recorded size applies.
    let (status, ran, stderr) = try_run(url, &["--read", &pool]).await;
    assert_eq!((status, ran), (NOT_ACQUIRED, false), "recorded 1 permit: {stderr}");
    leave(slot).await;
    assert_eq!(try_run(url, &["--read", &pool, "--permits", "1"]).await.0, 0, "the slot is free again");
    let out = output(distlock(Some(url), &["permits", &pool, "--clear-shared"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", crate::common::stderr(&out));
}

async fn inspect_shows_the_plain_lock_and_every_group_holder(url: &str) {
    let name = key("inspect-all");
    assert_eq!(
        inspect_json(url, &name, &[]).await,
        serde_json::json!({ "store": if url.starts_with("redis") { "redis" } else { "postgres" }, "key": name, "state": "free", "holders": [], "waiting": 0, "waiting_groups": 0, "places": [] })
    );
    let out = output(distlock(Some(url), &["inspect", &name])).await;
    assert_eq!(stdout(&out), format!("{name}: free\n"));

    let ttl = Duration::from_secs(60);
    let one = manager(url, "inspect@one").await;
    let two = manager(url, "inspect@two").await;
    let plain = one.lock(&name, ttl).await.expect("plain lock");
    let readers: Vec<GroupLock> =
        vec![one.lock_read(&name, ttl).await.expect("read one"), two.lock_read(&name, ttl).await.expect("read two")];
    let tokens = [plain.token().as_str(), readers[0].token().as_str(), readers[1].token().as_str()];

    let inspection = inspect_json(url, &name, &[]).await;
    assert_eq!(inspection["state"], "held", "{inspection}");
    let holders = inspection["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 3, "{inspection}");
    let expected = [
        ("lock", "exclusive", serde_json::Value::Null, plain.fence()),
        ("group", "shared", "inspect@one".into(), readers[0].stamp()),
        ("group", "shared", "inspect@two".into(), readers[1].stamp()),
    ];
    for ((holder, (kind, mode, owner_id, fence)), token) in holders.iter().zip(expected).zip(tokens) {
        assert_eq!(holder["kind"], kind, "{inspection}");
        assert_eq!(holder["mode"], mode, "{inspection}");
        assert_eq!(holder["owner_id"], owner_id, "{inspection}");
        assert_eq!(holder["owner"], fingerprint(token), "the owner is list's fingerprint: {inspection}");
        assert_eq!(holder["fence"], serde_json::json!(fence), "{inspection}");
        let left = holder["ttl_left_ms"].as_u64().expect("time left");
        assert!(left > 0 && left <= 60_000, "{inspection}");
        assert!(holder.get("token").is_none(), "no token without --show-tokens: {inspection}");
    }
    let text = inspection.to_string();
    for token in tokens {
        assert!(!text.contains(&token[..8]), "a token's prefix in the JSON: {text}");
    }
    let shown = inspect_json(url, &name, &["--show-tokens"]).await;
    for (holder, token) in shown["holders"].as_array().expect("holders").iter().zip(tokens) {
        assert_eq!(holder["token"], token, "{shown}");
    }

    let out = output(distlock(Some(url), &["inspect", &name])).await;
    assert_eq!(out.status.code(), Some(0), "{}", crate::common::stderr(&out));
    let table = stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 5, "header, 3 holders, summary:\n{table}");
    for column in ["KIND", "MODE", "OWNER", "TTL LEFT", "FENCE", "APP@INSTANCE"] {
        assert!(lines[0].contains(column), "{table}");
    }
    for (line, (kind, mode, owner_id, token)) in lines[1..4].iter().zip([
        ("lock", "exclusive", "-", tokens[0]),
        ("group", "shared", "inspect@one", tokens[1]),
        ("group", "shared", "inspect@two", tokens[2]),
    ]) {
        let fields: Vec<&str> = line.split_whitespace().collect();
        assert_eq!((fields[0], fields[1], fields[2]), (kind, mode, fingerprint(token).as_str()), "{table}");
        assert_eq!(fields[5], owner_id, "{table}");
        assert!(!line.contains(&token[..8]), "a token's prefix in the table:\n{table}");
    }
    assert_eq!(lines[4], format!("{name}: 3 holders"));
    let out = output(distlock(Some(url), &["inspect", &name, "--show-tokens"])).await;
    assert!(tokens.iter().all(|token| stdout(&out).contains(token)), "{}", stdout(&out));

    // A writer waiting behind the readers has a place on the name.
    let writer = tokio::spawn({
        let (two, name) = (two.clone(), name.clone());
        async move {
            let group = LockGroup::single(GroupMember::exclusive(&name).unwrap()).unwrap();
            two.lock_group_opts(&group, ttl, &LockOptions::new().wait(Duration::from_secs(60))).await
        }
    });
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while inspect_json(url, &name, &[]).await["waiting_groups"] != 1 {
        assert!(tokio::time::Instant::now() < deadline, "the waiting writer never showed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The table says so too, and lists the writer's place (polled: on a loaded machine a
    // waiter's place may lapse between two of its attempts until it takes it again).
    loop {
        let table = stdout(&output(distlock(Some(url), &["inspect", &name])).await);
        let summary = format!("{name}: 3 holders, 1 waiting");
        let place = table.lines().any(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            fields.len() == 6 && fields[0] == name && fields[1..3] == ["group", "exclusive"]
        });
        if table.lines().any(|line| line == summary) && place && table.lines().last() == Some("1 waiting") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{table}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    assert!(plain.release().await.expect("release"));
    for reader in readers {
        reader.release().await.expect("release");
    }
    let writer = tokio::time::timeout(Duration::from_secs(20), writer).await.expect("the writer's turn").unwrap();
    writer.expect("the writer got the name").release().await.expect("release");
    assert_eq!(inspect_json(url, &name, &[]).await["state"], "free");
}

async fn release_owner_frees_only_that_owners_holds(url: &str) {
    let (name, other) = (key("release-owner"), key("release-owner-other"));
    let owner = format!("cli-test@{}", uuid::Uuid::new_v4().simple());
    let mut doomed = Running::start(
        url,
        &["run", "--read", &name, "--owner", &owner, "--ttl", "3s", "--kill-grace", "300ms", "--", "sh", "-c", HOLD],
    );
    assert_eq!(doomed.line().await, "in");
    let survivor = holder(url, &["--read", &name, "--owner", "cli-test@survivor"]).await;
    let library = manager(url, &owner).await;
    let leaked = library.lock_write(&other, Duration::from_secs(60)).await.expect("write lock").into_stamp();

    let out = output(distlock(Some(url), &["release", "--owner", &owner])).await;
    assert_eq!(out.status.code(), Some(0), "{}", crate::common::stderr(&out));
    assert_eq!(stdout(&out), format!("{owner}: 2 group holds released\n"));
    assert_eq!(group_holders(url, &name).await, [("shared".to_owned(), "cli-test@survivor".to_owned())]);
    assert_eq!(inspect_json(url, &other, &[]).await["state"], "free");
    assert!(library.release_stamp(&leaked).await.is_err(), "the leaked hold was freed");

    // The run whose hold was freed learns it at its next renewal and stops its command.
    let lost = doomed.stderr_line_with("stopping the command").await;
    assert!(lost.contains("lease of lock group") && lost.contains(&name), "{lost}");
    let (status, stderr) = doomed.finish().await;
    assert_eq!(status, LEASE_LOST, "{stderr}");
    leave(survivor).await;

    let out = output(distlock(Some(url), &["release", "--owner", &owner])).await;
    assert_eq!(out.status.code(), Some(0), "{}", crate::common::stderr(&out));
    assert_eq!(stdout(&out), format!("{owner}: 0 group holds released\n"));
}

async fn permits_are_set_shown_and_cleared(url: &str) {
    let name = key("permits");
    let permits = |args: &'static [&'static str]| {
        let name = name.clone();
        async move {
            let mut all = vec!["permits", name.as_str(), "--format", "json"];
            all.extend_from_slice(args);
            let out = output(distlock(Some(url), &all)).await;
            assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
            let recorded: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
            assert_eq!(recorded["key"], name.as_str());
            (recorded["shared"].as_u64(), recorded["exclusive"].as_u64())
        }
    };
    assert_eq!(permits(&[]).await, (None, None));
    assert_eq!(permits(&["--shared", "3"]).await, (Some(3), None));
    assert_eq!(permits(&["--exclusive", "2"]).await, (Some(3), Some(2)));
    assert_eq!(permits(&[]).await, (Some(3), Some(2)));
    assert_eq!(permits(&["--clear-shared", "--exclusive", "4"]).await, (None, Some(4)));
    assert_eq!(permits(&["--clear-exclusive"]).await, (None, None));

    let out = output(distlock(Some(url), &["permits", &name, "--shared", "7"])).await;
    let table = stdout(&out);
    assert!(table.starts_with("MODE") && table.contains("shared     7"), "{table}");
    assert!(table.contains("exclusive  -  (none recorded"), "{table}");
    // Two exclusive permits: two writers at once.
    assert_eq!(permits(&["--exclusive", "2"]).await, (Some(7), Some(2)));
    let writer = holder(url, &["--write", &name]).await;
    let (status, ran, stderr) = try_run(url, &["--write", &name]).await;
    assert_eq!((status, ran), (0, true), "a second writer with 2 permits: {stderr}");
    leave(writer).await;
    assert_eq!(permits(&["--clear-shared", "--clear-exclusive"]).await, (None, None));
}

async fn a_group_lease_is_renewed_while_the_command_runs(url: &str) {
    let (a, b) = (key("renewed-a"), key("renewed-b"));
    // Two and a half TTLs of work: without renewal the group would expire under the
    // command (2 s leases leave a loaded machine's renewals time to arrive).
    let args = ["run", "--write", &a, "--read", &b, "--ttl", "2s", "--kill-grace", "200ms", "--", "sleep", "5"];
    let out = output(distlock(Some(url), &args)).await;
    assert_eq!(out.status.code(), Some(0), "{}", crate::common::stderr(&out));
    assert_eq!(inspect_json(url, &a, &[]).await["state"], "free");
}

async fn kill_9_of_distlock_kills_a_groups_command(url: &str) {
    let name = key("group-kill-9");
    let mut holder =
        Running::start(url, &["run", "--write", &name, "--ttl", "30s", "--", "sh", "-c", "echo $$; exec sleep 300"]);
    let command: i32 = holder.line().await.parse().expect("pid");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(holder.pid()), nix::sys::signal::Signal::SIGKILL)
        .expect("kill -9 distlock");
    let took = gone_within(&[command], Duration::from_secs(10)).await;
    assert!(took.is_ok(), "the command still runs 10 s after kill -9 of distlock");
    assert_eq!(group_holders(url, &name).await.len(), 1, "killed while the lease is still held");
}

async fn sigterm_to_distlock_reaches_a_groups_command_and_the_group_is_released(url: &str) {
    let name = key("group-sigterm");
    let script = r#"trap 'echo got-term; exit 3' TERM; sleep 60 & echo in; wait"#;
    let mut holder = Running::start(url, &["run", "--read", &name, "--", "sh", "-c", script]);
    assert_eq!(holder.line().await, "in");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(holder.pid()), nix::sys::signal::Signal::SIGTERM)
        .expect("signal distlock");
    assert_eq!(holder.line().await, "got-term");
    let (status, stderr) = holder.finish().await;
    assert_eq!(status, 3, "the command's own status: {stderr}");
    assert_eq!(inspect_json(url, &name, &[]).await["state"], "free");
}

/// Fencing on Redis: the command's DISTLOCK_FENCE is the group's stamp, also shown by
/// `inspect`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_fencing_mode_gives_the_group_stamp_as_fence() {
    let Some(url) = distlock_conformance::kit::redis_url("groups::redis_fencing_mode_gives_the_group_stamp_as_fence")
    else {
        return;
    };
    let url = format!("{url}?fencing=true&prefix=distlock-cli-groups-fencing");
    let (a, b) = (key("fenced-a"), key("fenced-b"));
    let mut group = Running::start(&url, &["run", "--write", &a, "--read", &b, "--", "sh", "-c", PRINT_AND_HOLD]);
    for _ in 0..3 {
        group.line().await;
    }
    let fence: u64 = group.line().await.parse().expect("DISTLOCK_FENCE is a number");
    for name in [&a, &b] {
        let inspection = inspect_json(&url, name, &[]).await;
        assert_eq!(inspection["holders"][0]["fence"], fence, "{inspection}");
    }
    group.close_stdin();
    let (status, stderr) = group.finish().await;
    assert_eq!(status, 0, "{stderr}");
    let out =
        output(distlock(Some(&url), &["run", "--write", &a, "--", "sh", "-c", r#"echo "$DISTLOCK_FENCE""#])).await;
    let next: u64 = stdout(&out).trim().parse().expect("a fence");
    assert!(next > fence, "stamps increase: {next} after {fence}");
}

all_stores!(
    two_readers_run_at_once,
    a_writer_waits_for_readers_and_holds_back_new_ones,
    a_group_of_read_and_write_names_is_all_or_nothing,
    a_semaphore_of_one_permit_excludes_a_second,
    inspect_shows_the_plain_lock_and_every_group_holder,
    release_owner_frees_only_that_owners_holds,
    permits_are_set_shown_and_cleared,
    a_group_lease_is_renewed_while_the_command_runs,
    kill_9_of_distlock_kills_a_groups_command,
    sigterm_to_distlock_reaches_a_groups_command_and_the_group_is_released,
);
