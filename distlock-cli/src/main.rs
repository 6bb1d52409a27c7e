//! `distlock`: run a command under a distributed lock or lock group, inspect, list and
//! release locks, set a name's permits, and benchmark a store — with any distlock store
//! (`memory://`, `redis://`, `postgres://`).
//!
//! See the crate's README for the commands, exit statuses and benchmark figures.

#![warn(clippy::unwrap_used, clippy::expect_used)]

mod bench;
mod cli;
mod exit;
mod inspect;
mod leader;
mod list;
mod permits;
mod run;
mod schedule;
mod show;
mod store;
mod top;

use std::process::ExitCode;

use crate::cli::Command;
use crate::exit::Failure;

fn main() -> ExitCode {
    // `distlock run` starts this binary again as its keeper and as the command's launcher.
    if let Some(code) = run::helper_process() {
        return ExitCode::from(code);
    }
    let cli = match cli::parse() {
        Ok(cli) => cli,
        Err(error) => {
            // --help and --version are "errors" printed on stdout with status 0.
            if !error.use_stderr() {
                let _ = error.print();
                return ExitCode::from(0);
            }
            match cli::one_line(&error) {
                Some(line) => eprintln!("distlock: {line}"),
                None => {
                    let _ = error.print();
                }
            }
            return ExitCode::from(exit::USAGE);
        }
    };
    init_tracing();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            Failure::new(exit::SOFTWARE, format!("cannot start the async runtime: {error}")).report();
            return ExitCode::from(exit::SOFTWARE);
        }
    };
    let store = cli.store.as_deref();
    let outcome = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => run::run(store, args).await,
            Command::Elect(args) => match args.into_run() {
                Ok(args) => run::run(store, args).await,
                Err(error) => Err(exit::Failure::usage(error.to_string())),
            },
            Command::Leader(args) => leader::leader(store, args).await,
            Command::Schedule(args) => schedule::schedule(store, args).await,
            Command::Inspect(args) => inspect::inspect(store, args).await,
            Command::Release(args) => inspect::release(store, args).await,
            Command::Permits(args) => permits::permits(store, args).await,
            Command::List(args) => list::list(store, args).await,
            Command::Top(args) => top::top(store, args).await,
            Command::Bench(args) => bench::bench(store, args).await,
        }
    });
    // Leftover tasks (a renewal being aborted, a connection's driver) must not hold the
    // exit up.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(failure) => {
            failure.report();
            ExitCode::from(failure.code)
        }
    }
}

/// Library warnings (a failed renewal, a failed background release) go to stderr;
/// `DISTLOCK_LOG=debug` shows more. A lost lease is reported once, by the command's own
/// message, not also by the library's warning.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("DISTLOCK_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(format!("warn,{}=off", distlock::LEASE_LOST_TARGET)));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .without_time()
        .try_init();
}
