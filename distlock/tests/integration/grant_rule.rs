//! The grant rule, checked everywhere: random histories of group requests, retries,
//! releases, withdrawals, permit changes and expiries run through a model built on
//! [`distlock::grant::decide`] and through a real store's [`GroupLockStore`], which must
//! make the same grant/wait decisions, hold the same holders and count the same waiting
//! groups at every step. Redis and PostgreSQL implement the rule on the server (a Lua
//! script, a PL/pgSQL function); the memory and etcd stores call the function, and run
//! here for their bookkeeping around it (places, tickets, permits, expiry).
//!
//! Besides the requests a manager sends, *probes* ask once with a ticket equal to (or one
//! from) a live place's, where a ticket comparison's `<` and `<=` differ.
//!
//! Expiry is made deterministic by epochs: an epoch is a number of steps the seed picks;
//! every hold and place of a *short* group expires at the end of the epoch it was written
//! in (its TTL is the time left until then, which allows every step of the epoch), and a
//! *tick* sleeps until every short lease has surely ended. The model drops them at the
//! tick. (etcd leases count whole seconds, so on
//! etcd every lease is long and the history has no expiries.)
//!
//! [`mutants`] shows that a planted one-character change to the Redis script or the
//! PostgreSQL function makes this driver report a divergence.
//!
//! `DISTLOCK_DIFF_SEED=<n>` replays a history (each run prints its seed);
//! `DISTLOCK_DIFF_STEPS=<n>` runs n steps per store, with no time bound (the default is a
//! few hundred steps, at most a few seconds per store). For a long run:
//! `DISTLOCK_DIFF_STEPS=20000 scripts/test.sh cargo nextest run -p distlock
//! --all-features -E 'test(/grant_rule/)'`.
#![cfg(all(feature = "memory", feature = "redis", feature = "postgres", feature = "etcd"))]

mod mutants;
mod script_proxy;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::grant::{self, Decision};
use distlock::{DynLockStore, GroupAcquire, GroupLockStore, GroupRequest, LockKey, LockMode, OwnerId, StoreKey};
use distlock::{StoreMember, Token, Ttl};

/// Names in play: few, so that groups meet.
const NAMES: usize = 3;
/// Groups holding or waiting at once, at most.
const LIVE_GROUPS: usize = 8;
/// An epoch is a number of steps the seed picks, and lasts at least this long: short
/// leases end at its end.
const EPOCH: Duration = Duration::from_millis(300);
/// An epoch's time also allows each of its steps twice the average step, and this much
/// more: a step must end before any short lease does.
const GUARD: Duration = Duration::from_millis(200);
/// Server clocks count whole milliseconds: a short lease may end this much before its
/// epoch does.
const SLACK: Duration = Duration::from_millis(2);
/// A long lease: outlives any run.
const LONG: Duration = Duration::from_secs(3600);
/// Without `DISTLOCK_DIFF_STEPS`: this many steps, within `CI_BUDGET`.
const CI_STEPS: u64 = 400;
const CI_BUDGET: Duration = Duration::from_secs(6);

/// SplitMix64: small, seedable, good enough to pick steps.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

fn seed() -> u64 {
    match std::env::var("DISTLOCK_DIFF_SEED") {
        Ok(text) => text.trim().parse().expect("DISTLOCK_DIFF_SEED is a number"),
        Err(_) => {
            let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            nanos.as_nanos() as u64 ^ u64::from(std::process::id()).rotate_left(32)
        }
    }
}

/// How far a run goes: a number of steps, within a time budget or not.
#[derive(Debug, Clone, Copy)]
struct Limits {
    steps: u64,
    budget: Option<Duration>,
}

impl Limits {
    /// `DISTLOCK_DIFF_STEPS` steps with no time bound, else `CI_STEPS` within `CI_BUDGET`.
    fn from_env() -> Self {
        match std::env::var("DISTLOCK_DIFF_STEPS") {
            Ok(text) => Self { steps: text.trim().parse().expect("DISTLOCK_DIFF_STEPS is a number"), budget: None },
            Err(_) => Self { steps: CI_STEPS, budget: Some(CI_BUDGET) },
        }
    }
}

