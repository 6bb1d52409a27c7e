//! The grant rule of lock groups: whether one member of a group request may be granted on
//! one name, given what the name has now.
//!
//! [`decide`] is the reference: the memory and etcd stores call it, and the Redis script
//! and the PostgreSQL function implement it on the server. A differential test drives
//! random histories through it and through those servers and requires the same decisions.
//! Everything else a store does around it — which places a blocked attempt records
//! ([`GroupRequest::places`](crate::GroupRequest::places)), how tickets are drawn, expiry
//! — is the [`GroupLockStore`](crate::GroupLockStore) contract's.
//!
//! ```
//! use distlock::grant::{decide, Decision, Holder, Place, Request};
//! use distlock::LockMode;
//!
//! // A reader holds the name and a writer waits with ticket 7.
//! let holders = [Holder { token: "r1", mode: LockMode::Shared }];
//! let places = [Place { token: "w1", mode: LockMode::Exclusive, ticket: 7 }];
//! let reader = |ticket| Request { token: "r2", mode: LockMode::Shared, ticket, permits: None };
//!
//! // A new reader queues behind the waiting writer (writer preference)…
//! assert_eq!(decide(&reader(None), holders, places), Decision::Wait);
//! // …one that waited since before the writer (an older ticket) does not.
//! assert_eq!(decide(&reader(Some(5)), holders, places), Decision::Grant);
//! // The writer itself waits for the reader's hold alone.
//! let writer = Request { token: "w1", mode: LockMode::Exclusive, ticket: Some(7), permits: Some(1) };
//! assert_eq!(decide(&writer, holders, places), Decision::Wait);
//! assert_eq!(decide(&writer, [], places), Decision::Grant);
//! ```

use crate::holder::LockMode;

/// A live holder of the name: an unexpired hold on the store's clock at the moment of the
/// decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Holder<'a> {
    /// The holding group's token.
    pub token: &'a str,
    /// The mode it holds the name in.
    pub mode: LockMode,
}

/// A live place (intent) of a waiting group on the name: unexpired on the store's clock at
/// the moment of the decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Place<'a> {
    /// The waiting group's token.
    pub token: &'a str,
    /// The mode it waits for.
    pub mode: LockMode,
    /// The waiting group's ticket (at least 1; smaller is older).
    pub ticket: u64,
}

/// One member of a group request, on its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    /// The requesting group's token.
    pub token: &'a str,
    /// The mode wanted.
    pub mode: LockMode,
    /// The group's ticket ([`GroupRequest::ticket`](crate::GroupRequest::ticket)); `None`
    /// on its first attempt.
    pub ticket: Option<u64>,
    /// The permits of `mode` on the name: the store's recorded entry for (name, mode) if
    /// any, else the member's
    /// [`default_permits`](crate::StoreMember::default_permits); `None`: unlimited.
    pub permits: Option<u32>,
}

/// What [`decide`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Decision {
    /// The member may be granted.
    Grant,
    /// The member must wait.
    Wait,
}

impl Decision {
    /// Whether it is [`Decision::Grant`].
    pub fn is_grant(self) -> bool {
        self == Self::Grant
    }
}

