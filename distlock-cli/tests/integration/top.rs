//! `distlock top` driven in a terminal (a detached tmux session of a fixed size) against
//! Redis and PostgreSQL, with a workload beside it: holders, a waiter, a hot key.

use std::process::Command as StdCommand;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::*;
use distlock::LockManager;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

/// The line the pane's shell prints once `distlock top` has exited, with its status.
const EXITED: &str = "distlock-top-exited-";

/// A private tmux server running one `distlock top`, killed when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    /// Starts `distlock top ARGS…` on `store` in a WIDTH×HEIGHT pane; when it exits, the
    /// pane's shell prints [`EXITED`] and its status, then whether the terminal is back
    /// in canonical mode (`icanon`, or `-icanon` if raw mode was left on).
    fn start(store: &str, args: &[&str], width: u16, height: u16) -> Self {
        let socket = format!("distlock-top-{}", uuid::Uuid::new_v4().simple());
        let quoted: Vec<String> = args.iter().map(|arg| format!("'{arg}'")).collect();
        let command = format!(
            "env DISTLOCK_STORE='{store}' '{}' top {}; echo {EXITED}$?; stty -a | tr ' ;' '\\n\\n' | grep -x -- '-\\?icanon'",
            env!("CARGO_BIN_EXE_distlock"),
            quoted.join(" ")
        );
        let tmux = Self { socket };
        tmux.run(&[
            "-f",
            "/dev/null",
            "start-server",
            ";",
            "set-option",
            "-g",
            "remain-on-exit",
            "on",
            ";",
            "new-session",
            "-d",
            "-x",
            &width.to_string(),
            "-y",
            &height.to_string(),
            &command,
        ]);
        tmux
    }

    fn run(&self, args: &[&str]) -> String {
        let out = StdCommand::new("tmux").arg("-L").arg(&self.socket).args(args).output().expect("run tmux");
        assert!(out.status.success(), "tmux {args:?}: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.run(&["capture-pane", "-p"])
    }

    /// The screen with the lines scrolled off it.
    fn history(&self) -> String {
        self.run(&["capture-pane", "-p", "-S", "-1000"])
    }

    fn send(&self, keys: &str) {
        self.run(&["send-keys", keys]);
    }

    /// Captures the pane every 50 ms until `done` holds for the screen, within `bound`;
    /// returns that screen.
    async fn until(&self, what: &str, bound: Duration, done: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            let screen = self.screen();
            if done(&screen) {
                return screen;
            }
            assert!(started.elapsed() < bound, "no {what} on the screen in {bound:?}:\n{screen}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends `q`, then waits (within `bound`) for distlock to exit with status 0 and the
    /// terminal to be restored: the UI gone, canonical mode back. Returns how long it took.
    async fn quit(&self, bound: Duration) -> Duration {
        let sent = Instant::now();
        self.send("q");
        self.until("exit", bound, |screen| {
            screen.lines().any(|line| line.trim() == "icanon" || line.trim() == "-icanon")
        })
        .await;
        let took = sent.elapsed();
        // What the shell printed after distlock may have scrolled up.
        let screen = self.history();
        assert!(screen.contains(&format!("{EXITED}0")), "exit status:\n{screen}");
        assert!(screen.lines().any(|line| line.trim() == "icanon"), "raw mode left on:\n{screen}");
        assert!(
            !screen.contains("distlock top ·") && !screen.contains("HAND-OFFS"),
            "the UI is still shown:\n{screen}"
        );
        took
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = StdCommand::new("tmux").arg("-L").arg(&self.socket).arg("kill-server").output();
    }
}

/// The table row of `key` on `screen`, split into its fields.
fn row<'a>(screen: &'a str, key: &str) -> Option<Vec<&'a str>> {
    screen.lines().map(|line| line.split_whitespace().collect::<Vec<_>>()).find(|fields| fields.first() == Some(&key))
}

