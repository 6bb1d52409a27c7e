//! `distlock top`: a live view of a store's held locks in the terminal, reading one page
//! of the listing per refresh so that a store of millions of keys costs one bounded read
//! per interval.

mod draw;
mod seen;

use std::io::{self, IsTerminal};
use std::sync::Arc;
use std::time::{Duration, Instant};

use distlock::{DynLockStore, HeldLock, KeyPattern, ListCursor, LockError, LockKey, WaitingPlace};
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::DefaultTerminal;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::cli::TopArgs;
use crate::exit::{self, Failure};
use crate::store;
use crate::top::draw::{Refresh, Status};
use crate::top::seen::{Seen, Sort, Waiting};

/// The most keys whose waiters one refresh reads (the rows on screen, in turn).
pub(crate) const WAITER_READS: usize = 8;

/// Shows the store's held locks until `q`, Ctrl-C or SIGTERM.
pub(crate) async fn top(url: Option<&str>, args: TopArgs) -> Result<u8, Failure> {
    if args.interval.is_zero() {
        return Err(Failure::usage("--interval must be greater than zero"));
    }
    if !io::stdout().is_terminal() {
        return Err(Failure::usage(
            "`distlock top` draws on a terminal and stdout is not one: use `distlock list` (or `list --watch`, \
             `list --format json`) to print the held locks to a pipe or file",
        ));
    }
    let (url, default) = store::url_or_default(url)?;
    let lock_store = store::connect(&url).await?;
    let note = if store::is_memory(&url) {
        Some(
            "memory:// is a store inside this one distlock process, which holds no locks: pass the store URL \
             your applications use (redis://…, postgres://…)"
                .to_owned(),
        )
    } else if default {
        Some(format!("the embedded store {url} (--store or DISTLOCK_STORE picks another)"))
    } else {
        None
    };
    let status = Status {
        backend: lock_store.backend(),
        pattern: args.pattern.as_str().to_owned(),
        interval: args.interval,
        page: args.page,
        note,
        sort: Sort::TimeLeft,
        offset: 0,
        last: None,
        error: None,
    };
    let signal_failure = |error: io::Error| Failure::new(exit::SOFTWARE, format!("cannot handle signals: {error}"));
    let terminate = signal(SignalKind::terminate()).map_err(signal_failure)?;
    let hangup = signal(SignalKind::hangup()).map_err(signal_failure)?;
    let screen = Screen::open()?;
    let keys = keys();
    let mut view = View {
        store: lock_store,
        pattern: args.pattern,
        page: usize::from(args.page),
        seen: Seen::new(args.interval, Instant::now()),
        status,
        cursor: None,
        probe: 0,
    };
    let shown = view.show(screen, keys, terminate, hangup).await;
    shown.map(|()| 0)
}

/// The terminal in raw mode on the alternate screen, restored when dropped: on every
/// return, error or panic (ratatui's panic hook restores it too).
struct Screen(DefaultTerminal);

impl Screen {
    fn open() -> Result<Self, Failure> {
        match ratatui::try_init() {
            Ok(terminal) => Ok(Self(terminal)),
            Err(error) => {
                ratatui::restore();
                Err(Failure::new(exit::SOFTWARE, format!("cannot set up the terminal: {error}")))
            }
        }
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        let _ = self.0.show_cursor();
        ratatui::restore();
    }
}

/// The terminal's events, read on a thread of their own (crossterm reads block), until
/// the receiver is dropped.
fn keys() -> mpsc::UnboundedReceiver<Event> {
    let (sender, receiver) = mpsc::unbounded_channel();
    std::thread::spawn(move || {
        while !sender.is_closed() {
            match event::poll(Duration::from_millis(100)) {
                Ok(true) => match event::read() {
                    Ok(event) => {
                        if sender.send(event).is_err() {
                            return;
                        }
                    }
                    Err(_) => return,
                },
                Ok(false) => {}
                Err(_) => return,
            }
        }
    });
    receiver
}

/// The view's state between refreshes.
struct View {
    store: Arc<DynLockStore>,
    pattern: KeyPattern,
    page: usize,
    seen: Seen,
    status: Status,
    /// Where the next refresh reads; `None`: from the start of the listing.
    cursor: Option<ListCursor>,
    /// Which on-screen row the next waiter reads start at.
    probe: usize,
}

/// What one refresh brings back.
struct Read {
    page: Result<(Vec<HeldLock>, Option<ListCursor>), LockError>,
    waiters: Vec<(String, Result<Option<Waiting>, LockError>)>,
    took: Duration,
}

/// What a key pressed asks for.
enum Action {
    Quit,
    Redraw,
}

