//! `--plot`: nodes and cost per hour over time, one line per strategy, as SVG.

use std::path::Path;

use plotters::prelude::*;

/// One strategy's series: (hour, nodes, USD per hour).
pub struct Series<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its points.
    pub points: &'a [(f64, f64, f64)],
}

const COLOURS: [RGBColor; 3] = [
    RGBColor(0x1f, 0x77, 0xb4),
    RGBColor(0xd6, 0x27, 0x28),
    RGBColor(0x7f, 0x7f, 0x7f),
];

/// Writes the chart to `path`.
pub fn write(path: &Path, title: &str, series: &[Series<'_>]) -> Result<(), String> {
    let root = SVGBackend::new(path, (960, 640)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| e.to_string())?;
    let root = root.titled(title, ("sans-serif", 20)).map_err(|e| e.to_string())?;
    let (top, bottom) = root.split_vertically(300);
    let hours = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .fold(1.0f64, f64::max);
    for (area, which, label) in [(&top, 1usize, "nodes"), (&bottom, 2usize, "USD per hour")] {
        let max = series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| if which == 1 { p.1 } else { p.2 }))
            .fold(1.0f64, f64::max)
            * 1.1;
        let mut chart = ChartBuilder::on(area)
            .margin(10)
            .x_label_area_size(30)
            .y_label_area_size(50)
            .build_cartesian_2d(0.0..hours, 0.0..max)
            .map_err(|e| e.to_string())?;
        chart
            .configure_mesh()
            .x_desc("hour")
            .y_desc(label)
            .draw()
            .map_err(|e| e.to_string())?;
        for (i, s) in series.iter().enumerate() {
            let colour = COLOURS[i % COLOURS.len()];
            chart
                .draw_series(LineSeries::new(
                    s.points.iter().map(|p| (p.0, if which == 1 { p.1 } else { p.2 })),
                    colour.stroke_width(2),
                ))
                .map_err(|e| e.to_string())?
                .label(s.name)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], colour.stroke_width(2)));
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperRight)
            .draw()
            .map_err(|e| e.to_string())?;
    }
    root.present().map_err(|e| e.to_string())?;
    Ok(())
}