/// The first step at which a store and the rule differed.
#[derive(Debug)]
struct Divergence {
    /// Steps run, the differing one included.
    steps: u64,
    /// What differed, the seed, the model's state and the last steps.
    report: String,
}

impl std::fmt::Display for Divergence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.report)
    }
}

/// How a group asks, as a manager would.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// One attempt, no places (`try_lock`).
    Single,
    /// Waits, with a place on every member.
    Fair,
    /// Waits, with places on its exclusive members only.
    Barging,
    /// Waits counting live holders only (`Admission::HoldersOnly`): no places.
    HoldersOnly,
    /// One attempt with a ticket chosen near a place's (equal, one less, one more), no
    /// places: where `<` and `<=` differ.
    Probe { ticket: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Holding,
    /// Blocked, with the ticket the store gave it.
    Waiting {
        ticket: u64,
    },
    Done,
}

/// A group member: name index, mode, default permits.
type Member = (usize, LockMode, Option<u32>);

#[derive(Debug)]
struct Group {
    id: usize,
    token: Token,
    members: Vec<Member>,
    kind: Kind,
    /// Its holds and places end with the epoch they were written in.
    short: bool,
    phase: Phase,
}

#[derive(Debug, Default, Clone)]
struct ModelName {
    /// (group id, mode).
    holders: Vec<(usize, LockMode)>,
    /// (group id, mode, ticket).
    places: Vec<(usize, LockMode, u64)>,
    /// Recorded permits: shared, exclusive.
    permits: [Option<u32>; 2],
}

fn slot(mode: LockMode) -> usize {
    usize::from(mode == LockMode::Exclusive)
}

/// The reference: the names' state and `grant::decide`.
#[derive(Debug, Default)]
struct Model {
    names: Vec<ModelName>,
}

impl Model {
    fn new() -> Self {
        Self { names: vec![ModelName::default(); NAMES] }
    }

    /// Whether `group` may be granted now: every member, by the rule.
    fn decide(&self, groups: &[Group], group: &Group, ticket: Option<u64>) -> Decision {
        let token_of = |id: usize| groups[id].token.as_str();
        let all = group.members.iter().all(|&(name, mode, default_permits)| {
            let state = &self.names[name];
            let request = grant::Request {
                token: group.token.as_str(),
                mode,
                ticket,
                permits: state.permits[slot(mode)].or(default_permits),
            };
            let holders = state.holders.iter().map(|&(id, mode)| grant::Holder { token: token_of(id), mode });
            let places =
                state.places.iter().map(|&(id, mode, ticket)| grant::Place { token: token_of(id), mode, ticket });
            grant::decide(&request, holders, places).is_grant()
        });
        if all {
            Decision::Grant
        } else {
            Decision::Wait
        }
    }

    fn grant(&mut self, group: &Group) {
        for &(name, mode, _) in &group.members {
            let state = &mut self.names[name];
            state.places.retain(|&(id, ..)| id != group.id);
            state.holders.retain(|&(id, _)| id != group.id);
            state.holders.push((group.id, mode));
        }
    }

    /// Records (or refreshes) the places a blocked attempt of `group` leaves.
    fn place(&mut self, group: &Group, request: &GroupRequest<'_>, members: &[StoreMember], ticket: u64) {
        for (&(name, mode, _), member) in group.members.iter().zip(members) {
            if request.places(member) {
                let state = &mut self.names[name];
                state.places.retain(|&(id, ..)| id != group.id);
                state.places.push((group.id, mode, ticket));
            }
        }
    }

    /// Removes the group's holds and places; returns the holds removed.
    fn release(&mut self, group: &Group) -> usize {
        let mut freed = 0;
        for &(name, ..) in &group.members {
            let state = &mut self.names[name];
            let before = state.holders.len();
            state.holders.retain(|&(id, _)| id != group.id);
            freed += before - state.holders.len();
            state.places.retain(|&(id, ..)| id != group.id);
        }
        freed
    }

