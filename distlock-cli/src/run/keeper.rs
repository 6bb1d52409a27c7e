//! The keeper: a small process between `distlock run` and the command, which kills the
//! whole command tree when distlock can no longer hold the lock for it.
//!
//! distlock → keeper → launcher → (exec) command → …
//!
//! - The keeper connects back to distlock over a Unix socket. When distlock dies, even of
//!   SIGKILL, the kernel closes its end and the keeper reads end-of-file: it then sends
//!   SIGKILL to the command's process group and to every process below itself, until none
//!   is left. A `kill` order from distlock does the same; `term` sends SIGTERM.
//! - On Linux it is a child subreaper (`PR_SET_CHILD_SUBREAPER`), so a process the command
//!   detaches (double fork, `setsid`) is re-parented to it rather than to init, and stays
//!   findable below it.
//! - distlock sends it the lease's deadline after every confirmed renewal; if the deadline
//!   passes without a newer one — distlock is stopped (SIGSTOP) or hung — the keeper kills
//!   the tree by itself, no later than distlock would have.
//! - When the command exits, processes it left behind get SIGTERM, then SIGKILL after the
//!   kill grace, before distlock releases the lock.
//! - It ignores (blocks) the signals distlock forwards and job-control stops, so a signal
//!   meant for the command or a `kill` of distlock's whole process group does not take it
//!   down first. Its exit status is the command's.
//!
//! The launcher (Linux) sets `PR_SET_PDEATHSIG` = SIGKILL on itself, checks that the
//! keeper did not die before that, and `exec`s the command: should the keeper itself be
//! killed, the command dies with it.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{getpid, getppid, Pid};

use super::protocol::{self, FromKeeper, ToKeeper};
use super::tree::Tree;
use crate::exit;

/// How often the keeper looks for processes left in the tree while killing it.
const RESCAN: Duration = Duration::from_millis(50);

/// `distlock __distlock-keeper RENDEZVOUS KILL_GRACE_MS -- CMD [ARGS…]`; returns the
/// command's exit status.
pub(super) fn keeper(args: &[OsString]) -> u8 {
    let [rendezvous, grace, separator, command @ ..] = args else { return misuse(protocol::KEEPER) };
    let (Some(rendezvous), Some(grace)) = (rendezvous.to_str(), grace.to_str().and_then(|ms| ms.parse().ok())) else {
        return misuse(protocol::KEEPER);
    };
    if separator != "--" || command.is_empty() {
        return misuse(protocol::KEEPER);
    }
    block_signals();
    let distlock = getppid();
    #[cfg(target_os = "linux")]
    {
        let _ = nix::sys::prctl::set_name(c"distlock-keeper");
        if let Err(error) = nix::sys::prctl::set_child_subreaper(true) {
            eprintln!(
                "distlock: cannot become a child subreaper ({error}); processes the command detaches may outlive it"
            );
        }
    }
    // distlock already gone (or not the one who started this): run nothing.
    let Ok(stream) = protocol::address(rendezvous).and_then(|address| UnixStream::connect_addr(&address)) else {
        return exit::SOFTWARE;
    };
    let Ok(mut report) = stream.try_clone() else { return exit::SOFTWARE };
    let mut tell = |message: FromKeeper| {
        let _ = report.write_all(message.line().as_bytes());
    };
    // distlock sends the lease's first deadline before anything else: the command never
    // runs without one.
    let mut orders = BufReader::new(stream);
    let mut first = String::new();
    let deadline = match orders.read_line(&mut first).map(|_| ToKeeper::parse(&first)) {
        Ok(Some(ToKeeper::Deadline(at))) => at,
        _ => return exit::SOFTWARE,
    };

    let program = &command[0];
    let path = match resolve(program) {
        Ok(path) => path,
        Err(not_started) => {
            eprintln!("distlock: {}", not_started.message);
            tell(FromKeeper::NotStarted(not_started.status));
            return not_started.status;
        }
    };
    let me = getpid();
    let launched = protocol::self_exe().and_then(|launcher| {
        std::process::Command::new(launcher)
            .arg0("distlock")
            .arg(protocol::EXEC)
            .arg(me.to_string())
            .arg(&path)
            .arg("--")
            .args(command)
            .process_group(0)
            .spawn()
    });
    let group = match launched.map(|child| i32::try_from(child.id())) {
        // The child is reaped below, by pid -1.
        Ok(Ok(pid)) => Pid::from_raw(pid),
        Ok(Err(_)) => return exit::SOFTWARE,
        Err(error) => {
            eprintln!("distlock: cannot run `{}`: {error}", program.to_string_lossy());
            tell(FromKeeper::NotStarted(exit::CANNOT_EXECUTE));
            return exit::CANNOT_EXECUTE;
        }
    };
    tell(FromKeeper::Started(group.as_raw()));

    let (events, inbox) = mpsc::channel();
    let sender = events.clone();
    std::thread::spawn(move || read_orders(orders, &sender));
    let reaped = events.clone();
    std::thread::spawn(move || reap(&reaped));
    // `events` stays alive here, so the inbox never disconnects while we wait on it.
    let watch = Watch { tree: Tree::new(me, group), command: group, grace: Duration::from_millis(grace), distlock };
    let ended = watch.run(&inbox, deadline);
    drop(events);
    if ended.expired {
        tell(FromKeeper::Expired);
    }
    ended.status.unwrap_or(exit::SOFTWARE)
}

