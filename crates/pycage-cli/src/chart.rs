//! BENCHMARKS.md's benchmark chart: an SVG drawn from `pycage bench --json`.
//!
//! `pycage bench --svg FILE` writes it beside the report. A horizontal bar
//! per row on a log scale (a zygote run and an interpreter start differ a
//! hundredfold), each labelled with its median; floors are drawn in grey.
//! A bar chart is a few rectangles and text elements, so it is written
//! here directly: a plotting crate would need a font backend (TTF files or
//! an embedded font) just to lay out these labels.

use std::fmt::Write as _;

/// One bar: a label, a median in milliseconds, whether it is a floor.
pub struct Bar {
    pub label: String,
    pub ms: f64,
    pub floor: bool,
}

const WIDTH: f64 = 760.0;
const LABEL_WIDTH: f64 = 250.0;
const ROW: f64 = 26.0;
const TOP: f64 = 48.0;
const BOTTOM: f64 = 40.0;

/// Escapes text for an SVG text node.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The chart as SVG text.
pub fn svg(title: &str, bars: &[Bar]) -> String {
    let height = TOP + ROW * bars.len() as f64 + BOTTOM;
    let plot = WIDTH - LABEL_WIDTH - 90.0;
    // Log scale from a decade below the smallest bar to a decade above the largest.
    let positive = bars.iter().map(|b| b.ms).filter(|m| *m > 0.0);
    let lo = positive.clone().fold(f64::INFINITY, f64::min).max(1e-3).log10().floor() - 1.0;
    let hi = positive.fold(0.0f64, f64::max).max(1e-3).log10().ceil() + 1.0;
    let x = |ms: f64| LABEL_WIDTH + plot * ((ms.max(1e-3).log10() - lo) / (hi - lo)).clamp(0.0, 1.0);
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="100%" height="100%" fill="white"/>"#);
    let _ = writeln!(out, r#"<text x="10" y="24" font-size="15" font-weight="bold">{}</text>"#, escape(title));
    let mut decade = lo;
    while decade <= hi {
        let ms = 10f64.powf(decade);
        let gx = x(ms);
        let label = if ms < 1.0 { format!("{ms} ms") } else { format!("{ms:.0} ms") };
        let _ = writeln!(
            out,
            r##"<line x1="{gx:.1}" y1="{TOP}" x2="{gx:.1}" y2="{:.1}" stroke="#ddd"/><text x="{gx:.1}" y="{:.1}" text-anchor="middle" fill="#666">{label}</text>"##,
            height - BOTTOM,
            height - BOTTOM + 16.0
        );
        decade += 1.0;
    }
    for (i, bar) in bars.iter().enumerate() {
        let y = TOP + ROW * i as f64;
        let end = x(bar.ms);
        let fill = if bar.floor { "#aaa" } else { "#3b7dd8" };
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text><rect x="{LABEL_WIDTH}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{fill}"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            LABEL_WIDTH - 8.0,
            y + ROW * 0.65,
            escape(&bar.label),
            y + 4.0,
            (end - LABEL_WIDTH).max(1.0),
            ROW - 8.0,
            end + 6.0,
            y + ROW * 0.65,
            if bar.ms < 1.0 { format!("{:.2} ms", bar.ms) } else { format!("{:.1} ms", bar.ms) }
        );
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bars_scale_logarithmically_and_text_is_escaped() {
        let bars = [
            Bar { label: "zygote <process>".into(), ms: 1.0, floor: false },
            Bar { label: "python -I".into(), ms: 100.0, floor: true },
        ];
        let svg = svg("t & u", &bars);
        assert!(svg.starts_with("<svg xmlns"));
        assert!(svg.contains("zygote &lt;process&gt;") && svg.contains("t &amp; u"));
        assert!(svg.contains(r##"fill="#aaa""##) && svg.contains(r##"fill="#3b7dd8""##));
        // 1 ms and 100 ms lie a third and two thirds of the way on 0.1..1000 ms.
        let plot = WIDTH - LABEL_WIDTH - 90.0;
        assert!(svg.contains(&format!(r#"width="{:.1}""#, plot / 4.0)), "{svg}");
        assert!(svg.contains(&format!(r#"width="{:.1}""#, plot * 3.0 / 4.0)), "{svg}");
        assert!(svg.trim_end().ends_with("</svg>"));
    }
}