    fn withdraw(&mut self, group: &Group) {
        for &(name, ..) in &group.members {
            self.names[name].places.retain(|&(id, ..)| id != group.id);
        }
    }

    /// The end of an epoch: short groups' holds and places are gone.
    fn expire(&mut self, groups: &[Group]) {
        for state in &mut self.names {
            state.holders.retain(|&(id, _)| !groups[id].short);
            state.places.retain(|&(id, ..)| !groups[id].short);
        }
    }

    fn dump(&self, groups: &[Group]) -> String {
        let mut out = String::new();
        for (i, state) in self.names.iter().enumerate() {
            let _ = writeln!(
                out,
                "  name n{i}: permits S={:?} X={:?}\n    holders {:?}\n    places {:?}",
                state.permits[0],
                state.permits[1],
                state.holders.iter().map(|&(id, mode)| format!("g{id}:{mode:?}")).collect::<Vec<_>>(),
                state.places.iter().map(|&(id, mode, t)| format!("g{id}:{mode:?}@{t}")).collect::<Vec<_>>(),
            );
        }
        for group in groups.iter().filter(|group| group.phase != Phase::Done) {
            let _ = writeln!(
                out,
                "  g{} {:?} short={} {:?} members {:?}",
                group.id, group.kind, group.short, group.phase, group.members
            );
        }
        out
    }
}

/// One store under test and the run's bookkeeping.
struct Run {
    label: &'static str,
    store: Arc<DynLockStore>,
    keys: Vec<StoreKey>,
    owner: OwnerId,
    expiries: bool,
    rng: Rng,
    seed: u64,
    model: Model,
    groups: Vec<Group>,
    log: Vec<String>,
    /// The current epoch's end, and the longest round trip of a request that wrote a
    /// short lease in it.
    epoch_end: Instant,
    /// Steps left in the current epoch, and the average step's time.
    epoch_steps: u64,
    step_time: Duration,
    slowest: Duration,
    steps: u64,
    ticks: u64,
    /// A step overran its epoch: the run stops.
    overran: bool,
    /// The store and the rule differed: the run stops.
    divergence: Option<Divergence>,
    /// Decisions compared: grants and waits, of first attempts and of retries.
    decided: [[u64; 2]; 2],
}

impl Run {
    fn groups(&self) -> &dyn GroupLockStore {
        self.store.groups().expect("the store has lock groups")
    }

    /// `what`, with the seed, the model's state before the step and the last steps.
    fn report(&self, what: &str) -> String {
        let history = self.log.iter().rev().take(40).rev().cloned().collect::<Vec<_>>().join("\n");
        format!(
            "{label}: {what}\n(seed {seed}: replay with DISTLOCK_DIFF_SEED={seed})\nmodel state before the step:\n{state}\nlast steps:\n{history}",
            label = self.label,
            seed = self.seed,
            state = self.model.dump(&self.groups),
        )
    }

    /// A store call that failed: no decision to compare, so the test fails.
    fn fail(&self, what: String) -> ! {
        panic!("{}", self.report(&what));
    }

    /// A difference between the store and the model: a divergence, unless a short lease
    /// may have ended before it was seen (a step that overran its epoch), which cannot be
    /// judged. Either ends the run.
    fn differ(&mut self, what: String) {
        if self.expiries && Instant::now() + SLACK >= self.epoch_end {
            eprintln!("{}: step {} overran its epoch, so it cannot be judged: {what}", self.label, self.steps);
            self.overran = true;
        } else {
            self.divergence = Some(Divergence { steps: self.steps + 1, report: self.report(&what) });
        }
    }

    /// The TTL of a lease written now: to the epoch's end for a short group.
    fn ttl(&self, short: bool) -> Ttl {
        let left = if short { self.epoch_end.saturating_duration_since(Instant::now()) } else { LONG };
        Ttl::new(left.max(Duration::from_millis(1))).expect("a valid TTL")
    }

    fn members(&self, group: &Group) -> Vec<StoreMember> {
        group
            .members
            .iter()
            .map(|&(name, mode, permits)| StoreMember::new(self.keys[name].clone(), mode, permits))
            .collect()
    }