/// `distlock __distlock-exec KEEPER_PID PROGRAM_PATH -- ARGV0 [ARGS…]`: replaces itself
/// with the command; returns only when that fails.
pub(super) fn launch(args: &[OsString]) -> u8 {
    let [keeper, path, separator, argv0, rest @ ..] = args else { return misuse(protocol::EXEC) };
    let Some(keeper) = keeper.to_str().and_then(|pid| pid.parse().ok()).map(Pid::from_raw) else {
        return misuse(protocol::EXEC);
    };
    if separator != "--" {
        return misuse(protocol::EXEC);
    }
    #[cfg(target_os = "linux")]
    {
        if let Err(error) = nix::sys::prctl::set_pdeathsig(Signal::SIGKILL) {
            eprintln!("distlock: cannot set the command's parent-death signal: {error}");
            return exit::SOFTWARE;
        }
        // The keeper may have died before the signal was armed: nothing would stop the
        // command then, so it must not start.
        if getppid() != keeper {
            return exit::SOFTWARE;
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = keeper;
    // The keeper's blocked signals were inherited and survive `exec`: the command must
    // start with none blocked, or it could not be stopped with SIGTERM.
    if let Err(error) = SigSet::empty().thread_set_mask() {
        eprintln!("distlock: cannot unblock signals for the command: {error}");
        return exit::SOFTWARE;
    }
    let error = std::process::Command::new(path).arg0(argv0).args(rest).exec();
    eprintln!("distlock: cannot run `{}`: {error}", argv0.to_string_lossy());
    if error.kind() == std::io::ErrorKind::NotFound {
        exit::COMMAND_NOT_FOUND
    } else {
        exit::CANNOT_EXECUTE
    }
}

fn misuse(marker: &str) -> u8 {
    eprintln!("distlock: `{marker}` is started by `distlock run`, not by hand");
    exit::USAGE
}

/// Blocks the signals distlock forwards to the command (and job-control stops) in this
/// process, so that they never end or stop the keeper. Threads started later inherit the
/// mask; the launcher clears it before it becomes the command.
fn block_signals() {
    let mut set = SigSet::empty();
    for signal in [
        Signal::SIGINT,
        Signal::SIGTERM,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
    ] {
        set.add(signal);
    }
    if let Err(error) = set.thread_block() {
        eprintln!("distlock: cannot block signals in the keeper: {error}");
    }
}

/// Why the command could not be started.
#[derive(Debug)]
struct NotStarted {
    status: u8,
    message: String,
}

/// Finds `program` as `execvp` would (a name with a `/` is a path; otherwise the first
/// executable file of that name in `PATH`), so that "not found" (127) and "cannot
/// execute" (126) are told apart here, before the command is started, from statuses the
/// command itself returns.
fn resolve(program: &std::ffi::OsStr) -> Result<PathBuf, NotStarted> {
    use std::os::unix::ffi::OsStrExt;
    let shown = program.to_string_lossy();
    let denied =
        |error: String| NotStarted { status: exit::CANNOT_EXECUTE, message: format!("cannot run `{shown}`: {error}") };
    if program.as_bytes().contains(&b'/') {
        let path = PathBuf::from(program);
        return match executable(&path) {
            Ok(()) => Ok(path),
            Err(None) => Err(NotStarted {
                status: exit::COMMAND_NOT_FOUND,
                message: format!("`{shown}`: no such file or directory"),
            }),
            Err(Some(error)) => Err(denied(error)),
        };
    }
    let search = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/bin:/usr/bin"));
    let mut refused = None;
    for dir in std::env::split_paths(&search) {
        let dir = if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir };
        let candidate = dir.join(program);
        match executable(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(None) => {}
            Err(Some(error)) => {
                refused.get_or_insert(error);
            }
        }
    }
    match refused {
        Some(error) => Err(denied(error)),
        None => Err(NotStarted { status: exit::COMMAND_NOT_FOUND, message: format!("`{shown}`: command not found") }),
    }
}

/// `Ok` for an executable file; `Err(None)` when nothing is there, `Err(Some(why))` when
/// something is there that cannot be executed.
fn executable(path: &Path) -> Result<(), Option<String>> {
    match std::fs::metadata(path) {
        Err(error) if matches!(error.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => {
            Err(None)
        }
        Err(error) => Err(Some(error.to_string())),
        Ok(meta) if meta.is_dir() => Err(Some("is a directory".to_owned())),
        Ok(_) => nix::unistd::access(path, nix::unistd::AccessFlags::X_OK)
            .map_err(|errno| Some(std::io::Error::from(errno).to_string())),
    }
}

/// What the keeper's threads report to its main thread.
#[derive(Debug)]
enum Event {
    /// An order from distlock.
    Order(ToKeeper),
    /// distlock closed the connection, or died.
    Hangup,
    /// A child (the command, or an orphan re-parented to the keeper) ended.
    Exited { pid: Pid, status: u8 },
    /// The keeper has no child left: the whole tree is gone.
    NoChildren,
}

fn read_orders(orders: BufReader<UnixStream>, events: &Sender<Event>) {
    for line in orders.lines() {
        let Ok(line) = line else { break };
        if let Some(order) = ToKeeper::parse(&line) {
            if events.send(Event::Order(order)).is_err() {
                return;
            }
        }
    }
    let _ = events.send(Event::Hangup);
}

fn reap(events: &Sender<Event>) {
    loop {
        let event = match waitpid(None::<Pid>, None) {
            Ok(WaitStatus::Exited(pid, code)) => {
                Event::Exited { pid, status: u8::try_from(code & 0xff).unwrap_or(u8::MAX) }
            }
            Ok(WaitStatus::Signaled(pid, signal, _)) => {
                Event::Exited { pid, status: exit::signal_status(signal as i32) }
            }
            Ok(_) | Err(Errno::EINTR) => continue,
            // ECHILD: no child left — nothing below the keeper is alive any more.
            Err(_) => {
                let _ = events.send(Event::NoChildren);
                return;
            }
        };
        if events.send(event).is_err() {
            return;
        }
    }
}

/// How far the keeper is in stopping the tree.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// Not stopping: the command runs.
    No,
    /// The command exited; what it left got SIGTERM and gets SIGKILL at this moment.
    Draining(Instant),
    /// SIGKILL to everything, until nothing is left.
    Killing,
}

/// How the watch ended.
#[derive(Debug)]
struct Ended {
    /// The command's exit status, as shells report it.
    status: Option<u8>,
    /// Whether the keeper's own deadline killed the tree.
    expired: bool,
}

struct Watch {
    tree: Tree,
    command: Pid,
    grace: Duration,
    distlock: Pid,
}

impl Watch {
    fn run(&self, inbox: &mpsc::Receiver<Event>, first_deadline: u64) -> Ended {
        let mut ended = Ended { status: None, expired: false };
        let mut deadline = Some(first_deadline);
        // distlock saw the loss itself (a `term` order): it says so; the keeper stays quiet.
        let mut loss_reported = false;
        let mut stop = Stop::No;
        let mut children = true;
        loop {
            if !children && !self.tree.group_alive() {
                return ended;
            }
            let event = match self.next_wake(stop, deadline, children) {
                Some(wait) => inbox.recv_timeout(wait),
                None => inbox.recv().map_err(|_| RecvTimeoutError::Disconnected),
            };
            match event {
                Ok(Event::Order(ToKeeper::Deadline(at))) => deadline = Some(at),
                Ok(Event::Order(ToKeeper::Terminate)) => {
                    loss_reported = true;
                    if stop != Stop::Killing {
                        self.tree.terminate();
                    }
                }
                Ok(Event::Order(ToKeeper::Kill)) => stop = self.kill(),
                Ok(Event::Hangup) => {
                    if stop != Stop::Killing {
                        eprintln!(
                            "distlock: distlock (pid {}) is gone; its keeper kills the command and every process it started",
                            self.distlock
                        );
                        stop = self.kill();
                    }
                }
                Ok(Event::Exited { pid, status }) if pid == self.command => {
                    ended.status = Some(status);
                    if stop == Stop::No {
                        stop = self.drain();
                    }
                }
                Ok(Event::Exited { .. }) => {
                    if stop == Stop::Killing {
                        self.tree.signal(Signal::SIGKILL);
                    }
                }
                Ok(Event::NoChildren) => children = false,
                Err(RecvTimeoutError::Timeout) => {
                    let expired = deadline.is_some_and(|at| protocol::monotonic_now() >= at);
                    if expired && stop != Stop::Killing {
                        if !loss_reported {
                            eprintln!(
                                "distlock: no lease renewal reached the keeper before the lease deadline (is distlock, pid {}, \
                                 stopped or hung?); killing the command and every process it started",
                                self.distlock
                            );
                        }
                        ended.expired = true;
                        stop = self.kill();
                    } else if matches!(stop, Stop::Draining(at) if Instant::now() >= at) {
                        eprintln!("distlock: processes the command left outlived --kill-grace; sending SIGKILL");
                        stop = self.kill();
                    } else if stop == Stop::Killing {
                        self.tree.signal(Signal::SIGKILL);
                    }
                }
                Err(RecvTimeoutError::Disconnected) => return ended,
            }
        }
    }

    /// When to look again without an event: at the deadline, at the end of the grace, or
    /// soon while killing (an orphan may be re-parented to the keeper at any time) or
    /// while only the process group is left to watch.
    fn next_wake(&self, stop: Stop, deadline: Option<u64>, children: bool) -> Option<Duration> {
        if stop == Stop::Killing || !children {
            return Some(RESCAN);
        }
        let until_deadline = deadline.map(|at| Duration::from_nanos(at.saturating_sub(protocol::monotonic_now())));
        let until_kill = match stop {
            Stop::Draining(at) => Some(at.saturating_duration_since(Instant::now())),
            _ => None,
        };
        match (until_deadline, until_kill) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn kill(&self) -> Stop {
        self.tree.signal(Signal::SIGKILL);
        Stop::Killing
    }

    /// The command exited: what it left gets SIGTERM now and SIGKILL after the grace.
    fn drain(&self) -> Stop {
        let left = self.tree.count();
        if left == 0 {
            return Stop::No;
        }
        eprintln!(
            "distlock: the command exited and left {left} process{} running; stopping {} before the lock is released: \
             SIGTERM now, SIGKILL in {}",
            if left == 1 { "" } else { "es" },
            if left == 1 { "it" } else { "them" },
            humantime::format_duration(self.grace),
        );
        self.tree.terminate();
        Stop::Draining(Instant::now() + self.grace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn programs_are_found_as_execvp_finds_them() {
        assert!(resolve("sh".as_ref()).is_ok_and(|path| path.ends_with("sh")));
        let missing = resolve("distlock-no-such-command".as_ref()).unwrap_err();
        assert_eq!(missing.status, exit::COMMAND_NOT_FOUND, "{}", missing.message);
        let missing = resolve("/nonexistent/tool".as_ref()).unwrap_err();
        assert_eq!(missing.status, exit::COMMAND_NOT_FOUND, "{}", missing.message);
        let directory = resolve("/".as_ref()).unwrap_err();
        assert_eq!(directory.status, exit::CANNOT_EXECUTE, "{}", directory.message);
    }
}
