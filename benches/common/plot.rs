//! PNG line charts of benchmark results (`MCPHOST_BENCH_PLOTS=DIR`).
//! Text needs a TrueType font: `MCPHOST_BENCH_FONT`, else DejaVu Sans or
//! the macOS system font.

use super::BenchResult;
use plotters::prelude::*;

pub struct Series {
    pub label: String,
    pub points: Vec<(f64, f64)>,
}

const FONTS: &[&str] = &[
    "/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf",
    "/System/Library/Fonts/Supplemental/Arial.ttf",
    "/Library/Fonts/Arial.ttf",
];

fn register_font() -> BenchResult<()> {
    let path = match std::env::var("MCPHOST_BENCH_FONT") {
        Ok(p) => p,
        Err(_) => FONTS
            .iter()
            .find(|p| std::path::Path::new(p).exists())
            .map(|p| (*p).to_owned())
            .ok_or("plots need a TrueType font: set MCPHOST_BENCH_FONT=/path/to/font.ttf")?,
    };
    let bytes: &'static [u8] = Box::leak(std::fs::read(&path)?.into_boxed_slice());
    plotters::style::register_font("sans-serif", FontStyle::Normal, bytes)
        .map_err(|_| format!("{path}: not a usable TrueType font"))?;
    Ok(())
}

/// A line chart of `series` (x against y, both linear from 0) to `path`.
pub fn lines(
    path: &std::path::Path,
    title: &str,
    x_label: &str,
    y_label: &str,
    series: &[Series],
) -> BenchResult<()> {
    register_font()?;
    let max = |f: fn(&(f64, f64)) -> f64| {
        series
            .iter()
            .flat_map(|s| s.points.iter().map(f))
            .fold(0.0f64, f64::max)
            * 1.1
    };
    let (x_max, y_max) = (max(|p| p.0).max(1.0), max(|p| p.1).max(1e-9));
    let root = BitMapBackend::new(path, (900, 560)).into_drawing_area();
    root.fill(&WHITE)?;
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 24))
        .margin(16)
        .x_label_area_size(48)
        .y_label_area_size(72)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc(x_label)
        .y_desc(y_label)
        .label_style(("sans-serif", 15))
        .draw()?;
    for (i, s) in series.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        chart
            .draw_series(LineSeries::new(
                s.points.iter().copied(),
                color.stroke_width(3),
            ))?
            .label(s.label.clone())
            .legend(move |(x, y)| PathElement::new([(x, y), (x + 20, y)], color.stroke_width(3)));
        chart.draw_series(s.points.iter().map(|&p| Circle::new(p, 4, color.filled())))?;
    }
    chart
        .configure_series_labels()
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .label_font(("sans-serif", 16))
        .position(SeriesLabelPosition::UpperLeft)
        .draw()?;
    root.present()?;
    Ok(())
}
