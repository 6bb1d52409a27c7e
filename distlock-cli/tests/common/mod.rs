//! Helpers shared by the integration tests: the real `distlock` binary, bounded waits.

#![allow(dead_code, unreachable_pub)]

use std::process::{Output, Stdio};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout, Command};

/// The longest any single step may take; a hung step fails the test instead of hanging it.
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The exit statuses documented in `distlock --help`.
pub const USAGE: i32 = 64;
pub const NOT_ACQUIRED: i32 = 75;
pub const LEASE_LOST: i32 = 76;
pub const NOT_RELEASED: i32 = 1;
pub const COMMAND_NOT_FOUND: i32 = 127;

/// `distlock ARGS…` on `store` (none when `None`), stdin closed, killed if dropped.
pub fn distlock(store: Option<&str>, args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_distlock"));
    command.args(args).env_remove("DISTLOCK_STORE").env_remove("DISTLOCK_LOG").stdin(Stdio::null()).kill_on_drop(true);
    if let Some(store) = store {
        command.env("DISTLOCK_STORE", store);
    }
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

/// A `distlock run` in the background whose stdout is read line by line.
pub struct Running {
    pub child: Child,
    pub lines: Lines<BufReader<ChildStdout>>,
}

impl Running {
    /// Starts `distlock run` with piped stdin and stdout (stderr piped too).
    pub fn start(store: &str, args: &[&str]) -> Self {
        let mut command = distlock(Some(store), args);
        command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = command.spawn().expect("spawn distlock run");
        let stdout = child.stdout.take().expect("piped stdout");
        Self { child, lines: BufReader::new(stdout).lines() }
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
        }
        (status.code().expect("distlock exited normally"), stderr)
    }

    pub fn pid(&self) -> i32 {
        i32::try_from(self.child.id().expect("running")).expect("pid")
    }
}
