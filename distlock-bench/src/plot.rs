//! SVG plots of the harness's figures, drawn once here for `scripts/bench.sh` (all stores
//! in one plot) and for `distlock bench --plot` (one store).
//!
//! Text is laid out with plotters' built-in estimate and drawn by the viewer, so drawing
//! needs no font files.

use std::path::{Path, PathBuf};

use plotters::prelude::*;

use super::record::{Figure, Series};

/// Line colours, chosen to stay apart for viewers with red–green colour blindness.
const COLOURS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(213, 94, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(230, 159, 0),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];

/// Why a plot could not be drawn or written.
#[derive(Debug)]
pub enum PlotError {
    /// The series have no point to draw.
    Empty(Figure),
    /// plotters refused the drawing.
    Draw {
        /// The plot.
        figure: Figure,
        /// plotters' message.
        message: String,
    },
    /// The SVG file could not be written.
    Write {
        /// The file.
        path: PathBuf,
        /// The cause.
        source: std::io::Error,
    },
}

impl std::fmt::Display for PlotError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Empty(figure) => write!(f, "nothing to plot for `{}`", figure.file_stem()),
            Self::Draw { figure, message } => write!(f, "could not draw `{}`: {message}", figure.file_stem()),
            Self::Write { path, .. } => write!(f, "could not write {}", path.display()),
        }
    }
}

impl std::error::Error for PlotError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Write { source, .. } => Some(source),
            _ => None,
        }
    }
}

/// A line of a plot: its legend and its points.
#[derive(Debug, Clone, Copy)]
pub struct Line<'a> {
    /// The legend.
    pub label: &'a str,
    /// (x, y) in the figure's units.
    pub points: &'a [(f64, f64)],
}

/// The bounds of the axes: from 0 to a little past the largest point. The hand-off CDF
/// stops at the largest 99th percentile of its lines, so one slow tail does not squash
/// the rest.
fn bounds(figure: Figure, lines: &[Line<'_>]) -> (f64, f64) {
    let largest = |pick: fn(&(f64, f64)) -> f64| {
        lines.iter().flat_map(|line| line.points.iter().map(pick)).fold(0.0_f64, f64::max)
    };
    let x = if figure == Figure::Handoff {
        lines
            .iter()
            .filter_map(|line| line.points.iter().find(|&&(_, share)| share >= 0.99).map(|&(x, _)| x))
            .fold(0.0_f64, f64::max)
    } else {
        largest(|&(x, _)| x)
    };
    let y = if figure == Figure::Handoff { 1.0 } else { largest(|&(_, y)| y) * 1.1 };
    (if x > 0.0 { x * 1.05 } else { 1.0 }, if y > 0.0 { y } else { 1.0 })
}

/// `figure` with `lines` as an SVG document.
///
/// # Errors
///
/// [`PlotError::Empty`] when no line has a point, [`PlotError::Draw`] when plotters fails.
pub fn svg(figure: Figure, subtitle: &str, lines: &[Line<'_>]) -> Result<String, PlotError> {
    if lines.iter().all(|line| line.points.is_empty()) {
        return Err(PlotError::Empty(figure));
    }
    let draw = |message: String| PlotError::Draw { figure, message };
    let (x_max, y_max) = bounds(figure, lines);
    let caption =
        if subtitle.is_empty() { figure.title().to_owned() } else { format!("{} · {subtitle}", figure.title()) };
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (760, 440)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| draw(e.to_string()))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(caption, ("sans-serif", 20))
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(64)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(|e| draw(e.to_string()))?;
        chart
            .configure_mesh()
            .x_desc(figure.x_label())
            .y_desc(figure.y_label())
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(|e| draw(e.to_string()))?;
        for (index, line) in lines.iter().enumerate() {
            let colour = COLOURS[index % COLOURS.len()];
            let style = colour.stroke_width(2);
            let points = line.points.iter().copied().filter(|&(x, _)| x <= x_max);
            chart
                .draw_series(LineSeries::new(points, style))
                .map_err(|e| draw(e.to_string()))?
                .label(line.label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], style));
            // Measured points get a mark where there are few (curves), none on a CDF.
            if line.points.len() <= 24 {
                let marks = line.points.iter().map(|&point| Circle::new(point, 3, colour.filled()));
                chart.draw_series(marks).map_err(|e| draw(e.to_string()))?;
            }
        }
        let corner =
            if figure == Figure::Handoff { SeriesLabelPosition::LowerRight } else { SeriesLabelPosition::UpperLeft };
        chart
            .configure_series_labels()
            .position(corner)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.4))
            .draw()
            .map_err(|e| draw(e.to_string()))?;
        root.present().map_err(|e| draw(e.to_string()))?;
    }
    Ok(out)
}

/// Draws `figure` and writes it to `<dir>/<stem>.svg`; returns the path.
///
/// # Errors
///
/// As [`svg`], and [`PlotError::Write`] when the file cannot be written.
pub fn write(dir: &Path, stem: &str, figure: Figure, subtitle: &str, lines: &[Line<'_>]) -> Result<PathBuf, PlotError> {
    let document = svg(figure, subtitle, lines)?;
    let path = dir.join(format!("{stem}.svg"));
    std::fs::create_dir_all(dir)
        .and_then(|()| std::fs::write(&path, document))
        .map_err(|source| PlotError::Write { path: path.clone(), source })?;
    Ok(path)
}

/// The plots of one store's series, as `distlock bench --plot` writes them: one SVG per
/// figure that has points, named after the figure (`handoff.svg`, …). Returns the paths.
///
/// # Errors
///
/// As [`write()`].
pub fn write_store(dir: &Path, store: &str, series: &[Series]) -> Result<Vec<PathBuf>, PlotError> {
    let mut written = Vec::new();
    for figure in Figure::ALL {
        let lines: Vec<Line<'_>> = series
            .iter()
            .filter(|series| series.figure == figure && !series.points.is_empty())
            .map(|series| Line { label: &series.name, points: &series.points })
            .collect();
        if !lines.is_empty() {
            written.push(write(dir, figure.file_stem(), figure, store, &lines)?);
        }
    }
    Ok(written)
}