/// `distlock run --key KEY` holding it until its stdin closes, once it holds the key.
async fn holder(url: &str, key: &str) -> Running {
    let mut running = Running::start(url, &["run", "--key", key, "--", "sh", "-c", "echo held; read line || true"]);
    assert_eq!(running.line().await, "held");
    running
}

/// Each holder's fingerprint, as `distlock list` shows it.
async fn owners(url: &str, pattern: &str) -> Vec<(String, String)> {
    let out = output(distlock(Some(url), &["list", "--match", pattern])).await;
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    stdout(&out)
        .lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            (fields.len() >= 5).then(|| (fields[0].to_owned(), fields[2].to_owned()))
        })
        .collect()
}

/// Redis waits fairly (keeps a queue of waiters to count) with `?fair=true`, on a key
/// prefix of its own (a prefix's clients agree on the setting).
fn fair(url: &str) -> String {
    if url.starts_with("redis://") {
        format!("{}/?fair=true&prefix=distlock-top-{}", url.trim_end_matches('/'), uuid::Uuid::new_v4().simple())
    } else {
        url.to_owned()
    }
}

async fn shows_holders_waiters_and_hand_offs(url: &str) {
    let url = &fair(url);
    let ns = key("top");
    let (a, b, contended, hot) =
        (format!("{ns}:held-a"), format!("{ns}:held-b"), format!("{ns}:contended"), format!("{ns}:hot"));
    let held_a = holder(url, &a).await;
    let held_b = holder(url, &b).await;
    let held_contended = holder(url, &contended).await;
    let owners = owners(url, &format!("{ns}:*")).await;
    assert_eq!(owners.len(), 3, "{owners:?}");
    let mut waiter =
        Running::start(url, &["run", "--key", &contended, "--", "sh", "-c", "echo held; read line || true"]);

    // The hot key changes hands about every 100 ms.
    let manager = LockManager::new(distlock::connect(url).await.expect("connect"));
    let hot_key = hot.clone();
    let hot_loop = tokio::spawn(async move {
        loop {
            let lock = manager.lock(&hot_key, Duration::from_secs(10)).await.expect("lock the hot key");
            tokio::time::sleep(Duration::from_millis(100)).await;
            lock.release().await.expect("release the hot key");
        }
    });

    let tmux = Tmux::start(url, &["--interval", "200ms", "--match", &format!("{ns}:*")], 180, 30);
    let screen = tmux
        .until("holders, a waiter and hand-offs", TIMEOUT, |screen| {
            let holders_shown =
                owners.iter().all(|(key, owner)| row(screen, key).is_some_and(|fields| fields[2] == owner));
            let waiting =
                row(screen, &contended).is_some_and(|fields| fields.windows(2).any(|pair| pair == ["1", "for"]));
            let handed_off = row(screen, &hot)
                .and_then(|fields| fields.last().and_then(|n| n.parse::<u32>().ok()))
                .is_some_and(|n| n > 0);
            holders_shown && waiting && handed_off
        })
        .await;
    assert!(screen.contains("refresh: 1 list page"), "{screen}");
    assert!(screen.contains(&format!("hottest: {hot} (")), "{screen}");
    let rate = screen
        .split("hand-offs: ")
        .nth(1)
        .and_then(|rest| rest.split("/s").next())
        .and_then(|rate| rate.parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no hand-off rate:\n{screen}"));
    assert!(rate > 0.0, "{screen}");

    // Keys: the order cycles, the view keeps running.
    tmux.send("s");
    tmux.until("the hottest order", TIMEOUT, |screen| screen.contains("sort: hottest")).await;
    tmux.quit(Duration::from_secs(5)).await;

    hot_loop.abort();
    for mut running in [held_a, held_b, held_contended] {
        running.close_stdin();
        assert_eq!(running.finish().await.0, 0);
    }
    assert_eq!(waiter.line().await, "held");
    waiter.close_stdin();
    assert_eq!(waiter.finish().await.0, 0);
}

all_stores!(shows_holders_waiters_and_hand_offs);

/// A Redis `MONITOR` connection: the `SCAN`s whose pattern contains `needle`, with the
/// server's time of each.
async fn monitor_scans(url: &str, needle: String) -> Arc<Mutex<Vec<(f64, String)>>> {
    let address = url.trim_start_matches("redis://").trim_end_matches('/');
    let mut stream = tokio::net::TcpStream::connect(address).await.expect("connect to Redis");
    stream.write_all(b"MONITOR\r\n").await.expect("MONITOR");
    let mut lines = BufReader::new(stream).lines();
    assert_eq!(lines.next_line().await.expect("read").as_deref(), Some("+OK"));
    let scans = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&scans);
    tokio::spawn(async move {
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("\"SCAN\"") && line.contains(&needle) {
                let at = line.trim_start_matches('+').split_whitespace().next().and_then(|at| at.parse::<f64>().ok());
                seen.lock().expect("scans").push((at.expect("a MONITOR time"), line));
            }
        }
    });
    scans
}

