//! `distlock list`: the held locks of a store — single locks and group holds — and the
//! acquisitions waiting for them, as tables or JSON, once or refreshed.

use std::io::{self, IsTerminal, Write};
use std::time::{Duration, SystemTime};

use distlock::{DynLockStore, HeldLock, ListCursor, ListPage, LockError, LockKey};
use serde::Serialize;
use tokio::signal::unix::{signal, SignalKind};

use crate::cli::{Format, ListArgs};
use crate::exit::{self, Failure};
use crate::show::{owner, round_ms, write_columns, write_waiting, Waiter};
use crate::store;

/// One holder of one key, as printed.
#[derive(Debug, Serialize)]
struct Row {
    key: String,
    /// `lock` (a single lock) or `group` (a read/write lock, semaphore or group hold).
    kind: &'static str,
    mode: &'static str,
    /// [`owner`] of the token.
    owner: String,
    /// A group holder's owner id (`app@instance`); `null` for a single lock.
    owner_id: Option<String>,
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
    /// Holders matching the pattern, also those `--limit` left out.
    total: usize,
    locks: Vec<Row>,
    /// Waiting places on the keys matching the pattern, also those `--limit` left out.
    total_waiting: usize,
    /// Oldest first.
    waiting: Vec<Waiter>,
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

/// Pages through the store's single locks and group holds, reads the fair-queue places
/// of the listed single locks, then sorts by key (Redis lists in hash order, and may list
/// a key twice).
async fn snapshot<'a>(store: &DynLockStore, args: &'a ListArgs) -> Result<Snapshot<'a>, Failure> {
    let page_size = usize::from(args.page_size);
    let pattern = &args.pattern;
    let locks = list_all(|cursor| async move { store.list(pattern, cursor.as_ref(), page_size).await }).await?;
    let groups = match store.groups() {
        Some(groups) => {
            let listed =
                list_all(|cursor| async move { groups.list_groups(pattern, cursor.as_ref(), page_size).await }).await;
            match listed {
                Ok(listed) => listed,
                // A store that cannot list its groups yet: its single locks still are.
                Err(LockError::Unsupported { .. }) => Vec::new(),
                Err(error) => return Err(error.into()),
            }
        }
        None => Vec::new(),
    };
    let mut waiting = Vec::new();
    if let Some(queue) = store.queue() {
        let mut keys: Vec<&str> = locks.iter().map(|lock| lock.key.as_str()).collect();
        keys.dedup();
        for key in keys {
            let store_key = LockKey::new(key)?.to_store_key();
            match queue.queue_places(&store_key).await {
                Ok(places) => {
                    waiting.extend(places.iter().map(|place| Waiter::new(key, "lock", place, args.show_tokens)));
                }
                Err(LockError::Unsupported { .. }) => break,
                Err(error) => return Err(error.into()),
            }
        }
    }
    let mut rows = Vec::new();
    for (kind, held) in locks.iter().map(|lock| ("lock", lock)).chain(groups.iter().map(|group| ("group", group))) {
        for holder in &held.holders {
            rows.push(Row {
                key: held.key.as_str().to_owned(),
                kind,
                mode: holder.mode.as_str(),
                owner: owner(&holder.token),
                owner_id: holder.owner.clone(),
                ttl_left_ms: holder.ttl_left.as_millis(),
                fence: holder.fence,
                token: args.show_tokens.then(|| holder.token.as_str().to_owned()),
            });
        }
        waiting.extend(held.waiting.iter().map(|place| Waiter::new(held.key.as_str(), kind, place, args.show_tokens)));
    }
    rows.sort_by(|a, b| (&a.key, a.kind, &a.owner).cmp(&(&b.key, b.kind, &b.owner)));
    rows.dedup_by(|a, b| a.key == b.key && a.kind == b.kind && a.owner == b.owner && a.mode == b.mode);
    waiting.sort_by(|a, b| (&a.key, a.kind, &a.owner).cmp(&(&b.key, b.kind, &b.owner)));
    waiting.dedup_by(|a, b| a.key == b.key && a.kind == b.kind && a.owner == b.owner);
    // Oldest first; a place of unknown age after those of known age.
    waiting.sort_by_key(|waiter| std::cmp::Reverse(waiter.waited_ms));
    let (total, total_waiting) = (rows.len(), waiting.len());
    if let Some(limit) = args.limit {
        rows.truncate(limit);
        waiting.truncate(limit);
    }
    Ok(Snapshot {
        store: store.backend(),
        pattern: args.pattern.as_str(),
        listed_at: humantime::format_rfc3339_millis(SystemTime::now()).to_string(),
        total,
        locks: rows,
        total_waiting,
        waiting,
    })
}

/// Every page of one listing, from the start until its cursor completes.
async fn list_all<F, Fut>(mut page: F) -> Result<Vec<HeldLock>, LockError>
where
    F: FnMut(Option<ListCursor>) -> Fut,
    Fut: std::future::Future<Output = Result<ListPage, LockError>>,
{
    let mut held = Vec::new();
    let mut cursor: Option<ListCursor> = None;
    loop {
        let listed = page(cursor.take()).await?;
        held.extend(listed.locks);
        match listed.next {
            Some(next) => cursor = Some(next),
            None => return Ok(held),
        }
    }
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
    write_holders(out, snapshot, args)?;
    if snapshot.total_waiting > 0 {
        writeln!(out)?;
        write_waiting(out, &snapshot.waiting, snapshot.total_waiting, args.show_tokens)?;
    }
    Ok(())
}

fn write_holders(out: &mut impl Write, snapshot: &Snapshot<'_>, args: &ListArgs) -> io::Result<()> {
    let noun = if snapshot.total == 1 { "lock" } else { "locks" };
    if snapshot.total == 0 {
        return writeln!(out, "no locks held (match {})", snapshot.pattern);
    }
    if snapshot.locks.is_empty() {
        return writeln!(out, "0 of {} {noun} held shown (--limit)", snapshot.total);
    }
    let rows: Vec<Vec<String>> = snapshot
        .locks
        .iter()
        .map(|row| {
            let mut cells = vec![
                row.key.clone(),
                row.mode.to_owned(),
                row.owner.clone(),
                round_ms(row.ttl_left_ms),
                row.fence.map_or_else(|| "-".to_owned(), |fence| fence.to_string()),
                row.kind.to_owned(),
                row.owner_id.clone().unwrap_or_else(|| "-".to_owned()),
            ];
            cells.extend(row.token.clone());
            cells
        })
        .collect();
    let columns = ["KEY", "MODE", "OWNER", ">TTL LEFT", ">FENCE", "KIND", "APP@INSTANCE", "TOKEN"];
    write_columns(out, &columns[..if args.show_tokens { 8 } else { 7 }], &rows)?;
    if snapshot.locks.len() < snapshot.total {
        writeln!(out, "{} of {} {noun} held shown (--limit)", snapshot.locks.len(), snapshot.total)
    } else {
        writeln!(out, "{} {noun} held", snapshot.total)
    }
}
