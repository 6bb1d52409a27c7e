//! `distlock schedule`: a command at each firing of a cron schedule, on one machine.

use std::process::Stdio;
use std::sync::Arc;

use distlock::jobs::{Job, JobError, JobRun};
use distlock::LockManager;
use tokio::signal::unix::{signal, SignalKind};

use crate::cli::ScheduleArgs;
use crate::exit::{self, Failure};
use crate::store;

/// Runs the schedule until SIGINT or SIGTERM; a running command gets the signal and is
/// waited for.
pub(crate) async fn schedule(url: Option<&str>, args: ScheduleArgs) -> Result<u8, Failure> {
    let job = Job::new(&args.name, &args.cron)
        .map_err(usage)?
        .at_most(args.at_most)
        .at_least(args.at_least)
        .late_start(args.late_start);
    // The durations are checked now, before connecting: the first firing is no place for it.
    job.next_firing(std::time::SystemTime::now()).map_err(usage)?;
    job.validate().map_err(usage)?;
    let (url, _) = store::url_or_default(url)?;
    let url = url.as_str();
    store::refuse_memory(url, "schedule")?;
    let locks = LockManager::new(store::connect(url).await?);
    let mut interrupt = signal(SignalKind::interrupt()).map_err(internal)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(internal)?;
    let command = Arc::new(args.command);
    let running = Arc::new(tokio::sync::Mutex::new(Vec::<u32>::new()));
    let task = {
        let running = running.clone();
        move |run: JobRun| {
            let (command, running) = (command.clone(), running.clone());
            async move { execute(&command, &run, &running).await }
        }
    };
    let signal = tokio::select! {
        ended = job.run(&locks, task) => return Err(usage(ended.err().unwrap_or(JobError::Durations(String::new())))),
        _ = interrupt.recv() => nix::sys::signal::Signal::SIGINT,
        _ = terminate.recv() => nix::sys::signal::Signal::SIGTERM,
    };
    // Pass the signal on to running commands and wait for them, so the firing's lock
    // outlives them.
    let pids: Vec<u32> = running.lock().await.clone();
    for pid in &pids {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(i32::try_from(*pid).unwrap_or(i32::MAX)), signal);
    }
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !running.lock().await.is_empty() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    Ok(exit::signal_status(signal as i32))
}

/// Runs the command for one firing and waits for it.
async fn execute(command: &[std::ffi::OsString], run: &JobRun, running: &tokio::sync::Mutex<Vec<u32>>) {
    let Some((program, arguments)) = command.split_first() else { return };
    let fence = run.fence.map(|fence| fence.to_string()).unwrap_or_default();
    let spawned = tokio::process::Command::new(program)
        .args(arguments)
        .env("DISTLOCK_JOB", &run.job)
        .env("DISTLOCK_FIRING", run.firing.unix_seconds().to_string())
        .env("DISTLOCK_FENCE", fence)
        .stdin(Stdio::null())
        .kill_on_drop(false)
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) => {
            eprintln!("distlock: cannot start the command for firing {}: {error}", run.firing.unix_seconds());
            return;
        }
    };
    let pid = child.id();
    if let Some(pid) = pid {
        running.lock().await.push(pid);
    }
    match child.wait().await {
        Ok(status) if !status.success() => {
            eprintln!("distlock: the command for firing {} ended with {status}", run.firing.unix_seconds());
        }
        Ok(_) => {}
        Err(error) => {
            eprintln!("distlock: lost track of the command for firing {}: {error}", run.firing.unix_seconds())
        }
    }
    if let Some(pid) = pid {
        running.lock().await.retain(|running| *running != pid);
    }
}

fn usage(error: JobError) -> Failure {
    match error {
        JobError::Lock(error) => error.into(),
        JobError::Name(error) => Failure::usage(format!("invalid job name: {error}")),
        other => Failure::usage(other.to_string()),
    }
}

fn internal(error: std::io::Error) -> Failure {
    Failure::new(exit::SOFTWARE, format!("cannot install a signal handler: {error}"))
}
