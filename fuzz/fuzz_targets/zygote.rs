//! Fuzz target: the zygote's answers as the host reads them.
//!
//! Checked for every input: `parse_zygote_answer` never panics; what it
//! accepts is under the packet cap, is JSON, and re-encodes (through the
//! typed answer) to a packet that parses back to the same answer.
#![no_main]

use libfuzzer_sys::fuzz_target;
use pycage_protocol::zygote::{parse_zygote_answer, ZygoteAnswer, MAX_ZYGOTE_PACKET};
use pycage_protocol::{write_json_string, JsonValue};

fn encode(answer: &ZygoteAnswer) -> Vec<u8> {
    match answer {
        ZygoteAnswer::Ready { pid, threads } => format!(r#"{{"type":"ready","pid":{pid},"threads":{threads}}}"#).into_bytes(),
        ZygoteAnswer::Spawned { id, pid } => format!(r#"{{"type":"spawned","id":{id},"pid":{pid}}}"#).into_bytes(),
        ZygoteAnswer::SpawnFailed { id, message } => {
            let mut out = format!(r#"{{"type":"spawn-failed","id":{id},"message":"#).into_bytes();
            write_json_string(&mut out, message);
            out.push(b'}');
            out
        }
        ZygoteAnswer::Reaped { id, status, cpu_ns } => {
            format!(r#"{{"type":"reaped","id":{id},"status":{status},"cpuNs":{cpu_ns}}}"#).into_bytes()
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(answer) = parse_zygote_answer(data) else { return };
    assert!(data.len() <= MAX_ZYGOTE_PACKET);
    assert!(JsonValue::parse(data).is_ok());
    let again = parse_zygote_answer(&encode(&answer)).expect("a re-encoded answer parses");
    assert_eq!(again, answer);
});
