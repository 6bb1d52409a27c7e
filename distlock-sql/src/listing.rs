//! Reading leases back: `inspect` and `list` answers built from a row's columns, checked.

use std::time::Duration;

use distlock_api::{HeldLock, KeyPattern, ListCursor, LockError, LockInfo, LockKey, Token, LOCK_NAMESPACE};

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
