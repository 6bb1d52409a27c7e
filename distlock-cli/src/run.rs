//! `distlock run`: a command under an auto-renewed lock.
//!
//! The command runs in its own process group, so that a lost lease stops everything it
//! started (SIGTERM to the group, then SIGKILL after the grace period), not only its
//! first process. When distlock owns the terminal's foreground, it hands the foreground
//! to that group for the command's lifetime (as a shell does for a job), so the command
//! can read the terminal and gets Ctrl-C from it directly; it takes it back afterwards.

use std::ffi::OsString;
use std::io::{ErrorKind, IsTerminal};
use std::process::ExitStatus;
use std::time::Duration;

use distlock::{DistributedLock, LockManager, LockOptions};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::cli::RunArgs;
use crate::exit::{self, Failure};
use crate::store;

/// How long background releases (of a cancelled acquisition) may take before exiting.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// Runs `args.command` under the lock and returns the exit status.
pub(crate) async fn run(url: Option<&str>, args: RunArgs) -> Result<u8, Failure> {
    // The command must be dead before the store can hand the key to another owner: the
    // loss is signalled at least the kill grace (and at least the default fifth of the TTL)
    // before that moment.
    distlock::Ttl::new(args.ttl)?;
    let loss_margin = (args.ttl / LockOptions::DEFAULT_LOSS_MARGIN_DIVISOR).max(args.kill_grace);
    if loss_margin >= args.ttl {
        return Err(Failure::usage(format!(
            "--kill-grace {} does not fit in --ttl {}: after a lost lease the command must be killed before \
             another owner can take the lock; shorten --kill-grace or lengthen --ttl",
            humantime::format_duration(args.kill_grace),
            humantime::format_duration(args.ttl),
        )));
    }
    let mut options = LockOptions::new().wait(args.wait).retry_interval(args.retry).loss_margin(loss_margin);
    options = match args.renew_every {
        Some(every) => options.renew_every(every),
        None => options.auto_renew(),
    };
    options.validate(args.ttl)?;
    let url = store::require_url(url, "run")?;
    store::refuse_memory(url, "run")?;
    // Installed before anything slow, so that Ctrl-C while connecting or waiting ends
    // distlock cleanly rather than killing it mid-acquisition.
    let mut signals = Signals::install()?;
    let key = args.key.as_str().to_owned();
    let locks = tokio::select! {
        store = store::connect(url) => LockManager::new(store?),
        signal = signals.recv() => return Ok(interrupted(signal, "connecting to the store")),
    };
    let acquired = tokio::select! {
        acquired = locks.lock_opts(&key, args.ttl, &options) => acquired,
        signal = signals.recv() => {
            flush(&locks).await;
            return Ok(interrupted(signal, "waiting for the lock"));
        }
    };
    let lock = match acquired {
        Ok(lock) => lock,
        Err(error) if error.is_not_acquired() => {
            let waited = humantime::format_duration(args.wait);
            eprintln!("distlock: {error} (waited {waited})");
            return Ok(exit::NOT_ACQUIRED);
        }
        Err(error) => {
            flush(&locks).await;
            return Err(error.into());
        }
    };
    let code = supervise(&lock, &args.command, args.kill_grace, &mut signals).await;
    let code = finish(lock, code).await;
    flush(&locks).await;
    Ok(code)
}

/// How the command ended.
enum Outcome {
    /// It exited on its own (or after a forwarded signal) with this status.
    Exited(u8),
    /// The lease was lost; the command was stopped.
    LeaseLost,
    /// It could not be started; the status is 126 or 127.
    NotStarted(u8),
}

/// Starts the command and watches it, the lease and distlock's signals.
async fn supervise(lock: &DistributedLock, argv: &[OsString], kill_grace: Duration, signals: &mut Signals) -> Outcome {
    let Some((program, program_args)) = argv.split_first() else {
        return Outcome::NotStarted(exit::COMMAND_NOT_FOUND);
    };
    let fence = lock.fence().map(|fence| fence.to_string()).unwrap_or_default();
    let mut child = match tokio::process::Command::new(program)
        .args(program_args)
        .env("DISTLOCK_KEY", lock.key().as_str())
        .env("DISTLOCK_TOKEN", lock.token().as_str())
        .env("DISTLOCK_FENCE", fence)
        .process_group(0)
        .spawn()
    {
        Ok(child) => child,
        Err(error) => {
            let program = program.to_string_lossy();
            if error.kind() == ErrorKind::NotFound {
                eprintln!("distlock: `{program}`: command not found");
                return Outcome::NotStarted(exit::COMMAND_NOT_FOUND);
            }
            eprintln!("distlock: cannot run `{program}`: {error}");
            return Outcome::NotStarted(exit::CANNOT_EXECUTE);
        }
    };
    let Some(group) = child.id().and_then(|id| i32::try_from(id).ok()).map(Pid::from_raw) else {
        // Already reaped: it can only have exited.
        return match child.wait().await {
            Ok(status) => Outcome::Exited(status_code(status)),
            Err(_) => Outcome::Exited(exit::SOFTWARE),
        };
    };
    let terminal = Foreground::hand_to(group);

    let mut lost = false;
    let mut kill_at: Option<Instant> = None;
    let status = loop {
        tokio::select! {
            status = child.wait() => break status,
            reason = lock.lost(), if !lost => {
                lost = true;
                eprintln!(
                    "distlock: lease of lock `{}` lost ({reason}); stopping the command: SIGTERM now, SIGKILL in {}",
                    lock.key(),
                    humantime::format_duration(kill_grace),
                );
                send(group, Signal::SIGTERM);
                kill_at = Some(Instant::now() + kill_grace);
            }
            () = sleep_until(kill_at) => {
                eprintln!("distlock: the command outlived --kill-grace; sending SIGKILL");
                send(group, Signal::SIGKILL);
                kill_at = None;
            }
            signal = signals.recv() => send(group, signal),
        }
    };
    terminal.restore();
    if lost {
        // Whatever the group left behind must not run on without the lock either.
        send(group, Signal::SIGKILL);
        return Outcome::LeaseLost;
    }
    match status {
        Ok(status) => Outcome::Exited(status_code(status)),
        Err(error) => {
            eprintln!("distlock: lost track of the command: {error}");
            Outcome::Exited(exit::SOFTWARE)
        }
    }
}

