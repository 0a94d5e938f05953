//! UUIDv7 identifiers: time-sortable, so id order is creation order.

use uuid::Uuid;

/// A fresh UUIDv7. Within one process, ids are strictly increasing.
pub fn new_id() -> Uuid {
    Uuid::now_v7()
}

/// Parses a textual id, accepting only the hyphenated form Kura writes.
pub fn parse_id(text: &str) -> Option<Uuid> {
    if text.len() != 36 {
        return None;
    }
    Uuid::try_parse(text).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_v7_and_increasing() {
        let a = new_id();
        let b = new_id();
        assert_eq!(a.get_version_num(), 7);
        assert!(b > a, "{b} should sort after {a}");
    }

    #[test]
    fn parse_rejects_other_forms() {
        let id = new_id();
        assert_eq!(parse_id(&id.to_string()), Some(id));
        assert_eq!(parse_id(&id.simple().to_string()), None);
        assert_eq!(parse_id("not-an-id"), None);
    }
}