    async fn attempt(&mut self, id: usize) {
        let group = &self.groups[id];
        let ticket = match (group.phase, group.kind) {
            (Phase::Waiting { ticket }, _) => Some(ticket),
            (_, Kind::Probe { ticket }) => Some(ticket),
            _ => None,
        };
        let members = self.members(group);
        let ttl = self.ttl(group.short);
        let intent_ttl = match group.kind {
            Kind::Fair | Kind::Barging => Some(ttl),
            Kind::Single | Kind::HoldersOnly | Kind::Probe { .. } => None,
        };
        let mut request = GroupRequest::new(&members, &group.token, &self.owner, ttl, intent_ttl, ticket);
        if group.kind == Kind::Barging {
            request = request.barging();
        }
        if group.kind == Kind::HoldersOnly {
            request = request.holders_only();
        }
        let ticket = request.ticket;
        let expected = self.model.decide(&self.groups, group, ticket);
        let retry = matches!(group.phase, Phase::Waiting { .. });
        self.log.push(format!(
            "#{} {} g{id} {:?} short={} members {:?} ticket {ticket:?}: the rule says {expected:?}",
            self.steps,
            if retry { "retry" } else { "first attempt" },
            group.kind,
            group.short,
            group.members,
        ));
        // What a first attempt's ticket must exceed: every place already on its names.
        let last_place = group
            .members
            .iter()
            .flat_map(|&(name, ..)| self.model.names[name].places.iter().map(|&(_, _, ticket)| ticket))
            .max()
            .unwrap_or(0);
        let sent = Instant::now();
        let answer = self.groups().try_acquire_group(request).await;
        let answer = answer.unwrap_or_else(|err| self.fail(format!("try_acquire_group failed: {err}")));
        if self.groups[id].short {
            self.slowest = self.slowest.max(sent.elapsed());
        }
        self.decided[usize::from(retry)][usize::from(expected == Decision::Wait)] += 1;
        match (expected, answer) {
            (Decision::Grant, GroupAcquire::Acquired { .. }) => {
                self.model.grant(&self.groups[id]);
                self.groups[id].phase = Phase::Holding;
            }
            (Decision::Wait, GroupAcquire::Blocked { ticket: given }) => {
                let group = &self.groups[id];
                match ticket {
                    Some(ticket) if given != ticket => {
                        return self.differ(format!("g{id}: an attempt with ticket {ticket} was given ticket {given}"));
                    }
                    // (A single attempt's ticket is never used: only a waiting group's must
                    // order it behind the places already there.)
                    None if intent_ttl.is_some() && given <= last_place => {
                        return self.differ(format!(
                            "g{id}: its first attempt was given ticket {given}, not above the places' {last_place}"
                        ));
                    }
                    _ => {}
                }
                if matches!(group.kind, Kind::Single | Kind::Probe { .. }) {
                    self.groups[id].phase = Phase::Done;
                    return;
                }
                if intent_ttl.is_some() {
                    let request = GroupRequest::new(&members, &group.token, &self.owner, ttl, intent_ttl, None);
                    let request = if group.kind == Kind::Barging { request.barging() } else { request };
                    self.model.place(group, &request, &members, given);
                }
                self.groups[id].phase = Phase::Waiting { ticket: given };
            }
            (expected, answer) => {
                self.differ(format!("g{id}: the rule says {expected:?}, the store answered {answer:?}"));
            }
        }
    }

