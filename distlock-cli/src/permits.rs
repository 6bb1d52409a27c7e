//! `distlock permits`: the recorded permits of a group name, shown or changed.

use std::io::{self, Write};

use distlock::{LockManager, LockMode};
use serde::Serialize;

use crate::cli::{Format, PermitsArgs};
use crate::exit::{self, Failure};
use crate::store;

/// What `permits --format json` prints: the recorded permits after any change.
#[derive(Debug, Serialize)]
struct Recorded<'a> {
    store: &'static str,
    key: &'a str,
    /// `null`: none recorded; each client's default applies.
    shared: Option<u32>,
    /// `null`: none recorded; each client's default applies.
    exclusive: Option<u32>,
}

/// Applies the setters (if any), then prints the recorded permits of both modes.
pub(crate) async fn permits(url: Option<&str>, args: PermitsArgs) -> Result<u8, Failure> {
    let (url, _) = store::url_or_default(url)?;
    let url = url.as_str();
    store::refuse_memory(url, "permits")?;
    let locks = LockManager::new(store::connect(url).await?);
    let key = args.key.as_str();
    for (mode, permits) in args.changes() {
        locks.set_permits(key, mode, permits).await?;
    }
    let groups = locks.store().groups().ok_or_else(|| {
        Failure::from(distlock::LockError::Unsupported { backend: locks.store().backend(), operation: "permits" })
    })?;
    let store_key = args.key.to_store_key();
    let (shared, exclusive) = tokio::try_join!(
        groups.permits(&store_key, LockMode::Shared),
        groups.permits(&store_key, LockMode::Exclusive)
    )?;
    let recorded = Recorded { store: locks.store().backend(), key, shared, exclusive };
    let mut out = io::BufWriter::new(io::stdout().lock());
    let written = match args.format {
        Format::Json => {
            serde_json::to_writer(&mut out, &recorded).map_err(io::Error::from).and_then(|()| writeln!(out))
        }
        Format::Table => write_table(&mut out, &recorded),
    }
    .and_then(|()| out.flush());
    match written {
        Ok(()) => Ok(0),
        Err(error) if error.kind() == io::ErrorKind::BrokenPipe => Ok(0),
        Err(error) => Err(Failure::new(exit::SOFTWARE, format!("cannot write the permits: {error}"))),
    }
}

fn write_table(out: &mut impl Write, recorded: &Recorded<'_>) -> io::Result<()> {
    let shown = |permits: Option<u32>, default: &str| match permits {
        Some(permits) => permits.to_string(),
        None => format!("-  (none recorded: each client's default applies, {default} unless configured)"),
    };
    writeln!(out, "MODE       PERMITS")?;
    writeln!(out, "shared     {}", shown(recorded.shared, "unlimited"))?;
    writeln!(out, "exclusive  {}", shown(recorded.exclusive, "1"))
}
