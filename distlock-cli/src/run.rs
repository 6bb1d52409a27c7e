//! `distlock run`: a command under an auto-renewed lock or lock group.
//!
//! The command runs below a keeper process ([`keeper`]), in its own process group, so
//! that a lost lease stops everything it started (SIGTERM, then SIGKILL after the grace
//! period), not only its first process — and so that nothing it started outlives
//! distlock, even when distlock is killed with SIGKILL. When distlock owns the terminal's
//! foreground, it hands the foreground to the command's group for its lifetime (as a shell
//! does for a job), so the command can read the terminal and gets Ctrl-C from it
//! directly; it takes it back afterwards.

mod held;
mod keeper;
mod link;
mod protocol;
mod tree;

use std::ffi::OsString;
use std::io::IsTerminal;
use std::time::Duration;

use distlock::{LockManager, LockOptions};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use tokio::signal::unix::{signal, SignalKind};
use tokio::time::Instant;

use crate::cli::RunArgs;
use crate::exit::{self, Failure};
use crate::store;
pub(crate) use held::Held;
use held::Wanted;
use link::Keeper;
use protocol::{FromKeeper, ToKeeper};

/// How long background releases (of a cancelled acquisition) may take before exiting.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(5);

/// The keeper and launcher processes are this binary started with a hidden first
/// argument: runs them and returns their exit status, or `None` for any other command
/// line.
pub(crate) fn helper_process() -> Option<u8> {
    let args: Vec<OsString> = std::env::args_os().collect();
    match args.get(1).and_then(|marker| marker.to_str()) {
        Some(protocol::KEEPER) => Some(keeper::keeper(&args[2..])),
        Some(protocol::EXEC) => Some(keeper::launch(&args[2..])),
        _ => None,
    }
}

/// The statuses `run` exits with for its own outcomes, after `--conflict-exit-code`,
/// `--lost-exit-code` and `--error-exit-code`.
#[derive(Debug, Clone, Copy)]
struct Statuses {
    conflict: u8,
    lost: u8,
    /// Replaces 69, 70, 126 and 127 when set.
    error: Option<u8>,
}

/// Records `--permits N` as the shared permits of each `--read` name that has none
/// recorded (the semaphore's size, set by its first user and read by every other and by
/// `distlock permits`); a name recorded with another size is a usage error.
async fn record_permits(
    locks: &LockManager,
    names: impl Iterator<Item = &distlock::LockKey>,
    permits: u32,
) -> Result<(), Failure> {
    // A store without groups refuses the acquisition itself, with its own message.
    let Some(groups) = locks.store().groups() else { return Ok(()) };
    for name in names {
        match groups.permits(&name.to_store_key(), distlock::LockMode::Shared).await? {
            None => locks.set_permits(name.as_str(), distlock::LockMode::Shared, Some(permits)).await?,
            Some(recorded) if recorded == permits => {}
            Some(recorded) => {
                return Err(Failure::usage(format!(
                    "`{name}` is a semaphore of {recorded} recorded permits; --permits {permits} disagrees \
                     (`distlock permits {name} --shared {permits}` changes the recorded size)"
                )))
            }
        }
    }
    Ok(())
}

/// How `run` ended, before it becomes an exit status.
#[derive(Debug)]
enum Ended {
    /// The command ran; its status.
    Command(u8),
    /// The lock (or a name of the group) was held by another owner until the wait ran out.
    NotAcquired,
    /// The lease was lost while the command ran (or as it ended).
    LeaseLost,
    /// The command could not be started: 126 or 127.
    NotStarted(u8),
    /// distlock got signal N while connecting or waiting: 128 + N.
    Interrupted(u8),
    /// distlock could not run its keeper, or lost it.
    Internal,
}

