//! Leader election, measured the same way for every store and beside etcd's own election:
//!
//! - **graceful hand-over**: the leader resigns while the other candidate waits in its
//!   campaign; the time from the start of `resign()` to the waiting campaign returning;
//! - **observer lag**: an observer on a connection of its own reports the new leader; the
//!   time from the start of `resign()` (after a failover: from the SIGKILL) to the
//!   observer's report. It includes the hand-over: an observer may report the new leader
//!   before the new leader's own campaign has returned, so the time from that return
//!   would often be nothing;
//! - **failover after `kill -9`**: the leader is a child process (this benchmark's own
//!   executable, started as [`ChildSpec`] says) killed with SIGKILL while a candidate
//!   waits; the time from the SIGKILL to the waiting campaign returning. It is about the
//!   lease's TTL, so it takes a few rounds of about that long each.
//!
//! Each implementation is a [`Side`]: two [`Candidate`]s and a [`Watch`], each on its own
//! store connection, and how a child process leads. [`compare`] runs the sides' rounds in
//! turn (rotating which goes first) and reports p50 and p99 of every figure, each side
//! beside the first, as [`record::Ratios`].
//!
//! A store benchmark starts with [`leader_child`]: when it returns a spec, the process is
//! a failover leader; it opens the store the spec names and calls [`lead_until_killed`].

use std::future::Future;
use std::pin::Pin;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock_api::{DynLockStore, LockError, LockManager};
use distlock_election::{Election, Leadership, Observer};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::{mpsc, Mutex};
use tokio::task::JoinHandle;

use super::record::{self, Ratios, Record};

/// A boxed future, so that [`Candidate`] and [`Watch`] are dyn-compatible.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The environment variable that makes a benchmark process a failover leader.
pub const CHILD_ENV: &str = "DISTLOCK_BENCH_ELECTION_LEADER";

/// How long a candidate waits in its campaign, and an observer settles, before the
/// leader resigns or is killed.
const SETTLE: Duration = Duration::from_millis(100);
/// The longest a hand-over or an observer's report may take before the round fails.
const HAND_OVER_LIMIT: Duration = Duration::from_secs(10);

/// One candidate of an election, on its own connection.
pub trait Candidate: Send + Sync {
    /// Campaigns with `value` and waits until this candidate leads; returns its term (a
    /// number that grows from leader to leader: distlock's fence, etcd's revision).
    fn campaign<'a>(&'a self, value: &'a str) -> BoxFuture<'a, Result<u64, LockError>>;
    /// Resigns the lead won last.
    fn resign(&self) -> BoxFuture<'_, Result<(), LockError>>;
}

/// An observer of an election, on its own connection.
pub trait Watch: Send {
    /// Waits for the next change of leader; its term, `None` for nobody.
    fn changed(&mut self) -> BoxFuture<'_, Result<Option<u64>, LockError>>;
}

/// A distlock [`Election`] candidate.
#[derive(Debug)]
pub struct DistlockCandidate {
    election: Election,
    lead: Mutex<Option<Leadership>>,
}

impl DistlockCandidate {
    /// A candidate of election `name` among `locks`' locks, with leases of `ttl`.
    ///
    /// # Errors
    ///
    /// As [`Election::new`].
    pub fn new(locks: &LockManager, name: &str, ttl: Duration) -> Result<Self, LockError> {
        Ok(Self { election: Election::new(locks, name)?.ttl(ttl), lead: Mutex::new(None) })
    }
}

impl Candidate for DistlockCandidate {
    fn campaign<'a>(&'a self, value: &'a str) -> BoxFuture<'a, Result<u64, LockError>> {
        Box::pin(async move {
            let leadership = self.election.campaign(value).await?;
            let term = leadership.term();
            *self.lead.lock().await = Some(leadership);
            Ok(term)
        })
    }

