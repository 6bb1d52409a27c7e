//! Child processes that hold a lock and can be killed with `kill -9`.
//!
//! A test re-runs its own test binary as a child that runs one test, the *child entry*,
//! which finds its role in the environment, acquires a lock, prints a line and then
//! waits to be killed. Run normally (without the role), a child entry returns at once.
//!
//! ```no_run
//! use std::time::Duration;
//! use distlock_conformance::kit::child::{self, ChildProcess};
//!
//! // The child entry, run by the parent below.
//! #[tokio::test]
//! async fn child_entry_holds_lock() {
//!     let Some(key) = child::role_arg("holder") else { return };
//!     // … acquire `key`, then:
//!     child::announce("ACQUIRED");
//!     child::park().await;
//! }
//!
//! #[test]
//! fn killed_holder_frees_lock_after_ttl() {
//!     let mut holder = ChildProcess::spawn("child_entry_holds_lock", "holder", "order:1");
//!     holder.wait_for_line("ACQUIRED", Duration::from_secs(30));
//!     holder.kill9();
//!     // … the lock is still held until its TTL runs out, then free.
//! }
//! ```

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

const ROLE_VAR: &str = "DISTLOCK_CHILD_ROLE";
const ARG_VAR: &str = "DISTLOCK_CHILD_ARG";

/// When this process is a child started with `role`, its argument; otherwise `None`.
pub fn role_arg(role: &str) -> Option<String> {
    if std::env::var(ROLE_VAR).ok()? == role {
        std::env::var(ARG_VAR).ok()
    } else {
        None
    }
}

/// Prints `line` on stdout (flushed, on a line of its own) for the parent's
/// [`ChildProcess::wait_for_line`].
pub fn announce(line: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "\n{line}");
    let _ = out.flush();
}

/// Waits forever, holding whatever the child holds, until it is killed.
pub async fn park() -> ! {
    std::future::pending::<()>().await;
    unreachable!("pending() never completes")
}

/// A child process re-running this test binary; killed with SIGKILL when dropped.
#[derive(Debug)]
pub struct ChildProcess {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl ChildProcess {
    /// Re-runs the current test binary, running only the test named `test` (its name
    /// within the binary, e.g. `child_entry_holds_lock` or `module::name`), with `role` and
    /// `arg` in its environment (see [`role_arg`]). Server URLs and other variables are
    /// inherited.
    pub fn spawn(test: &str, role: &str, arg: &str) -> Self {
        Self::spawn_under(&[], test, role, arg)
    }

    /// As [`spawn`](Self::spawn), with the test binary run by `wrapper` (a program and its
    /// first arguments, e.g. `["faketime", "-f", "+10d"]`), which gets the binary's path
    /// and arguments after its own. An empty `wrapper` runs the binary itself.
    pub fn spawn_under(wrapper: &[&str], test: &str, role: &str, arg: &str) -> Self {
        let exe = std::env::current_exe().expect("the test binary's path");
        let mut command = match wrapper.split_first() {
            Some((program, first)) => {
                let mut command = Command::new(program);
                command.args(first).arg(exe);
                command
            }
            None => Command::new(exe),
        };
        let mut child = command
            .args(["--exact", test, "--nocapture", "--test-threads", "1"])
            .env(ROLE_VAR, role)
            .env(ARG_VAR, arg)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("spawn the child test process");
        let stdout = child.stdout.take().expect("piped stdout");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines }
    }

    /// Waits for a stdout line containing `prefix` and returns it from `prefix` on. (The
    /// test harness may have printed `test name ... ` on the same line first.)
    ///
    /// # Panics
    ///
    /// When no such line arrives within `timeout` or the child exits first.
    pub fn wait_for_line(&mut self, prefix: &str, timeout: Duration) -> String {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.contains(prefix) => {
                    let start = line.find(prefix).unwrap_or_default();
                    return line[start..].to_owned();
                }
                Ok(_) => continue,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    panic!("child did not print a line starting with {prefix:?} within {timeout:?}")
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status = self.child.wait().ok();
                    panic!("child exited ({status:?}) before printing {prefix:?}")
                }
            }
        }
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Kills the child with SIGKILL (`kill -9`) and reaps it: it gets no chance to
    /// release anything.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        self.kill9();
    }
}
