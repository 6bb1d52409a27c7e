//! `distlock list`: the held locks of a store, as a table or JSON, once or refreshed.

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, SystemTime};

use distlock::{DynLockStore, ListCursor};
use serde::Serialize;
use tokio::signal::unix::{signal, SignalKind};

use crate::cli::{Format, ListArgs};
use crate::exit::{self, Failure};
use crate::show::{owner, round};
use crate::store;

/// One holder of one key, as printed.
#[derive(Debug, Serialize)]
struct Row {
    key: String,
    mode: &'static str,
    /// [`owner`] of the token.
    owner: String,
    ttl_left_ms: u128,
    /// `null` on a store that does not fence.
    fence: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<String>,
}

/// What one listing found, as `--format json` prints it.
#[derive(Debug, Serialize)]
struct Snapshot<'a> {
    store: &'static str,
    #[serde(rename = "match")]
    pattern: &'a str,
    /// When the listing finished (RFC 3339, UTC).
    listed_at: String,
    /// Held locks matching the pattern, also those `--limit` left out.
    total: usize,
    locks: Vec<Row>,
}

/// Lists the held locks once, or every `--watch` interval until interrupted.
pub(crate) async fn list(url: Option<&str>, args: ListArgs) -> Result<u8, Failure> {
    if args.watch.is_some_and(|interval| interval.is_zero()) {
        return Err(Failure::usage("--watch interval must be greater than zero"));
    }
    let (url, default) = store::url_or_default(url)?;
    let url = url.as_str();
    if default {
        eprintln!("distlock: the embedded store {url} (--store or DISTLOCK_STORE picks another)");
    }
    let lock_store = store::connect(url).await?;
    if store::is_memory(url) {
        eprintln!(
            "distlock: memory:// is a store inside this one distlock process, which holds no locks: \
             the list is empty. Pass the store URL your applications use (redis://…, postgres://…)."
        );
    }
    let Some(interval) = args.watch else {
        let snapshot = snapshot(&*lock_store, &args).await?;
        print(&snapshot, &args, None)?;
        return Ok(0);
    };
    let signal_failure = |error: io::Error| Failure::new(exit::SOFTWARE, format!("cannot handle signals: {error}"));
    let mut interrupt = signal(SignalKind::interrupt()).map_err(signal_failure)?;
    let mut terminate = signal(SignalKind::terminate()).map_err(signal_failure)?;
    let watch = Watch { interval, redraw: io::stdout().is_terminal() && args.format == Format::Table };
    loop {
        let listed = tokio::select! {
            listed = snapshot(&*lock_store, &args) => listed,
            _ = interrupt.recv() => return Ok(0),
            _ = terminate.recv() => return Ok(0),
        };
        match listed {
            Ok(snapshot) => {
                if print(&snapshot, &args, Some(&watch))? == Printed::ReaderGone {
                    return Ok(0);
                }
            }
            // The store may come back: say so and try again at the next refresh.
            Err(failure) => failure.report(),
        }
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = interrupt.recv() => return Ok(0),
            _ = terminate.recv() => return Ok(0),
        }
    }
}

/// How `--watch` prints each listing.
struct Watch {
    interval: Duration,
    /// Clear the terminal and draw the table at the top (stdout is a terminal).
    redraw: bool,
}

/// Pages through the store, then sorts by key (Redis lists in hash order, and may list
/// a key twice).
async fn snapshot<'a>(store: &DynLockStore, args: &'a ListArgs) -> Result<Snapshot<'a>, Failure> {
    let mut rows = Vec::new();
    let mut cursor: Option<ListCursor> = None;
    loop {
        let page = store.list(&args.pattern, cursor.as_ref(), usize::from(args.page_size)).await?;
        for lock in page.locks {
            for holder in lock.holders {
                rows.push(Row {
                    key: lock.key.as_str().to_owned(),
                    mode: holder.mode.as_str(),
                    owner: owner(&holder.token),
                    ttl_left_ms: holder.ttl_left.as_millis(),
                    fence: holder.fence,
                    token: args.show_tokens.then(|| holder.token.as_str().to_owned()),
                });
            }
        }
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    rows.sort_by(|a, b| (&a.key, &a.owner).cmp(&(&b.key, &b.owner)));
    rows.dedup_by(|a, b| a.key == b.key && a.owner == b.owner && a.mode == b.mode);
    let total = rows.len();
    if let Some(limit) = args.limit {
        rows.truncate(limit);
    }
    Ok(Snapshot {
        store: store.backend(),
        pattern: args.pattern.as_str(),
        listed_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        total,
        locks: rows,
    })
}

