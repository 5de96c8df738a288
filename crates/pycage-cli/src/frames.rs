//! `pycage frames validate`: replay a captured fd-3 transcript (child→host
//! lines) through the host's own validator.
//!
//! One output line per input line, in order:
//! - the rebuilt frame as compact JSON (`ChildFrame::encode`: known fields
//!   only, numbers as their exact text);
//! - `forged\t<rebuilt frame>` for a `done` that carries both a value and an
//!   error: valid on the wire (the host keeps the error and drops the
//!   value), but the honest child never sends it;
//! - `drop` when the line is not a valid frame (`drop\t<reason>` with
//!   `--explain`);
//! - `oversized` when the line is over `--max-line-bytes`.
//!
//! With `--max-value-bytes N`, a kept `done` with a value gets
//! `\tvalue-bytes=<canonical size>` or `\tvalue-over-budget` appended.
//!
//! Then one summary line on stderr (stdout keeps one line per input line):
//! `frames validate: N lines: K kept, F forged, D dropped, O oversized`.
//! Exit status 0 when every line was kept, 1 when any was forged, dropped
//! or oversized, 2 when the transcript cannot be read.
//!
//! Reading never holds more than the line cap plus a constant:
//! [`FrameReader`] never buffers an over-cap line, and output goes through a
//! fixed-size buffered writer. A kept line is parsed into a tape, which
//! takes a small multiple of the line's size while that line is handled.

use std::fs::File;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Args;
use pycage_protocol::{limits, meter_value, parse_child_frame, ChildFrame, FrameReader, LineEvent};

use crate::output;

#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Transcript file, or `-` for stdin (the default).
    #[arg(value_name = "FILE|-")]
    file: Option<PathBuf>,

    /// Longest accepted line, without its newline.
    #[arg(long, value_name = "N", default_value_t = limits::DEFAULT_MAX_LINE_BYTES)]
    max_line_bytes: usize,

    /// Meter each `done` value against this budget (canonical JSON bytes).
    #[arg(long, value_name = "N")]
    max_value_bytes: Option<u64>,

    /// Append why a line was dropped: `drop<TAB><reason>`.
    #[arg(long)]
    explain: bool,
}

pub fn validate(args: &ValidateArgs) -> anyhow::Result<ExitCode> {
    let input: Box<dyn Read> = match &args.file {
        Some(path) if path.as_os_str() != "-" => {
            Box::new(File::open(path).with_context(|| format!("cannot open transcript {}", path.display()))?)
        }
        _ => Box::new(io::stdin().lock()),
    };
    let mut out = output::stdout_buffered();
    let mut summary = Summary::default();
    match replay(input, &mut out, args, &mut summary).and_then(|()| out.flush()) {
        Ok(()) => {}
        // The reader went away (`| head`): stop quietly.
        Err(e) if output::is_broken_pipe(&e) => return Ok(ExitCode::SUCCESS),
        Err(e) => return Err(e).context("frames validate"),
    }
    output::stderr_line(&summary.to_string());
    Ok(if summary.clean() { ExitCode::SUCCESS } else { ExitCode::from(EXIT_NOT_CLEAN) })
}

/// Exit status when a line was forged, dropped or oversized.
const EXIT_NOT_CLEAN: u8 = 1;

/// How many lines went each way.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Summary {
    kept: u64,
    forged: u64,
    dropped: u64,
    oversized: u64,
}

impl Summary {
    fn clean(&self) -> bool {
        self.forged == 0 && self.dropped == 0 && self.oversized == 0
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Summary { kept, forged, dropped, oversized } = *self;
        let lines = kept + forged + dropped + oversized;
        write!(
            f,
            "frames validate: {lines} lines: {kept} kept, {forged} forged, {dropped} dropped, {oversized} oversized"
        )
    }
}

