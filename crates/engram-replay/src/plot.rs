//! The SVG of a report: per-step decode stall over time (one line per
//! schedule) above the prefill stall of each chunk.

use std::path::Path;

use plotters::coord::ranged1d::ValueFormatter;
use plotters::prelude::*;

use crate::report::Report;
use engram::{Error, Result};

/// Line colours, one per schedule in report order.
const COLOURS: [RGBColor; 6] = [
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(31, 119, 180),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(127, 127, 127),
];

/// Writes `report` as an SVG at `path` (written under a temporary name,
/// then renamed, so no half-written plot is left behind).
pub fn write_svg(report: &Report, path: &Path) -> Result<()> {
    let tmp = path.with_extension("svg.tmp");
    draw(report, &tmp).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        Error::io(
            path,
            std::io::Error::other(format!("drawing the plot: {e}")),
        )
    })?;
    std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))
}

type DrawResult = std::result::Result<(), Box<dyn std::error::Error>>;

fn draw(report: &Report, path: &Path) -> DrawResult {
    let root = SVGBackend::new(path, (1100, 900)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(470);
    // The first prompt's first repeat: one run of every schedule.
    let run = report
        .prompts
        .first()
        .and_then(|p| p.repeats.first())
        .map_or(&[][..], Vec::as_slice);
    let decode: Vec<(&str, Vec<f64>)> = run
        .iter()
        .map(|s| (s.name.as_str(), s.step_stall_us.clone()))
        .collect();
    // Log scale: decode stalls span microseconds (a hit) to tens of
    // milliseconds (a device outlier), and the typical step matters most.
    panel(
        &top,
        &format!(
            "decode stall per step, log scale ({}, hints {})",
            report.compute, report.hints
        ),
        ("decode step", "stall (us)"),
        &decode,
        true,
    )?;
    let prefill: Vec<(&str, Vec<f64>)> = run
        .iter()
        .map(|s| {
            let ms = s.chunk_stall_seconds.iter().map(|v| v * 1e3).collect();
            (s.name.as_str(), ms)
        })
        .collect();
    panel(
        &bottom,
        &format!(
            "prefill stall per {}-token chunk ({} sweep)",
            report.ubatch, report.sweep
        ),
        ("chunk", "stall (ms)"),
        &prefill,
        false,
    )?;
    root.present()?;
    Ok(())
}

/// A line chart of `series` over their sample index: linear y, or log y
/// (values below 1 drawn at 1).
fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    axes: (&str, &str),
    series: &[(&str, Vec<f64>)],
    log: bool,
) -> DrawResult {
    let len = series
        .iter()
        .map(|(_, v)| v.len())
        .max()
        .unwrap_or(0)
        .max(1) as f64;
    let top = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0f64, f64::max)
        * 1.05;
    let mut builder = ChartBuilder::on(area);
    builder
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64);
    if log {
        let chart = builder.build_cartesian_2d(0f64..len, (1f64..top.max(10.0)).log_scale())?;
        draw_lines(chart, axes, series, |y| y.max(1.0))
    } else {
        let chart = builder.build_cartesian_2d(0f64..len, 0f64..top.max(1e-3))?;
        draw_lines(chart, axes, series, |y| y)
    }
}

/// The mesh, one line per series in its colour, and the legend.
fn draw_lines<'a, X, Y>(
    mut chart: ChartContext<'a, SVGBackend<'a>, Cartesian2d<X, Y>>,
    (x_desc, y_desc): (&str, &str),
    series: &[(&str, Vec<f64>)],
    clamp: impl Fn(f64) -> f64,
) -> DrawResult
where
    X: Ranged<ValueType = f64> + ValueFormatter<f64>,
    Y: Ranged<ValueType = f64> + ValueFormatter<f64>,
{
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        // At most one label per sample, so whole-number labels never repeat.
        .x_labels(
            series
                .iter()
                .map(|(_, v)| v.len())
                .max()
                .unwrap_or(0)
                .clamp(2, 11),
        )
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for (i, (name, values)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points = values
            .iter()
            .enumerate()
            .map(|(x, &y)| (x as f64, clamp(y)));
        chart
            .draw_series(LineSeries::new(points, colour.stroke_width(2)))?
            .label(*name)
            .legend(move |(x, y)| {
                PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2))
            });
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.85))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}