/// Runs `args.command` under the lock or group and returns the exit status.
pub(crate) async fn run(url: Option<&str>, args: RunArgs) -> Result<u8, Failure> {
    let statuses = Statuses {
        conflict: args.conflict_exit_code.unwrap_or(exit::NOT_ACQUIRED),
        lost: args.lost_exit_code.unwrap_or(exit::LEASE_LOST),
        error: args.error_exit_code,
    };
    match run_command(url, args).await {
        Ok(Ended::Command(code) | Ended::Interrupted(code)) => Ok(code),
        Ok(Ended::NotAcquired) => Ok(statuses.conflict),
        Ok(Ended::LeaseLost) => Ok(statuses.lost),
        Ok(Ended::NotStarted(code)) => Ok(statuses.error.unwrap_or(code)),
        Ok(Ended::Internal) => Ok(statuses.error.unwrap_or(exit::SOFTWARE)),
        Err(mut failure) => {
            // A wrong command line is always 64: the flags themselves may be what is wrong.
            if let Some(code) = statuses.error.filter(|_| failure.code != exit::USAGE) {
                failure.code = code;
            }
            Err(failure)
        }
    }
}

async fn run_command(url: Option<&str>, args: RunArgs) -> Result<Ended, Failure> {
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
    // `None`: wait as long as it takes.
    let wait = if args.no_wait { Some(Duration::ZERO) } else { args.wait };
    let mut options = LockOptions::new().retry_interval(args.retry).loss_margin(loss_margin);
    options = match args.renew_every {
        Some(every) => options.renew_every(every),
        None => options.auto_renew(),
    };
    let waiting = |wait: Option<Duration>| match wait {
        Some(wait) => options.wait(wait),
        None => options,
    };
    waiting(wait).validate(args.ttl)?;
    let wanted = Wanted::from_args(&args, loss_margin)?;
    let (url, _) = store::url_or_default(url)?;
    let url = url.as_str();
    store::refuse_memory(url, if args.lead.is_some() { "elect" } else { "run" })?;
    // Installed before anything slow, so that Ctrl-C while connecting or waiting ends
    // distlock cleanly rather than killing it mid-acquisition.
    let mut signals = Signals::install()?;
    let key = wanted.names()[0].to_owned();
    let label = wanted.label();
    let locks = tokio::select! {
        store = store::connect(url) => LockManager::new(store?),
        signal = signals.recv() => return Ok(interrupted(signal, "connecting to the store")),
    };
    let locks = match args.owner.clone() {
        Some(owner) => locks.with_owner(owner),
        None => locks,
    };
    if let Some(permits) = args.permits {
        let shared = args.members.iter().filter(|(mode, _)| *mode == distlock::LockMode::Shared);
        record_permits(&locks, shared.map(|(_, name)| name), permits).await?;
    }
    let started = Instant::now();
    let acquire = async {
        // One attempt first, so that a wait is announced (DISTLOCK_LOG=info) when it begins.
        if let Some(held) = wanted.try_take(&locks, args.ttl, &waiting(Some(Duration::ZERO))).await? {
            return Ok(Some(held));
        }
        if wait == Some(Duration::ZERO) {
            return Ok(None);
        }
        match wait {
            Some(wait) => tracing::info!(
                lock.key = %key,
                wait = %humantime::format_duration(wait),
                "the lock is held by another owner; waiting for it"
            ),
            None => {
                tracing::info!(lock.key = %key, "the lock is held by another owner; waiting for it without a deadline")
            }
        }
        let left = wait.map(|wait| wait.saturating_sub(started.elapsed()));
        wanted.take(&locks, args.ttl, &waiting(left)).await
    };
    let acquired = tokio::select! {
        acquired = acquire => acquired,
        signal = signals.recv() => {
            flush(&locks).await;
            return Ok(interrupted(signal, "waiting for the lock"));
        }
    };
    let held = match acquired {
        Ok(Some(held)) => held,
        Ok(None) => {
            let waited = humantime::format_duration(wait.unwrap_or_default());
            eprintln!("distlock: {label} not acquired: {} (waited {waited})", wanted.conflict());
            return Ok(Ended::NotAcquired);
        }
        Err(error) => {
            flush(&locks).await;
            return Err(error.into());
        }
    };
    let names = wanted.names().join("\n");
    let owner = match wanted {
        Wanted::Lock(_) | Wanted::Lead { .. } => String::new(),
        Wanted::Group(_) => locks.owner().to_string(),
    };
    let mut env = vec![("DISTLOCK_KEY", key.as_str()), ("DISTLOCK_NAMES", &names), ("DISTLOCK_OWNER", &owner)];
    let term = held.fence().map(|term| term.to_string()).unwrap_or_default();
    if let Wanted::Lead { name, value, .. } = &wanted {
        env.extend([
            ("DISTLOCK_ELECTION", name.as_str()),
            ("DISTLOCK_TERM", &term),
            ("DISTLOCK_VALUE", value.as_str()),
        ]);
    }
    let supervision = Supervision {
        command: &args.command,
        env: &env,
        label: &label,
        kill_grace: args.kill_grace,
        loss_margin,
        interactive: true,
    };
    let outcome = supervision.run(&held, &mut signals).await;
    let ended = finish(held, &label, outcome).await;
    flush(&locks).await;
    Ok(ended)
}

