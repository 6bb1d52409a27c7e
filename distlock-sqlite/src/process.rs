//! Holder processes: who holds a lease (process id, its start time, its PID namespace)
//! and whether that process is still running. A leaf: imports nothing from the rest of
//! the crate.
//!
//! A process id alone is not an identity: the kernel reuses ids. The start time (field 22
//! of `/proc/<pid>/stat`, in clock ticks since boot) tells a reused id apart, and the PID
//! namespace (the inode of `/proc/self/ns/pid`) says whether an id means the same process
//! here as it did for the writer. A holder is judged gone only when that is certain: same
//! namespace, and no process with its id and start time (or only its zombie).

use std::io::ErrorKind;
use std::os::fd::OwnedFd;
use std::os::unix::fs::MetadataExt;
use std::sync::OnceLock;

use rustix::process::{pidfd_open, test_kill_process, Pid, PidfdFlags};
use tokio::io::unix::AsyncFd;

/// A process as stored with a lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ProcessId {
    /// The process id.
    pub(crate) pid: i64,
    /// Its start time, in clock ticks since boot (`/proc/<pid>/stat` field 22).
    pub(crate) start: i64,
    /// The inode of its PID namespace; 0 when unknown.
    pub(crate) namespace: i64,
}

/// What `/proc/<pid>/stat` says of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stat {
    /// The state letter (`R`, `S`, `Z`, …).
    pub(crate) state: char,
    /// Field 22: the start time in clock ticks since boot.
    pub(crate) start: i64,
}

/// Parses the text of `/proc/<pid>/stat`. The command name (field 2) is in parentheses
/// and may itself hold spaces and parentheses, so the fields are counted from the last `)`.
pub(crate) fn parse_stat(text: &str) -> Option<Stat> {
    let (_, rest) = text.rsplit_once(')')?;
    let mut fields = rest.split_ascii_whitespace();
    let state = fields.next()?.chars().next()?;
    // After the state (field 3), field 22 is the 19th field further on.
    let start = fields.nth(18)?.parse().ok()?;
    Some(Stat { state, start })
}

/// `/proc/<pid>/stat` of `pid`, or the I/O error.
pub(crate) fn read_stat(pid: i64) -> Result<Option<Stat>, std::io::Error> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    Ok(parse_stat(&text))
}

fn namespace_of_self() -> i64 {
    std::fs::metadata("/proc/self/ns/pid").map_or(0, |meta| i64::try_from(meta.ino()).unwrap_or(0))
}

/// This process, read once.
pub(crate) fn current() -> ProcessId {
    static CURRENT: OnceLock<ProcessId> = OnceLock::new();
    *CURRENT.get_or_init(|| {
        let pid = i64::from(std::process::id());
        let start = read_stat(pid).ok().flatten().map_or(0, |stat| stat.start);
        ProcessId { pid, start, namespace: namespace_of_self() }
    })
}

impl ProcessId {
    /// Whether this process is certainly gone: it ran in this process's PID namespace
    /// (so its id means the same here), and no process with its id runs now, or the one
    /// that does started at another time (a reused id), or it is a zombie (dead, not yet
    /// reaped by its parent). `false` whenever that cannot be known (another namespace,
    /// an unknown start time, a `/proc` that hides other users' processes).
    pub(crate) fn is_gone(&self) -> bool {
        let me = current();
        if self.namespace == 0 || self.namespace != me.namespace || self.start == 0 || self.pid <= 0 {
            return false;
        }
        if self.pid == me.pid {
            return self.start != me.start;
        }
        match read_stat(self.pid) {
            Ok(Some(stat)) => stat.start != self.start || matches!(stat.state, 'Z' | 'X' | 'x'),
            Ok(None) => false,
            // `/proc` mounted with `hidepid` hides processes of other users: ask the
            // kernel whether the id exists at all (EPERM: it does).
            Err(error) if error.kind() == ErrorKind::NotFound => self.pid_is_unused(),
            Err(_) => false,
        }
    }

    fn pid_is_unused(&self) -> bool {
        let Some(pid) = i32::try_from(self.pid).ok().and_then(Pid::from_raw) else { return false };
        matches!(test_kill_process(pid), Err(rustix::io::Errno::SRCH))
    }

    /// A handle that becomes readable when this process exits, for waiters to wake when
    /// a holder dies: [`Exit::Gone`] when it is gone already, [`Exit::Unknown`] when it
    /// cannot be watched (this process, another namespace, no pidfd support).
    pub(crate) fn exit_watch(&self) -> Exit {
        let me = current();
        if self.namespace == 0 || self.namespace != me.namespace || self.pid == me.pid || self.start == 0 {
            return Exit::Unknown;
        }
        let Some(pid) = i32::try_from(self.pid).ok().and_then(Pid::from_raw) else { return Exit::Unknown };
        let fd: OwnedFd = match pidfd_open(pid, PidfdFlags::NONBLOCK) {
            Ok(fd) => fd,
            Err(rustix::io::Errno::SRCH) => return Exit::Gone,
            Err(_) => return Exit::Unknown,
        };
        // The handle names whichever process has the id now: it is the holder only if the
        // start time still matches (checked after opening, so a reuse cannot slip between).
        if self.is_gone() {
            return Exit::Gone;
        }
        // `AsyncFd::new` is deprecated because it cannot know whether the caller owns the
        // descriptor; here it takes the `OwnedFd` itself, which nothing else can close.
        #[allow(deprecated)]
        let watch = AsyncFd::new(fd);
        watch.map_or(Exit::Unknown, |watch| Exit::Watch(ExitWatch(watch)))
    }
}

/// What [`ProcessId::exit_watch`] found.
#[derive(Debug)]
pub(crate) enum Exit {
    /// The process runs; the handle reports its exit.
    Watch(ExitWatch),
    /// The process is gone already.
    Gone,
    /// The process cannot be watched from here.
    Unknown,
}

/// A process handle (pidfd) that is readable once the process has exited.
#[derive(Debug)]
pub(crate) struct ExitWatch(AsyncFd<OwnedFd>);

impl ExitWatch {
    /// Completes when the process exits (at once if it has).
    pub(crate) async fn exited(&self) {
        // Readiness is all a pidfd reports; an error ends the wait just the same.
        let _ = self.0.readable().await;
    }
}

/// Completes when any of `watches` reports its process's exit; never when there are none.
pub(crate) async fn any_exited(watches: &[ExitWatch]) {
    if watches.is_empty() {
        return std::future::pending().await;
    }
    let mut exits: Vec<_> = watches.iter().map(|watch| Box::pin(watch.exited())).collect();
    std::future::poll_fn(|cx| {
        if exits.iter_mut().any(|exit| std::future::Future::poll(exit.as_mut(), cx).is_ready()) {
            std::task::Poll::Ready(())
        } else {
            std::task::Poll::Pending
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields_are_counted_from_the_last_parenthesis() {
        let text = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 1 2 0 0 20 0 1 0 987654 1000 10";
        assert_eq!(parse_stat(text), Some(Stat { state: 'S', start: 987_654 }));
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_alive_and_a_reused_id_is_not_it() {
        let me = current();
        assert!(me.start > 0 && me.namespace > 0, "{me:?}");
        assert!(!me.is_gone());
        assert!(ProcessId { start: me.start + 1, ..me }.is_gone(), "another start time: a reused id");
        assert!(!ProcessId { namespace: me.namespace + 1, start: me.start + 1, ..me }.is_gone(), "another namespace");
    }
}
