//! `distlock inspect` and `distlock release`.

use std::future::Future;
use std::io::{self, Write};

use distlock::{LockError, LockInfo, LockManager, WaitingPlace};
use serde::Serialize;

use crate::cli::{Format, InspectArgs, ReleaseArgs};
use crate::exit::{self, Failure, NOT_RELEASED};
use crate::show::{owner, round_ms, write_columns, write_waiting, Waiter};
use crate::store;

/// One holder of the name, as printed.
#[derive(Debug, Serialize)]
struct Holder {
    /// `lock` (the plain lock's holder) or `group` (a group holder).
    kind: &'static str,
    mode: &'static str,
    /// The token's fingerprint, as `distlock list` shows it.
    owner: String,
    /// A group holder's owner id (`app@instance`); `null` for the plain lock.
    owner_id: Option<String>,
    ttl_left_ms: u128,
    /// `null` on a store that does not fence.
    fence: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<String>,
}

/// What `inspect --format json` prints.
#[derive(Debug, Serialize)]
struct Inspection<'a> {
    store: &'static str,
    key: &'a str,
    /// `held` when the name has any holder, else `free`.
    state: &'static str,
    holders: Vec<Holder>,
    /// Waiting acquisitions queued for the plain lock (fair waiting).
    waiting: usize,
    /// Waiting lock groups (read/write locks, semaphores) with a place on the name.
    waiting_groups: usize,
    /// The waiting places: the plain lock's queue in arrival order, then the waiting
    /// groups' oldest first, each with how long it has waited. Empty, while the counts
    /// above are not, on a store that cannot read its places.
    places: Vec<Waiter>,
}

/// Prints every holder of a name — the plain lock's and the group holders — or that it
/// is free, and how many acquisitions wait in the plain lock's queue and as groups.
pub(crate) async fn inspect(url: Option<&str>, args: InspectArgs) -> Result<u8, Failure> {
    let (url, _) = store::url_or_default(url)?;
    let url = url.as_str();
    store::refuse_memory(url, "inspect")?;
    let store = store::connect(url).await?;
    let key = args.key.to_store_key();
    let holders = async {
        match store.groups() {
            Some(groups) => {
                tokio::try_join!(groups.holders(&key), places_or_count(groups.places(&key), groups.waiting(&key)))
            }
            // A store without groups has no group holders.
            None => Ok((Vec::new(), Places::default())),
        }
    };
    let waiting = async {
        match store.queue() {
            Some(queue) => places_or_count(queue.queue_places(&key), queue.queue_len(&key)).await,
            // A store without a queue keeps no places: its waiters barge.
            None => Ok(Places::default()),
        }
    };
    let (plain, (groups, group_places), queue_places) = tokio::try_join!(store.inspect(&key), holders, waiting)?;
    let name = args.key.as_str();
    let places = (queue_places.places.iter().map(|place| Waiter::new(name, "lock", place, args.show_tokens)))
        .chain(group_places.places.iter().map(|place| Waiter::new(name, "group", place, args.show_tokens)))
        .collect();
    let holder = |kind: &'static str, info: LockInfo| Holder {
        kind,
        mode: info.mode.as_str(),
        owner: owner(&info.token),
        owner_id: info.owner,
        ttl_left_ms: info.ttl_left.as_millis(),
        fence: info.fence,
        token: args.show_tokens.then(|| info.token.as_str().to_owned()),
    };
    let mut group_holders: Vec<Holder> = groups.into_iter().map(|info| holder("group", info)).collect();
    group_holders.sort_by(|a, b| (a.mode, &a.owner_id, &a.owner).cmp(&(b.mode, &b.owner_id, &b.owner)));
    let holders: Vec<Holder> = plain.map(|info| holder("lock", info)).into_iter().chain(group_holders).collect();
    let inspection = Inspection {
        store: store.backend(),
        key: args.key.as_str(),
        state: if holders.is_empty() { "free" } else { "held" },
        holders,
        waiting: queue_places.count,
        waiting_groups: group_places.count,
        places,
    };
    let mut out = io::BufWriter::new(io::stdout().lock());
    let written = match args.format() {
        Format::Json => {
            serde_json::to_writer(&mut out, &inspection).map_err(io::Error::from).and_then(|()| writeln!(out))
        }
        Format::Table => write_table(&mut out, &inspection, args.show_tokens),
    }
    .and_then(|()| out.flush());
    match written {
        Ok(()) => Ok(0),
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(0),
        Err(error) => Err(Failure::new(exit::SOFTWARE, format!("cannot write the holders: {error}"))),
    }
}