/// How the command ended.
pub(crate) enum Outcome {
    /// It exited on its own (or after a forwarded signal) with this status.
    Exited(u8),
    /// The lease was lost; the command was stopped.
    LeaseLost,
    /// It could not be started; the status is 126 or 127.
    NotStarted(u8),
    /// The keeper could not be started, or was killed.
    Internal,
}

/// The command under the keeper, watched against the lease and distlock's signals.
pub(crate) struct Supervision<'a> {
    pub(crate) command: &'a [OsString],
    /// The command's environment, besides the token and fence.
    pub(crate) env: &'a [(&'a str, &'a str)],
    /// How messages name the lock or group.
    pub(crate) label: &'a str,
    pub(crate) kill_grace: Duration,
    pub(crate) loss_margin: Duration,
    /// The command shares distlock's standard input and gets the terminal's foreground
    /// while it runs; otherwise its standard input is empty and the terminal stays.
    pub(crate) interactive: bool,
}

impl Supervision<'_> {
    pub(crate) async fn run(&self, lock: &Held, signals: &mut Signals) -> Outcome {
        let fence = lock.fence().map(|fence| fence.to_string()).unwrap_or_default();
        let mut env = vec![("DISTLOCK_FENCE", fence.as_str())];
        if let Some(token) = lock.token() {
            env.push(("DISTLOCK_TOKEN", token.as_str()));
        }
        env.extend_from_slice(self.env);
        let tick = self.heartbeat();
        let mut sent_deadline = self.keeper_deadline(lock.safe_until(), tick);
        let started = Keeper::start(self.command, &env, self.kill_grace, sent_deadline, self.interactive).await;
        let mut keeper = match started {
            Ok(keeper) => keeper,
            Err(error) => {
                eprintln!("distlock: cannot start its keeper process: {error}; the command was not run");
                return Outcome::Internal;
            }
        };
        let group = match keeper.started().await {
            Some(FromKeeper::Started(pid)) => Pid::from_raw(pid),
            Some(FromKeeper::NotStarted(code)) => {
                let _ = keeper.wait().await;
                return Outcome::NotStarted(code);
            }
            _ => {
                let status = keeper.wait().await;
                match &status {
                    // Killed before its report of the start reached us: the command may
                    // have started, and dies with its keeper.
                    Ok(status) if status.code().is_none() => eprintln!(
                        "distlock: its keeper process was killed ({status}) before it reported starting the command"
                    ),
                    _ => eprintln!("distlock: its keeper process ended before starting the command ({status:?})"),
                }
                return Outcome::Internal;
            }
        };
        let terminal = if self.interactive { Foreground::hand_to(group) } else { Foreground::none() };

        let mut heartbeat = tokio::time::interval(tick);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut lost = false;
        let mut kill_at: Option<Instant> = None;
        let status = loop {
            tokio::select! {
                status = keeper.wait() => break status,
                reason = lock.lost(), if !lost => {
                    lost = true;
                    let what = match lock {
                        Held::Firing { .. } => format!("{} reached --at-most", self.label),
                        _ => format!("lease of {} lost ({reason})", self.label),
                    };
                    eprintln!(
                        "distlock: {what}; stopping the command: SIGTERM now, SIGKILL in {}",
                        humantime::format_duration(self.kill_grace),
                    );
                    keeper.order(ToKeeper::Terminate);
                    kill_at = Some(Instant::now() + self.kill_grace);
                }
                () = sleep_until(kill_at) => {
                    eprintln!("distlock: the command outlived --kill-grace; sending SIGKILL");
                    keeper.order(ToKeeper::Kill);
                    kill_at = None;
                }
                _ = heartbeat.tick(), if !lost => {
                    let deadline = self.keeper_deadline(lock.safe_until(), tick);
                    if deadline != sent_deadline {
                        keeper.order(ToKeeper::Deadline(deadline));
                        sent_deadline = deadline;
                    }
                }
                signal = signals.recv() => send(group, signal),
            }
        };
        terminal.restore();
        let expired = keeper.expired().await;
        if expired && !lost {
            eprintln!(
                "distlock: the keeper killed the command: no renewal of {} was confirmed before its deadline",
                self.label
            );
        }
        if lost || expired {
            return Outcome::LeaseLost;
        }
        match status {
            Ok(status) => match status.code() {
                Some(code) => Outcome::Exited(u8::try_from(code & 0xff).unwrap_or(u8::MAX)),
                None => {
                    eprintln!(
                        "distlock: its keeper process was killed ({status}); killing the command's process group"
                    );
                    send(group, Signal::SIGKILL);
                    Outcome::Internal
                }
            },
            Err(error) => {
                eprintln!("distlock: lost track of its keeper process: {error}");
                send(group, Signal::SIGKILL);
                Outcome::Internal
            }
        }
    }

    /// How often the keeper's deadline is brought up to date: often enough that a renewal
    /// confirmed before the loss would be signalled reaches the keeper before its deadline.
    fn heartbeat(&self) -> Duration {
        (self.kill_grace / 2).min(self.loss_margin / 4).clamp(Duration::from_millis(5), Duration::from_secs(1))
    }

    /// When the keeper kills the tree by itself if it hears nothing newer: when distlock
    /// would send SIGKILL after a loss (`safe_until` − loss margin + kill grace), with at
    /// least two heartbeats of slack, and never after `safe_until`.
    fn keeper_deadline(&self, safe_until: Instant, tick: Duration) -> u64 {
        let slack = self.kill_grace.max(tick * 2).min(self.loss_margin);
        let at = safe_until.checked_sub(self.loss_margin).unwrap_or(safe_until) + slack;
        protocol::monotonic_at(at.into_std())
    }
}