    fn resign(&self) -> BoxFuture<'_, Result<(), LockError>> {
        Box::pin(async move {
            let lead = self.lead.lock().await.take();
            if let Some(lead) = lead {
                lead.resign().await?;
            }
            Ok(())
        })
    }
}

/// A distlock [`Observer`].
#[derive(Debug)]
pub struct DistlockWatch(Observer);

impl DistlockWatch {
    /// An observer of election `name` among `locks`' locks.
    ///
    /// # Errors
    ///
    /// As [`Election::new`].
    pub fn new(locks: &LockManager, name: &str) -> Result<Self, LockError> {
        Ok(Self(Election::new(locks, name)?.observe()))
    }
}

impl Watch for DistlockWatch {
    fn changed(&mut self) -> BoxFuture<'_, Result<Option<u64>, LockError>> {
        Box::pin(async move { Ok(self.0.changed().await?.map(|leader| leader.term)) })
    }
}

/// What a failover leader process needs: which side it campaigns for, in which election,
/// on which store (what the benchmark needs to open the same store: a key prefix, a
/// table, a URL).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildSpec {
    /// The side, as the benchmark names it (`distlock`, `etcd`).
    pub role: String,
    /// The election's name.
    pub name: String,
    /// What opens the store.
    pub store: String,
}

impl ChildSpec {
    fn encode(&self) -> String {
        format!("{}\u{1f}{}\u{1f}{}", self.role, self.name, self.store)
    }
}

/// The spec of this process, when it was started as a failover leader.
pub fn leader_child() -> Option<ChildSpec> {
    let spec = std::env::var(CHILD_ENV).ok()?;
    let mut parts = spec.splitn(3, '\u{1f}');
    Some(ChildSpec { role: parts.next()?.to_owned(), name: parts.next()?.to_owned(), store: parts.next()?.to_owned() })
}

/// Campaigns through `candidate`, prints `LEADING <term>` when leading and then waits to
/// be killed.
///
/// # Panics
///
/// When the campaign fails.
pub async fn lead_until_killed(candidate: &dyn Candidate) -> ! {
    use std::io::Write;
    let term = candidate
        .campaign(&format!("child-{}", std::process::id()))
        .await
        .unwrap_or_else(|error| panic!("election child: {error}"));
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "\nLEADING {term}");
        let _ = out.flush();
    }
    std::future::pending::<()>().await;
    unreachable!("pending() never completes")
}

/// Campaigns for election `spec.name` as [`DistlockCandidate`] on `store` with leases of
/// `ttl` and waits to be killed ([`lead_until_killed`]): a store benchmark's failover
/// leader, once it has opened the store `spec.store` names.
///
/// # Panics
///
/// When the election's name is not valid or the campaign fails.
pub async fn lead_distlock_until_killed(store: Arc<DynLockStore>, spec: &ChildSpec, ttl: Duration) -> ! {
    let locks = LockManager::new(store);
    let candidate = DistlockCandidate::new(&locks, &spec.name, ttl).expect("the election's name");
    lead_until_killed(&candidate).await
}

/// The distlock side of election `name`, leases of `ttl`: two candidates and an observer,
/// each on a store of its own from `connect`; its failover leader is started with
/// `child_store` as [`ChildSpec::store`] (role `distlock`), `None` leaves it out of the
/// failover figure.
///
/// # Panics
///
/// When `name` is not a valid election name.
pub async fn distlock_side<F, Fut>(name: &str, ttl: Duration, child_store: Option<String>, connect: F) -> Side
where
    F: Fn() -> Fut,
    Fut: Future<Output = Arc<DynLockStore>>,
{
    let mut locks = Vec::with_capacity(3);
    for _ in 0..3 {
        locks.push(LockManager::new(connect().await));
    }
    let candidate = |locks: &LockManager| -> Arc<dyn Candidate> {
        Arc::new(DistlockCandidate::new(locks, name, ttl).expect("the election's name"))
    };
    Side {
        name: "distlock".to_owned(),
        candidates: [candidate(&locks[0]), candidate(&locks[1])],
        watch: Box::new(DistlockWatch::new(&locks[2], name).expect("the election's name")),
        child: child_store.map(|store| ChildSpec { role: "distlock".to_owned(), name: name.to_owned(), store }),
    }
}