/// 20,000 held keys: each refresh reads one page (one `SCAN … COUNT 1000` per interval,
/// never two at once), the table fills in as the pages come round, and `q` still quits
/// at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_keys_cost_one_page_per_refresh() {
    const KEYS: usize = 20_000;
    let Some(url) = distlock_conformance::kit::redis_url("top::many_keys_cost_one_page_per_refresh") else { return };
    let ns = key("top-many");
    let manager = LockManager::new(distlock::connect(&url).await.expect("connect"));
    let mut tasks = tokio::task::JoinSet::new();
    for task in 0..32 {
        let (manager, ns) = (manager.clone(), ns.clone());
        tasks.spawn(async move {
            for n in (task..KEYS).step_by(32) {
                let lock = manager.lock(&format!("{ns}:{n}"), Duration::from_secs(600)).await.expect("lock");
                // Held on the store until its lease ends, with nothing renewing it.
                let _token = lock.leak();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.expect("a holder task");
    }

    // The pattern's `-` are escaped on the wire; its random part is not.
    let needle = ns.rsplit(':').next().expect("the namespace's random part").to_owned();
    let scans = monitor_scans(&url, needle).await;
    let tmux = Tmux::start(&url, &["--interval", "200ms", "--page", "1000", "--match", &format!("{ns}:*")], 160, 40);
    let screen = tmux
        .until("a whole pass of the listing", TIMEOUT, |screen| {
            screen.contains(&format!("keys seen: {KEYS} ")) && !screen.contains("listing passes: 0 ")
        })
        .await;
    assert!(screen.contains("refresh: 1 list page"), "{screen}");
    let took = tmux.quit(Duration::from_secs(3)).await;
    assert!(took < Duration::from_secs(3), "quitting took {took:?}");

    let scans = scans.lock().expect("scans").clone();
    assert!(scans.len() >= KEYS / 1000, "a pass of {KEYS} keys needs at least {} pages: {}", KEYS / 1000, scans.len());
    for (_, line) in &scans {
        assert!(line.contains("\"COUNT\" \"1000\""), "{line}");
    }
    // The server stamps a command when it arrives: a busy machine delays one page's
    // command more than the next one's, so two pages may arrive somewhat less than an
    // interval apart; more than one page per refresh would arrive milliseconds apart.
    for pair in scans.windows(2) {
        let gap = pair[1].0 - pair[0].0;
        assert!(gap >= 0.1, "two pages read {gap:.3} s apart (interval 200 ms):\n{}\n{}", pair[0].1, pair[1].1);
    }
}

/// Without a terminal, `top` is a usage error that points to `list`.
#[tokio::test]
async fn without_a_terminal_top_is_a_usage_error() {
    let out = output(distlock(Some("memory://"), &["top"])).await;
    assert_eq!(out.status.code(), Some(USAGE), "{}", stderr(&out));
    assert!(stderr(&out).contains("stdout is not one") && stderr(&out).contains("distlock list"), "{}", stderr(&out));
    assert!(stdout(&out).is_empty());
}
