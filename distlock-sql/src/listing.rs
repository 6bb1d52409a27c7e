//! Reading leases back: `inspect` and `list` answers built from a row's columns, checked;
//! and the places of waiters and the pages of group listings.

use std::time::Duration;

use distlock_api::{
    HeldLock, KeyPattern, ListCursor, LockError, LockInfo, LockKey, LockMode, Token, WaitingPlace, LOCK_NAMESPACE,
};

/// The key after which a listing page starts: `""` for the first page, else the cursor's.
///
/// # Errors
///
/// [`LockError::Config`] for a cursor that is not a key of a `database` store.
pub fn page_start<'c>(cursor: Option<&'c ListCursor>, database: &str) -> Result<&'c str, LockError> {
    match cursor {
        None => Ok(""),
        Some(cursor) if cursor.as_str().starts_with(LOCK_NAMESPACE) => Ok(cursor.as_str()),
        Some(cursor) => {
            Err(LockError::Config { message: format!("{cursor:?} is not a listing cursor of the {database} store") })
        }
    }
}

/// A held lease's columns as [`LockInfo`]: its token, its fence, and the microseconds
/// left on it as the server computed them (a negative count, a lease ending as it is
/// read, counts as 1).
///
/// # Errors
///
/// What is wrong with the row, for the store's "unexpected answer" error: a token that
/// is not a UUID v4 or a negative fence.
pub fn lock_info(token: &str, fence: i64, micros_left: i64) -> Result<LockInfo, String> {
    let token = Token::parse(token).map_err(|_| "the stored token is not a UUID v4".to_owned())?;
    let fence = u64::try_from(fence).map_err(|_| format!("negative fence {fence}"))?;
    Ok(LockInfo::new(token, Some(fence), Duration::from_micros(u64::try_from(micros_left).unwrap_or(1))))
}

/// A listed held lease as [`HeldLock`], or `None` when `store_key` is not a lock's key
/// or does not match `pattern`.
///
/// # Errors
///
/// As [`lock_info`], naming the key; and for a stored key that is not a valid key.
pub fn held_lock(
    pattern: &KeyPattern,
    store_key: &str,
    token: &str,
    fence: i64,
    micros_left: i64,
) -> Result<Option<HeldLock>, String> {
    let Some(key) = store_key.strip_prefix(LOCK_NAMESPACE) else { return Ok(None) };
    if !pattern.matches(key) {
        return Ok(None);
    }
    let key = LockKey::new(key).map_err(|_| format!("the table holds an invalid key {key:?}"))?;
    let info = lock_info(token, fence, micros_left).map_err(|what| format!("`{key}`: {what}"))?;
    Ok(Some(HeldLock::new(key, vec![info])))
}

/// A waiting place's columns as [`WaitingPlace`]: its token, its mode, and the
/// microseconds left on it and since it was taken as the server computed them.
///
/// # Errors
///
/// What is wrong with the row: a token that is not a UUID v4.
pub fn waiting_place(
    token: &str,
    mode: LockMode,
    micros_left: i64,
    micros_waited: i64,
) -> Result<WaitingPlace, String> {
    let token = Token::parse(token).map_err(|_| "a stored token is not a UUID v4".to_owned())?;
    let left = Duration::from_micros(u64::try_from(micros_left).unwrap_or(1));
    let waited = Duration::from_micros(u64::try_from(micros_waited).unwrap_or(0));
    Ok(WaitingPlace::new(token, mode, Some(waited), left))
}

/// One live hold or place of a group name, as a group listing reads it.
#[derive(Debug, Clone, Copy)]
pub struct GroupRow<'a> {
    /// The stored name (in the `lock:` namespace).
    pub name: &'a str,
    /// The holder's or waiter's token.
    pub token: &'a str,
    /// The mode held or waited for.
    pub mode: LockMode,
    /// A holder's owner id.
    pub owner: &'a str,
    /// A holder's fence; `None` for a place.
    pub fence: Option<i64>,
    /// Microseconds left on the hold or place.
    pub micros_left: i64,
    /// For a place, microseconds since it was taken; `None` for a hold.
    pub micros_waited: Option<i64>,
}

/// The names of a group listing page, from its rows ordered by name: each name that
/// `pattern` matches with its holders (sorted by fence) and its places (in row order).
///
/// # Errors
///
/// What is wrong with a row, naming its key: an invalid stored name, a token that is not
/// a UUID v4, a negative fence.
pub fn group_names<'a>(
    pattern: &KeyPattern,
    rows: impl IntoIterator<Item = GroupRow<'a>>,
) -> Result<Vec<HeldLock>, String> {
    let mut names: Vec<HeldLock> = Vec::new();
    for row in rows {
        let Some(key) = row.name.strip_prefix(LOCK_NAMESPACE) else { continue };
        if !pattern.matches(key) {
            continue;
        }
        let fail = |what: String| format!("`{key}`: {what}");
        if names.last().is_none_or(|last| last.key.as_str() != key) {
            let key = LockKey::new(key).map_err(|_| format!("the table holds an invalid name {key:?}"))?;
            names.push(HeldLock::new(key, Vec::new()));
        }
        let Some(name) = names.last_mut() else { continue };
        match (row.fence, row.micros_waited) {
            (Some(fence), _) => {
                let info = lock_info(row.token, fence, row.micros_left).map_err(fail)?;
                name.holders.push(info.with_mode(row.mode).with_owner(row.owner));
            }
            (None, waited) => {
                let place = waiting_place(row.token, row.mode, row.micros_left, waited.unwrap_or(0)).map_err(fail)?;
                name.waiting.push(place);
            }
        }
    }
    for name in &mut names {
        name.holders.sort_by_key(|holder| holder.fence);
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_become_answers_or_say_what_is_wrong() {
        let token = Token::generate();
        let info = lock_info(token.as_str(), 7, 1_500).unwrap();
        assert_eq!(
            (info.token.clone(), info.fence, info.ttl_left),
            (token.clone(), Some(7), Duration::from_micros(1_500))
        );
        assert_eq!(lock_info(token.as_str(), 7, -3).unwrap().ttl_left, Duration::from_micros(1));
        assert!(lock_info("x", 7, 5).unwrap_err().contains("UUID"));
        assert!(lock_info(token.as_str(), -1, 5).unwrap_err().contains("negative fence -1"));

        let pattern = KeyPattern::new("a*").unwrap();
        let key = format!("{LOCK_NAMESPACE}ab");
        assert!(held_lock(&pattern, &key, token.as_str(), 1, 5).unwrap().is_some());
        assert!(held_lock(&pattern, &format!("{LOCK_NAMESPACE}b"), token.as_str(), 1, 5).unwrap().is_none());
        assert!(held_lock(&pattern, "other:ab", token.as_str(), 1, 5).unwrap().is_none());
        assert!(held_lock(&pattern, &key, "x", 1, 5).unwrap_err().contains("`ab`"));

        assert_eq!(page_start(None, "MySQL").unwrap(), "");
        let err = page_start(Some(&ListCursor::new("x".to_owned())), "MySQL").unwrap_err();
        assert!(err.to_string().contains("MySQL store"), "{err}");
    }
}
