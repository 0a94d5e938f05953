//! Canonical JSON hashing: any JSON text. Canonicalizing never panics, is idempotent, and
//! the record hash over the canonical bytes equals the hash of the parsed value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::canonical::{canonical_json, record_hash, record_hash_from_canonical};

fuzz_target!(|data: &[u8]| {
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    let Ok(canonical) = canonical_json(&value) else {
        return;
    };
    let reparsed: serde_json::Value =
        serde_json::from_str(&canonical).expect("canonical output is JSON");
    let again = canonical_json(&reparsed).expect("canonicalizes again");
    assert_eq!(canonical, again, "canonicalization is not idempotent");
    let a = record_hash("memory.fact", &value, "agent:fuzz").expect("hash");
    let b = record_hash_from_canonical("memory.fact", &canonical, "agent:fuzz").expect("hash");
    assert_eq!(
        a, b,
        "hash over canonical bytes differs from hash of the value"
    );
});
