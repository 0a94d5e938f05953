//! Canonical bytes (RFC 8785 JSON Canonicalization Scheme) and SHA-256, the basis of every hash.

use serde::Serialize;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// RFC 8785 canonical JSON text of any serializable value.
pub fn canonical_json<T: Serialize>(value: &T) -> Result<String, serde_json::Error> {
    serde_json_canonicalizer::to_string(value)
}

/// Lower-case hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    to_hex(&Sha256::digest(bytes))
}

/// Lowercase hex, in one pass over a buffer (`hex::encode` builds its string a char at a
/// time, which shows up when verify hashes 100 000 records).
pub fn to_hex(bytes: &[u8]) -> String {
    let mut buf = vec![0u8; bytes.len() * 2];
    // The buffer is exactly twice the input, so this cannot fail; hex digits are ASCII.
    let _ = hex::encode_to_slice(bytes, &mut buf);
    String::from_utf8(buf).unwrap_or_default()
}

/// The content address of a record: SHA-256 over the RFC 8785 form of
/// `{"author_id": .., "content": .., "record_type": ..}`. Key order and whitespace of the
/// input never matter; any change to type, content or author does.
pub fn record_hash(
    record_type: &str,
    content: &Value,
    author_id: &str,
) -> Result<String, serde_json::Error> {
    let doc = json!({
        "author_id": author_id,
        "content": content,
        "record_type": record_type,
    });
    let bytes = serde_json_canonicalizer::to_vec(&doc)?;
    Ok(sha256_hex(&bytes))
}

/// [`record_hash`] for content that is already in RFC 8785 form (as Kura stores it), without
/// re-parsing it: the canonical object is assembled around the canonical content text.
pub fn record_hash_from_canonical(
    record_type: &str,
    canonical_content: &str,
    author_id: &str,
) -> Result<String, serde_json::Error> {
    Ok(to_hex(&record_digest_from_canonical(
        record_type,
        canonical_content,
        author_id,
    )))
}

/// [`record_hash_from_canonical`] as raw bytes, assembled in a reused buffer: verify computes
/// it for every record, and a fresh `String` per field showed up beside SHA-256 itself.
/// serde_json escapes a string exactly as RFC 8785 does (`strings_escape_as_rfc8785` checks).
pub fn record_digest_from_canonical(
    record_type: &str,
    canonical_content: &str,
    author_id: &str,
) -> [u8; 32] {
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    BUF.with(|buf| {
        let mut buf = buf.borrow_mut();
        buf.clear();
        buf.extend_from_slice(b"{\"author_id\":");
        // Writing a string into a Vec cannot fail.
        let _ = serde_json::to_writer(&mut *buf, author_id);
        buf.extend_from_slice(b",\"content\":");
        buf.extend_from_slice(canonical_content.as_bytes());
        buf.extend_from_slice(b",\"record_type\":");
        let _ = serde_json::to_writer(&mut *buf, record_type);
        buf.push(b'}');
        let digest = Sha256::digest(&buf[..]).into();
        if buf.capacity() > 1 << 20 {
            *buf = Vec::new();
        }
        digest
    })
}

