use std::sync::Arc;
use std::time::Duration;

use distlock_api::{DynLockStore, LockError, LossReason};
use distlock_election::{Election, Leader, Leadership, Observer};
use tokio::task::JoinHandle;

use super::{count_reaches, manager, Keys};

/// A bound for anything that should happen "at once": generous, these check behaviour.
const SOON: Duration = Duration::from_secs(10);

/// The election of a case, or — on a store without lease values or fencing — a check
/// that campaigning and reading are refused before anything is held, and `None`.
async fn election_or_refusal(store: &Arc<DynLockStore>, case: &str) -> Option<Election> {
    let keys = Keys::new(case);
    let election = Election::new(&manager(store), &keys.key("e")).unwrap().ttl(Duration::from_secs(3));
    if store.values().is_some() && store.capabilities().fencing {
        return Some(election);
    }
    let refused = |err: &LockError| {
        if store.values().is_none() {
            matches!(err, LockError::Unsupported { operation: "election", .. })
        } else {
            matches!(err, LockError::Config { .. })
        }
    };
    let err = election.campaign("a").await.unwrap_err();
    assert!(refused(&err), "{err}");
    let err = election.leader().await.unwrap_err();
    assert!(refused(&err), "{err}");
    assert!(store.inspect(&election.key().to_store_key()).await.unwrap().is_none(), "a refused campaign holds");
    None
}

/// The observer's next answer, within [`SOON`].
async fn next(observer: &mut Observer) -> Option<Leader> {
    tokio::time::timeout(SOON, observer.changed()).await.expect("no change seen").unwrap()
}

fn value_of(leader: &Leader) -> &str {
    leader.value.as_ref().map_or("<none>", |value| value.as_str())
}

/// Starts a campaign in a task and waits until it waits in the queue (on a store with a
/// fair queue, whose length is then `queued`).
async fn candidate(
    store: &Arc<DynLockStore>,
    election: &Election,
    value: &str,
    queued: usize,
) -> JoinHandle<Leadership> {
    let campaign = {
        let election = election.clone();
        let value = value.to_owned();
        tokio::spawn(async move { election.campaign(&value).await.unwrap() })
    };
    if let Some(queue) = store.queue() {
        let key = election.key().to_store_key();
        count_reaches("candidates waiting", queued, || async { queue.queue_len(&key).await.unwrap() }).await;
    }
    campaign
}

/// A candidate leads with its value and a term; a second one waits; a resign hands the
/// lead to it at once with a greater term; `proclaim` changes the value within the term;
/// after the last resign nobody leads.
pub async fn election_resign_hands_over_to_the_next_candidate(store: Arc<DynLockStore>) {
    let Some(election) = election_or_refusal(&store, "election-resign").await else { return };
    assert_eq!(election.leader().await.unwrap(), None);
    let first = election.campaign("a:1").await.unwrap();
    let leader = election.leader().await.unwrap().expect("a leader");
    assert_eq!((leader.term, value_of(&leader)), (first.term(), "a:1"));
    assert!(election.campaign_for("x", Duration::ZERO).await.unwrap().is_none(), "two leaders at once");

    let second = candidate(&store, &election, "b:1", 1).await;
    assert!(!second.is_finished(), "a candidate led while another led");
    let first_term = first.term();
    assert!(first.resign().await.unwrap());
    let mut second = tokio::time::timeout(SOON, second).await.expect("no hand-over after a resign").unwrap();
    assert!(second.term() > first_term, "term {} after {first_term}", second.term());
    let leader = election.leader().await.unwrap().expect("a leader");
    assert_eq!((leader.term, value_of(&leader)), (second.term(), "b:1"));

    second.proclaim("b:2").await.unwrap();
    assert_eq!(second.value().as_str(), "b:2");
    let leader = election.leader().await.unwrap().expect("a leader");
    assert_eq!((leader.term, value_of(&leader)), (second.term(), "b:2"), "proclaim changed the term");
    assert!(matches!(second.proclaim("\0").await, Err(LockError::InvalidValue { .. })));
    assert!(second.resign().await.unwrap());
    assert_eq!(election.leader().await.unwrap(), None);
}

