//! The host-wide turn to write: an exclusive `flock` on a file beside the database
//! (`<database>-lock`). A leaf: imports nothing from the rest of the crate.
//!
//! SQLite alone makes a writer that finds the database locked sleep and retry (its busy
//! handler sleeps up to 100 ms at a time), so a process that writes in a tight loop can
//! keep another one out for as long as it goes on. Writers that first queue on this file
//! lock are woken by the kernel the moment the holder lets go instead, and SQLite's own
//! wait is left for writers that do not take the lock (other programs on the file).

use std::fs::{File, OpenOptions, TryLockError};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The gate file of one database.
#[derive(Debug)]
pub(crate) struct Gate {
    file: Arc<File>,
}

/// This process's turn at the gate; dropping it lets the next writer in.
#[derive(Debug)]
pub(crate) struct Turn {
    file: Arc<File>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        if let Err(error) = self.file.unlock() {
            tracing::warn!(%error, "unlocking the write gate failed");
        }
    }
}

/// The gate file's path for the database file `database`.
pub(crate) fn path_for(database: &Path) -> PathBuf {
    let mut name = database.as_os_str().to_owned();
    name.push("-lock");
    PathBuf::from(name)
}

impl Gate {
    /// Opens (creating it if missing) the gate file of `database`.
    pub(crate) fn open(database: &Path) -> Result<Self, std::io::Error> {
        let file = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(path_for(database))?;
        Ok(Self { file: Arc::new(file) })
    }

    /// Waits for this process's turn: taken at once when the gate is free, else waited
    /// for on a blocking thread; if the caller gives up, the turn it would have got is let
    /// go as soon as it arrives.
    pub(crate) async fn turn(&self) -> Result<Turn, std::io::Error> {
        // A free gate is taken here, without the two thread switches of a trip through
        // the blocking pool for every write.
        match self.file.try_lock() {
            Ok(()) => return Ok(Turn { file: Arc::clone(&self.file) }),
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(error)) => return Err(error),
        }
        let file = Arc::clone(&self.file);
        tokio::task::spawn_blocking(move || {
            file.lock()?;
            Ok(Turn { file })
        })
        .await
        .map_err(std::io::Error::other)?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_turn_excludes_other_openers_until_dropped() {
        let dir = distlock_conformance::kit::fresh_dir("gate");
        let database = dir.join("x.db");
        assert_eq!(path_for(&database), dir.join("x.db-lock"));
        let (a, b) = (Gate::open(&database).unwrap(), Gate::open(&database).unwrap());
        let turn = a.turn().await.unwrap();
        assert!(matches!(b.file.try_lock(), Err(std::fs::TryLockError::WouldBlock)));
        drop(turn);
        let _second = b.turn().await.unwrap();
    }
}