/// The places on a name, or only how many there are on a store that cannot read them.
#[derive(Debug, Default)]
struct Places {
    places: Vec<WaitingPlace>,
    count: usize,
}

/// Reads the places (one read), or counts them (one read) when the store cannot read them.
async fn places_or_count(
    places: impl Future<Output = Result<Vec<WaitingPlace>, LockError>>,
    count: impl Future<Output = Result<usize, LockError>>,
) -> Result<Places, LockError> {
    match places.await {
        Ok(places) => Ok(Places { count: places.len(), places }),
        Err(LockError::Unsupported { .. }) => Ok(Places { places: Vec::new(), count: count.await? }),
        Err(error) => Err(error),
    }
}

fn write_table(out: &mut impl Write, inspection: &Inspection<'_>, show_tokens: bool) -> io::Result<()> {
    write_holders(out, inspection, show_tokens)?;
    if !inspection.places.is_empty() {
        writeln!(out)?;
        write_waiting(out, &inspection.places, inspection.places.len(), show_tokens)?;
    }
    Ok(())
}

fn write_holders(out: &mut impl Write, inspection: &Inspection<'_>, show_tokens: bool) -> io::Result<()> {
    let holders = &inspection.holders;
    if holders.is_empty() {
        return match inspection.waiting + inspection.waiting_groups {
            0 => writeln!(out, "{}: free", inspection.key),
            n => writeln!(out, "{}: free, {n} waiting", inspection.key),
        };
    }
    let rows: Vec<Vec<String>> = holders
        .iter()
        .map(|holder| {
            let mut cells = vec![
                holder.kind.to_owned(),
                holder.mode.to_owned(),
                holder.owner.clone(),
                round_ms(holder.ttl_left_ms),
                holder.fence.map_or_else(|| "-".to_owned(), |fence| fence.to_string()),
                holder.owner_id.clone().unwrap_or_else(|| "-".to_owned()),
            ];
            cells.extend(holder.token.clone());
            cells
        })
        .collect();
    let columns = ["KIND", "MODE", "OWNER", ">TTL LEFT", ">FENCE", "APP@INSTANCE", "TOKEN"];
    write_columns(out, &columns[..if show_tokens { 7 } else { 6 }], &rows)?;
    let noun = if holders.len() == 1 { "holder" } else { "holders" };
    let waiting = match inspection.waiting + inspection.waiting_groups {
        0 => String::new(),
        n => format!(", {n} waiting"),
    };
    writeln!(out, "{}: {} {noun}{waiting}", inspection.key, holders.len())
}

/// Releases a lock if `--token` still holds it, or every group hold of `--owner`.
pub(crate) async fn release(url: Option<&str>, args: ReleaseArgs) -> Result<u8, Failure> {
    let (url, _) = store::url_or_default(url)?;
    let url = url.as_str();
    store::refuse_memory(url, "release")?;
    let store = store::connect(url).await?;
    let (key, token) = match (args.key, args.token, args.owner) {
        (Some(key), Some(token), None) => (key, token),
        (None, None, Some(owner)) => {
            let freed = LockManager::new(store).release_owner_of(&owner).await?;
            let noun = if freed == 1 { "group hold" } else { "group holds" };
            println!("{owner}: {freed} {noun} released");
            return Ok(0);
        }
        _ => return Err(Failure::usage("`release` takes KEY --token TOKEN, or --owner APP@INSTANCE")),
    };
    let name = key.as_str();
    if store.release(&key.to_store_key(), &token).await? {
        println!("{name}: released");
        Ok(0)
    } else {
        eprintln!(
            "distlock: lock `{name}` not released: token {}… does not hold it (it is free, expired, or held by another token)",
            token.short()
        );
        Ok(NOT_RELEASED)
    }
}
