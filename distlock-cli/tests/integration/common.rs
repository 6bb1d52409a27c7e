//! Helpers shared by the integration tests: the real `distlock` binary, bounded waits.

#![allow(dead_code, unreachable_pub)]

use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStderr, ChildStdout, Command};

/// The longest any single step may take; a hung step fails the test instead of hanging it.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The exit statuses documented in `distlock --help`.
pub const USAGE: i32 = 64;
pub const NOT_ACQUIRED: i32 = 75;
pub const LEASE_LOST: i32 = 76;
pub const NOT_RELEASED: i32 = 1;
pub const COMMAND_NOT_FOUND: i32 = 127;

/// `distlock ARGS…` on `store`, stdin closed, killed if dropped. With `None`, neither a
/// store nor a state directory: no default store either (a test that wants the default
/// store sets `XDG_STATE_HOME` to a folder of its own), so no test writes to `$HOME`.
pub fn distlock(store: Option<&str>, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_distlock"));
    command.args(args).env_remove("DISTLOCK_STORE").env_remove("DISTLOCK_LOG").stdin(Stdio::null()).kill_on_drop(true);
    match store {
        Some(store) => command.env("DISTLOCK_STORE", store),
        None => command.env_remove("HOME").env_remove("XDG_STATE_HOME"),
    };
    command
}

/// Runs `command` to completion, within [`TIMEOUT`].
pub async fn output(mut command: Command) -> Output {
    tokio::time::timeout(TIMEOUT, command.output())
        .await
        .expect("distlock did not finish in time")
        .expect("spawn distlock")
}

/// A fresh key for one test, so that tests share servers without colliding.
pub fn key(test: &str) -> String {
    format!("distlock-cli-test:{test}:{}", uuid::Uuid::new_v4().simple())
}

pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// A `distlock run` in the background whose stdout (and, on demand, stderr) is read line
/// by line.
pub struct Running {
    pub child: Child,
    pub lines: Lines<BufReader<ChildStdout>>,
    errors: Option<Lines<BufReader<ChildStderr>>>,
}

impl Running {
    /// Starts `distlock run` with piped stdin and stdout (stderr piped too).
    pub fn start(store: &str, args: &[&str]) -> Self {
        Self::spawn(distlock(Some(store), args))
    }

    /// Starts `command` (from [`distlock`]) with piped stdin, stdout and stderr.
    pub fn spawn(mut command: Command) -> Self {
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn distlock run");
        let stdout = child.stdout.take().expect("piped stdout");
        Self { child, lines: BufReader::new(stdout).lines(), errors: None }
    }

    /// Reads distlock's stderr until a line contains `needle`, within [`TIMEOUT`]; returns
    /// that line.
    pub async fn stderr_line_with(&mut self, needle: &str) -> String {
        if self.errors.is_none() {
            let stderr = self.child.stderr.take().expect("piped stderr");
            self.errors = Some(BufReader::new(stderr).lines());
        }
        let errors = self.errors.as_mut().expect("stderr reader");
        let found = async {
            loop {
                match errors.next_line().await.expect("read distlock's stderr") {
                    Some(line) if line.contains(needle) => return line,
                    Some(_) => {}
                    None => panic!("distlock's stderr ended without `{needle}`"),
                }
            }
        };
        tokio::time::timeout(TIMEOUT, found).await.unwrap_or_else(|_| panic!("no `{needle}` on stderr in time"))
    }

    /// The next line the command printed, within [`TIMEOUT`].
    pub async fn line(&mut self) -> String {
        tokio::time::timeout(TIMEOUT, self.lines.next_line())
            .await
            .expect("no output from the command in time")
            .expect("read the command's output")
            .expect("the command ended without printing")
    }

    /// Closes the command's stdin (a `read` in it returns).
    pub fn close_stdin(&mut self) {
        drop(self.child.stdin.take());
    }

    /// Waits for distlock to exit, within [`TIMEOUT`]; returns its status and stderr.
    pub async fn finish(mut self) -> (i32, String) {
        let status = tokio::time::timeout(TIMEOUT, self.child.wait())
            .await
            .expect("distlock did not exit in time")
            .expect("wait");
        let mut stderr = String::new();
        if let Some(mut pipe) = self.child.stderr.take() {
            use tokio::io::AsyncReadExt;
            // A process the command left behind may hold the pipe open: bounded.
            let _ = tokio::time::timeout(TIMEOUT, pipe.read_to_string(&mut stderr)).await;
        } else if let Some(mut errors) = self.errors.take() {
            let rest = async {
                while let Ok(Some(line)) = errors.next_line().await {
                    stderr.push_str(&line);
                    stderr.push('\n');
                }
            };
            let _ = tokio::time::timeout(TIMEOUT, rest).await;
        }
        (status.code().expect("distlock exited normally"), stderr)
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id().expect("running")).expect("pid")
    }
}

/// Whether process `pid` still runs: it exists and is not a zombie (a zombie is dead,
/// waiting for its parent to collect its status).
pub fn alive(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next()) != Some("Z"),
        Err(_) => false,
    }
}

/// Waits until none of `pids` runs, up to `bound`; returns how long it took, or the pids
/// still running at the bound. (No signal tells a test that a process it did not start
/// has died: this looks every 20 ms.)
pub async fn gone_within(pids: &[i32], bound: Duration) -> Result<Duration, Vec<i32>> {
    let started = std::time::Instant::now();
    loop {
        let running: Vec<i32> = pids.iter().copied().filter(|pid| alive(*pid)).collect();
        if running.is_empty() {
            return Ok(started.elapsed());
        }
        if started.elapsed() >= bound {
            return Err(running);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A fresh empty directory for one test's files, removed when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(test: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("distlock-cli-{test}-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        Self(dir)
    }

    pub fn path(&self, name: &str) -> String {
        self.0.join(name).display().to_string()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs each case `async fn case(url: &str)` of the calling test file on Redis and on
/// PostgreSQL, as `redis::case` and `postgres::case` (`#[macro_use] mod common;`).
#[macro_export]
macro_rules! all_stores {
    ($($case:ident),* $(,)?) => {
        $crate::store_tests!(redis, redis_url, [$($case),*]);
        $crate::store_tests!(postgres, postgres_url, [$($case),*]);
    };
}

/// One store's module of [`all_stores!`] cases.
#[macro_export]
macro_rules! store_tests {
    ($store:ident, $url:ident, [$($case:ident),* $(,)?]) => {
        mod $store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let test = concat!(module_path!(), "::", stringify!($case));
                    let Some(url) = distlock_conformance::kit::$url(test) else { return };
                    super::$case(&url).await;
                }
            )*
        }
    };
}
