//! The caller's journal key and the HMAC-SHA256 signature it makes.
//!
//! The key never reaches a run: it stays in the host's memory, its `Debug`
//! shows nothing of it, and only the tag it makes is written.

use std::fmt;
use std::sync::Arc;

use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;

use crate::error::KeyError;

/// Shortest key accepted, in bytes: a key guessed by brute force would let
/// anyone forge a journal.
pub const MIN_KEY_BYTES: usize = 16;

/// Environment variable the CLI and the Python package read the key from
/// (its UTF-8 bytes are the key).
pub const KEY_ENV: &str = "PYCAGE_JOURNAL_KEY";

/// What is signed before the journal's bytes: a journal tag is never a tag
/// of anything else made with the same key.
const CONTEXT: &[u8] = b"pycage durable-run journal\0";

/// A secret that signs and verifies journals. Cheap to clone.
#[derive(Clone)]
pub struct JournalKey(Arc<[u8]>);

impl JournalKey {
    /// A key of these bytes (at least [`MIN_KEY_BYTES`]).
    pub fn new(bytes: impl AsRef<[u8]>) -> Result<JournalKey, KeyError> {
        let bytes = bytes.as_ref();
        if bytes.len() < MIN_KEY_BYTES {
            return Err(KeyError::TooShort { bytes: bytes.len(), min: MIN_KEY_BYTES });
        }
        Ok(JournalKey(Arc::from(bytes)))
    }

    /// A key of 32 bytes from the kernel's randomness, for a process that
    /// keeps its journals to itself (`pycage mcp`).
    pub fn random() -> std::io::Result<JournalKey> {
        use std::io::Read;
        let mut bytes = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
        Ok(JournalKey(Arc::from(&bytes[..])))
    }

    /// The key in [`KEY_ENV`], if it is set.
    pub fn from_env() -> Option<Result<JournalKey, KeyError>> {
        let value = std::env::var_os(KEY_ENV)?;
        Some(JournalKey::new(value.as_encoded_bytes()))
    }

    /// The tag of `parts` (concatenated).
    pub(crate) fn sign(&self, parts: &[&[u8]]) -> [u8; 32] {
        self.mac(parts).finalize().into_bytes().into()
    }

    /// Whether `tag` is the tag of `parts`, compared in constant time.
    pub(crate) fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        self.mac(parts).verify_slice(tag).is_ok()
    }

    fn mac(&self, parts: &[&[u8]]) -> Hmac<Sha256> {
        // HMAC takes a key of any length: this cannot fail.
        let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&self.0)
            .unwrap_or_else(|_| <Hmac<Sha256> as KeyInit>::new(&Default::default()));
        mac.update(CONTEXT);
        for part in parts {
            mac.update(part);
        }
        mac
    }
}

impl fmt::Debug for JournalKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("JournalKey(..)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_keys_are_refused_and_debug_shows_nothing() {
        assert_eq!(JournalKey::new("short").unwrap_err(), KeyError::TooShort { bytes: 5, min: 16 });
        let key = JournalKey::new("a secret of enough bytes").unwrap();
        assert_eq!(format!("{key:?}"), "JournalKey(..)");
    }

    #[test]
    fn tags_depend_on_key_and_every_byte() {
        let a = JournalKey::new([1u8; 32]).unwrap();
        let b = JournalKey::new([2u8; 32]).unwrap();
        let tag = a.sign(&[b"head", b"body"]);
        assert!(a.verify(&[b"headbody"], &tag), "parts are concatenated");
        assert!(!b.verify(&[b"head", b"body"], &tag));
        assert!(!a.verify(&[b"head", b"bodY"], &tag));
        assert!(!a.verify(&[b"head", b"body"], &tag[..31]));
    }
}