/// The grant rule: whether `request`'s member may be granted on a name whose live holders
/// are `holders` and whose live places are `places`.
///
/// # The rule
///
/// Let M be the request's mode, T its token, t its ticket and P its permits (the recorded
/// permits of (name, M), else the member's default; `None`: unlimited). The holders and
/// places of T itself never count. Of the others:
///
/// - the **holders** are every live holder of another token;
/// - the **older places** are the live places of other tokens whose ticket is strictly
///   smaller than t — on a first attempt (no ticket), every live place of another token.
///
/// The member is **granted** exactly when
///
/// 1. no holder is of the other mode than M,
/// 2. no older place is of the other mode than M, and
/// 3. P is unlimited, or (holders of M) + (older places of M) < P;
///
/// otherwise it **waits**. A group is granted when every one of its members is, each
/// decided on the state of its name before the attempt; a group is never granted in part.
///
/// # Consequences the stores rely on
///
/// - **Writer preference and arrival order**: an older place counts as a holder of its
///   mode, so a waiting writer holds back readers that arrive after it, a waiting reader
///   holds back later writers, and semaphore waiters take their slots in arrival order.
/// - **Progress**: only strictly older places count, so the oldest waiting group is held
///   back by holders alone, and two groups waiting for each other's names cannot block
///   each other forever.
/// - **Holders only**: tickets are at least 1, so a request with ticket
///   [`GroupRequest::HOLDERS_ONLY_TICKET`](crate::GroupRequest::HOLDERS_ONLY_TICKET) has
///   no older places and is refused by live holders alone
///   ([`Admission::HoldersOnly`](crate::Admission::HoldersOnly)).
/// - **Permits of at least 1**: a name without another holder or older place of M admits
///   one member of M whatever its permits (stores may skip reading them then).
/// - **Lowered permits**: holders beyond a lowered P keep their holds; the rule grants
///   no new member of M until the count is below P again.
pub fn decide<'a>(
    request: &Request<'_>,
    holders: impl IntoIterator<Item = Holder<'a>>,
    places: impl IntoIterator<Item = Place<'a>>,
) -> Decision {
    let mut same = 0u64;
    for holder in holders.into_iter().filter(|holder| holder.token != request.token) {
        if holder.mode != request.mode {
            return Decision::Wait;
        }
        same += 1;
    }
    let older = places
        .into_iter()
        .filter(|place| place.token != request.token && request.ticket.is_none_or(|ticket| place.ticket < ticket));
    for place in older {
        if place.mode != request.mode {
            return Decision::Wait;
        }
        same += 1;
    }
    if request.permits.is_none_or(|permits| same < u64::from(permits)) {
        Decision::Grant
    } else {
        Decision::Wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: LockMode = LockMode::Shared;
    const X: LockMode = LockMode::Exclusive;

    fn ask(mode: LockMode, ticket: Option<u64>, permits: Option<u32>) -> Request<'static> {
        Request { token: "me", mode, ticket, permits }
    }

    fn holder(token: &str, mode: LockMode) -> Holder<'_> {
        Holder { token, mode }
    }

    fn place(token: &str, mode: LockMode, ticket: u64) -> Place<'_> {
        Place { token, mode, ticket }
    }

    #[test]
    fn a_free_name_grants_any_mode_and_permits() {
        for mode in [S, X] {
            for permits in [None, Some(1), Some(3)] {
                assert_eq!(decide(&ask(mode, None, permits), [], []), Decision::Grant);
            }
        }
    }

    #[test]
    fn holders_of_the_other_mode_refuse() {
        assert_eq!(decide(&ask(S, None, None), [holder("w", X)], []), Decision::Wait);
        assert_eq!(decide(&ask(X, None, None), [holder("r", S)], []), Decision::Wait);
        assert_eq!(decide(&ask(S, Some(1), None), [holder("r", S), holder("r2", S)], []), Decision::Grant);
    }

    #[test]
    fn permits_count_holders_and_older_places_of_the_mode() {
        assert_eq!(decide(&ask(X, None, Some(1)), [holder("w", X)], []), Decision::Wait);
        assert_eq!(decide(&ask(X, None, Some(2)), [holder("w", X)], []), Decision::Grant);
        let places = [place("s1", S, 3)];
        assert_eq!(decide(&ask(S, Some(9), Some(2)), [holder("s0", S)], places), Decision::Wait);
        assert_eq!(decide(&ask(S, Some(2), Some(2)), [holder("s0", S)], places), Decision::Grant);
        assert_eq!(decide(&ask(S, None, Some(2)), [holder("s0", S)], places), Decision::Wait);
    }

    #[test]
    fn only_strictly_older_places_count() {
        let places = [place("w", X, 5)];
        assert_eq!(decide(&ask(S, Some(5), None), [], places), Decision::Grant);
        assert_eq!(decide(&ask(S, Some(6), None), [], places), Decision::Wait);
        assert_eq!(decide(&ask(S, None, None), [], places), Decision::Wait, "a first attempt yields to every place");
    }

    #[test]
    fn the_requests_own_holds_and_places_do_not_count() {
        assert_eq!(decide(&ask(X, Some(2), Some(1)), [holder("me", S)], [place("me", S, 1)]), Decision::Grant);
    }

    #[test]
    fn holders_only_ticket_sees_no_places() {
        let ticket = Some(crate::GroupRequest::HOLDERS_ONLY_TICKET);
        assert_eq!(decide(&ask(S, ticket, None), [], [place("w", X, 1)]), Decision::Grant);
        assert_eq!(decide(&ask(S, ticket, None), [holder("w", X)], []), Decision::Wait);
    }
}