/// Writes one output line per input line and counts them in `summary`.
fn replay(input: impl Read, out: &mut impl Write, args: &ValidateArgs, summary: &mut Summary) -> io::Result<()> {
    let mut reader = FrameReader::new(input, args.max_line_bytes);
    let mut encoded = Vec::new();
    while let Some(event) = reader.next_event()? {
        let line = match event {
            LineEvent::Oversized => {
                summary.oversized += 1;
                out.write_all(b"oversized\n")?;
                continue;
            }
            LineEvent::Line(line) => line,
        };
        let frame = match parse_child_frame(line) {
            Ok(frame) => frame,
            Err(reason) => {
                summary.dropped += 1;
                if args.explain {
                    writeln!(out, "drop\t{reason}")?;
                } else {
                    out.write_all(b"drop\n")?;
                }
                continue;
            }
        };
        if let ChildFrame::Done { value: Some(_), error: Some(_) } = &frame {
            summary.forged += 1;
            out.write_all(b"forged\t")?;
        } else {
            summary.kept += 1;
        }
        encoded.clear();
        frame.encode(&mut encoded);
        out.write_all(&encoded)?;
        if let (Some(budget), ChildFrame::Done { value: Some(value), .. }) = (args.max_value_bytes, &frame) {
            match meter_value(value, budget) {
                Some(size) => write!(out, "\tvalue-bytes={size}")?,
                None => out.write_all(b"\tvalue-over-budget")?,
            }
        }
        out.write_all(b"\n")?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn replay_str(input: &[u8], max_line_bytes: usize, max_value_bytes: Option<u64>, explain: bool) -> String {
        replay_summary(input, max_line_bytes, max_value_bytes, explain).0
    }

    fn replay_summary(
        input: &[u8],
        max_line_bytes: usize,
        max_value_bytes: Option<u64>,
        explain: bool,
    ) -> (String, Summary) {
        let args = ValidateArgs { file: None, max_line_bytes, max_value_bytes, explain };
        let mut out = Vec::new();
        let mut summary = Summary::default();
        replay(input, &mut out, &args, &mut summary).unwrap();
        (String::from_utf8(out).unwrap(), summary)
    }

    #[test]
    fn forged_done_and_summary() {
        let input = concat!(
            "{\"type\":\"done\",\"value\":1,\"error\":{\"kind\":\"exception\",\"message\":\"m\"}}\n",
            "{\"type\":\"boot-ack\"}\n",
            "junk\n",
            "123456\n",
        );
        let (out, summary) = replay_summary(input.as_bytes(), 1024, None, false);
        assert_eq!(
            out,
            "forged\t{\"type\":\"done\",\"value\":1,\"error\":{\"kind\":\"exception\",\"message\":\"m\"}}\n\
             {\"type\":\"boot-ack\"}\ndrop\ndrop\n"
        );
        assert_eq!(summary, Summary { kept: 1, forged: 1, dropped: 2, oversized: 0 });
        assert!(!summary.clean());
        assert_eq!(summary.to_string(), "frames validate: 4 lines: 1 kept, 1 forged, 2 dropped, 0 oversized");
        let (_, summary) = replay_summary(b"{\"type\":\"done\"}\n", 1024, None, false);
        assert!(summary.clean());
    }

    #[test]
    fn one_output_line_per_input_line() {
        let input = concat!(
            "{\"type\":\"boot-ack\",\"x\":1}\n",
            "\n",
            "{\"type\":\"log\",\"text\":\"hi\",\"truncated\":\"yes\"}\n",
            "{\"type\":\"done\",\"value\":[1.50, 2e3]}\n",
            "{\"type\":\"done\"}\n",
            "{\"type\":\"call\",\"id\":-1,\"global\":\"t\",\"name\":\"n\",\"args\":null}\n",
            "{\"type\":\"done\",\"value\":\"",
        );
        assert_eq!(
            replay_str(input.as_bytes(), 1024, Some(10), false),
            concat!(
                "{\"type\":\"boot-ack\"}\n",
                "drop\n",
                "{\"type\":\"log\",\"text\":\"hi\"}\n",
                "{\"type\":\"done\",\"value\":[1.50,2e3]}\tvalue-bytes=10\n",
                "{\"type\":\"done\"}\n",
                "drop\n",
                "drop\n",
            )
        );
        assert_eq!(
            replay_str(b"{\"type\":\"done\",\"value\":[1.50, 2e3]}\n[]", 1024, Some(9), true),
            "{\"type\":\"done\",\"value\":[1.50,2e3]}\tvalue-over-budget\ndrop\tnot a JSON object\n"
        );
    }

    #[test]
    fn oversized_lines() {
        // The cap is inclusive: a 5-byte line fits a 5-byte cap (and is junk).
        assert_eq!(replay_str(b"12345\n123456\n{\"type\":\"done\"}", 5, None, false), "drop\noversized\noversized\n");
        assert_eq!(replay_str(b"xxxxxxxxxxxx", 5, None, false), "oversized\n");
    }
}