/// An observer reports the current leader first, then each change in order: a proclaimed
/// value (same term), the next leader (a greater term), nobody.
pub async fn election_observer_sees_every_change_in_order(store: Arc<DynLockStore>) {
    let Some(election) = election_or_refusal(&store, "election-observe").await else { return };
    let mut observer = election.observe();
    assert_eq!(next(&mut observer).await, None, "nobody leads yet");
    let mut first = election.campaign("a:1").await.unwrap();
    let seen = next(&mut observer).await.expect("a leader");
    assert_eq!((seen.term, value_of(&seen)), (first.term(), "a:1"));
    first.proclaim("a:2").await.unwrap();
    let seen = next(&mut observer).await.expect("a leader");
    assert_eq!((seen.term, value_of(&seen)), (first.term(), "a:2"));

    let second = candidate(&store, &election, "b:1", 1).await;
    assert!(first.resign().await.unwrap());
    let second = tokio::time::timeout(SOON, second).await.expect("no hand-over").unwrap();
    let seen = next(&mut observer).await.expect("a leader");
    assert_eq!((seen.term, value_of(&seen)), (second.term(), "b:1"));
    assert_eq!(observer.last_term(), Some(Some(second.term())));
    assert!(second.resign().await.unwrap());
    assert_eq!(next(&mut observer).await, None, "a resigned leader still seen");
}

/// Candidates lead in the order they started waiting on a store with a fair queue; on one
/// without, every waiting candidate still leads in turn.
pub async fn election_candidates_lead_in_arrival_order(store: Arc<DynLockStore>) {
    let Some(election) = election_or_refusal(&store, "election-order").await else { return };
    let mut leading = election.campaign("c0").await.unwrap();
    let mut waiting = Vec::new();
    for n in 1..=3 {
        waiting.push((format!("c{n}"), candidate(&store, &election, &format!("c{n}"), n).await));
    }
    let fair = store.capabilities().fair_queue;
    let mut led = Vec::new();
    while !waiting.is_empty() {
        let term = leading.term();
        assert!(leading.resign().await.unwrap());
        let next = if fair {
            let (name, campaign) = waiting.remove(0);
            let next = tokio::time::timeout(SOON, campaign).await.expect("no hand-over").unwrap();
            assert_eq!(next.value().as_str(), name, "served out of arrival order");
            next
        } else {
            let deadline = tokio::time::Instant::now() + SOON;
            loop {
                if let Some(index) = waiting.iter().position(|(_, campaign)| campaign.is_finished()) {
                    break waiting.remove(index).1.await.unwrap();
                }
                assert!(tokio::time::Instant::now() < deadline, "no candidate led after a resign");
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        };
        assert!(next.term() > term, "term {} after {term}", next.term());
        led.push(next.value().as_str().to_owned());
        leading = next;
    }
    assert!(leading.resign().await.unwrap());
    if fair {
        assert_eq!(led, ["c1", "c2", "c3"]);
    }
}

/// A leader whose lease is taken from it learns so from `lost()`, and its `proclaim`
/// fails with `LeaseLost` without touching the new holder's value.
pub async fn election_leader_learns_of_a_lost_lead(store: Arc<DynLockStore>) {
    let Some(election) = election_or_refusal(&store, "election-lost").await else { return };
    let mut leader = election.campaign("a").await.unwrap();
    // An administrator force-releases the lead and another candidate takes it.
    assert!(store.release(leader.lock().store_key(), leader.lock().token()).await.unwrap());
    let usurper = election.campaign("b").await.unwrap();
    let reason = tokio::time::timeout(SOON, leader.lost()).await.expect("lost did not fire");
    assert_eq!(reason, LossReason::NotHeld);
    let err = leader.proclaim("a:2").await.unwrap_err();
    assert!(matches!(err, LockError::LeaseLost { .. }), "{err}");
    let seen = election.leader().await.unwrap().expect("a leader");
    assert_eq!((seen.term, value_of(&seen)), (usurper.term(), "b"));
    assert!(usurper.term() > leader.term());
    assert!(!leader.resign().await.unwrap(), "a lost lead was resigned");
    assert!(usurper.resign().await.unwrap());
}
