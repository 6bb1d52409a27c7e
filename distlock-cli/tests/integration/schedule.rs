//! `distlock schedule` across processes on real servers: five processes whose wall
//! clocks are up to 4 s apart (libfaketime) run each firing of a job once, also while they
//! are killed one by one; a run killed mid-way is not run again for its firing.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::common::*;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;

/// `distlock schedule NAME ARGS… -- sh -c SCRIPT` with its wall clock `offset` (e.g. `+2s`)
/// from the true one, in a process group of its own.
fn scheduler(url: &str, offset: &str, name: &str, args: &[&str], script: &str) -> Running {
    let faketime = distlock_conformance::kit::libfaketime()
        .expect("libfaketime (Debian package faketime; scripts/test.sh installs it)");
    let mut all = vec!["schedule", name];
    all.extend_from_slice(args);
    all.extend_from_slice(&["--", "sh", "-c", script]);
    let mut command = distlock(Some(url), &all);
    command.env("LD_PRELOAD", faketime).env("FAKETIME", offset).env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
    command.process_group(0);
    Running::spawn(command)
}

/// Sleeps until the true wall clock is half-way between two whole seconds, at least
/// `after` from now: away from the firings, which every process starts at a whole second
/// (their clocks differ by whole seconds).
async fn sleep_to_half_second(after: Duration) {
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap() + after;
    let target = Duration::from_secs(now.as_secs()) + Duration::from_millis(500);
    let target = if target < now { target + Duration::from_secs(1) } else { target };
    tokio::time::sleep(target - SystemTime::now().duration_since(UNIX_EPOCH).unwrap()).await;
}

/// Waits for a killed process's end.
async fn reap(mut killed: Running) {
    let _ = tokio::time::timeout(TIMEOUT, killed.child.wait()).await.expect("a killed process did not end");
}

/// The firings (Unix seconds) the runs file holds, one per run.
fn runs(path: &str) -> Vec<u64> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(|line| line.trim().parse().unwrap()).collect()
}

