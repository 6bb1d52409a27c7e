//! `distlock leader`: an election's leader, once or as it changes.

use std::io::{self, Write};

use distlock::election::{Election, Leader};
use distlock::LockManager;
use serde::Serialize;
use tokio::signal::unix::{signal, SignalKind};

use crate::cli::{Format, LeaderArgs};
use crate::exit::{self, Failure};
use crate::show::round;
use crate::store;

/// One line of `leader --format json`.
#[derive(Debug, Serialize)]
struct Shown<'a> {
    election: &'a str,
    /// `led` or `none`.
    state: &'static str,
    term: Option<u64>,
    value: Option<&'a str>,
    ttl_left_ms: Option<u128>,
}

/// Prints the leader, and with --watch every change until interrupted.
pub(crate) async fn leader(url: Option<&str>, args: LeaderArgs) -> Result<u8, Failure> {
    let (url, _) = store::url_or_default(url)?;
    let url = url.as_str();
    store::refuse_memory(url, "leader")?;
    let store = store::connect(url).await?;
    let election = Election::new(&LockManager::new(store), &args.name)?;
    if !args.watch {
        let leader = election.leader().await?;
        print(&args, leader.as_ref())?;
        return Ok(0);
    }
    let mut observer = election.observe();
    let mut interrupt = signal(SignalKind::interrupt()).map_err(internal)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(internal)?;
    loop {
        tokio::select! {
            changed = observer.changed() => print(&args, changed?.as_ref())?,
            _ = interrupt.recv() => return Ok(0),
            _ = terminate.recv() => return Ok(0),
        }
    }
}

fn print(args: &LeaderArgs, leader: Option<&Leader>) -> Result<(), Failure> {
    let mut out = io::stdout().lock();
    let written = match args.format {
        Format::Json => {
            let shown = Shown {
                election: &args.name,
                state: if leader.is_some() { "led" } else { "none" },
                term: leader.map(|leader| leader.term),
                value: leader.and_then(|leader| leader.value.as_ref()).map(|value| value.as_str()),
                ttl_left_ms: leader.map(|leader| leader.ttl_left.as_millis()),
            };
            let line = serde_json::to_string(&shown).map_err(|error| internal(io::Error::other(error)))?;
            writeln!(out, "{line}")
        }
        Format::Table => match leader {
            Some(leader) => writeln!(
                out,
                "{}: term {}, value {}, {} left",
                args.name,
                leader.term,
                leader.value.as_ref().map_or("(none yet)", |value| value.as_str()),
                round(leader.ttl_left),
            ),
            None => writeln!(out, "{}: no leader", args.name),
        },
    };
    written.and_then(|()| out.flush()).map_err(internal)
}

fn internal(error: io::Error) -> Failure {
    Failure::new(exit::SOFTWARE, format!("cannot write the leader: {error}"))
}
