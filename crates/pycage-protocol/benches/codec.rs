//! Codec benchmarks: ours beside serde_json in the same group, so ratios are
//! meaningful on a noisy machine.
//!
//! Run: `cargo bench -p pycage-protocol --bench codec`
//!
//! Groups:
//! - `done_1MiB`: a ~1 MiB `done` line with a mixed value (nested objects and
//!   arrays, raw unicode and escaped strings, integers, big integers, floats).
//!   `pycage_validate_meter` is the host's whole job on that line
//!   (`validate_child_frame` + `meter_value`); `serde_value` and
//!   `serde_ignored` are `serde_json::from_slice` into `Value` and
//!   `IgnoredAny`. The other `pycage_*` rows split our cost into parts.
//! - `deep_1M`: `[[[...]]]` 1,000,000 deep (2 MB). serde_json refuses to
//!   build a `Value` past depth 128, so it has only an `IgnoredAny` row
//!   (syntax check, nothing built).
//! - `flat_1M_numbers`: one array of 1,000,000 numbers (integers, big
//!   integers and floats).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing, clippy::panic)]

use std::hint::black_box;
use std::time::Duration;

#[path = "../tests/support/mod.rs"]
mod support;

use criterion::{criterion_group, BenchmarkGroup, Criterion, Throughput};
use pycage_protocol::{meter_value, validate_child_frame, ChildFrame, FrameReader, JsonValue};
use support::Rng;

const WORDS: &[&str] =
    &["alpha", "beta", "gamma", "delta", "café", "naïve", "Grüße", "東京", "данные", "😀", "ok", "value", "résumé"];

/// Escaped string bodies as a child would send them.
const ESCAPED: &[&str] = &[
    r#"line one\nline two\ttabbed"#,
    r#"she said \"hi\" \\ back"#,
    r#"\u00e9t\u00e9 \ud83d\ude00 \u0001\u001f"#,
    r#"path\/to\/file \r\n"#,
];

fn push_str(out: &mut String, rng: &mut Rng) {
    out.push('"');
    if rng.below(4) == 0 {
        out.push_str(ESCAPED[rng.below(ESCAPED.len() as u64) as usize]);
    } else {
        for i in 0..1 + rng.below(6) {
            if i > 0 {
                out.push(' ');
            }
            out.push_str(WORDS[rng.below(WORDS.len() as u64) as usize]);
        }
    }
    out.push('"');
}

fn push_number(out: &mut String, rng: &mut Rng) {
    match rng.below(4) {
        0 => out.push_str(&rng.below(1_000_000).to_string()),
        1 => out.push_str(&format!("-{}{:019}", 1 + rng.below(999), rng.next() % 10_000_000_000_000_000_000)),
        2 => out.push_str(&format!("{}.{:03}e-{}", rng.below(1000), rng.below(1000), rng.below(20))),
        _ => out.push_str(&format!("{:.6}", (rng.next() % 1_000_000) as f64 / 7.0)),
    }
}