/// True when `hex` is exactly the lowercase hex of `bytes` (compared without allocating).
pub fn hex_matches(bytes: &[u8], hex: &str) -> bool {
    let mut buf = [0u8; 64];
    bytes.len() <= 32
        && bytes.len() * 2 == hex.len()
        && hex::encode_to_slice(bytes, &mut buf[..bytes.len() * 2]).is_ok()
        && buf[..bytes.len() * 2] == *hex.as_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(text: &str) -> String {
        let value: Value = serde_json::from_str(text).expect("test JSON parses");
        canonical_json(&value).expect("canonicalizes")
    }

    /// RFC 8785 section 3.2.2: the whole-document example.
    #[test]
    fn rfc8785_example_3_2_2() {
        let input = r#"{
          "numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
          "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
          "literals": [null, true, false]
        }"#;
        let expected = "{\"literals\":[null,true,false],\"numbers\":[333333333.3333333,1e+30,4.5,0.002,1e-27],\"string\":\"€$\\u000f\\nA'B\\\"\\\\\\\\\\\"/\"}";
        assert_eq!(canon(input), expected);
    }

    /// RFC 8785 section 3.2.3: property sorting by UTF-16 code units.
    #[test]
    fn rfc8785_example_3_2_3_sorting() {
        let input = r#"{
          "\u20ac": "Euro Sign",
          "\r": "Carriage Return",
          "\ufb33": "Hebrew Letter Dalet With Dagesh",
          "1": "One",
          "\ud83d\ude00": "Emoji: Grinning Face",
          "\u0080": "Control",
          "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        let expected = "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}";
        assert_eq!(canon(input), expected);
    }

    /// RFC 8785 appendix B: number serialization samples (ECMAScript rules).
    #[test]
    fn rfc8785_appendix_b_numbers() {
        let cases = [
            ("0", "0"),
            ("-0", "0"),
            ("1e21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("5e-324", "5e-324"),
            ("1.7976931348623157e308", "1.7976931348623157e+308"),
            ("9007199254740992", "9007199254740992"),
            ("-9007199254740992", "-9007199254740992"),
            ("0.000001", "0.000001"),
            ("0.0000001", "1e-7"),
            ("295147905179352830000", "295147905179352830000"),
            ("1.0", "1"),
            ("333333333.3333332", "333333333.3333332"),
        ];
        for (input, expected) in cases {
            assert_eq!(canon(input), expected, "number {input}");
        }
    }

    #[test]
    fn record_hash_is_stable_and_sensitive() {
        let content = json!({"text": "hello"});
        let h = record_hash("agent.thought", &content, "agent:bmo").expect("hash");
        assert_eq!(h.len(), 64);
        assert_eq!(
            h,
            record_hash("agent.thought", &json!({"text": "hello"}), "agent:bmo").expect("hash")
        );
        assert_ne!(
            h,
            record_hash("agent.plan", &content, "agent:bmo").expect("hash")
        );
        assert_ne!(
            h,
            record_hash("agent.thought", &content, "agent:bmp").expect("hash")
        );
        assert_ne!(
            h,
            record_hash("agent.thought", &json!({"text": "hello!"}), "agent:bmo").expect("hash")
        );
    }

    #[test]
    fn hash_from_canonical_matches_full_hash() {
        let content = json!({"b": [1, 2.5, "x\u{1}"], "a": {"z": null, "é": true}});
        let canonical = canonical_json(&content).expect("canon");
        assert_eq!(
            record_hash_from_canonical("memory.fact", &canonical, "user:\"q\"").expect("hash"),
            record_hash("memory.fact", &content, "user:\"q\"").expect("hash")
        );
    }

    #[test]
    fn strings_escape_as_rfc8785() {
        for text in [
            "plain",
            "q\"uote\\back/slash",
            "\u{0}\u{1}\u{8}\t\n\u{b}\u{c}\r\u{1f}\u{7f}",
            "é€😀\u{2028}\u{2029}\u{fffd}",
        ] {
            let ours = serde_json::to_string(text).expect("json");
            assert_eq!(ours, canonical_json(&text).expect("canon"), "{text:?}");
            let content = json!({"t": text});
            let canonical = canonical_json(&content).expect("canon");
            assert_eq!(
                record_hash_from_canonical(text, &canonical, text).expect("hash"),
                record_hash(text, &content, text).expect("hash")
            );
        }
    }

    #[test]
    fn hex_matches_only_the_exact_lowercase_hex() {
        let d = [0xabu8, 0x01, 0xff];
        assert!(hex_matches(&d, "ab01ff"));
        assert!(!hex_matches(&d, "AB01FF"));
        assert!(!hex_matches(&d, "ab01f"));
        assert!(!hex_matches(&d, "ab01ff00"));
        assert!(!hex_matches(&[0u8; 33], &"00".repeat(33)));
    }

    /// String concatenation would make these two collide; canonical JSON does not.
    #[test]
    fn no_concatenation_ambiguity() {
        let a = record_hash("a.b", &json!("c"), "x:y").expect("hash");
        let b = record_hash("a.bc", &json!(""), "x:y").expect("hash");
        assert_ne!(a, b);
    }
}