    async fn new_group(&mut self) {
        let id = self.groups.len();
        let size = 1 + self.rng.below(NAMES);
        let mut names: Vec<usize> = (0..NAMES).collect();
        for i in 0..size {
            let j = i + self.rng.below(NAMES - i);
            names.swap(i, j);
        }
        let members: Vec<Member> = names[..size]
            .iter()
            .map(|&name| {
                let mode = if self.rng.chance(60) { LockMode::Shared } else { LockMode::Exclusive };
                let permits = match self.rng.below(4) {
                    0 => None,
                    n => Some(n as u32),
                };
                (name, mode, permits)
            })
            .collect();
        let mut kind = match self.rng.below(10) {
            0..=2 => Kind::Single,
            3..=4 => Kind::Fair,
            5 | 6 => Kind::Barging,
            7 => Kind::HoldersOnly,
            _ => Kind::Fair,
        };
        let mut members = members;
        if kind == Kind::Single && self.rng.chance(70) {
            if let Some((probing, ticket)) = self.probe() {
                members = probing;
                kind = Kind::Probe { ticket };
            }
        }
        let short = self.expiries && self.rng.chance(40);
        self.groups.push(Group { id, token: Token::generate(), members, kind, short, phase: Phase::Done });
        self.attempt(id).await;
    }

    /// A probe: one member on the name of a live place, in either mode, with a ticket
    /// equal to the place's (half the time), one below or one above it; `None` when no
    /// name has a place.
    fn probe(&mut self) -> Option<(Vec<Member>, u64)> {
        let places: Vec<(usize, LockMode, u64)> = (0..NAMES)
            .flat_map(|name| self.model.names[name].places.iter().map(move |&(_, mode, ticket)| (name, mode, ticket)))
            .collect();
        if places.is_empty() {
            return None;
        }
        let (name, mode, ticket) = places[self.rng.below(places.len())];
        let mode = match (self.rng.chance(70), mode) {
            (false, mode) => mode,
            (true, LockMode::Shared) => LockMode::Exclusive,
            (true, _) => LockMode::Shared,
        };
        let ticket = match self.rng.below(4) {
            0 => ticket.saturating_sub(1).max(1),
            1 => ticket + 1,
            _ => ticket,
        };
        Some((vec![(name, mode, None)], ticket))
    }

    async fn release(&mut self, id: usize) {
        let keys: Vec<StoreKey> = self.groups[id].members.iter().map(|&(name, ..)| self.keys[name].clone()).collect();
        let expected = self.model.release(&self.groups[id]);
        self.log.push(format!("#{} release g{id}: model frees {expected}", self.steps));
        let freed = self.groups().release_group(&keys, &self.groups[id].token).await;
        let freed = freed.unwrap_or_else(|err| self.fail(format!("release_group failed: {err}")));
        if freed != expected {
            self.differ(format!("release of g{id} freed {freed} holds, the model {expected}"));
        }
        self.groups[id].phase = Phase::Done;
    }

    async fn withdraw(&mut self, id: usize) {
        let keys: Vec<StoreKey> = self.groups[id].members.iter().map(|&(name, ..)| self.keys[name].clone()).collect();
        self.log.push(format!("#{} withdraw g{id}", self.steps));
        self.model.withdraw(&self.groups[id]);
        let done = self.groups().withdraw_intents(&keys, &self.groups[id].token).await;
        done.unwrap_or_else(|err| self.fail(format!("withdraw_intents failed: {err}")));
        self.groups[id].phase = Phase::Done;
    }

    async fn set_permits(&mut self) {
        let name = self.rng.below(NAMES);
        let mode = if self.rng.chance(50) { LockMode::Shared } else { LockMode::Exclusive };
        let permits = match self.rng.below(4) {
            0 => None,
            n => Some(n as u32),
        };
        self.log.push(format!("#{} set permits of n{name} {mode:?} to {permits:?}", self.steps));
        self.model.names[name].permits[slot(mode)] = permits;
        let done = self.groups().set_permits(&self.keys[name], mode, permits).await;
        done.unwrap_or_else(|err| self.fail(format!("set_permits failed: {err}")));
    }

    /// Sleeps until every short lease has ended; the model drops them.
    async fn tick(&mut self) {
        let until = self.epoch_end + self.slowest + Duration::from_millis(5);
        if self.epoch_steps > 0 {
            // Out of time before its steps were done (a slow machine): a replay of this
            // seed may tick elsewhere.
            eprintln!("{}: epoch {} ended by time, {} steps early", self.label, self.ticks, self.epoch_steps);
        }
        tokio::time::sleep_until(until.into()).await;
        self.log.push(format!("#{} tick: short leases ended", self.steps));
        self.model.expire(&self.groups);
        self.slowest = Duration::ZERO;
        self.ticks += 1;
        self.start_epoch();
    }

