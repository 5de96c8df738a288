//! Runs that failed during `pycage bench`: counted per case, the first
//! failure of each in words, reported in text and JSON.

use pycage_protocol::JsonBuilder;

/// Failed tries per case: how many of how many, and the first failure in
/// words. Cases keep the order they first appeared in.
#[derive(Debug, Default)]
pub(crate) struct Failures(Vec<Tally>);

#[derive(Debug)]
pub(crate) struct Tally {
    pub(crate) case: String,
    pub(crate) tried: usize,
    pub(crate) failed: usize,
    pub(crate) first: Option<String>,
}

impl Failures {
    fn tally(&mut self, case: &str) -> &mut Tally {
        if let Some(i) = self.0.iter().position(|t| t.case == case) {
            return &mut self.0[i];
        }
        self.0.push(Tally { case: case.to_owned(), tried: 0, failed: 0, first: None });
        let last = self.0.len() - 1;
        &mut self.0[last]
    }

    /// Counts one try of `case`; returns its value when it succeeded.
    pub(crate) fn note<T>(&mut self, case: &str, outcome: Result<T, String>) -> Option<T> {
        let t = self.tally(case);
        t.tried += 1;
        match outcome {
            Ok(v) => Some(v),
            Err(why) => {
                t.failed += 1;
                t.first.get_or_insert(why);
                None
            }
        }
    }

    /// `n` tries of `case`, of which `errors` failed.
    pub(crate) fn note_many(&mut self, case: &str, n: usize, errors: Vec<String>) {
        let t = self.tally(case);
        t.tried += n;
        t.failed += errors.len();
        if t.first.is_none() {
            t.first = errors.into_iter().next();
        }
    }

    pub(crate) fn any(&self) -> bool {
        self.0.iter().any(|t| t.failed > 0)
    }

    pub(crate) fn failed(&self) -> impl Iterator<Item = &Tally> {
        self.0.iter().filter(|t| t.failed > 0)
    }

    /// The report's "failed runs" lines (none when every run succeeded).
    pub(crate) fn text(&self) -> Vec<String> {
        if !self.any() {
            return Vec::new();
        }
        let mut l = vec![String::new(), "failed runs (left out of the figures above)".into()];
        for t in self.failed() {
            let first = t.first.as_deref().unwrap_or("");
            l.push(format!("  {}: {} of {} failed; first: {first}", t.case, t.failed, t.tried));
        }
        l
    }

    /// The report's `"failures"` member: one object per failing case.
    pub(crate) fn json(&self, b: &mut JsonBuilder) -> Result<(), pycage_protocol::BuildError> {
        b.key("failures")?;
        b.begin_array()?;
        for t in self.failed() {
            b.begin_object()?;
            b.key("case")?;
            b.string(&t.case)?;
            b.key("tried")?;
            b.number(&t.tried.to_string())?;
            b.key("failed")?;
            b.number(&t.failed.to_string())?;
            b.key("first")?;
            b.string(t.first.as_deref().unwrap_or(""))?;
            b.end()?;
        }
        b.end()
    }
}

/// A run's failure in words: `kind: message`.
pub(crate) fn in_words(e: &pycage_runtime::RunFailure) -> String {
    format!("{}: {}", e.kind, e.message)
}
