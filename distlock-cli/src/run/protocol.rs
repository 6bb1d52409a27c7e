//! What `distlock run` and its keeper process say to each other, how they meet, and the
//! clock they share.
//!
//! The keeper is the `distlock` binary itself, started with a hidden first argument. It
//! connects back to a Unix socket distlock listens on: that connection is its lifeline —
//! the kernel closes distlock's end when distlock dies, however it dies, and the keeper
//! reads end-of-file. Messages are lines of text; distlock's first is a deadline, and the
//! keeper starts the command only once it has it:
//!
//! | from → to | line | meaning |
//! |---|---|---|
//! | distlock → keeper | `deadline NS` | kill the command tree if no later deadline arrives by `NS` (`CLOCK_MONOTONIC`, ns) |
//! | distlock → keeper | `term` | the lease is lost: SIGTERM to the command tree |
//! | distlock → keeper | `kill` | SIGKILL to the command tree now |
//! | keeper → distlock | `pid N` | the command runs as pid N, the leader of its process group |
//! | keeper → distlock | `not-started S` | the command could not be started; exit status S (126, 127) |
//! | keeper → distlock | `expired` | no deadline came in time; the keeper killed the command tree |

use std::io;
use std::os::unix::net::SocketAddr;
use std::path::PathBuf;

/// The first argument that makes the binary a keeper:
/// `distlock __distlock-keeper RENDEZVOUS KILL_GRACE_MS -- CMD [ARGS…]`.
pub(super) const KEEPER: &str = "__distlock-keeper";

/// The first argument that makes the binary the command's launcher:
/// `distlock __distlock-exec KEEPER_PID PROGRAM_PATH -- ARGV0 [ARGS…]`. It sets the
/// parent-death signal (Linux) and replaces itself with the command.
pub(super) const EXEC: &str = "__distlock-exec";

/// A line from distlock to its keeper.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ToKeeper {
    /// The moment (`CLOCK_MONOTONIC`, ns) by which the command tree must be dead unless a
    /// later deadline arrives.
    Deadline(u64),
    /// SIGTERM to the command tree.
    Terminate,
    /// SIGKILL to the command tree.
    Kill,
}

/// A line from the keeper to distlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FromKeeper {
    /// The command runs with this pid (and process group).
    Started(i32),
    /// The command could not be started; the status is 126 or 127.
    NotStarted(u8),
    /// The keeper's deadline passed: it killed the command tree.
    Expired,
}

impl ToKeeper {
    pub(super) fn line(self) -> String {
        match self {
            Self::Deadline(at) => format!("deadline {at}\n"),
            Self::Terminate => "term\n".to_owned(),
            Self::Kill => "kill\n".to_owned(),
        }
    }

    pub(super) fn parse(line: &str) -> Option<Self> {
        match line.trim_end().split_once(' ') {
            Some(("deadline", at)) => at.parse().ok().map(Self::Deadline),
            None if line.trim_end() == "term" => Some(Self::Terminate),
            None if line.trim_end() == "kill" => Some(Self::Kill),
            _ => None,
        }
    }
}

impl FromKeeper {
    pub(super) fn line(self) -> String {
        match self {
            Self::Started(pid) => format!("pid {pid}\n"),
            Self::NotStarted(status) => format!("not-started {status}\n"),
            Self::Expired => "expired\n".to_owned(),
        }
    }

    pub(super) fn parse(line: &str) -> Option<Self> {
        match line.trim_end().split_once(' ') {
            Some(("pid", pid)) => pid.parse().ok().map(Self::Started),
            Some(("not-started", status)) => status.parse().ok().map(Self::NotStarted),
            None if line.trim_end() == "expired" => Some(Self::Expired),
            _ => None,
        }
    }
}

/// The socket address of a rendezvous name: an abstract socket on Linux (no file to
/// clean up, even after SIGKILL), a path elsewhere.
pub(super) fn address(rendezvous: &str) -> io::Result<SocketAddr> {
    #[cfg(target_os = "linux")]
    {
        use std::os::linux::net::SocketAddrExt;
        SocketAddr::from_abstract_name(rendezvous)
    }
    #[cfg(not(target_os = "linux"))]
    {
        SocketAddr::from_pathname(rendezvous)
    }
}

/// The binary to start a keeper or launcher with: this very executable, even if its
/// file was replaced or removed since distlock started (Linux).
pub(super) fn self_exe() -> io::Result<PathBuf> {
    if cfg!(target_os = "linux") {
        Ok(PathBuf::from("/proc/self/exe"))
    } else {
        std::env::current_exe()
    }
}

/// Now on `CLOCK_MONOTONIC`, in nanoseconds: the clock both processes read deadlines on.
pub(super) fn monotonic_now() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(now) => {
            let nanos = std::time::Duration::from(now).as_nanos();
            u64::try_from(nanos).unwrap_or(u64::MAX)
        }
        // Cannot fail for CLOCK_MONOTONIC; "now" would then be 0 and no deadline passes.
        Err(_) => 0,
    }
}

/// `instant` on [`monotonic_now`]'s scale.
pub(super) fn monotonic_at(instant: std::time::Instant) -> u64 {
    let (now_instant, now) = (std::time::Instant::now(), monotonic_now());
    let ahead = |duration: std::time::Duration| u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
    match instant.checked_duration_since(now_instant) {
        Some(later) => now.saturating_add(ahead(later)),
        None => now.saturating_sub(ahead(now_instant.duration_since(instant))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_round_trip() {
        for message in [ToKeeper::Deadline(12_345), ToKeeper::Terminate, ToKeeper::Kill] {
            assert_eq!(ToKeeper::parse(&message.line()), Some(message));
        }
        for message in [FromKeeper::Started(42), FromKeeper::NotStarted(127), FromKeeper::Expired] {
            assert_eq!(FromKeeper::parse(&message.line()), Some(message));
        }
        assert_eq!(ToKeeper::parse("deadline soon\n"), None);
        assert_eq!(FromKeeper::parse("pid\n"), None);
    }

    #[test]
    fn the_shared_clock_agrees_with_instant() {
        let in_a_second = std::time::Instant::now() + std::time::Duration::from_secs(1);
        let delta = monotonic_at(in_a_second).saturating_sub(monotonic_now());
        assert!((900_000_000..=1_000_000_000).contains(&delta), "{delta}");
    }
}
