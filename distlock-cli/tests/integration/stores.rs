//! The real `distlock` binary against real Redis and PostgreSQL servers
//! (`DISTLOCK_REDIS_URL`, `DISTLOCK_POSTGRES_URL`; `DISTLOCK_REQUIRE_SERVICES=1` turns a
//! missing server into a failure).

use std::time::{Duration, Instant};

use crate::common::*;

/// The child's view of the lock, printed by [`PRINT_LOCK`].
const PRINT_LOCK: &str = r#"printf '%s\n%s\n%s\n' "$DISTLOCK_KEY" "$DISTLOCK_TOKEN" "$DISTLOCK_FENCE""#;

/// Deletes the lock's key behind distlock's back, as a server-side loss would.
async fn delete_on_server(url: &str, key: &str) {
    if url.starts_with("redis") {
        use distlock::redis::redis;
        let client = redis::Client::open(url).expect("redis url");
        let mut conn = client.get_multiplexed_async_connection().await.expect("connect to redis");
        let deleted: i64 = redis::cmd("DEL")
            .arg(format!("{}:lock:{key}", distlock::redis::RedisLockStore::DEFAULT_KEY_PREFIX))
            .query_async(&mut conn)
            .await
            .expect("DEL");
        assert_eq!(deleted, 1, "the lock's key exists in Redis");
    } else {
        use distlock::postgres::sqlx;
        let pool = sqlx::PgPool::connect(url).await.expect("connect to postgres");
        let deleted = sqlx::query("DELETE FROM public.distribute_lock WHERE key = $1")
            .bind(format!("{}{key}", distlock::LOCK_NAMESPACE))
            .execute(&pool)
            .await
            .expect("DELETE");
        assert_eq!(deleted.rows_affected(), 1, "the lock's row exists in PostgreSQL");
        pool.close().await;
    }
}

/// `inspect KEY --json` (the same as `--format json`).
async fn inspect(url: &str, key: &str) -> serde_json::Value {
    let out = output(distlock(Some(url), &["inspect", key, "--json"])).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("inspect --json")
}

fn fenced(url: &str) -> bool {
    url.starts_with("postgres")
}

async fn child_gets_the_lock_in_its_environment_and_its_status_is_passed_through(url: &str) {
    let key = key("env");
    let script = format!("{PRINT_LOCK}; exit 7");
    let out = output(distlock(Some(url), &["run", "--key", &key, "--", "sh", "-c", &script])).await;
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let printed = stdout(&out);
    let lines: Vec<&str> = printed.lines().collect();
    assert_eq!(lines.len(), 3, "{printed}");
    assert_eq!(lines[0], key);
    assert!(distlock::Token::parse(lines[1]).is_ok(), "DISTLOCK_TOKEN is a UUID v4: {}", lines[1]);
    if fenced(url) {
        assert!(lines[2].parse::<u64>().is_ok_and(|fence| fence > 0), "DISTLOCK_FENCE: {:?}", lines[2]);
    } else {
        assert_eq!(lines[2], "", "no fencing on the default Redis store");
    }
    assert_eq!(inspect(url, &key).await["state"], "free", "released after the command");

    for (script, status) in [("exit 0", 0), ("exit 1", 1), ("exit 255", 255), ("kill -TERM $$", 143)] {
        let out = output(distlock(Some(url), &["run", "--key", &key, "--", "sh", "-c", script])).await;
        assert_eq!(out.status.code(), Some(status), "{script}: {}", stderr(&out));
    }
    let out = output(distlock(Some(url), &["run", "--key", &key, "--", "distlock-no-such-command"])).await;
    assert_eq!(out.status.code(), Some(COMMAND_NOT_FOUND), "{}", stderr(&out));
    assert_eq!(inspect(url, &key).await["state"], "free", "released when the command could not start");
}