    /// The next epoch: its steps, picked by the seed (so a replay ticks at the same
    /// steps), and its end, from the average step time.
    fn start_epoch(&mut self) {
        self.epoch_steps = 5 + self.rng.below(40) as u64;
        let budget = self.step_time * 2 * self.epoch_steps as u32 + GUARD;
        self.epoch_end = Instant::now() + budget.max(EPOCH);
    }

    /// The store's holders and waiting counts match the model's, on every name.
    async fn compare_names(&mut self) {
        for name in 0..NAMES {
            let key = self.keys[name].clone();
            let state = &self.model.names[name];
            let places = state.places.len();
            let mut expected: Vec<(String, &str)> = state
                .holders
                .iter()
                .map(|&(id, mode)| (self.groups[id].token.as_str().to_owned(), mode.as_str()))
                .collect();
            expected.sort();
            let holders = self.groups().holders(&key).await;
            let holders = holders.unwrap_or_else(|err| self.fail(format!("holders failed: {err}")));
            let mut found: Vec<(String, &str)> =
                holders.iter().map(|info| (info.token.as_str().to_owned(), info.mode.as_str())).collect();
            found.sort();
            if found != expected {
                return self.differ(format!("n{name} is held by {found:?}, the model says {expected:?}"));
            }
            let waiting = self.groups().waiting(&key).await;
            let waiting = waiting.unwrap_or_else(|err| self.fail(format!("waiting failed: {err}")));
            if waiting != places {
                return self.differ(format!("n{name} has {waiting} places, the model {places}"));
            }
        }
    }

    async fn step(&mut self) {
        let live: Vec<usize> = self.groups.iter().filter(|g| g.phase != Phase::Done).map(|g| g.id).collect();
        let waiting: Vec<usize> =
            live.iter().copied().filter(|&id| matches!(self.groups[id].phase, Phase::Waiting { .. })).collect();
        let holding: Vec<usize> = live.iter().copied().filter(|&id| self.groups[id].phase == Phase::Holding).collect();
        let roll = self.rng.below(100);
        if roll < 35 && live.len() < LIVE_GROUPS {
            self.new_group().await;
        } else if roll < 65 && !waiting.is_empty() {
            let id = waiting[self.rng.below(waiting.len())];
            self.attempt(id).await;
        } else if roll < 85 && !holding.is_empty() {
            let id = holding[self.rng.below(holding.len())];
            self.release(id).await;
        } else if roll < 93 && !waiting.is_empty() {
            let id = waiting[self.rng.below(waiting.len())];
            if self.rng.chance(50) {
                self.withdraw(id).await;
            } else {
                // A cancelled waiter releases with its token: it frees its places.
                self.release(id).await;
            }
        } else if roll < 97 {
            self.set_permits().await;
        } else if !holding.is_empty() {
            let id = holding[self.rng.below(holding.len())];
            self.release(id).await;
        }
    }

    /// Runs steps until `limits` or a divergence, which it returns.
    async fn run(&mut self, limits: Limits) -> Result<(), Divergence> {
        let started = Instant::now();
        self.start_epoch();
        while self.steps < limits.steps && limits.budget.is_none_or(|budget| started.elapsed() <= budget) {
            if self.expiries && (self.epoch_steps == 0 || Instant::now() + GUARD > self.epoch_end) {
                self.tick().await;
            }
            let began = Instant::now();
            self.step().await;
            if !self.overran && self.divergence.is_none() {
                self.compare_names().await;
            }
            if let Some(divergence) = self.divergence.take() {
                eprintln!(
                    "{}: diverged from the grant rule at step {} (seed {})",
                    self.label, divergence.steps, self.seed
                );
                return Err(divergence);
            }
            self.step_time = (self.step_time * 7 + began.elapsed()) / 8;
            self.epoch_steps = self.epoch_steps.saturating_sub(1);
            if self.overran {
                // Rare: a step of more than GUARD (a loaded machine). The steps before agreed.
                eprintln!("{}: stopping after {} steps that agreed", self.label, self.steps);
                break;
            }
            self.steps += 1;
            if self.log.len() > 200 {
                self.log.drain(..100);
            }
        }
        let [[first_granted, first_waited], [retry_granted, retry_waited]] = self.decided;
        eprintln!(
            "{}: {} steps, {} groups ({first_granted} granted and {first_waited} blocked at once, \
             {retry_granted} granted and {retry_waited} blocked on a retry), {} ticks in {:.1?} agreed \
             with the grant rule (seed {})",
            self.label,
            self.steps,
            self.groups.len(),
            self.ticks,
            started.elapsed(),
            self.seed,
        );
        Ok(())
    }
}

