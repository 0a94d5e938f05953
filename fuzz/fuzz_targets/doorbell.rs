//! Doorbell parser: any bytes, every message type. Parsing must never panic, the size cap
//! holds, and whatever parses re-encodes to bytes that parse to the same message.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::doorbell::{
    self, ApprovalDecision, MAX_DOORBELL_BYTES, PendingQuery, RecordWritten, SessionComplete,
    SessionCreate, ToolApprove, WorkerComplete, WorkerDispatch,
};
use serde::Serialize;
use serde::de::DeserializeOwned;

fn round_trip<T: DeserializeOwned + Serialize + PartialEq + std::fmt::Debug>(data: &[u8]) {
    if let Ok(msg) = doorbell::parse::<T>(data) {
        assert!(data.len() <= MAX_DOORBELL_BYTES, "cap not enforced");
        // What parsed within the cap always encodes within the cap (encoding is compact).
        let bytes = doorbell::encode(&msg).expect("re-encode");
        let again: T = doorbell::parse(&bytes).expect("re-parse");
        assert_eq!(msg, again);
    }
}

fuzz_target!(|data: &[u8]| {
    round_trip::<SessionCreate>(data);
    round_trip::<WorkerDispatch>(data);
    round_trip::<WorkerComplete>(data);
    round_trip::<SessionComplete>(data);
    round_trip::<RecordWritten>(data);
    round_trip::<ToolApprove>(data);
    round_trip::<PendingQuery>(data);
    round_trip::<ApprovalDecision>(data);
    if let Ok(d) = doorbell::parse::<ApprovalDecision>(data) {
        let _ = d.signing_bytes("00");
    }
});