async fn a_held_lock_is_not_acquired_with_a_distinct_status(url: &str) {
    let key = key("busy");
    let mut holder = Running::start(url, &["run", "--key", &key, "--", "sh", "-c", "echo ready; read line || true"]);
    assert_eq!(holder.line().await, "ready");

    let out = output(distlock(Some(url), &["run", "--key", &key, "--no-wait", "--", "sh", "-c", "echo ran"])).await;
    assert_eq!(out.status.code(), Some(NOT_ACQUIRED), "{}", stderr(&out));
    assert_eq!(stdout(&out), "", "the command must not run");
    let message = stderr(&out);
    assert_eq!(message.lines().count(), 1, "one line: {message}");
    assert!(message.contains("not acquired") && message.contains(&key), "{message}");

    let started = Instant::now();
    let out =
        output(distlock(Some(url), &["run", "--key", &key, "--wait", "300ms", "--retry", "20ms", "--", "true"])).await;
    assert_eq!(out.status.code(), Some(NOT_ACQUIRED), "{}", stderr(&out));
    assert!(started.elapsed() >= Duration::from_millis(300), "waited {:?}", started.elapsed());

    holder.close_stdin();
    let (status, stderr) = holder.finish().await;
    assert_eq!(status, 0, "{stderr}");
    let out = output(distlock(Some(url), &["run", "--key", &key, "--", "true"])).await;
    assert_eq!(out.status.code(), Some(0), "free again: {}", crate::common::stderr(&out));
}

