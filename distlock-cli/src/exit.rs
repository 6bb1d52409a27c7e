//! Exit statuses and the error type every command returns.
//!
//! The statuses of `distlock` itself follow `sysexits.h` where one fits, so that they
//! stay clear of the 0–2 most commands use and of the shell's 126, 127 and 128 + N.

use std::error::Error as StdError;
use std::fmt;

use distlock::LockError;

/// `run`: the lock (or a name of the group) was held by another owner until `--wait` ran
/// out (`EX_TEMPFAIL`: try again later). `--conflict-exit-code` replaces it.
pub(crate) const NOT_ACQUIRED: u8 = 75;
/// `run`: the lease was lost while the command ran; the command was stopped (SIGTERM,
/// then SIGKILL after `--kill-grace`). In sysexits' range (`EX_PROTOCOL`: the remote
/// side withdrew what it had granted). `--lost-exit-code` replaces it.
pub(crate) const LEASE_LOST: u8 = 76;
/// The command line is wrong: unknown flag, bad duration, invalid key, token, owner,
/// permits or group, no store, `memory://` where another process must see the lock
/// (`EX_USAGE`).
pub(crate) const USAGE: u8 = 64;
/// The store could not be reached or failed (`EX_UNAVAILABLE`).
pub(crate) const UNAVAILABLE: u8 = 69;
/// `bench` saw a mutual-exclusion violation, or an internal error such as `run`'s keeper
/// process being killed (`EX_SOFTWARE`).
pub(crate) const SOFTWARE: u8 = 70;
/// `bench --plot`: the plots could not be written (`EX_CANTCREAT`).
pub(crate) const CANT_CREATE: u8 = 73;
/// `release`: the token does not hold the lock (it is free, expired or held by another
/// token); nothing was changed.
pub(crate) const NOT_RELEASED: u8 = 1;
/// `run`: the command was found but could not be started (as in `env`, shells).
pub(crate) const CANNOT_EXECUTE: u8 = 126;
/// `run`: the command was not found (as in `env`, shells).
pub(crate) const COMMAND_NOT_FOUND: u8 = 127;

/// The status of a process that ended on signal `signal`, as shells report it.
pub(crate) fn signal_status(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}

/// The exit-status table shown by `--help` and in the README.
pub(crate) const EXIT_STATUS_HELP: &str = "\
Exit status:
  run, elect the command's own status (128 + N when it ended on signal N)
  0          success (inspect, list, top, release, permits, leader, bench)
  1          release KEY --token: the token does not hold the lock; nothing was changed
  64         usage: bad flag, duration, key, token, owner or permits; --key with --read or
             --write; a name twice in a group; no store; memory:// with run, elect,
             leader, schedule, inspect, release or permits; elect on a store that does
             not fence; a bad schedule or schedule durations; top without a terminal
  69         the store could not be reached or failed, or has no lock groups
             (run: --error-exit-code)
  70         bench: a mutual-exclusion violation was observed (never expected);
             run: an internal error, e.g. its keeper process was killed (--error-exit-code)
  73         bench --plot: the plots could not be written
  75         run: the lock, or a name of the group, is held by another owner (or out of
             permits), after --wait; elect: another candidate still leads
             (--conflict-exit-code)
  76         run, elect: the lease (the lead) was lost; the command got SIGTERM, SIGKILL
             after --kill-grace (--lost-exit-code)
  126, 127   run: the command could not be started / was not found (--error-exit-code)
  128 + N    run, elect: distlock got signal N while connecting or waiting; nothing was
             run; schedule: stopped by signal N (the usual way it ends)
With --conflict-exit-code, --lost-exit-code and --error-exit-code set to statuses the
command never uses, every other status of run is the command's own (or 64, 128 + N).";

/// A command's failure: what to print and the exit status.
#[derive(Debug)]
pub(crate) struct Failure {
    /// The exit status.
    pub(crate) code: u8,
    message: String,
    causes: Vec<String>,
}

impl Failure {
    /// A failure with `code` and a one-line message.
    pub(crate) fn new(code: u8, message: impl Into<String>) -> Self {
        Self { code, message: message.into(), causes: Vec::new() }
    }

    /// A usage error (exit status 64).
    pub(crate) fn usage(message: impl Into<String>) -> Self {
        Self::new(USAGE, message)
    }

    /// Prints the failure on stderr, causes included.
    pub(crate) fn report(&self) {
        eprintln!("distlock: {self}");
        for cause in &self.causes {
            eprintln!("  caused by: {cause}");
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl From<LockError> for Failure {
    fn from(error: LockError) -> Self {
        let code = match &error {
            LockError::NotAcquired { .. } => NOT_ACQUIRED,
            LockError::LeaseLost { .. } => LEASE_LOST,
            LockError::InvalidKey { .. }
            | LockError::InvalidOptions { .. }
            | LockError::InvalidGroup { .. }
            | LockError::InvalidToken
            | LockError::InvalidValue { .. }
            | LockError::Config { .. } => USAGE,
            _ => UNAVAILABLE,
        };
        let mut causes = Vec::new();
        let mut source = error.source();
        while let Some(cause) = source {
            causes.push(cause.to_string());
            source = cause.source();
        }
        Self { code, message: error.to_string(), causes }
    }
}
