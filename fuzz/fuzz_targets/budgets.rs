//! Fuzz target: the budgets table's conversions and checks, the code every
//! interface's budget value goes through (the CLI's flags in the flag's
//! unit, the Python keywords in the keyword's unit, `RuntimeConfig::validate`).
//!
//! Input: a stream of (row, interface, value) triples. Checked for every
//! input, never panicking:
//! - `convert` rounds up exactly (same base) or refuses (different bases);
//! - a value inside `bound(row, unit)` lands inside the row once converted
//!   to the row's unit the way the CLI does it (truncating), and a value
//!   just outside it does not (the bounds are exact, rounded inward);
//! - `set` then `get` gives the value back for every value the row accepts
//!   (no field too narrow for its bounds);
//! - `validate` fails on a configuration with any value outside its row's
//!   bounds, naming that row's field, and `bound_text` never panics.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pycage_runtime::budgets::{bound, convert, Unit, BUDGETS};
use pycage_runtime::RuntimeConfig;

/// `value` in `unit` to the row's unit, as the CLI's `--flag VALUE` does.
fn cli(value: u64, unit: Unit, row_unit: Unit) -> Option<u64> {
    u64::try_from(u128::from(value) * u128::from(unit.scale()) / u128::from(row_unit.scale())).ok()
}

fuzz_target!(|data: &[u8]| {
    let mut config = RuntimeConfig::default();
    let mut broken: Option<&'static str> = None;
    for chunk in data.chunks_exact(10) {
        let row = &BUDGETS[usize::from(chunk[0]) % BUDGETS.len()];
        let value = u64::from_le_bytes(chunk[2..10].try_into().unwrap());
        // The interface: the flag, the Python keyword, or the field itself.
        let unit = match chunk[1] % 3 {
            0 => row.flag.map_or(row.unit, |(_, u)| u),
            1 => row.python.map_or(row.unit, |(_, u)| u),
            _ => row.unit,
        };

        for other in [Unit::Bytes, Unit::Mib, Unit::Millis, Unit::Seconds, Unit::Count] {
            if let Some(c) = convert(value, unit, other) {
                let exact = u128::from(value) * u128::from(unit.scale());
                let got = u128::from(c) * u128::from(other.scale());
                if c != u64::MAX {
                    assert!(got >= exact, "{value} {unit:?} -> {c} {other:?} rounds down");
                    assert!(got < exact + u128::from(other.scale()), "{value} {unit:?} -> {c} {other:?}");
                }
            }
        }

        let (min, max) = bound(row, unit);
        let _ = row.bound_text(unit);
        if let Some(v) = cli(value, unit, row.unit) {
            if (min..=max).contains(&value) {
                assert!(row.contains(v), "{}: {value} in {unit:?} is in {min}..={max} but {v} is refused", row.field);
            }
            if value < min || (max != u64::MAX && value > max) {
                assert!(!row.contains(v), "{}: {value} in {unit:?} is outside {min}..={max} but accepted", row.field);
            }
        }

        row.set(&mut config, value);
        if row.contains(value) {
            assert_eq!(row.get(&config), value, "{}: the field does not hold {value}", row.field);
        } else {
            broken = Some(row.field);
        }
    }
    let valid = config.validate();
    if let Some(field) = broken {
        // The last value set outside its bounds may have been overwritten
        // by a later valid one of the same row: check the row as it is now.
        let row = BUDGETS.iter().find(|r| r.field == field).unwrap();
        if !row.contains(row.get(&config)) {
            let e = valid.expect_err("a value outside its bounds was accepted");
            let _ = e.to_string();
        }
    }
});