async fn concurrent_runs_on_one_key_never_overlap(url: &str) {
    const RUNS: usize = 4;
    let key = key("overlap");
    let dir = std::env::temp_dir().join(format!("distlock-cli-overlap-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let log = dir.join("intervals");
    let script = format!(
        r#"echo "$DISTLOCK_TOKEN start $(date +%s%N) ${{DISTLOCK_FENCE:-0}}" >> '{log}'; sleep 0.2; echo "$DISTLOCK_TOKEN end $(date +%s%N) ${{DISTLOCK_FENCE:-0}}" >> '{log}'"#,
        log = log.display()
    );
    let runs: Vec<_> = (0..RUNS)
        .map(|_| {
            distlock(Some(url), &["run", "--key", &key, "--wait", "25s", "--retry", "10ms", "--", "sh", "-c", &script])
                .spawn()
                .expect("spawn distlock run")
        })
        .collect();
    for run in runs {
        let out =
            tokio::time::timeout(TIMEOUT, run.wait_with_output()).await.expect("run finished in time").expect("wait");
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    }

    let text = std::fs::read_to_string(&log).expect("the children wrote their intervals");
    let _ = std::fs::remove_dir_all(&dir);
    let mut intervals: Vec<(u128, u128, u64)> = Vec::new();
    for token in text.lines().filter_map(|line| line.split(' ').next()).collect::<std::collections::BTreeSet<_>>() {
        let field = |kind: &str, index: usize| -> String {
            text.lines()
                .map(|line| line.split(' ').collect::<Vec<_>>())
                .find(|fields| fields[0] == token && fields[1] == kind)
                .unwrap_or_else(|| panic!("no {kind} line for {token}:\n{text}"))[index]
                .to_owned()
        };
        let start = field("start", 2).parse().expect("ns");
        let end = field("end", 2).parse().expect("ns");
        intervals.push((start, end, field("start", 3).parse().expect("fence")));
    }
    assert_eq!(intervals.len(), RUNS, "one interval per run:\n{text}");
    intervals.sort_unstable();
    for pair in intervals.windows(2) {
        assert!(pair[0].1 <= pair[1].0, "critical sections overlap: {pair:?}\n{text}");
        if fenced(url) {
            assert!(pair[0].2 < pair[1].2, "fences increase with each holder: {pair:?}");
        }
    }
}

/// How a test takes the lease away from a running holder.
enum Lose {
    /// Delete the key on the server.
    DeleteOnServer,
    /// `distlock release KEY --token T` (after a wrong token, which must change nothing).
    AdminRelease,
}

/// Starts a holder whose child prints its token and `$$` then runs `child`, takes its
/// lease away, and waits for distlock: (status, stderr, time from the loss to the exit).
async fn lease_loss(url: &str, child: &str, kill_grace: &str, lose: Lose, flags: &[&str]) -> (i32, String, Duration) {
    let key = key("lease-loss");
    let script = format!(r#"echo "$DISTLOCK_TOKEN"; echo $$; {child}"#);
    // A 3 s lease: renewed every second, so that a starved renewal on a loaded machine
    // does not lose it before the test takes it away.
    let mut args = vec!["run", "--key", &key, "--ttl", "3s", "--kill-grace", kill_grace];
    args.extend_from_slice(flags);
    args.extend_from_slice(&["--", "sh", "-c", &script]);
    let mut holder = Running::start(url, &args);
    let token = holder.line().await;
    let child_pid: i32 = holder.line().await.parse().expect("pid");
    match lose {
        Lose::DeleteOnServer => delete_on_server(url, &key).await,
        Lose::AdminRelease => {
            let wrong = distlock::Token::generate();
            let out = output(distlock(Some(url), &["release", &key, "--token", wrong.as_str()])).await;
            assert_eq!(out.status.code(), Some(NOT_RELEASED), "a wrong token releases nothing: {}", stderr(&out));
            let out = output(distlock(Some(url), &["release", &key, "--token", &token])).await;
            assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        }
    }
    let lost_at = Instant::now();
    let (status, stderr) = holder.finish().await;
    let took = lost_at.elapsed();
    let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child_pid), None).is_ok();
    assert!(!alive, "the command (pid {child_pid}) still runs after distlock exited");
    (status, stderr, took)
}

async fn deleting_the_key_on_the_server_stops_the_command(url: &str) {
    let (status, stderr, _) = lease_loss(url, "exec sleep 60", "500ms", Lose::DeleteOnServer, &[]).await;
    assert_eq!(status, LEASE_LOST, "{stderr}");
    assert!(stderr.contains("lease of lock") && stderr.contains("lost") && stderr.contains("SIGTERM"), "{stderr}");
    assert_eq!(stderr.matches("lost").count(), 1, "the loss is reported once: {stderr}");
    assert!(!stderr.contains("sending SIGKILL"), "sleep dies on SIGTERM: {stderr}");
}

async fn an_administrators_release_stops_the_command(url: &str) {
    let (status, stderr, _) = lease_loss(url, "exec sleep 60", "500ms", Lose::AdminRelease, &[]).await;
    assert_eq!(status, LEASE_LOST, "{stderr}");
}

async fn a_command_ignoring_sigterm_gets_sigkill_after_the_grace(url: &str) {
    let child = r#"trap "" TERM; while :; do sleep 0.1; done"#;
    let (status, stderr, took) = lease_loss(url, child, "600ms", Lose::DeleteOnServer, &[]).await;
    assert_eq!(status, LEASE_LOST, "{stderr}");
    assert!(stderr.contains("sending SIGKILL"), "{stderr}");
    assert!(took >= Duration::from_millis(600), "SIGKILL came after the grace, not before: {took:?}");
}

async fn sigterm_to_distlock_reaches_the_command_and_the_lock_is_released(url: &str) {
    let key = key("sigterm");
    // `ready` only once `sleep` runs, so that the forwarded SIGTERM reaches it too.
    let script = r#"trap 'echo got-term; exit 3' TERM; sleep 60 & echo ready; wait"#;
    let mut holder = Running::start(url, &["run", "--key", &key, "--", "sh", "-c", script]);
    assert_eq!(holder.line().await, "ready");
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(holder.pid()), nix::sys::signal::Signal::SIGTERM)
        .expect("signal distlock");
    assert_eq!(holder.line().await, "got-term");
    let (status, stderr) = holder.finish().await;
    assert_eq!(status, 3, "the command's own status: {stderr}");
    assert_eq!(inspect(url, &key).await["state"], "free");
}