/// Five processes, clocks at −2, −1, 0, +1 and +2 s, run a job every second for more than
/// 30 s; four of them are killed (`kill -9`) one by one on the way. Every firing in the
/// span runs exactly once: none twice, none missed while one process lives.
async fn five_skewed_processes_run_each_firing_once(url: &str) {
    if distlock_conformance::kit::libfaketime().is_none() && !distlock_conformance::kit::services_required() {
        eprintln!("SKIPPED: install faketime to run it");
        return;
    }
    let dir = TempDir::new("schedule");
    let file = dir.path("runs");
    let name = key("every-second");
    let script = format!(r#"echo "$DISTLOCK_FIRING" >> {file}"#);
    let args = ["--cron", "* * * * * *", "--at-least", "8s", "--late-start", "2s"];
    // Killed in this order; the process at +0s lives to the end.
    let offsets = ["+2s", "-2s", "+1s", "-1s", "+0s"];
    let mut processes: Vec<Running> =
        offsets.iter().map(|offset| scheduler(url, offset, &name, &args, &script)).collect();
    let started = Instant::now();
    for _ in 0..4 {
        sleep_to_half_second(Duration::from_secs(6)).await;
        let victim = processes.remove(0);
        killpg(Pid::from_raw(victim.pid()), Signal::SIGKILL).expect("kill -9");
        reap(victim).await;
    }
    sleep_to_half_second(Duration::from_secs(36).saturating_sub(started.elapsed())).await;
    let last = processes.remove(0);
    kill(Pid::from_raw(last.pid()), Signal::SIGTERM).expect("SIGTERM");
    let (status, errors) = last.finish().await;
    assert_eq!(status, 143, "{errors}");

    let mut firings = runs(&file);
    let count = firings.len();
    firings.sort_unstable();
    firings.dedup();
    assert_eq!(firings.len(), count, "a firing ran twice: {:?}", runs(&file));
    let (first, last) = (firings[0], firings[firings.len() - 1]);
    let missing: Vec<u64> = (first..=last).filter(|firing| firings.binary_search(firing).is_err()).collect();
    assert!(missing.is_empty(), "missed firings {missing:?} of {first}..={last}");
    assert!(firings.len() >= 30, "only {} firings in {first}..={last}", firings.len());
}

/// The process that runs a firing is killed (with its command) mid-run: the other process
/// reaches the firing a second later and finds it taken, so the firing is not run again;
/// the next firing runs.
async fn a_run_killed_midway_is_not_run_again(url: &str) {
    if distlock_conformance::kit::libfaketime().is_none() && !distlock_conformance::kit::services_required() {
        eprintln!("SKIPPED: install faketime to run it");
        return;
    }
    let dir = TempDir::new("schedule-killed");
    let file = dir.path("runs");
    let name = key("killed");
    let script = format!(r#"echo "$DISTLOCK_FIRING" >> {file}; sleep 3"#);
    let args = ["--cron", "*/4 * * * * *", "--at-most", "20s", "--at-least", "3500ms", "--late-start", "2s"];
    // The process whose clock is ahead reaches each firing first.
    let ahead = scheduler(url, "+1s", &name, &args, &script);
    let behind = scheduler(url, "+0s", &name, &args, &script);
    let deadline = Instant::now() + TIMEOUT;
    while runs(&file).is_empty() {
        assert!(Instant::now() < deadline, "no firing ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    killpg(Pid::from_raw(ahead.pid()), Signal::SIGKILL).expect("kill -9 the scheduler and its command");
    reap(ahead).await;
    let killed = runs(&file)[0];
    while runs(&file).len() < 2 {
        assert!(Instant::now() < deadline, "the next firing never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    kill(Pid::from_raw(behind.pid()), Signal::SIGTERM).expect("SIGTERM");
    let _ = behind.finish().await;
    let firings = runs(&file);
    assert_eq!(firings.iter().filter(|firing| **firing == killed).count(), 1, "run again: {firings:?}");
    assert_eq!(firings[1], killed + 4, "{firings:?}");
}

/// A scheduler paused (SIGSTOP) over several firings reports each firing it reached too
/// late as missed, runs none of them late, and goes on with the next ones.
async fn firings_reached_too_late_are_reported_missed(url: &str) {
    let dir = TempDir::new("schedule-missed");
    let file = dir.path("runs");
    let name = key("missed");
    let script = format!(r#"echo "$DISTLOCK_FIRING" >> {file}"#);
    let args = ["--cron", "* * * * * *", "--at-least", "2s", "--late-start", "500ms"];
    let mut paused =
        distlock(Some(url), &[&["schedule", name.as_str()][..], &args, &["--", "sh", "-c", &script]].concat());
    paused.process_group(0);
    let mut paused = Running::spawn(paused);
    let deadline = Instant::now() + TIMEOUT;
    while runs(&file).is_empty() {
        assert!(Instant::now() < deadline, "no firing ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    sleep_to_half_second(Duration::ZERO).await;
    kill(Pid::from_raw(paused.pid()), Signal::SIGSTOP).expect("SIGSTOP");
    let stopped_at = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    tokio::time::sleep(Duration::from_secs(4)).await;
    kill(Pid::from_raw(paused.pid()), Signal::SIGCONT).expect("SIGCONT");
    let line = paused.stderr_line_with("missed").await;
    assert!(line.contains("no instance ran it"), "{line}");
    let resumed_at = stopped_at + 4;
    while runs(&file).last().is_none_or(|last| *last <= resumed_at) {
        assert!(Instant::now() < deadline, "no firing ran after the pause");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    kill(Pid::from_raw(paused.pid()), Signal::SIGTERM).expect("SIGTERM");
    let _ = paused.child.wait().await;
    let firings = runs(&file);
    let late: Vec<u64> = firings.iter().copied().filter(|f| *f > stopped_at && *f < resumed_at).collect();
    assert!(late.is_empty(), "firings run late after the pause: {late:?} of {firings:?}");
}

/// Starts `distlock schedule` with an every-second job whose command writes its pid to
/// `pid_file` and sleeps; returns the scheduler and the command's pid once it runs.
async fn scheduler_with_running_command(url: &str, name: &str, args: &[&str], pid_file: &str) -> (Running, i32) {
    let script = format!("echo $$ > {pid_file}.tmp && mv {pid_file}.tmp {pid_file} && exec sleep 60");
    let all = [&["schedule", name, "--cron", "* * * * * *"][..], args, &["--", "sh", "-c", &script]].concat();
    let scheduler = Running::spawn(distlock(Some(url), &all));
    let deadline = Instant::now() + TIMEOUT;
    let pid = loop {
        if let Ok(pid) = std::fs::read_to_string(pid_file) {
            break pid.trim().parse().unwrap();
        }
        assert!(Instant::now() < deadline, "no firing ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    (scheduler, pid)
}

/// `kill -9` of the scheduler leaves no command running: its keeper kills the command's
/// process group.
async fn killing_the_scheduler_stops_its_command(url: &str) {
    let dir = TempDir::new("schedule-kill9");
    let pid_file = dir.path("pid");
    let (scheduler, command) = scheduler_with_running_command(url, &key("kill9"), &[], &pid_file).await;
    assert!(alive(command));
    kill(Pid::from_raw(scheduler.pid()), Signal::SIGKILL).expect("kill -9 the scheduler");
    reap(scheduler).await;
    gone_within(&[command], TIMEOUT).await.unwrap_or_else(|left| panic!("still running: {left:?}"));
}

/// A command still running when its firing's lock stops being safe (`--at-most`) is
/// stopped, SIGTERM first, before the lock ends.
async fn a_command_outliving_at_most_is_stopped(url: &str) {
    let dir = TempDir::new("schedule-at-most");
    let pid_file = dir.path("pid");
    let args = ["--at-most", "3s", "--at-least", "2s", "--late-start", "500ms", "--kill-grace", "500ms"];
    let (mut scheduler, command) = scheduler_with_running_command(url, &key("at-most"), &args, &pid_file).await;
    let started = Instant::now();
    let line = scheduler.stderr_line_with("stopping the command").await;
    assert!(line.contains("reached --at-most"), "{line}");
    let took = started.elapsed() + gone_within(&[command], TIMEOUT).await.unwrap_or_else(|left| panic!("{left:?}"));
    assert!(took < Duration::from_secs(3), "the command ran {took:?}, past --at-most");
    kill(Pid::from_raw(scheduler.pid()), Signal::SIGTERM).expect("SIGTERM");
    let _ = scheduler.finish().await;
}

/// Bad schedules and durations are usage errors before any connection.
#[tokio::test]
async fn bad_schedules_are_usage_errors() {
    for args in [
        &["schedule", "j", "--cron", "61 * * * *", "--", "true"][..],
        &["schedule", "j", "--cron", "* * * * *", "--at-least", "10m", "--", "true"],
        &["schedule", "j", "--cron", "* * * * *", "--late-start", "5s", "--", "true"],
        &["schedule", "j", "--cron", "* * * * *", "--at-most", "10s", "--kill-grace", "10s", "--", "true"],
    ] {
        let out = output(distlock(Some("redis://127.0.0.1:1"), args)).await;
        assert_eq!(out.status.code(), Some(USAGE), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out).lines().count(), 1, "{}", stderr(&out));
    }
}

all_stores!(a_run_killed_midway_is_not_run_again, firings_reached_too_late_are_reported_missed);
// 36 s of an every-second schedule: on one store, which is all it needs of the store
// (one lock per firing, taken once); the other cases run on both. The command's
// supervision is the same on every store.
store_tests!(
    on_redis,
    redis_url,
    [
        five_skewed_processes_run_each_firing_once,
        killing_the_scheduler_stops_its_command,
        a_command_outliving_at_most_is_stopped
    ]
);