/// One election implementation as [`compare`] measures it.
pub struct Side {
    /// Its name in reports (`distlock`, `etcd election`).
    pub name: String,
    /// Two candidates, each on its own connection.
    pub candidates: [Arc<dyn Candidate>; 2],
    /// An observer, on a connection of its own.
    pub watch: Box<dyn Watch>,
    /// How a child process leads the same election, for the failover figure; `None`
    /// leaves the side out of it.
    pub child: Option<ChildSpec>,
}

impl std::fmt::Debug for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Side").field("name", &self.name).field("child", &self.child).finish_non_exhaustive()
    }
}

/// The plan of a [`compare`].
#[derive(Debug, Clone, Copy)]
pub struct Plan {
    /// The leaders' lease (TTL).
    pub ttl: Duration,
    /// Graceful hand-overs per side.
    pub hand_overs: usize,
    /// Failovers per side (each about `ttl` long); 0 skips the figure.
    pub failovers: usize,
}

impl Plan {
    /// The leaders' lease of [`standard`](Self::standard): 2 s.
    pub const TTL: Duration = Duration::from_secs(2);

    /// TTL 2 s; [`scaled`](super::scaled)`(40)` hand-overs (at least 5) and
    /// [`rounds`](super::rounds)`(10)` failovers (at least 3, 5 in a scaled-down run).
    pub fn standard() -> Self {
        let failovers = if super::scale() < 1.0 { 5 } else { super::rounds(10).max(3) };
        Self { ttl: Self::TTL, hand_overs: super::scaled(40).max(5), failovers }
    }
}

/// The reports of an observer, each with the instant it arrived.
struct Events {
    reports: mpsc::UnboundedReceiver<(Option<u64>, Instant)>,
    task: JoinHandle<()>,
}

impl Events {
    fn start(mut watch: Box<dyn Watch>) -> Self {
        let (tx, reports) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            loop {
                match watch.changed().await {
                    Ok(term) => {
                        if tx.send((term, Instant::now())).is_err() {
                            return;
                        }
                    }
                    Err(error) => {
                        eprintln!("election observer: {error}");
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        });
        Self { reports, task }
    }

    fn drain(&mut self) {
        while self.reports.try_recv().is_ok() {}
    }

    /// When the observer first reported a leader other than `old`.
    async fn new_leader(&mut self, old: Option<u64>) -> Option<Instant> {
        let wait = async {
            loop {
                match self.reports.recv().await? {
                    (Some(term), at) if Some(term) != old => return Some(at),
                    _ => continue,
                }
            }
        };
        tokio::time::timeout(HAND_OVER_LIMIT, wait).await.ok().flatten()
    }
}

/// A figure's samples in a side, and the quantiles reported of them.
type Samples = fn(&Running) -> &Vec<f64>;
type Quantiles = &'static [(&'static str, f64)];

type Campaign = JoinHandle<Result<(u64, Instant), LockError>>;

fn start_campaign(candidate: &Arc<dyn Candidate>, value: &'static str) -> Campaign {
    let candidate = Arc::clone(candidate);
    tokio::spawn(async move {
        let term = candidate.campaign(value).await?;
        Ok((term, Instant::now()))
    })
}

async fn finish(campaign: Campaign, limit: Duration, what: &str) -> (u64, Instant) {
    match tokio::time::timeout(limit, campaign).await {
        Ok(Ok(Ok(led))) => led,
        Ok(Ok(Err(error))) => panic!("{what}: the campaign failed: {error}"),
        Ok(Err(error)) => panic!("{what}: the campaign's task failed: {error}"),
        Err(_) => panic!("{what}: the waiting candidate did not lead within {limit:?}"),
    }
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1e3
}