/// Script lines that start a daemon: it double-forks into a session of its own (so it
/// leaves the process group and is orphaned) and writes its pid to `daemon`, which the
/// script waits for. The pid is written by the shell's own `echo` (one `write` of a few
/// bytes) and the daemon then `exec`s `sleep`, so from the moment the file has its pid the
/// daemon is exactly one process: a helper such as `mv` could still be exiting when the
/// script reads the file and be counted as one more process left behind.
fn daemon_start(daemon: &str) -> String {
    format!(
        r#"( setsid sh -c 'echo $$ > "$1"; exec sleep 300' sh '{daemon}' & )
while [ ! -s '{daemon}' ]; do sleep 0.01; done"#
    )
}

/// The command's script: a background child, and a daemon (see [`daemon_start`]), whose
/// pid it waits for; then it prints `$$ $PPID CHILD DAEMON` and waits.
fn tree_script(dir: &TempDir) -> String {
    let daemon = dir.path("daemon");
    let daemon_start = daemon_start(&daemon);
    format!(
        r#"sleep 300 & child=$!
{daemon_start}
echo "$$ $PPID $child $(cat '{daemon}')"
wait"#
    )
}

/// The pids [`tree_script`] printed: the command, the keeper, the child, the daemon.
fn tree_pids(line: &str) -> Vec<i32> {
    let pids: Vec<i32> = line.split(' ').map(|pid| pid.parse().expect("pid")).collect();
    assert_eq!(pids.len(), 4, "{line}");
    for pid in &pids {
        assert!(alive(*pid), "pid {pid} runs before the test: {line}");
    }
    pids
}

async fn kill_9_of_distlock_kills_the_command_and_everything_it_started(url: &str) {
    let key = key("kill-9");
    let dir = TempDir::new("kill-9");
    let script = tree_script(&dir);
    let mut holder = Running::start(url, &["run", "--key", &key, "--ttl", "30s", "--", "sh", "-c", &script]);
    let pids = tree_pids(&holder.line().await);
    let daemon = pids[3];
    let session = nix::unistd::getsid(Some(nix::unistd::Pid::from_raw(daemon))).expect("getsid");
    assert_eq!(session.as_raw(), daemon, "the daemon left the command's session and process group");

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(holder.pid()), nix::sys::signal::Signal::SIGKILL)
        .expect("kill -9 distlock");
    let status = tokio::time::timeout(TIMEOUT, holder.child.wait()).await.expect("distlock died").expect("wait");
    assert_eq!(std::os::unix::process::ExitStatusExt::signal(&status), Some(9));
    let took = gone_within(&pids, Duration::from_secs(10))
        .await
        .unwrap_or_else(|running| panic!("still running 10 s after kill -9 of distlock: {running:?} of {pids:?}"));
    // The lease is no longer renewed but has not expired: nothing of the command ran
    // past the moment another owner could take the lock.
    assert_eq!(inspect(url, &key).await["state"], "held", "died {took:?} after distlock, well within the 30 s TTL");
    let stderr = holder.stderr_line_with("is gone").await;
    assert!(stderr.contains("kills the command"), "{stderr}");
}

async fn processes_the_command_leaves_behind_are_stopped_before_the_release(url: &str) {
    let key = key("leftovers");
    let dir = TempDir::new("leftovers");
    let daemon = dir.path("daemon");
    let daemon_start = daemon_start(&daemon);
    let script = format!(
        r#"sleep 300 & child=$!
{daemon_start}
echo "$child $(cat '{daemon}')"
exit 3"#
    );
    let out = output(distlock(Some(url), &["run", "--key", &key, "--", "sh", "-c", &script])).await;
    assert_eq!(out.status.code(), Some(3), "the command's own status: {}", stderr(&out));
    assert!(stderr(&out).contains("left 2 processes running"), "{}", stderr(&out));
    for pid in stdout(&out).split_whitespace().map(|pid| pid.parse::<i32>().expect("pid")) {
        assert!(!alive(pid), "pid {pid}, left by the command, outlived distlock");
    }
    assert_eq!(inspect(url, &key).await["state"], "free");
}