/// A namespace of its own for one run: a key prefix (Redis, etcd) or a schema (PostgreSQL).
fn private_url(base: &str, name: &str) -> String {
    let separator = if base.contains('?') { '&' } else { '?' };
    if base.starts_with("postgres") {
        format!("{base}{separator}schema={name}&create=true")
    } else if base.starts_with("etcd") {
        format!("{base}{separator}prefix={name}")
    } else {
        format!("{base}{separator}prefix={name}:")
    }
}

/// A fresh name for one run's namespace.
fn private_name() -> String {
    format!("grant_{}", &Token::generate().as_str().replace('-', "")[..12])
}

/// Runs a history of `DISTLOCK_DIFF_SEED` (else a random seed) through the rule and the
/// store at `url`, for `DISTLOCK_DIFF_STEPS` steps (else the CI limits); fails on a
/// divergence.
async fn differential(label: &'static str, url: &str, expiries: bool) {
    let name = private_name();
    let url = if url == "memory://" { url.to_owned() } else { private_url(url, &name) };
    let store = distlock::connect(&url).await.unwrap_or_else(|err| panic!("{label}: connect: {err}"));
    if let Err(divergence) = drive(label, store, &name, seed(), expiries, Limits::from_env()).await {
        panic!("{divergence}");
    }
}

/// The driver: runs the history of `seed` through the rule and `store` (its keys in a
/// namespace of their own) until `limits`, and returns the first divergence. `name` names
/// the run's owner. Without `expiries` every lease is long.
async fn drive(
    label: &'static str,
    store: Arc<DynLockStore>,
    name: &str,
    seed: u64,
    expiries: bool,
    limits: Limits,
) -> Result<(), Divergence> {
    eprintln!("{label}: seed {seed} (replay with DISTLOCK_DIFF_SEED={seed})");
    let keys = (0..NAMES).map(|i| LockKey::new(format!("n{i}")).expect("a valid key").to_store_key()).collect();
    let mut run = Run {
        label,
        store,
        keys,
        owner: OwnerId::new("grant-rule", name).expect("a valid owner"),
        expiries,
        rng: Rng(seed),
        seed,
        model: Model::new(),
        groups: Vec::new(),
        log: Vec::new(),
        epoch_end: Instant::now(),
        epoch_steps: 0,
        step_time: Duration::from_millis(5),
        slowest: Duration::ZERO,
        steps: 0,
        ticks: 0,
        overran: false,
        divergence: None,
        decided: [[0; 2]; 2],
    };
    let outcome = run.run(limits).await;
    let _ = run.groups().release_owner(&run.owner).await;
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_decides_as_the_grant_rule() {
    let Some(url) = distlock_conformance::kit::redis_url("redis_decides_as_the_grant_rule") else { return };
    differential("redis", &url, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_decides_as_the_grant_rule() {
    let Some(url) = distlock_conformance::kit::postgres_url("postgres_decides_as_the_grant_rule") else { return };
    differential("postgres", &url, true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_decides_as_the_grant_rule() {
    differential("memory", "memory://", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_decides_as_the_grant_rule() {
    let Some(url) = distlock_conformance::kit::etcd_url("etcd_decides_as_the_grant_rule") else { return };
    differential("etcd", &url, false).await;
}
