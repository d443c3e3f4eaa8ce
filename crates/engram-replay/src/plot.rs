//! The SVG of a report: per-step decode stall over time (one line per
//! schedule) above the prefill stall of each chunk.

use std::path::Path;

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
    let decode: Vec<(&str, Vec<f64>)> = report
        .schedules
        .iter()
        .map(|s| (s.name.as_str(), s.step_stall_us.clone()))
        .collect();
    panel(
        &top,
        &format!(
            "decode stall per step ({}, hints {})",
            report.compute, report.hints
        ),
        "decode step",
        "stall (us)",
        &decode,
    )?;
    let prefill: Vec<(&str, Vec<f64>)> = report
        .schedules
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
        "chunk",
        "stall (ms)",
        &prefill,
    )?;
    root.present()?;
    Ok(())
}

/// One chart: a line per series over its sample index.
fn panel(
    area: &DrawingArea<SVGBackend<'_>, plotters::coord::Shift>,
    caption: &str,
    x_desc: &str,
    y_desc: &str,
    series: &[(&str, Vec<f64>)],
) -> DrawResult {
    let len = series
        .iter()
        .map(|(_, v)| v.len())
        .max()
        .unwrap_or(0)
        .max(1);
    let top = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .fold(0.0f64, f64::max)
        .max(1e-3)
        * 1.05;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(36)
        .y_label_area_size(64)
        .build_cartesian_2d(0f64..len as f64, 0f64..top)?;
    chart
        .configure_mesh()
        .x_desc(x_desc)
        .y_desc(y_desc)
        .x_label_formatter(&|x| format!("{x:.0}"))
        .y_label_formatter(&|y| format!("{y:.0}"))
        .draw()?;
    for (i, (name, values)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let points = values.iter().enumerate().map(|(x, &y)| (x as f64, y));
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
