//! Bounded tool output: whatever a tool produces becomes a JSON value that fits in a record
//! after escaping, and says how big the whole was and what its SHA-256 is, so a huge or
//! binary output can never make a turn unstorable.

use std::io::Read;

use base64::Engine as _;
pub use kura_model::bounded::excerpt;
use proto::content::{OversizedResult, RecordedOutput, to_json};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

/// Bytes of one output kept in full; more is cut to this and marked.
pub const KEEP_BYTES: usize = 64 * 1024;

/// Bytes of a binary output kept, as base64.
const KEEP_BINARY: usize = 4 * 1024;

/// Everything a reader produced: its first [`KEEP_BYTES`] bytes, its full size and digest.
#[derive(Debug, Default)]
pub struct Captured {
    /// The first bytes.
    pub head: Vec<u8>,
    /// Every byte read.
    pub total: u64,
    /// SHA-256 of every byte read, hex.
    pub sha256: String,
}

/// Reads `r` to its end (so a writer never blocks on a full pipe), keeping the head.
pub fn capture(mut r: impl Read, keep: usize) -> std::io::Result<Captured> {
    let mut hasher = Sha256::new();
    let mut head = Vec::new();
    let mut total = 0u64;
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match r.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        hasher.update(&buf[..n]);
        total += n as u64;
        if head.len() < keep {
            let take = n.min(keep - head.len());
            head.extend_from_slice(&buf[..take]);
        }
    }
    Ok(Captured {
        head,
        total,
        sha256: hex::encode(hasher.finalize()),
    })
}

impl Captured {
    /// The output as fields of a result, under `name`: `name` holds the text (all of it, or
    /// its head); a cut output adds `name_truncated`, `name_bytes` (the full size) and
    /// `name_sha256`; binary output leaves `name` empty and adds `name_binary` and
    /// `name_base64` (its first 4 KiB).
    pub fn fields(&self, name: &str, into: &mut Map<String, Value>) {
        let cut = self.total > self.head.len() as u64;
        let text = match std::str::from_utf8(&self.head) {
            Ok(t) => Some(t),
            // A cut in the middle of a character is still text.
            Err(e) if cut && e.error_len().is_none() => {
                std::str::from_utf8(&self.head[..e.valid_up_to()]).ok()
            }
            Err(_) => None,
        };
        let mut out = RecordedOutput::default();
        match text {
            Some(t) => {
                out.truncated = cut;
                out.text = t.to_owned();
            }
            None => {
                let head = &self.head[..self.head.len().min(KEEP_BINARY)];
                out.binary = true;
                out.base64 = Some(base64::engine::general_purpose::STANDARD.encode(head));
                out.truncated = self.total > head.len() as u64;
            }
        }
        if cut || text.is_none() {
            out.bytes = Some(self.total);
            out.sha256 = Some(self.sha256.clone());
        }
        out.insert_into(name, into);
    }
}

/// A tool result too big for a record (after JSON escaping), replaced by what identifies it.
pub fn fit(value: Value, max: usize) -> Value {
    let text = value.to_string();
    if text.len() <= max {
        return value;
    }
    let digest = hex::encode(Sha256::digest(text.as_bytes()));
    to_json(&OversizedResult {
        truncated: true,
        bytes: text.len() as u64,
        sha256: digest,
        // A quarter: escaping the JSON excerpt again at most doubles it.
        excerpt: excerpt(&text, (max / 4).min(KEEP_BINARY)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(c: &Captured) -> Value {
        let mut m = Map::new();
        c.fields("out", &mut m);
        Value::Object(m)
    }

    #[test]
    fn text_binary_and_cut_outputs() {
        let whole = capture(&b"hello"[..], 16).expect("capture");
        assert_eq!(fields(&whole), json!({"out": "hello"}));

        let cut = fields(&capture(&b"hello world"[..], 5).expect("capture"));
        assert_eq!(cut["out"], "hello");
        assert_eq!(cut["out_truncated"], true);
        assert_eq!(cut["out_bytes"], 11);
        assert_eq!(
            cut["out_sha256"],
            hex::encode(Sha256::digest(b"hello world")),
            "the digest covers the whole output"
        );

        // "é" is two bytes: a cut between them is still text.
        let mid = fields(&capture("aé".as_bytes(), 2).expect("capture"));
        assert_eq!(mid["out"], "a");

        let binary = fields(&capture(&[0u8, 159, 146, 150, 255][..], 16).expect("capture"));
        assert_eq!(binary["out_binary"], true);
        assert_eq!(binary["out_base64"], "AJ+Slv8=");
        assert_eq!(binary["out"], "");
        assert_eq!(binary["out_bytes"], 5);
    }

    #[test]
    fn fit_replaces_what_is_too_big() {
        let small = json!({"a": 1});
        assert_eq!(fit(small.clone(), 100), small);
        let big = json!({"text": "\u{1}".repeat(1000)});
        let size = big.to_string().len();
        let v = fit(big, 512);
        assert_eq!(v["truncated"], true);
        assert!(v.to_string().len() <= 512, "{} bytes", v.to_string().len());
        assert_eq!(v["bytes"], size);
    }
}
