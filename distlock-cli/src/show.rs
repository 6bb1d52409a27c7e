//! How a hold is shown to a person: its holder's safe name and its time left; and how
//! the places of waiting acquisitions are printed.

use std::io::{self, Write};
use std::time::Duration;

use distlock::{Token, WaitingPlace};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// A holder's name that is safe to show: the first 8 hex digits of the SHA-256 of its
/// token. Two holders are told apart, one holder is recognised across listings, and the
/// token cannot be recovered (unlike a prefix of it, which is part of the secret).
pub(crate) fn owner(token: &Token) -> String {
    let digest = Sha256::digest(token.as_str().as_bytes());
    digest.iter().take(4).map(|byte| format!("{byte:02x}")).collect()
}

/// A duration rounded to what a person reads: ms below 10 s, else 0.1 s.
pub(crate) fn round(duration: Duration) -> String {
    let millis = duration.as_millis();
    if millis < 10_000 {
        format!("{millis}ms")
    } else {
        format!("{:.1}s", duration.as_secs_f64())
    }
}

/// A duration in milliseconds, as [`round`] shows it.
pub(crate) fn round_ms(ms: u128) -> String {
    round(Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX)))
}

/// One waiting acquisition's place on one key, as printed.
#[derive(Debug, Serialize)]
pub(crate) struct Waiter {
    pub(crate) key: String,
    /// `lock` (a place in a single lock's fair queue) or `group` (a waiting group's place).
    pub(crate) kind: &'static str,
    pub(crate) mode: &'static str,
    /// [`owner`] of the waiter's token.
    pub(crate) owner: String,
    /// How long the place has existed, by the store's clock; `null` on a store that does
    /// not record it.
    pub(crate) waited_ms: Option<u128>,
    /// The place's time left unless the waiter refreshes it.
    pub(crate) place_left_ms: u128,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) token: Option<String>,
}

impl Waiter {
    pub(crate) fn new(key: &str, kind: &'static str, place: &WaitingPlace, show_tokens: bool) -> Self {
        Self {
            key: key.to_owned(),
            kind,
            mode: place.mode.as_str(),
            owner: owner(&place.token),
            waited_ms: place.waited.map(|waited| waited.as_millis()),
            place_left_ms: place.ttl_left.as_millis(),
            token: show_tokens.then(|| place.token.as_str().to_owned()),
        }
    }
}

/// The waiting places, oldest first: key, kind, mode, owner, time waited, place left.
pub(crate) fn write_waiting(
    out: &mut impl Write,
    waiting: &[Waiter],
    total: usize,
    show_tokens: bool,
) -> io::Result<()> {
    let rows: Vec<Vec<String>> = waiting
        .iter()
        .map(|waiter| {
            let mut row = vec![
                waiter.key.clone(),
                waiter.kind.to_owned(),
                waiter.mode.to_owned(),
                waiter.owner.clone(),
                waiter.waited_ms.map_or_else(|| "-".to_owned(), round_ms),
                round_ms(waiter.place_left_ms),
            ];
            row.extend(waiter.token.clone());
            row
        })
        .collect();
    let columns = ["WAITING", "KIND", "MODE", "OWNER", ">WAITED", ">PLACE LEFT", "TOKEN"];
    write_columns(out, &columns[..if show_tokens { 7 } else { 6 }], &rows)?;
    if waiting.len() < total {
        writeln!(out, "{} of {total} waiting shown (--limit)", waiting.len())
    } else {
        writeln!(out, "{total} waiting")
    }
}

/// Writes a table: the header line, then a line per row; each column as wide as its
/// widest cell or header, two spaces apart, trailing spaces trimmed. A header starting
/// with `>` (not printed) makes its column right-aligned.
pub(crate) fn write_columns(out: &mut impl Write, headers: &[&str], rows: &[Vec<String>]) -> io::Result<()> {
    let columns: Vec<(&str, bool)> = headers
        .iter()
        .map(|header| header.strip_prefix('>').map_or((*header, false), |header| (header, true)))
        .collect();
    let widths: Vec<usize> = columns
        .iter()
        .enumerate()
        .map(|(at, (header, _))| {
            let cells = rows.iter().filter_map(|row| row.get(at)).map(|cell| cell.chars().count());
            cells.chain([header.chars().count()]).max().unwrap_or(0)
        })
        .collect();
    let line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut line = String::new();
        for ((cell, (_, right)), width) in cells.zip(&columns).zip(&widths) {
            if !line.is_empty() {
                line.push_str("  ");
            }
            let padding = " ".repeat(width.saturating_sub(cell.chars().count()));
            if *right {
                line.push_str(&padding);
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&padding);
            }
        }
        line.trim_end().to_owned()
    };
    writeln!(out, "{}", line(&mut columns.iter().map(|(header, _)| *header)))?;
    for row in rows {
        writeln!(out, "{}", line(&mut row.iter().map(String::as_str)))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_are_stable_short_and_not_a_prefix_of_the_token() {
        let token = Token::parse("4f1c0a4e-8d5b-4d61-9a8e-0c2b7f3e9a10").unwrap();
        let owner = owner(&token);
        assert_eq!(owner.len(), 8);
        assert!(owner.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(owner, super::owner(&token.clone()), "stable");
        assert!(!token.as_str().contains(&owner), "not part of the token");
        assert_ne!(owner, super::owner(&Token::generate()));
    }

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_and_trimmed() {
        let rows = vec![
            vec!["a".to_owned(), "12".to_owned(), "x".to_owned()],
            vec!["long".to_owned(), "3".to_owned(), String::new()],
        ];
        let mut out = Vec::new();
        write_columns(&mut out, &["K", ">N", "LAST"], &rows).unwrap();
        assert_eq!(String::from_utf8(out).unwrap(), "K      N  LAST\na     12  x\nlong   3\n");
    }
}