/// Whether a listing reached stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Printed {
    Written,
    /// Stdout was closed (`| head`): nobody reads any more; stop quietly.
    ReaderGone,
}

/// Prints one listing.
fn print(snapshot: &Snapshot<'_>, args: &ListArgs, watch: Option<&Watch>) -> Result<Printed, Failure> {
    let mut out = io::BufWriter::new(io::stdout().lock());
    let written = match args.format {
        Format::Json => write_json(&mut out, snapshot),
        Format::Table => write_table(&mut out, snapshot, args, watch),
    }
    .and_then(|()| out.flush());
    match written {
        Ok(()) => Ok(Printed::Written),
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(Printed::ReaderGone),
        Err(error) => Err(Failure::new(exit::SOFTWARE, format!("cannot write the listing: {error}"))),
    }
}

fn write_json(out: &mut impl Write, snapshot: &Snapshot<'_>) -> io::Result<()> {
    serde_json::to_writer(&mut *out, snapshot)?;
    writeln!(out)
}

fn write_table(
    out: &mut impl Write,
    snapshot: &Snapshot<'_>,
    args: &ListArgs,
    watch: Option<&Watch>,
) -> io::Result<()> {
    match watch {
        Some(watch) if watch.redraw => {
            // Cursor home, clear the screen.
            write!(out, "\x1b[H\x1b[2J")?;
            writeln!(
                out,
                "Every {}: distlock list --match {} ({}) · {} · Ctrl-C to stop\n",
                humantime::format_duration(watch.interval),
                snapshot.pattern,
                snapshot.store,
                snapshot.listed_at
            )?;
        }
        Some(_) => writeln!(out, "--- {} · {} · match {} ---", snapshot.listed_at, snapshot.store, snapshot.pattern)?,
        None => {}
    }
    let noun = if snapshot.total == 1 { "lock" } else { "locks" };
    if snapshot.total == 0 {
        return writeln!(out, "no locks held (match {})", snapshot.pattern);
    }
    if snapshot.locks.is_empty() {
        return writeln!(out, "0 of {} {noun} held shown (--limit)", snapshot.total);
    }
    let fence = |row: &Row| row.fence.map_or_else(|| "-".to_owned(), |fence| fence.to_string());
    let left = |row: &Row| round(Duration::from_millis(u64::try_from(row.ttl_left_ms).unwrap_or(u64::MAX)));
    let key_width = snapshot.locks.iter().map(|row| row.key.chars().count()).max().unwrap_or(0).max(3);
    let fence_width = snapshot.locks.iter().map(|row| fence(row).len()).max().unwrap_or(0).max(5);
    let left_width = snapshot.locks.iter().map(|row| left(row).len()).max().unwrap_or(0).max(8);
    write!(
        out,
        "{:key_width$}  {:9}  {:8}  {:>left_width$}  {:>fence_width$}",
        "KEY", "MODE", "OWNER", "TTL LEFT", "FENCE"
    )?;
    writeln!(out, "{}", if args.show_tokens { "  TOKEN" } else { "" })?;
    for row in &snapshot.locks {
        write!(
            out,
            "{:key_width$}  {:9}  {:8}  {:>left_width$}  {:>fence_width$}",
            row.key,
            row.mode,
            row.owner,
            left(row),
            fence(row)
        )?;
        match &row.token {
            Some(token) => writeln!(out, "  {token}")?,
            None => writeln!(out)?,
        }
    }
    if snapshot.locks.len() < snapshot.total {
        writeln!(out, "{} of {} {noun} held shown (--limit)", snapshot.locks.len(), snapshot.total)
    } else {
        writeln!(out, "{} {noun} held", snapshot.total)
    }
}
