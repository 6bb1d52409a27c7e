//! Private servers die with the test process that started them, whatever way it ends.
//!
//! A server's owner kills it on drop, but a test process that is killed (a nextest
//! timeout, `kill -9`), aborts, or keeps its last store alive until `exit` runs no
//! destructor, and its servers would live on. So every server the kit spawns gets a
//! watchdog: a small detached shell that checks once a second whether the test process is
//! still there, and when it is gone, kills the server — only if that pid is still the
//! server (its command line still names the server's own marker, such as its port), so a
//! reused pid is never hit. The watchdog ends by itself as soon as the server is gone.

use std::process::{Command, Stdio};

/// Watches `server_pid` for the life of this process (or, while a shared deployment
/// starts, of the run that owns it: see `shared`); `marker` is a text its command line
/// (`/proc/<pid>/cmdline`) contains, e.g. `:6380` for a server on port 6380.
/// Best effort: without `sh`, the server is only killed by its owner's drop.
pub(crate) fn reap_with_this_process(server_pid: u32, marker: &str) {
    let me = super::shared::reap_owner();
    let marker = marker.replace('\'', "");
    let script = format!(
        "while kill -0 {me} 2>/dev/null && kill -0 {server_pid} 2>/dev/null; do sleep 1; done; \
         if ! kill -0 {me} 2>/dev/null && tr '\\0' ' ' < /proc/{server_pid}/cmdline 2>/dev/null | grep -qF -- '{marker}'; \
         then kill -9 {server_pid} 2>/dev/null; fi"
    );
    // The shell is not waited for: it outlives this process by design (init reaps it).
    let _ = Command::new("sh")
        .arg("-c")
        .arg(script)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn();
}