impl View {
    async fn show(
        &mut self,
        mut screen: Screen,
        mut keys: mpsc::UnboundedReceiver<Event>,
        mut terminate: tokio::signal::unix::Signal,
        mut hangup: tokio::signal::unix::Signal,
    ) -> Result<(), Failure> {
        let mut ticker = tokio::time::interval(self.status.interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut reading: Option<JoinHandle<Read>> = None;
        loop {
            self.draw(&mut screen)?;
            tokio::select! {
                _ = ticker.tick(), if reading.is_none() => {
                    reading = Some(self.read(screen.0.size().map(|size| size.height).unwrap_or(24)));
                }
                read = async {
                    match reading.as_mut() {
                        Some(task) => task.await,
                        None => std::future::pending().await,
                    }
                }, if reading.is_some() => {
                    reading = None;
                    match read {
                        Ok(read) => self.apply(read),
                        Err(error) => self.status.error = Some(format!("the refresh failed: {error}")),
                    }
                }
                event = keys.recv() => match event {
                    Some(event) => {
                        if let Action::Quit = self.on(&event, &screen) {
                            break;
                        }
                    }
                    None => break,
                },
                _ = terminate.recv() => break,
                _ = hangup.recv() => break,
            }
        }
        if let Some(task) = reading {
            task.abort();
        }
        Ok(())
    }

    fn draw(&mut self, screen: &mut Screen) -> Result<(), Failure> {
        let now = Instant::now();
        let rows = self.seen.rows(self.status.sort, now);
        let height = screen.0.size().map(|size| size.height).unwrap_or(24);
        self.status.offset = self.status.offset.min(rows.len().saturating_sub(draw::table_rows(height)));
        screen
            .0
            .draw(|frame| draw::draw(frame, &self.seen, &rows, &self.status, now))
            .map(|_| ())
            .map_err(|error| Failure::new(exit::SOFTWARE, format!("cannot draw on the terminal: {error}")))
    }

    /// Starts one refresh: the next page of the listing, and the waiters of at most
    /// [`WAITER_READS`] of the rows on a screen of `height` lines.
    fn read(&mut self, height: u16) -> JoinHandle<Read> {
        let now = Instant::now();
        let rows = self.seen.rows(self.status.sort, now);
        let on_screen: Vec<&str> =
            rows.iter().skip(self.status.offset).take(draw::table_rows(height)).map(|(name, _)| *name).collect();
        let mut probed = Vec::new();
        if !on_screen.is_empty() {
            let start = self.probe % on_screen.len();
            probed = on_screen
                .iter()
                .cycle()
                .skip(start)
                .take(WAITER_READS.min(on_screen.len()))
                .map(|name| (*name).to_owned())
                .collect();
            self.probe = start + probed.len();
        }
        let store = Arc::clone(&self.store);
        let pattern = self.pattern.clone();
        let cursor = self.cursor.clone();
        let page = self.page;
        tokio::spawn(async move {
            let started = Instant::now();
            let listed = store.list(&pattern, cursor.as_ref(), page).await.map(|page| (page.locks, page.next));
            let mut waiters = Vec::with_capacity(probed.len());
            for name in probed {
                let count = waiters_of(&*store, &name).await;
                waiters.push((name, count));
            }
            Read { page: listed, waiters, took: started.elapsed() }
        })
    }

    fn apply(&mut self, read: Read) {
        let now = Instant::now();
        match read.page {
            Ok((locks, next)) => {
                let held = locks.len();
                let last = next.is_none();
                self.seen.page(locks, last, now);
                self.cursor = next;
                self.status.error = None;
                self.status.last = Some(Refresh { locks: held, waiter_reads: read.waiters.len(), took: read.took });
            }
            // The store may come back: say so, and read the same page at the next refresh.
            Err(error) => self.status.error = Some(format!("the listing failed: {error}")),
        }
        for (name, count) in read.waiters {
            match count {
                Ok(count) => self.seen.waiters(&name, count, now),
                Err(error) => self.status.error = Some(format!("reading the waiters of {name} failed: {error}")),
            }
        }
    }

    fn on(&mut self, event: &Event, screen: &Screen) -> Action {
        let Event::Key(key) = event else { return Action::Redraw };
        if key.kind == KeyEventKind::Release {
            return Action::Redraw;
        }
        let page = draw::table_rows(screen.0.size().map(|size| size.height).unwrap_or(24)).max(1);
        let offset = &mut self.status.offset;
        match key.code {
            KeyCode::Char('q') | KeyCode::Esc => return Action::Quit,
            KeyCode::Char('c') if key.modifiers.contains(KeyModifiers::CONTROL) => return Action::Quit,
            KeyCode::Char('s') => {
                self.status.sort = self.status.sort.next();
                *offset = 0;
            }
            KeyCode::Up => *offset = offset.saturating_sub(1),
            KeyCode::Down => *offset = offset.saturating_add(1),
            KeyCode::PageUp => *offset = offset.saturating_sub(page),
            KeyCode::PageDown => *offset = offset.saturating_add(page),
            KeyCode::Home => *offset = 0,
            KeyCode::End => *offset = usize::MAX,
            _ => {}
        }
        Action::Redraw
    }
}

/// The acquisitions waiting for `name` — the places in its fair queue and the waiting
/// groups with a place on it — and how long the oldest has waited, by the store's clock
/// (`None` on a store that cannot read its places: only counts). `None` on a store that
/// keeps neither.
async fn waiters_of(store: &DynLockStore, name: &str) -> Result<Option<Waiting>, LockError> {
    let key = LockKey::new(name)?.to_store_key();
    let queued = match store.queue() {
        Some(queue) => Some(places_of(queue.queue_places(&key).await, || queue.queue_len(&key)).await?),
        None => None,
    };
    let grouped = match store.groups() {
        Some(groups) => Some(places_of(groups.places(&key).await, || groups.waiting(&key)).await?),
        None => None,
    };
    Ok(match (queued, grouped) {
        (None, None) => None,
        (queued, grouped) => Some(queued.into_iter().chain(grouped).fold(Waiting::default(), |all, some| Waiting {
            count: all.count + some.count,
            oldest: all.oldest.max(some.oldest),
        })),
    })
}

/// The places read (their number and the oldest one's age), or only their number when
/// the store cannot read them.
async fn places_of<F, Fut>(places: Result<Vec<WaitingPlace>, LockError>, count: F) -> Result<Waiting, LockError>
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = Result<usize, LockError>>,
{
    match places {
        Ok(places) => Ok(Waiting { count: places.len(), oldest: places.iter().filter_map(|place| place.waited).max() }),
        Err(LockError::Unsupported { .. }) => Ok(Waiting { count: count().await?, oldest: None }),
        Err(error) => Err(error),
    }
}
