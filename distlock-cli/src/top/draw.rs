//! The screen of `distlock top`: a header (the store, what a refresh cost, the hand-offs
//! and hottest keys) over the table of held keys.

use std::time::{Duration, Instant};

use ratatui::layout::{Constraint, Layout};
use ratatui::style::{Modifier, Style};
use ratatui::text::Line;
use ratatui::widgets::{Cell, Paragraph, Row, Table};
use ratatui::Frame;

use crate::show::round;
use crate::top::seen::{Key, Seen, Sort};

/// Lines above the table.
const HEADER_LINES: u16 = 4;

/// Everything on the screen besides the keys.
#[derive(Debug)]
pub(crate) struct Status {
    /// The store's backend (`redis`, `postgres`…).
    pub(crate) backend: &'static str,
    pub(crate) pattern: String,
    pub(crate) interval: Duration,
    pub(crate) page: u16,
    /// A line about the store itself (`memory://` holds nothing), if any.
    pub(crate) note: Option<String>,
    pub(crate) sort: Sort,
    /// The first row shown.
    pub(crate) offset: usize,
    /// What the last refresh read, when one has come back.
    pub(crate) last: Option<Refresh>,
    /// The last refresh's failure, until one succeeds.
    pub(crate) error: Option<String>,
}

/// What one refresh read.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refresh {
    /// Held keys on the page.
    pub(crate) locks: usize,
    /// Waiter counts read (one per key: its queue's length, its waiting groups).
    pub(crate) waiter_reads: usize,
    pub(crate) took: Duration,
}

/// How many table rows fit on a screen of `height` lines.
pub(crate) fn table_rows(height: u16) -> usize {
    usize::from(height.saturating_sub(HEADER_LINES + 1))
}

/// Draws the header and the rows of the table from `status.offset` on.
pub(crate) fn draw(frame: &mut Frame<'_>, seen: &Seen, rows: &[(&str, &Key)], status: &Status, now: Instant) {
    let [header, table] = Layout::vertical([Constraint::Length(HEADER_LINES), Constraint::Min(0)]).areas(frame.area());
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let mut lines = vec![Line::styled(
        format!(
            "distlock top · {} · match {} · a page of {} keys every {} · sort: {} (s) · q: quit",
            status.backend,
            status.pattern,
            status.page,
            humantime::format_duration(status.interval),
            status.sort.label()
        ),
        bold,
    )];
    let cost = match status.last {
        Some(last) => format!(
            "refresh: 1 list page ({} held) + {} waiter reads in {}",
            last.locks,
            last.waiter_reads,
            round(last.took)
        ),
        None => "refresh: reading the first page…".to_owned(),
    };
    lines.push(Line::raw(format!("keys seen: {} · listing passes: {} · {cost}", rows.len(), seen.passes())));
    let hottest: Vec<String> = seen.hottest(3, now).into_iter().map(|(key, n)| format!("{key} ({n})")).collect();
    lines.push(Line::raw(format!(
        "hand-offs: {:.1}/s · hottest: {}",
        seen.rate(now),
        if hottest.is_empty() { "-".to_owned() } else { hottest.join(", ") }
    )));
    if let Some(line) = status.error.as_ref().or(status.note.as_ref()) {
        lines.push(Line::raw(line.clone()));
    }
    frame.render_widget(Paragraph::new(lines), header);

    let body = rows.iter().skip(status.offset).take(table_rows(frame.area().height)).map(|(name, key)| {
        let holder = if key.holders > 1 { format!("{} +{}", key.holder, key.holders - 1) } else { key.holder.clone() };
        let waiters = match (key.waiters, key.waiting_since) {
            (Some(n), Some(since)) if n > 0 => format!("{n} for {}", round(now.saturating_duration_since(since))),
            (Some(n), _) => n.to_string(),
            (None, _) => "-".to_owned(),
        };
        Row::new([
            Cell::from(name.to_string()),
            Cell::from(key.mode),
            Cell::from(holder),
            Cell::from(Line::raw(round(key.time_left(now))).right_aligned()),
            Cell::from(Line::raw(key.fence.map_or_else(|| "-".to_owned(), |fence| fence.to_string())).right_aligned()),
            Cell::from(Line::raw(waiters).right_aligned()),
            Cell::from(Line::raw(key.handoffs(now).to_string()).right_aligned()),
        ])
    });
    let widths = [
        Constraint::Fill(1),
        Constraint::Length(9),
        Constraint::Length(11),
        Constraint::Length(9),
        Constraint::Length(10),
        Constraint::Length(14),
        Constraint::Length(9),
    ];
    let head = Row::new([
        Cell::from("KEY"),
        Cell::from("MODE"),
        Cell::from("HOLDER"),
        Cell::from(Line::raw("TIME LEFT").right_aligned()),
        Cell::from(Line::raw("FENCE").right_aligned()),
        Cell::from(Line::raw("WAITERS").right_aligned()),
        Cell::from(Line::raw("HAND-OFFS").right_aligned()),
    ])
    .style(bold.add_modifier(Modifier::REVERSED));
    frame.render_widget(Table::new(body, widths).header(head).column_spacing(1), table);
}
