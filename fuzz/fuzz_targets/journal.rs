//! Fuzz target: opening a durable run's journal (`pycage_journal`).
//!
//! A journal comes back from wherever the caller kept it, and its payload
//! holds what a hostile program passed to and got from its bindings. For
//! every input, never panicking:
//! - `Journal::open` refuses the bytes as they are (a made-up input has no
//!   valid tag), whatever their size, header or version;
//! - the same bytes as a payload, past the signature
//!   (`open_unsigned_payload`): refused with an error, or accepted, and
//!   then sealing the journal and opening it again gives it back exactly.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pycage_journal::{Journal, JournalKey};

fuzz_target!(|data: &[u8]| {
    let Ok(key) = JournalKey::new([7u8; 32]) else { return };
    assert!(Journal::open(data, &key, 1 << 20).is_err(), "a made-up journal was accepted");
    if let Ok(journal) = Journal::open_unsigned_payload(data) {
        let sealed = journal.seal(&key);
        match Journal::open(&sealed, &key, u64::MAX) {
            Ok(again) => assert_eq!(again, journal, "a sealed journal did not open to itself"),
            Err(e) => panic!("a sealed journal was refused: {e}"),
        }
    }
});