async fn a_lost_lease_stops_processes_that_left_the_group_too(url: &str) {
    let key = key("lost-tree");
    let dir = TempDir::new("lost-tree");
    let script = tree_script(&dir);
    let mut holder = Running::start(
        url,
        &[
            "run",
            "--key",
            &key,
            "--ttl",
            "2s",
            "--kill-grace",
            "300ms",
            "--lost-exit-code",
            "9",
            "--",
            "sh",
            "-c",
            &script,
        ],
    );
    let pids = tree_pids(&holder.line().await);
    delete_on_server(url, &key).await;
    let (status, stderr) = holder.finish().await;
    assert_eq!(status, 9, "--lost-exit-code: {stderr}");
    let running: Vec<i32> = pids.iter().copied().filter(|pid| alive(*pid)).collect();
    assert!(running.is_empty(), "still running after distlock exited: {running:?} of {pids:?}\n{stderr}");
}

async fn sigstop_of_distlock_the_keeper_kills_the_command_before_the_lease_expires(url: &str) {
    let key = key("sigstop");
    // Loss margin 1 s (a fifth of the TTL): the keeper kills 100 ms (the grace) after the
    // moment distlock would have signalled the loss — 0.9 s before the lease expires.
    let mut holder = Running::start(
        url,
        &["run", "--key", &key, "--ttl", "5s", "--kill-grace", "100ms", "--", "sh", "-c", "echo $$; exec sleep 300"],
    );
    let command: i32 = holder.line().await.parse().expect("pid");
    let distlock = nix::unistd::Pid::from_raw(holder.pid());
    nix::sys::signal::kill(distlock, nix::sys::signal::Signal::SIGSTOP).expect("SIGSTOP distlock");
    let took = gone_within(&[command], Duration::from_secs(15)).await;
    let state = inspect(url, &key).await["state"].clone();
    nix::sys::signal::kill(distlock, nix::sys::signal::Signal::SIGCONT).expect("SIGCONT distlock");
    let took = took.unwrap_or_else(|_| panic!("the command still runs 15 s after SIGSTOP of distlock"));
    assert!(took < Duration::from_secs(5), "killed {took:?} after SIGSTOP, within one TTL");
    assert_eq!(state, "held", "killed before the lease expired ({took:?} after SIGSTOP)");
    let (status, stderr) = holder.finish().await;
    assert_eq!(status, LEASE_LOST, "{stderr}");
    assert!(stderr.contains("no lease renewal reached the keeper"), "{stderr}");
}

async fn sigkill_of_the_keeper_kills_the_command_and_is_an_error(url: &str) {
    let key = key("keeper-killed");
    let mut holder = Running::start(
        url,
        &["run", "--key", &key, "--error-exit-code", "5", "--", "sh", "-c", "echo $$ $PPID; exec sleep 300"],
    );
    let line = holder.line().await;
    let (command, keeper) = line.split_once(' ').expect("two pids");
    let (command, keeper): (i32, i32) = (command.parse().expect("pid"), keeper.parse().expect("pid"));
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(keeper), nix::sys::signal::Signal::SIGKILL)
        .expect("kill -9 keeper");
    let (status, stderr) = holder.finish().await;
    assert_eq!(status, 5, "--error-exit-code: {stderr}");
    assert!(stderr.contains("keeper process was killed"), "{stderr}");
    assert!(gone_within(&[command], Duration::from_secs(10)).await.is_ok(), "the command died with its keeper");
}

