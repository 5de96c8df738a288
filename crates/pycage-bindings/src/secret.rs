//! Values that may be secrets: header values and upstream environment
//! variables, written literally in the bindings file or taken from the
//! host's environment (`{ env = "NAME" }`). They go only where the file
//! sends them, and never print: `Debug` shows `<redacted>`.

use std::fmt;

/// A configured value that must not be shown.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The value, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn debug_redacts() {
        assert_eq!(format!("{:?}", super::Secret::new("hunter2")), "<redacted>");
    }
}
