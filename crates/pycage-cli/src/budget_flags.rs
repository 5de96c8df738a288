//! The budget flags of `run`, `repl` and `mcp`, built from the runtime's
//! budgets table (`pycage_runtime::budgets`): one flag per row that has one,
//! its default and its help from the row, its value in the flag's unit
//! (`--memory-mb` in MiB, `--wall-ms` in milliseconds), and a bad value
//! reported in the flag's words with the real bound.

use clap::{Arg, ArgMatches, Args, Command, FromArgMatches};
use pycage_runtime::budgets::{self, BudgetRow, Unit, BUDGETS};
use pycage_runtime::{ConfigError, RuntimeConfig};

/// The value given (or defaulted) for each budget flag, in the flag's unit.
#[derive(Debug, Clone, Default)]
pub struct BudgetArgs {
    values: Vec<(&'static str, u64)>,
}

fn flagged() -> impl Iterator<Item = (&'static BudgetRow, &'static str, Unit)> {
    BUDGETS.iter().filter_map(|r| r.flag.map(|(flag, unit)| (r, flag, unit)))
}

fn help(row: &BudgetRow, unit: Unit) -> String {
    let unit = match unit {
        Unit::Count => String::new(),
        u => format!(", in {}", u.suffix().trim()),
    };
    // The docs' line, without its Markdown.
    format!("{}{unit}", row.doc.replace('`', ""))
}

impl Args for BudgetArgs {
    fn augment_args(cmd: Command) -> Command {
        flagged().fold(cmd, |cmd, (row, flag, unit)| {
            let default = budgets::convert(row.default_value(), row.unit, unit).unwrap_or(row.default_value());
            cmd.arg(
                Arg::new(flag)
                    .long(flag)
                    .value_name("N")
                    .value_parser(clap::value_parser!(u64))
                    .default_value(default.to_string())
                    .help(help(row, unit)),
            )
        })
    }

    fn augment_args_for_update(cmd: Command) -> Command {
        Self::augment_args(cmd)
    }
}

impl FromArgMatches for BudgetArgs {
    fn from_arg_matches(m: &ArgMatches) -> Result<Self, clap::Error> {
        let mut args = BudgetArgs::default();
        args.update_from_arg_matches(m)?;
        Ok(args)
    }

    fn update_from_arg_matches(&mut self, m: &ArgMatches) -> Result<(), clap::Error> {
        for (_, flag, _) in flagged() {
            if let Some(v) = m.get_one::<u64>(flag) {
                self.values.retain(|(f, _)| *f != flag);
                self.values.push((flag, *v));
            }
        }
        Ok(())
    }
}

impl BudgetArgs {
    /// Puts every flag's value into `config` (checked in the flag's words).
    pub fn apply(&self, config: &mut RuntimeConfig) -> anyhow::Result<()> {
        for (row, flag, unit) in flagged() {
            let Some(&(_, value)) = self.values.iter().find(|(f, _)| *f == flag) else { continue };
            let v = u128::from(value) * u128::from(unit.scale()) / u128::from(row.unit.scale());
            let v = u64::try_from(v).map_err(|_| anyhow::anyhow!("--{flag} {value} is too large"))?;
            row.set(config, v);
            if !row.contains(v) {
                anyhow::bail!("--{flag} {}", row.bound_text(unit));
            }
        }
        Ok(())
    }
}

/// A configuration error in the words of the flag that set the field, when
/// a flag sets it (the bound in the flag's unit).
pub fn flag_message(e: &ConfigError) -> String {
    match flagged().find(|(row, _, _)| row.field == e.field) {
        Some((row, flag, unit)) if row.check(&RuntimeConfig::default()).is_ok() && e.problem.starts_with("must") => {
            format!("--{flag} {}", row.bound_text(unit))
        }
        _ => e.to_string(),
    }
}