/// Releases the lock after the command and turns the outcome into an exit status.
async fn finish(lock: DistributedLock, outcome: Outcome) -> u8 {
    let key = lock.key().as_str().to_owned();
    let code = match outcome {
        Outcome::LeaseLost => {
            drop(lock);
            return exit::LEASE_LOST;
        }
        Outcome::Exited(code) | Outcome::NotStarted(code) => code,
    };
    if lock.is_lost() {
        eprintln!(
            "distlock: lease of lock `{key}` was lost as the command ended; its work may not have been protected"
        );
        drop(lock);
        return exit::LEASE_LOST;
    }
    match lock.release().await {
        Ok(true) => code,
        Ok(false) => {
            eprintln!("distlock: lock `{key}` had already expired or been released when the command ended");
            exit::LEASE_LOST
        }
        Err(error) => {
            Failure::from(error).report();
            eprintln!("distlock: lock `{key}` will be freed when its lease expires");
            code
        }
    }
}

/// The status to exit with for `status`, as shells do: the code, or 128 + the signal.
fn status_code(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code & 0xff).unwrap_or(u8::MAX),
        (None, Some(signal)) => exit::signal_status(signal),
        (None, None) => exit::SOFTWARE,
    }
}

fn interrupted(signal: Signal, during: &str) -> u8 {
    eprintln!("distlock: {} while {during}; nothing was run", signal.as_str());
    exit::signal_status(signal as i32)
}

async fn flush(locks: &LockManager) {
    if tokio::time::timeout(FLUSH_TIMEOUT, locks.flush_releases()).await.is_err() {
        eprintln!("distlock: a lock release did not finish in time; the lock will be freed when its lease expires");
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(deadline) => tokio::time::sleep_until(deadline).await,
        None => std::future::pending().await,
    }
}

/// Sends `signal` to the command's process group; a group that is already gone is fine.
fn send(group: Pid, signal: Signal) {
    if let Err(error) = killpg(group, signal) {
        if error != nix::errno::Errno::ESRCH {
            eprintln!("distlock: cannot send {} to the command: {error}", signal.as_str());
        }
    }
}

/// The signals distlock passes on to the command.
struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> Result<Self, Failure> {
        let listen = |kind: SignalKind| {
            signal(kind)
                .map_err(|error| Failure::new(exit::SOFTWARE, format!("cannot install a signal handler: {error}")))
        };
        Ok(Self {
            interrupt: listen(SignalKind::interrupt())?,
            terminate: listen(SignalKind::terminate())?,
            hangup: listen(SignalKind::hangup())?,
            quit: listen(SignalKind::quit())?,
        })
    }

    /// The next signal distlock received.
    async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.interrupt.recv() => Signal::SIGINT,
            _ = self.terminate.recv() => Signal::SIGTERM,
            _ = self.hangup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
        }
    }
}

/// The terminal's foreground, handed to the command's group while it runs.
struct Foreground {
    /// distlock's own group, to give the foreground back to; `None` when it was not
    /// handed over (no terminal, or distlock runs in the background).
    restore_to: Option<Pid>,
}

impl Foreground {
    fn hand_to(group: Pid) -> Self {
        let stdin = std::io::stdin();
        if !stdin.is_terminal() {
            return Self { restore_to: None };
        }
        let ours = nix::unistd::getpgrp();
        if nix::unistd::tcgetpgrp(&stdin).ok() != Some(ours) {
            return Self { restore_to: None };
        }
        if nix::unistd::tcsetpgrp(&stdin, group).is_err() {
            return Self { restore_to: None };
        }
        // The command may have tried to read the terminal before it was handed over, and
        // been stopped for it (SIGTTIN): wake it.
        send(group, Signal::SIGCONT);
        Self { restore_to: Some(ours) }
    }

    fn restore(self) {
        let Some(ours) = self.restore_to else { return };
        // distlock is now in a background group: taking the foreground back raises
        // SIGTTOU unless this thread blocks it.
        let mut ttou = nix::sys::signal::SigSet::empty();
        ttou.add(Signal::SIGTTOU);
        let mut previous = nix::sys::signal::SigSet::empty();
        let blocked = nix::sys::signal::pthread_sigmask(
            nix::sys::signal::SigmaskHow::SIG_BLOCK,
            Some(&ttou),
            Some(&mut previous),
        );
        if let Err(error) = nix::unistd::tcsetpgrp(std::io::stdin(), ours) {
            tracing::debug!(%error, "could not take the terminal's foreground back");
        }
        if blocked.is_ok() {
            let _ = nix::sys::signal::pthread_sigmask(nix::sys::signal::SigmaskHow::SIG_SETMASK, Some(&previous), None);
        }
    }
}
