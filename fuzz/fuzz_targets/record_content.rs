//! Record content parsing and the checks verify runs on raw columns: any bytes as a record
//! type, author and content. Validation never panics; what validates hashes consistently;
//! raw columns (as a tampered database could hold them) never make the checks panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use proto::record::{Content, NewRecord, RecordColumns, RecordType};

fuzz_target!(|data: &[u8]| {
    let Some((&kind, rest)) = data.split_first() else {
        return;
    };
    let text = String::from_utf8_lossy(rest);
    let (author, content) = text.split_once('\n').unwrap_or(("agent:fuzz", &text));
    let record_type = RecordType::ALL[usize::from(kind) % RecordType::ALL.len()];

    if let Ok(value) = serde_json::from_str::<serde_json::Value>(content) {
        let _ = Content::parse(record_type, value.clone());
        let new = NewRecord {
            record_type,
            content: value,
            author_id: author.to_owned(),
            metadata: Default::default(),
        };
        if let Ok(parts) = new.validate() {
            let cols = RecordColumns {
                record_id: "01900000-0000-7000-8000-000000000000",
                hash: &parts.hash,
                record_type: record_type.as_str(),
                content: &parts.content,
                author_id: author,
                metadata: &parts.metadata,
                created_at: "2026-01-01T00:00:00.000000Z",
            };
            assert!(
                cols.hash_matches(),
                "a validated record fails its own hash check"
            );
            assert_eq!(cols.recompute_hash().as_deref(), Ok(parts.hash.as_str()));
        }
    }
    // Raw, possibly tampered columns: verify's checks must report, never panic.
    let parts: Vec<&str> = text.splitn(7, '\u{1f}').collect();
    let get = |i: usize| parts.get(i).copied().unwrap_or("");
    let cols = RecordColumns {
        record_id: get(0),
        hash: get(1),
        record_type: get(2),
        content: get(3),
        author_id: get(4),
        metadata: get(5),
        created_at: get(6),
    };
    let _ = cols.hash_matches();
    let _ = cols.recompute_hash();
    let _ = cols.leaf_hash();
    let _ = cols.leaf_bytes();
    let _ = get(2).parse::<RecordType>();
});
