//! What mikado extracts from a `task.deliverable`:
//! - JSON deliverables: a `facts` and a `decisions` list, each item a string or
//!   `{"text": "...", "supersedes": "<earlier decision text or record id>"}`;
//! - text deliverables: lines starting with `FACT:` or `DECISION:` (any case, optionally
//!   after a `- ` or `* ` bullet).

use kura_memory::Item;
use proto::record::RecordType;
use serde_json::Value;

fn items_from(list: Option<&Value>, kind: RecordType) -> Vec<Item> {
    let Some(Value::Array(list)) = list else {
        return vec![];
    };
    list.iter()
        .filter_map(|v| match v {
            Value::String(s) => Some(Item {
                kind,
                text: s.trim().to_owned(),
                supersedes: None,
            }),
            Value::Object(o) => o.get("text").and_then(Value::as_str).map(|t| Item {
                kind,
                text: t.trim().to_owned(),
                supersedes: o
                    .get("supersedes")
                    .and_then(Value::as_str)
                    .map(str::to_owned),
            }),
            _ => None,
        })
        .filter(|i| !i.text.is_empty())
        .collect()
}

/// Marked `FACT:` / `DECISION:` lines in text.
pub fn marked_lines(text: &str) -> Vec<Item> {
    let mut out = Vec::new();
    for line in text.lines() {
        let l = line.trim().trim_start_matches(['-', '*']).trim_start();
        let lower = l.to_ascii_lowercase();
        let (kind, rest) = if lower.starts_with("fact:") {
            (RecordType::MemoryFact, &l[5..])
        } else if lower.starts_with("decision:") {
            (RecordType::MemoryDecision, &l[9..])
        } else {
            continue;
        };
        let text = rest.trim();
        if !text.is_empty() {
            out.push(Item {
                kind,
                text: text.to_owned(),
                supersedes: None,
            });
        }
    }
    out
}

/// Everything extractable from a deliverable's content.
pub fn from_deliverable(content: &Value) -> Vec<Item> {
    let mut out = items_from(content.get("facts"), RecordType::MemoryFact);
    out.extend(items_from(
        content.get("decisions"),
        RecordType::MemoryDecision,
    ));
    if let Some(t) = proto::content::text_of(content) {
        out.extend(marked_lines(t));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_deliverable_forms_are_read() {
        let items = from_deliverable(&json!({
            "text": "Summary.\nFACT: the Pi has 4 GB of RAM\n- decision: use SQLite\nnot a fact",
            "facts": ["water boils at 100 C", {"text": "  "}],
            "decisions": [{"text": "use WAL", "supersedes": "use rollback journal"}]
        }));
        let got: Vec<(RecordType, &str, Option<&str>)> = items
            .iter()
            .map(|i| (i.kind, i.text.as_str(), i.supersedes.as_deref()))
            .collect();
        assert_eq!(
            got,
            [
                (RecordType::MemoryFact, "water boils at 100 C", None),
                (
                    RecordType::MemoryDecision,
                    "use WAL",
                    Some("use rollback journal")
                ),
                (RecordType::MemoryFact, "the Pi has 4 GB of RAM", None),
                (RecordType::MemoryDecision, "use SQLite", None),
            ]
        );
    }
}
