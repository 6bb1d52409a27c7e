//! `distlock schedule`: a command at each firing of a cron schedule, on one machine of a
//! fleet.
//!
//! Each firing's command runs under the same supervision as `run`'s: below a keeper
//! process, in a process group of its own, so that it is stopped when the firing's lock
//! stops being safe (`--at-most`) and nothing it started outlives distlock, even when
//! distlock is killed with SIGKILL.

use std::ffi::OsString;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use distlock::jobs::{Job, JobError, JobRun};
use distlock::LockManager;
use tokio::sync::RwLock;

use crate::cli::ScheduleArgs;
use crate::exit::{self, Failure};
use crate::run::{Held, Outcome, Signals, Supervision};
use crate::store;

/// What every firing's supervision shares.
struct Command {
    argv: Vec<OsString>,
    kill_grace: Duration,
    loss_margin: Duration,
    /// Each running firing holds a read guard: stopping waits for the write guard.
    running: RwLock<()>,
}

/// Runs the schedule until SIGINT, SIGTERM, SIGHUP or SIGQUIT; running commands get the
/// signal and are waited for.
pub(crate) async fn schedule(url: Option<&str>, args: ScheduleArgs) -> Result<u8, Failure> {
    if args.kill_grace >= args.at_most {
        return Err(Failure::usage(format!(
            "--kill-grace {} does not fit in --at-most {}: a command still running at --at-most must be killed \
             before another process could take its firing; shorten --kill-grace or lengthen --at-most",
            humantime::format_duration(args.kill_grace),
            humantime::format_duration(args.at_most),
        )));
    }
    // The command is stopped the loss margin before the firing's lease ends: SIGTERM, and
    // SIGKILL after the kill grace, before the end.
    let loss_margin = (args.at_most / distlock::LockOptions::DEFAULT_LOSS_MARGIN_DIVISOR).max(args.kill_grace);
    let job = Job::new(&args.name, &args.cron)
        .map_err(usage)?
        .at_most(args.at_most)
        .at_least(args.at_least)
        .late_start(args.late_start);
    // The durations are checked now, before connecting: the first firing is no place for it.
    job.next_firing(SystemTime::now()).map_err(usage)?;
    job.validate().map_err(usage)?;
    let (url, _) = store::url_or_default(url)?;
    let url = url.as_str();
    store::refuse_memory(url, "schedule")?;
    let mut signals = Signals::install()?;
    let locks = tokio::select! {
        store = store::connect(url) => LockManager::new(store?),
        signal = signals.recv() => return Ok(exit::signal_status(signal as i32)),
    };
    let command =
        Arc::new(Command { argv: args.command, kill_grace: args.kill_grace, loss_margin, running: RwLock::new(()) });
    let task = {
        let command = command.clone();
        move |run: JobRun| {
            let command = command.clone();
            async move { execute(&command, &run).await }
        }
    };
    let signal = tokio::select! {
        ended = job.run(&locks, task) => return Err(usage(ended.err().unwrap_or(JobError::Durations(String::new())))),
        signal = signals.recv() => signal,
    };
    // Each running command's supervision passed the signal on (as it does any later one):
    // wait for them, so that the firings' locks outlive them.
    let _stopped = command.running.write().await;
    Ok(exit::signal_status(signal as i32))
}

/// Runs the command for one firing, supervised, and waits for it.
async fn execute(command: &Command, run: &JobRun) {
    let _running = command.running.read().await;
    let firing = run.firing.unix_seconds().to_string();
    let label = format!("firing {firing} of job `{}`", run.job);
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(failure) => {
            failure.report();
            return;
        }
    };
    let env = [("DISTLOCK_JOB", run.job.as_str()), ("DISTLOCK_FIRING", firing.as_str())];
    let supervision = Supervision {
        command: &command.argv,
        env: &env,
        label: &label,
        kill_grace: command.kill_grace,
        loss_margin: command.loss_margin,
        interactive: false,
    };
    let held = Held::Firing { fence: run.fence, safe_until: run.safe_until, loss_margin: command.loss_margin };
    match supervision.run(&held, &mut signals).await {
        Outcome::Exited(0) | Outcome::LeaseLost | Outcome::Internal => {}
        Outcome::Exited(code) => eprintln!("distlock: the command for {label} exited with status {code}"),
        Outcome::NotStarted(code) => eprintln!("distlock: the command for {label} could not be started ({code})"),
    }
}

fn usage(error: JobError) -> Failure {
    match error {
        JobError::Lock(error) => error.into(),
        JobError::Name(error) => Failure::usage(format!("invalid job name: {error}")),
        other => Failure::usage(other.to_string()),
    }
}