/// A side during the rounds: one candidate leads, the other waits in its campaign.
struct Running {
    name: String,
    candidates: [Arc<dyn Candidate>; 2],
    child: Option<ChildSpec>,
    events: Events,
    leader: usize,
    term: u64,
    waiting: Option<Campaign>,
    hand_over: Vec<f64>,
    lag: Vec<f64>,
    failover: Vec<f64>,
    failover_lag: Vec<f64>,
}

impl Running {
    async fn start(side: Side) -> Self {
        let Side { name, candidates, watch, child } = side;
        let term =
            candidates[0].campaign("a").await.unwrap_or_else(|error| panic!("{name}: the first campaign: {error}"));
        let waiting = Some(start_campaign(&candidates[1], "b"));
        let events = Events::start(watch);
        Self {
            name,
            candidates,
            child,
            events,
            leader: 0,
            term,
            waiting,
            hand_over: Vec::new(),
            lag: Vec::new(),
            failover: Vec::new(),
            failover_lag: Vec::new(),
        }
    }

    /// The leader resigns; the waiting candidate leads; the old leader campaigns again.
    async fn hand_over(&mut self) {
        tokio::time::sleep(SETTLE).await;
        self.events.drain();
        let waiting = self.waiting.take().expect("a waiting candidate");
        let started = Instant::now();
        self.candidates[self.leader].resign().await.unwrap_or_else(|error| panic!("{}: resign: {error}", self.name));
        let (term, led) = finish(waiting, HAND_OVER_LIMIT, &format!("{}: hand-over", self.name)).await;
        let seen = self.events.new_leader(Some(self.term)).await;
        let seen = seen.unwrap_or_else(|| panic!("{}: the observer did not report term {term}", self.name));
        self.hand_over.push(ms(led - started));
        self.lag.push(ms(seen.saturating_duration_since(started)));
        self.term = term;
        let old = self.leader;
        self.leader = 1 - old;
        self.waiting = Some(start_campaign(&self.candidates[old], if old == 0 { "a" } else { "b" }));
    }

    /// Leaves nobody leading and nobody waiting.
    async fn stop_leading(&mut self) {
        self.candidates[self.leader].resign().await.unwrap_or_else(|error| panic!("{}: resign: {error}", self.name));
        if let Some(waiting) = self.waiting.take() {
            let (term, _) = finish(waiting, HAND_OVER_LIMIT, &format!("{}: last hand-over", self.name)).await;
            self.term = term;
            let waiter = 1 - self.leader;
            self.candidates[waiter].resign().await.unwrap_or_else(|error| panic!("{}: resign: {error}", self.name));
        }
    }

    /// A child process leads; candidate 0 waits; the child is killed with SIGKILL.
    async fn failover(&mut self, ttl: Duration) {
        let Some(spec) = self.child.clone() else { return };
        let exe = std::env::current_exe().expect("the benchmark's own executable");
        let mut child = tokio::process::Command::new(exe)
            .env(CHILD_ENV, spec.encode())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|error| panic!("{}: start the leader process: {error}", self.name));
        let mut lines = BufReader::new(child.stdout.take().expect("piped stdout")).lines();
        let leading = async {
            while let Some(line) = lines.next_line().await.ok()? {
                if let Some(term) = line.trim().strip_prefix("LEADING ") {
                    return term.parse::<u64>().ok();
                }
            }
            None
        };
        let child_term = tokio::time::timeout(Duration::from_secs(30), leading)
            .await
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("{}: the leader process did not lead within 30 s", self.name));
        let waiting = start_campaign(&self.candidates[0], "a");
        tokio::time::sleep(SETTLE).await;
        self.events.drain();
        let killed = Instant::now();
        let _ = child.start_kill();
        let _ = child.wait().await;
        let (term, led) = finish(waiting, ttl * 3 + HAND_OVER_LIMIT, &format!("{}: failover", self.name)).await;
        let seen = self.events.new_leader(Some(child_term)).await;
        let seen = seen.unwrap_or_else(|| panic!("{}: the observer did not report term {term}", self.name));
        self.failover.push(ms(led - killed));
        self.failover_lag.push(ms(seen.saturating_duration_since(killed)));
        self.term = term;
        self.leader = 0;
        self.candidates[0].resign().await.unwrap_or_else(|error| panic!("{}: resign: {error}", self.name));
    }
}