/// Releases the lock or group after the command and says how `run` ended.
async fn finish(lock: Held, label: &str, outcome: Outcome) -> Ended {
    let ended = match outcome {
        Outcome::LeaseLost => {
            drop(lock);
            return Ended::LeaseLost;
        }
        Outcome::Exited(code) => Ended::Command(code),
        Outcome::NotStarted(code) => Ended::NotStarted(code),
        Outcome::Internal => Ended::Internal,
    };
    if lock.is_lost() {
        eprintln!("distlock: lease of {label} was lost as the command ended; its work may not have been protected");
        drop(lock);
        return Ended::LeaseLost;
    }
    match lock.release().await {
        Ok(true) => ended,
        Ok(false) => {
            eprintln!("distlock: {label} had already expired or been released when the command ended");
            Ended::LeaseLost
        }
        Err(error) => {
            Failure::from(error).report();
            eprintln!("distlock: {label} will be freed when its lease expires");
            ended
        }
    }
}

fn interrupted(signal: Signal, during: &str) -> Ended {
    eprintln!("distlock: {} while {during}; nothing was run", signal.as_str());
    Ended::Interrupted(exit::signal_status(signal as i32))
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
pub(crate) struct Signals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    hangup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
}

impl Signals {
    pub(crate) fn install() -> Result<Self, Failure> {
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
    pub(crate) async fn recv(&mut self) -> Signal {
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
    /// The foreground stays where it is.
    fn none() -> Self {
        Self { restore_to: None }
    }

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
