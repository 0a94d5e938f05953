//! The `records.hash` column: the content hash's 32 bytes inside SQLite, lowercase hex
//! everywhere else (records, leaves, proofs, the CLI and the wire).

use std::borrow::Cow;

use rusqlite::types::ValueRef;

/// The bytes to store, or to look up, for a hex content hash; `None` when `hex` is not one
/// (64 lowercase hex digits), so a lookup by a malformed hash finds nothing.
pub fn to_column(hex: &str) -> Option<[u8; 32]> {
    if hex.len() != 64 || hex.bytes().any(|b| b.is_ascii_uppercase()) {
        return None;
    }
    let mut out = [0u8; 32];
    hex::decode_to_slice(hex, &mut out).ok()?;
    Some(out)
}

/// The hex form of a stored hash column, encoded into `buf` without a heap allocation in
/// the normal case (a 32-byte BLOB). Any other stored value — only a tampered file holds
/// one — becomes a text that no SHA-256 hex equals, so `verify` reports the record rather
/// than reading a TEXT hash that happens to spell the right digits as the real thing.
pub(crate) fn render<'b>(value: ValueRef<'_>, buf: &'b mut [u8; 64]) -> Cow<'b, str> {
    match value {
        ValueRef::Blob(b) if b.len() == 32 => {
            // The buffer is exactly twice the input; hex digits are ASCII.
            let _ = hex::encode_to_slice(b, &mut buf[..]);
            Cow::Borrowed(std::str::from_utf8(&buf[..]).unwrap_or_default())
        }
        ValueRef::Blob(b) => Cow::Owned(format!("blob:{}", hex::encode(b))),
        ValueRef::Text(t) => Cow::Owned(format!("text:{}", String::from_utf8_lossy(t))),
        ValueRef::Integer(n) => Cow::Owned(format!("integer:{n}")),
        ValueRef::Real(x) => Cow::Owned(format!("real:{x}")),
        ValueRef::Null => Cow::Borrowed(""),
    }
}

/// [`render`] into an owned string.
pub(crate) fn to_hex(value: ValueRef<'_>) -> String {
    render(value, &mut [0u8; 64]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hash_round_trips_through_its_column() {
        let hex = proto::canonical::sha256_hex(b"kura");
        let col = to_column(&hex).expect("a hash");
        assert_eq!(to_hex(ValueRef::Blob(&col)), hex);
    }

    #[test]
    fn only_lowercase_64_digit_hex_is_a_column() {
        let hex = proto::canonical::sha256_hex(b"kura");
        assert!(to_column(&hex.to_uppercase()).is_none());
        assert!(to_column(&hex[..62]).is_none());
        assert!(to_column(&format!("{}zz", &hex[..62])).is_none());
    }

    #[test]
    fn a_stored_value_of_another_form_never_reads_as_a_hash() {
        let hex = proto::canonical::sha256_hex(b"kura");
        for v in [
            ValueRef::Text(hex.as_bytes()),
            ValueRef::Blob(&[1u8; 31]),
            ValueRef::Null,
            ValueRef::Integer(7),
        ] {
            let shown = to_hex(v);
            assert_ne!(shown, hex);
            assert!(to_column(&shown).is_none(), "{shown}");
        }
    }
}