fn push_record(out: &mut String, rng: &mut Rng, id: u64) {
    out.push_str(&format!(r#"{{"id":{id},"name":"#));
    push_str(out, rng);
    out.push_str(r#","tags":["#);
    for i in 0..rng.below(5) {
        if i > 0 {
            out.push(',');
        }
        push_str(out, rng);
    }
    out.push_str(r#"],"score":"#);
    push_number(out, rng);
    out.push_str(r#","big":"#);
    out.push_str(&format!("{}{:019}{:019}", 1 + rng.below(9), rng.next() % 10u64.pow(19), rng.next() % 10u64.pow(19)));
    out.push_str(r#","flag":"#);
    out.push_str(if rng.below(2) == 0 { "true" } else { "false" });
    out.push_str(r#","none":null,"nested":{"xs":["#);
    for i in 0..rng.below(8) {
        if i > 0 {
            out.push(',');
        }
        push_number(out, rng);
    }
    out.push_str(r#"],"deeper":{"m":[[1,2],[3,[4,{"k":"#);
    push_str(out, rng);
    out.push_str("}]]]}}}");
}

/// A `done` line (no `\n`) of at least `size` bytes.
fn done_line(size: usize) -> Vec<u8> {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut out = String::from(r#"{"type":"done","value":{"source":"bench","items":["#);
    let mut id = 0;
    while out.len() < size {
        if id > 0 {
            out.push(',');
        }
        push_record(&mut out, &mut rng, id);
        id += 1;
    }
    out.push_str("]}}");
    out.into_bytes()
}

fn flat_numbers(n: usize) -> Vec<u8> {
    let mut rng = Rng(42);
    let mut out = String::from("[");
    for i in 0..n {
        if i > 0 {
            out.push(',');
        }
        push_number(&mut out, &mut rng);
    }
    out.push(']');
    out.into_bytes()
}

fn deep_array(n: usize) -> Vec<u8> {
    let mut v = vec![b'['; n];
    v.resize(2 * n, b']');
    v
}

fn configure(g: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>, bytes: usize) {
    g.throughput(Throughput::Bytes(bytes as u64));
    g.sample_size(30);
    g.warm_up_time(Duration::from_secs(2));
    g.measurement_time(Duration::from_secs(8));
}

fn done_1mib(c: &mut Criterion) {
    let line = done_line(1 << 20);
    // Sanity: the line is a valid frame and serde_json reads it too.
    let frame = validate_child_frame(&line).unwrap();
    let ChildFrame::Done { value: Some(v), .. } = &frame else { panic!() };
    let size = meter_value(v, u64::MAX).unwrap();
    assert!(size > 1_000_000, "{size}");
    serde_json::from_slice::<serde_json::Value>(&line).unwrap();

    let mut g = c.benchmark_group("done_1MiB");
    configure(&mut g, line.len());
    g.bench_function("pycage_validate_meter", |b| {
        b.iter(|| {
            let f = validate_child_frame(black_box(&line)).unwrap();
            let ChildFrame::Done { value: Some(v), .. } = &f else { panic!() };
            black_box(meter_value(v, u64::MAX))
        })
    });
    g.bench_function("serde_value", |b| {
        b.iter(|| black_box(serde_json::from_slice::<serde_json::Value>(black_box(&line)).unwrap()))
    });
    g.bench_function("serde_ignored", |b| {
        b.iter(|| black_box(serde_json::from_slice::<serde::de::IgnoredAny>(black_box(&line)).unwrap()))
    });
    g.bench_function("pycage_parse", |b| b.iter(|| black_box(JsonValue::parse(black_box(&line)).unwrap())));
    g.bench_function("pycage_meter", |b| b.iter(|| black_box(meter_value(black_box(v), u64::MAX))));
    g.bench_function("pycage_encode", |b| {
        let mut out = Vec::with_capacity(line.len());
        b.iter(|| {
            out.clear();
            black_box(v).write_canonical(&mut out);
            black_box(out.len())
        })
    });
    g.finish();
}

fn deep_1m(c: &mut Criterion) {
    let input = deep_array(1_000_000);
    // serde_json cannot build a `Value` this deep (recursion limit 128); it
    // can skip one (`IgnoredAny` is iterative), which only checks syntax.
    assert!(serde_json::from_slice::<serde_json::Value>(&input).is_err(), "serde_json stops at depth 128");
    let mut g = c.benchmark_group("deep_1M");
    configure(&mut g, input.len());
    g.bench_function("pycage_parse", |b| b.iter(|| black_box(JsonValue::parse(black_box(&input)).unwrap())));
    g.bench_function("serde_ignored", |b| {
        b.iter(|| black_box(serde_json::from_slice::<serde::de::IgnoredAny>(black_box(&input)).unwrap()))
    });
    g.finish();
}

fn flat_1m(c: &mut Criterion) {
    let input = flat_numbers(1_000_000);
    let mut g = c.benchmark_group("flat_1M_numbers");
    configure(&mut g, input.len());
    g.bench_function("pycage_parse", |b| b.iter(|| black_box(JsonValue::parse(black_box(&input)).unwrap())));
    g.bench_function("serde_value", |b| {
        b.iter(|| black_box(serde_json::from_slice::<serde_json::Value>(black_box(&input)).unwrap()))
    });
    g.bench_function("serde_ignored", |b| {
        b.iter(|| black_box(serde_json::from_slice::<serde::de::IgnoredAny>(black_box(&input)).unwrap()))
    });
    g.finish();
}

/// Linux only: peak RSS growth while `f` runs, in KiB, from `VmHWM` after
/// resetting it through `/proc/self/clear_refs`. Memory the allocator
/// already holds is reused without showing up here, so this is a lower
/// bound on what a fresh process needs. `None` where /proc does not allow it.
fn peak_rss_growth_kib<T>(f: impl FnOnce() -> T) -> Option<(u64, T)> {
    fn status_kib(field: &str) -> Option<u64> {
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with(field))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }
    std::fs::write("/proc/self/clear_refs", "5").ok()?;
    let before = status_kib("VmRSS:")?;
    let out = f();
    let peak = status_kib("VmHWM:")?;
    Some((peak.saturating_sub(before), out))
}

/// A reader producing one `len`-byte line of `x` and no newline.
struct OneLongLine(u64);
impl std::io::Read for OneLongLine {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = buf.len().min(usize::try_from(self.0).unwrap_or(usize::MAX));
        buf[..n].fill(b'x');
        self.0 -= n as u64;
        Ok(n)
    }
}

/// The memory rows: name, and a function that builds the input and returns
/// (input bytes, peak RSS growth while handling it).
type MemoryRow = (&'static str, fn() -> Option<(usize, u64)>);

const MEMORY_ROWS: &[MemoryRow] = &[
    ("100 MB line, FrameReader, 8 MiB cap", || {
        let n = 100_000_000;
        let (kib, _) = peak_rss_growth_kib(|| {
            let mut r = FrameReader::new(OneLongLine(n), pycage_protocol::limits::DEFAULT_MAX_LINE_BYTES);
            let mut events = 0;
            while let Ok(Some(_)) = r.next_event() {
                events += 1;
            }
            events
        })?;
        Some((n as usize, kib))
    }),
    ("done_1MiB validate_child_frame", || {
        let line = done_line(1 << 20);
        let (kib, _) = peak_rss_growth_kib(|| validate_child_frame(&line))?;
        Some((line.len(), kib))
    }),
    ("done_1MiB serde_json::Value", || {
        let line = done_line(1 << 20);
        let (kib, _) = peak_rss_growth_kib(|| serde_json::from_slice::<serde_json::Value>(&line).ok())?;
        Some((line.len(), kib))
    }),
    ("deep_1M JsonValue::parse", || {
        let input = deep_array(1_000_000);
        let (kib, _) = peak_rss_growth_kib(|| JsonValue::parse(&input).ok())?;
        Some((input.len(), kib))
    }),
    ("flat_1M JsonValue::parse", || {
        let input = flat_numbers(1_000_000);
        let (kib, _) = peak_rss_growth_kib(|| JsonValue::parse(&input).ok())?;
        Some((input.len(), kib))
    }),
    ("flat_1M serde_json::Value", || {
        let input = flat_numbers(1_000_000);
        let (kib, _) = peak_rss_growth_kib(|| serde_json::from_slice::<serde_json::Value>(&input).ok())?;
        Some((input.len(), kib))
    }),
];

/// Selects one memory row in a child process.
const MEMORY_ROW_ENV: &str = "PYCAGE_BENCH_MEMORY_ROW";

/// Peak memory, printed before the timings. Each row runs in a fresh
/// process (this binary, re-executed), so no row reuses another's freed
/// memory.
#[allow(clippy::print_stderr, clippy::print_stdout)]
fn memory_report() {
    if let Ok(row) = std::env::var(MEMORY_ROW_ENV) {
        let result = row.parse::<usize>().ok().and_then(|i| MEMORY_ROWS.get(i)).and_then(|(_, f)| f());
        if let Some((input, kib)) = result {
            println!("{input} {kib}");
        }
        std::process::exit(0);
    }
    let Ok(exe) = std::env::current_exe() else { return };
    eprintln!("peak RSS growth while handling the input (input already in memory; fresh process per row):");
    for (i, (name, _)) in MEMORY_ROWS.iter().enumerate() {
        let out = std::process::Command::new(&exe).env(MEMORY_ROW_ENV, i.to_string()).output();
        let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
        match text.split_whitespace().collect::<Vec<_>>()[..] {
            [input, kib] => eprintln!("  {name:<40} input {input:>9} B   peak +{kib} KiB"),
            _ => eprintln!("  {name:<40} (not measurable here)"),
        }
    }
}

criterion_group!(benches, done_1mib, deep_1m, flat_1m);

fn main() {
    memory_report();
    benches();
    Criterion::default().configure_from_args().final_summary();
}