/// Measures every side's hand-overs, then its failovers, the sides taking turns round by
/// round (in an order that rotates every round); prints each figure and writes it, p50
/// and p99, every side beside the first, under `label`.
///
/// # Panics
///
/// When a campaign or resignation fails, or a hand-over or an observer's report takes
/// longer than 10 s (a failover: 3 TTLs more).
pub async fn compare(label: &str, sides: Vec<Side>, plan: Plan) {
    let mut running = Vec::with_capacity(sides.len());
    for side in sides {
        running.push(Running::start(side).await);
    }
    // Warm-up: a hand-over each.
    for side in &mut running {
        side.hand_over().await;
        side.hand_over.clear();
        side.lag.clear();
    }
    let count = running.len();
    for round in 0..plan.hand_overs {
        for i in 0..count {
            running[(i + round) % count].hand_over().await;
        }
    }
    for side in &mut running {
        side.stop_leading().await;
    }
    let failing: Vec<usize> = (0..count).filter(|&i| running[i].child.is_some()).collect();
    for round in 0..plan.failovers {
        for i in 0..failing.len() {
            running[failing[(i + round) % failing.len()]].failover(plan.ttl).await;
        }
    }
    for side in &running {
        side.events.task.abort();
    }

    let ttl = format!("TTL {:?}", plan.ttl);
    let figures: [(&str, Samples, Quantiles); 4] = [
        (
            "election: graceful hand-over, resign() → the waiting candidate leads",
            |side| &side.hand_over,
            &[("p50", 0.5), ("p99", 0.99)],
        ),
        ("election: observer lag, resign() → an observer reports the new leader", |side| &side.lag, &[("p50", 0.5)]),
        (
            "election: failover after kill -9 of the leader process, SIGKILL → the waiting candidate leads",
            |side| &side.failover,
            &[("p50", 0.5), ("p99", 0.99)],
        ),
        (
            "election: observer lag after kill -9, SIGKILL → an observer reports the new leader",
            |side| &side.failover_lag,
            &[("p50", 0.5)],
        ),
    ];
    for (title, samples_of, quantiles) in figures {
        let sides: Vec<&Running> = running.iter().filter(|side| !samples_of(side).is_empty()).collect();
        if sides.is_empty() {
            continue;
        }
        let names: Vec<&str> = sides.iter().map(|side| side.name.as_str()).collect();
        let samples: Vec<Vec<f64>> = sides.iter().map(|side| samples_of(side).clone()).collect();
        println!("{label}{title}, {ttl}, {} rounds", samples[0].len());
        for &(quantile, q) in quantiles {
            let title = format!("{label}{title}, {ttl}, {quantile}");
            let ratios = Ratios::of_quantile(&record::suite(), &title, "ms", q, &names, &samples);
            for (i, row) in ratios.rows.iter().enumerate() {
                let beside = if i == 0 { String::new() } else { format!("   {:.2}× {}", row.ratio, names[0]) };
                println!("  {quantile} {:<16}{:9.2} ms{beside}", row.name, row.value);
            }
            record::emit(&Record::Ratios(ratios));
        }
    }
    for side in &running {
        let p50 = super::record::quantile(&side.hand_over, 0.5);
        let goal = if p50 <= 5.0 { "met" } else { "MISSED" };
        println!("  {}: hand-over p50 {p50:.2} ms (goal ≤ 5 ms: {goal})", side.name);
    }
}
