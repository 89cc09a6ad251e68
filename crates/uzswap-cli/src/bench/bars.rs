//! Grouped bar charts for the benchmarks' `--plot`: one panel per figure,
//! bars grouped by row (a workload), one colour per column (a backend or
//! cell), each bar labelled with its value. `bench compare` and `bench
//! programs` draw with it, so their plots read alike.

use std::path::Path;

use anyhow::Result;

/// One panel: a figure of every (column, row).
pub struct Panel {
    pub title: String,
    /// `values[column][row]`; None draws no bar there.
    pub values: Vec<Vec<Option<f64>>>,
    /// A horizontal reference line (in the values' unit) and its legend.
    pub hline: Option<(f64, String)>,
    /// Draw bar heights on a log10 scale, for figures that span orders of
    /// magnitude (a slowdown of 1.1x next to one of 100x). Values must be
    /// above zero; bars start at 1, so one below 1 points down.
    pub log: bool,
}

const COLORS: [plotters::style::RGBColor; 8] = [
    plotters::style::RGBColor(31, 119, 180),
    plotters::style::RGBColor(23, 190, 207),
    plotters::style::RGBColor(214, 39, 40),
    plotters::style::RGBColor(255, 127, 14),
    plotters::style::RGBColor(127, 127, 127),
    plotters::style::RGBColor(44, 160, 44),
    plotters::style::RGBColor(148, 103, 189),
    plotters::style::RGBColor(140, 86, 75),
];

/// A bar's label: whole numbers from 100 up, one decimal below.
fn label(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.1}")
    }
}

/// Draw `panels` side by side into a PNG of `size` pixels at `path`.
pub fn draw(
    path: &Path,
    size: (u32, u32),
    rows: &[String],
    cols: &[String],
    panels: &[Panel],
) -> Result<()> {
    use plotters::prelude::*;
    let root = BitMapBackend::new(path, size).into_drawing_area();
    root.fill(&WHITE)?;
    let areas = root.split_evenly((1, panels.len()));
    let group = cols.len() as f64 + 1.0;
    for (area, panel) in areas.iter().zip(panels) {
        let scale = |v: f64| if panel.log { v.log10() } else { v };
        let shown = panel
            .values
            .iter()
            .flatten()
            .flatten()
            .copied()
            .filter(|v| !panel.log || *v > 0.0);
        let hline = panel.hline.as_ref().map(|(y, _)| scale(*y));
        let (lo, hi) = shown.fold((0.0f64, hline.unwrap_or(0.0)), |(lo, hi), v| {
            (lo.min(scale(v)), hi.max(scale(v)))
        });
        let ymax = hi.max(1e-6) * 1.45; // headroom for the legend
        let ymin = if lo < 0.0 { lo * 1.2 } else { 0.0 };
        let xmax = rows.len() as f64 * group;
        let mut chart = ChartBuilder::on(area)
            .caption(&panel.title, ("sans-serif", 20))
            .margin(12)
            .x_label_area_size(30)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..xmax, ymin..ymax)?;
        let log_label = |y: &f64| label(10f64.powf(*y));
        let mut mesh = chart.configure_mesh();
        mesh.disable_x_mesh()
            .x_labels(0)
            .y_max_light_lines(1)
            .x_label_formatter(&|_| String::new())
            .y_label_style(("sans-serif", 14));
        if panel.log {
            mesh.y_label_formatter(&log_label);
        }
        mesh.draw()?;
        for (bi, (col, values)) in cols.iter().zip(&panel.values).enumerate() {
            let color = COLORS[bi % COLORS.len()];
            let bars: Vec<(f64, f64, f64)> = values
                .iter()
                .enumerate()
                .filter_map(|(ri, v)| {
                    let v = (*v)?;
                    (!panel.log || v > 0.0)
                        .then(|| (ri as f64 * group + 0.5 + bi as f64, scale(v), v))
                })
                .collect();
            chart
                .draw_series(
                    bars.iter()
                        .map(|&(x, y, _)| Rectangle::new([(x, 0.0), (x + 0.9, y)], color.filled())),
                )?
                .label(col.clone())
                .legend(move |(x, y)| {
                    Rectangle::new([(x, y - 6), (x + 12, y + 6)], color.filled())
                });
            chart.draw_series(bars.iter().map(|&(x, y, v)| {
                Text::new(
                    label(v),
                    (x, y.max(0.0) + ymax * 0.01),
                    ("sans-serif", 11)
                        .into_font()
                        .transform(FontTransform::Rotate270),
                )
            }))?;
        }
        if let (Some(y), Some((_, text))) = (hline, &panel.hline) {
            chart
                .draw_series(LineSeries::new(
                    [(0.0, y), (xmax, y)],
                    BLACK.stroke_width(1),
                ))?
                .label(text.clone())
                .legend(|(x, y)| PathElement::new([(x, y), (x + 12, y)], BLACK));
        }
        // Row names under each group, in pixel coordinates.
        for (ri, r) in rows.iter().enumerate() {
            let (px, py) = chart.backend_coord(&(ri as f64 * group + group / 2.0, ymin));
            let (ox, oy) = area.get_base_pixel();
            area.draw_text(
                r,
                &("sans-serif", 16).into_text_style(area),
                (px - ox - 4 * r.len() as i32, py - oy + 8),
            )?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .label_font(("sans-serif", 13))
            .draw()?;
    }
    root.present()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_large_values() {
        assert_eq!(label(123.4), "123");
        assert_eq!(label(1.26), "1.3");
    }

    #[test]
    fn draws_linear_and_log_panels() {
        let path = std::env::temp_dir().join(format!("uzswap-bars-{}.png", std::process::id()));
        let panels = [
            Panel {
                title: "linear".into(),
                values: vec![vec![Some(3.0), None], vec![Some(5.0), Some(1.0)]],
                hline: Some((4.0, "line".into())),
                log: false,
            },
            Panel {
                title: "log".into(),
                values: vec![vec![Some(0.5), Some(120.0)], vec![Some(1.2), Some(0.0)]],
                hline: None,
                log: true,
            },
        ];
        draw(
            &path,
            (800, 300),
            &["a".into(), "b".into()],
            &["x".into(), "y".into()],
            &panels,
        )
        .unwrap();
        let png = std::fs::read(&path).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(&png[1..4], b"PNG");
    }
}