async fn run_waits_for_a_held_lock_by_default(url: &str) {
    // Redis queues waiters when asked to (a prefix of its own: every client of a prefix
    // shares its settings).
    let fair_redis;
    let url = if url.starts_with("redis") {
        let separator = if url.contains('?') { '&' } else { '?' };
        fair_redis = format!("{url}{separator}prefix={}&fair=true&notifications=true", key("fair"));
        fair_redis.as_str()
    } else {
        url
    };
    let key = key("waits");
    let mut holder = Running::start(url, &["run", "--key", &key, "--", "sh", "-c", "echo ready; read line || true"]);
    assert_eq!(holder.line().await, "ready");

    let mut waiter = distlock(Some(url), &["run", "--key", &key, "--retry", "20ms", "--", "sh", "-c", "echo ran"]);
    waiter.env("DISTLOCK_LOG", "info");
    let mut waiter = Running::spawn(waiter);
    waiter.stderr_line_with("waiting for it without a deadline").await;
    assert!(waiter.child.try_wait().expect("try_wait").is_none(), "still waiting");
    // The waiter takes a place in the key's queue (fair waiting); inspect shows it.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while inspect(url, &key).await["waiting"] != 1 {
        assert!(std::time::Instant::now() < deadline, "the waiter never showed in the queue");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The table says so too (polled as well: on a loaded machine a waiter's place may
    // lapse between two of its attempts, and it queues again).
    loop {
        let table = stdout(&output(distlock(Some(url), &["inspect", &key])).await);
        if table.contains(&format!("{key}: 1 holder, 1 waiting")) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{table}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    holder.close_stdin();
    let (status, stderr) = holder.finish().await;
    assert_eq!(status, 0, "{stderr}");
    assert_eq!(waiter.line().await, "ran", "the waiter ran once the holder released");
    let (status, stderr) = waiter.finish().await;
    assert_eq!(status, 0, "{stderr}");
}

async fn distlocks_own_statuses_can_be_moved_out_of_the_commands_way(url: &str) {
    let key = key("statuses");
    let mut holder = Running::start(url, &["run", "--key", &key, "--", "sh", "-c", "echo ready; read line || true"]);
    assert_eq!(holder.line().await, "ready");
    for (flags, status) in [
        (&["--no-wait"][..], NOT_ACQUIRED),
        (&["--no-wait", "--retry", "0s"], NOT_ACQUIRED),
        (&["--no-wait", "-E", "3"], 3),
        (&["--wait", "100ms", "--conflict-exit-code", "200"], 200),
    ] {
        let mut args = vec!["run", "--key", &key];
        args.extend_from_slice(flags);
        args.extend_from_slice(&["--", "sh", "-c", "exit 75"]);
        let out = output(distlock(Some(url), &args)).await;
        assert_eq!(out.status.code(), Some(status), "{flags:?}: {}", stderr(&out));
    }
    holder.close_stdin();
    holder.finish().await;

    // Free now: the command's own 75 is passed through untouched.
    let out = output(distlock(Some(url), &["run", "--key", &key, "-E", "3", "--", "sh", "-c", "exit 75"])).await;
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    for (command, status) in [("distlock-no-such-command", 5), ("/", 5), ("true", 0)] {
        let out = output(distlock(Some(url), &["run", "--key", &key, "--error-exit-code", "5", "--", command])).await;
        assert_eq!(out.status.code(), Some(status), "{command}: {}", stderr(&out));
    }
    let out = output(distlock(Some(url), &["run", "--key", &key, "--", "/"])).await;
    assert_eq!(out.status.code(), Some(126), "a directory cannot be executed: {}", stderr(&out));
    assert_eq!(inspect(url, &key).await["state"], "free");
}

async fn inspect_shows_the_holder_and_release_checks_the_token(url: &str) {
    let key = key("inspect");
    let backend = if url.starts_with("redis") { "redis" } else { "postgres" };
    assert_eq!(
        inspect(url, &key).await,
        serde_json::json!({ "store": backend, "key": key, "state": "free", "holders": [], "waiting": 0, "waiting_groups": 0, "places": [] })
    );
    let script = format!("{PRINT_LOCK}; read line");
    let mut holder = Running::start(url, &["run", "--key", &key, "--ttl", "20s", "--", "sh", "-c", &script]);
    holder.line().await;
    let token = holder.line().await;
    let fence = holder.line().await;

    let held = inspect(url, &key).await;
    assert_eq!(held["state"], "held", "{held}");
    let holders = held["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 1, "{held}");
    let lock = &holders[0];
    assert_eq!(
        (&lock["kind"], &lock["mode"], &lock["owner_id"]),
        (&"lock".into(), &"exclusive".into(), &serde_json::Value::Null)
    );
    let owner = lock["owner"].as_str().expect("owner");
    assert_eq!(owner.len(), 8, "a fingerprint of the token: {held}");
    assert!(!held.to_string().contains(&token[..8]), "no part of the token: {held}");
    let left = lock["ttl_left_ms"].as_u64().expect("time left");
    assert!(left > 0 && left <= 20_000, "{held}");
    if fenced(url) {
        assert_eq!(lock["fence"].to_string(), fence, "{held}");
    } else {
        assert_eq!(lock["fence"], serde_json::Value::Null, "{held}");
    }
    let out = output(distlock(Some(url), &["inspect", &key])).await;
    let table = stdout(&out);
    assert!(table.contains(owner) && table.contains(&format!("{key}: 1 holder")), "{table}");
    assert!(!table.contains(&token[..8]), "{table}");
    for flag in ["--show-tokens", "--show-token"] {
        let out = output(distlock(Some(url), &["inspect", &key, flag])).await;
        assert!(stdout(&out).contains(&token), "{flag}: {}", stdout(&out));
    }
    assert_eq!(inspect(url, &key).await["holders"][0]["owner"], owner, "the same holder keeps its owner");

    let out = output(distlock(Some(url), &["release", &key, "--token", distlock::Token::generate().as_str()])).await;
    assert_eq!(out.status.code(), Some(NOT_RELEASED), "{}", stderr(&out));
    assert!(!stderr(&out).contains(&token), "never prints the holder's token: {}", stderr(&out));
    assert_eq!(inspect(url, &key).await["state"], "held", "a wrong token changes nothing");
    let out = output(distlock(Some(url), &["release", &key, "--token", &token])).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(inspect(url, &key).await["state"], "free");

    // The holder learns at the latest when its command ends that it lost the lease.
    holder.close_stdin();
    let (status, stderr) = holder.finish().await;
    assert_eq!(status, LEASE_LOST, "{stderr}");
}

async fn bench_with_baseline_reports_zero_violations(url: &str) {
    let out = output(distlock(
        Some(url),
        &["bench", "--duration", "200ms", "--workers", "4", "--retry", "5ms", "--baseline", "--json"],
    ))
    .await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(report["violations"], 0, "{report:#}");
    let rows = report["rows"].as_array().expect("rows");
    assert_eq!(rows.len(), 6, "{report:#}");
    for row in rows {
        assert!(row["ops"].as_u64().expect("ops") > 0, "{row:#}");
        assert_eq!(row["lost_leases"], 0, "{row:#}");
    }
}

all_stores!(
    child_gets_the_lock_in_its_environment_and_its_status_is_passed_through,
    a_held_lock_is_not_acquired_with_a_distinct_status,
    concurrent_runs_on_one_key_never_overlap,
    deleting_the_key_on_the_server_stops_the_command,
    an_administrators_release_stops_the_command,
    a_command_ignoring_sigterm_gets_sigkill_after_the_grace,
    sigterm_to_distlock_reaches_the_command_and_the_lock_is_released,
    inspect_shows_the_holder_and_release_checks_the_token,
    bench_with_baseline_reports_zero_violations,
    kill_9_of_distlock_kills_the_command_and_everything_it_started,
    processes_the_command_leaves_behind_are_stopped_before_the_release,
    a_lost_lease_stops_processes_that_left_the_group_too,
    sigstop_of_distlock_the_keeper_kills_the_command_before_the_lease_expires,
    sigkill_of_the_keeper_kills_the_command_and_is_an_error,
    run_waits_for_a_held_lock_by_default,
    distlocks_own_statuses_can_be_moved_out_of_the_commands_way,
);
