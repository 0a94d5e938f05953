//! Records: the immutable, typed, content-addressed atoms of agent memory.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use crate::ids::RecordId;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use sha2::{Digest, Sha256};

use crate::canonical::{canonical_json, record_hash, record_hash_from_canonical, sha256_hex};
pub use crate::content::{TextContent, ToolCallContent, ToolResultContent, ToolStatus};

/// Largest canonical content a record may carry (bytes). Records are memory, not blobs.
pub const MAX_CONTENT_BYTES: usize = 4 * 1024 * 1024;
/// Longest author id accepted.
pub const MAX_AUTHOR_BYTES: usize = 200;
/// Largest integer magnitude that survives RFC 8785 (IEEE-754 doubles) exactly.
const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Why a record (or its parts) was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum RecordError {
    /// The type is not one of the semantic record types.
    #[error("unknown record type {0:?} (known: {known})", known = RecordType::known_list())]
    UnknownType(String),
    /// The author id is empty, too long, or not of the form `kind:name`.
    #[error("invalid author id {0:?}: expected kind:name, e.g. user:oles or agent:hashi")]
    InvalidAuthor(String),
    /// The content does not fit the shape its record type requires.
    #[error("invalid content for {record_type}: {reason}")]
    InvalidContent {
        /// The record type whose shape was violated.
        record_type: RecordType,
        /// What was wrong.
        reason: String,
    },
    /// The content is larger than [`MAX_CONTENT_BYTES`].
    #[error("content is {0} bytes, larger than the {MAX_CONTENT_BYTES}-byte limit")]
    TooLarge(usize),
    /// A number cannot be hashed exactly under RFC 8785.
    #[error("number {0} is outside the exactly representable range (±2^53-1)")]
    UnsafeNumber(String),
    /// Serialization failed (should not happen for valid JSON values).
    #[error("cannot canonicalize: {0}")]
    Canonical(String),
    /// Stored content that is not JSON at all.
    #[error("content is not JSON: {0}")]
    NotJson(String),
}

macro_rules! record_types {
    ($($variant:ident => $name:literal, $doc:literal;)*) => {
        /// The semantic record types of DESIGN.md. Unknown types are refused.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
        pub enum RecordType {
            $(#[doc = $doc] #[serde(rename = $name)] $variant,)*
        }

        impl RecordType {
            /// Every known type, in declaration order.
            pub const ALL: &'static [RecordType] = &[$(RecordType::$variant,)*];

            /// The dotted wire name, e.g. `tool.call`.
            pub fn as_str(self) -> &'static str {
                match self { $(RecordType::$variant => $name,)* }
            }
        }

        impl FromStr for RecordType {
            type Err = RecordError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($name => Ok(RecordType::$variant),)*
                    other => Err(RecordError::UnknownType(other.to_owned())),
                }
            }
        }
    };
}

record_types! {
    TaskInstruction => "task.instruction", "What needs to be done (from a user or Minato).";
    TaskDeliverable => "task.deliverable", "A turn's final output.";
    AgentThought => "agent.thought", "Agent reasoning.";
    AgentPlan => "agent.plan", "A structured plan before execution.";
    ToolCall => "tool.call", "A tool invocation request.";
    ToolResult => "tool.result", "A tool invocation's outcome.";
    MemoryFact => "memory.fact", "Extracted knowledge.";
    MemoryDecision => "memory.decision", "An extracted decision.";
    SysContext => "sys.context", "A system context snapshot.";
    SysError => "sys.error", "An error or failure.";
    ApprovalRequest => "approval.request", "A tool call waiting for a policy or human decision.";
    ApprovalDecision => "approval.decision", "A policy or human decision on an approval request.";
    SessionFork => "session.fork", "The first record of a session forked from a sealed ledger: names its origin.";
    AuthorityWrit => "authority.writ", "A signed writ: bounded authority a person granted, or a holder delegated.";
    AuthorityRevocation => "authority.revocation", "A signed revocation of a writ and every writ delegated from it.";
    SysRedaction => "sys.redaction", "A signed redaction: a record's content erased, its leaf kept.";
    TaskRoute => "task.route", "Which role a request or plan step went to, and why.";
    TaskVerdict => "task.verdict", "A validator's verdict on a deliverable: pass or fail, and why.";
    ModelPrompt => "model.prompt", "What a model was sent for the answer that follows: the request's SHA-256, the frame it was built in, what was cut, what the answer cost.";
}

impl RecordType {
    fn known_list() -> String {
        Self::ALL
            .iter()
            .map(|t| t.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for RecordType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Typed views of record content. On disk content is always JSON.
#[derive(Debug, Clone, PartialEq)]
pub enum Content {
    /// `{"text": ..}`.
    Text(TextContent),
    /// Any JSON value.
    Json(Value),
    /// A tool call.
    ToolCall(ToolCallContent),
    /// A tool result.
    ToolResult(ToolResultContent),
}

impl Content {
    /// Shorthand for text content.
    pub fn text(text: impl Into<String>) -> Self {
        Content::Text(TextContent { text: text.into() })
    }

    /// The JSON value stored for this content.
    pub fn into_value(self) -> Value {
        // Serializing these plain structs to a Value cannot fail (string keys, no maps with
        // non-string keys); fall back to Null rather than panic if it ever did.
        match self {
            Content::Text(t) => serde_json::to_value(t).unwrap_or(Value::Null),
            Content::Json(v) => v,
            Content::ToolCall(c) => serde_json::to_value(c).unwrap_or(Value::Null),
            Content::ToolResult(r) => serde_json::to_value(r).unwrap_or(Value::Null),
        }
    }

    /// Reads `value` as the content of a record of type `record_type`, checking its shape.
    pub fn parse(record_type: RecordType, value: Value) -> Result<Content, RecordError> {
        check_shape(record_type, &value)?;
        let invalid = |reason: String| RecordError::InvalidContent {
            record_type,
            reason,
        };
        match record_type {
            RecordType::ToolCall => serde_json::from_value(value)
                .map(Content::ToolCall)
                .map_err(|e| invalid(e.to_string())),
            RecordType::ToolResult => serde_json::from_value(value)
                .map(Content::ToolResult)
                .map_err(|e| invalid(e.to_string())),
            _ => match value {
                Value::Object(ref map) if map.len() == 1 && map.contains_key("text") => {
                    match serde_json::from_value::<TextContent>(value.clone()) {
                        Ok(t) => Ok(Content::Text(t)),
                        Err(_) => Ok(Content::Json(value)),
                    }
                }
                other => Ok(Content::Json(other)),
            },
        }
    }
}

/// A record before it is stored: what the writer supplies.
#[derive(Debug, Clone, PartialEq)]
pub struct NewRecord {
    /// The semantic type.
    pub record_type: RecordType,
    /// The JSON content (shape checked by [`NewRecord::validate`]).
    pub content: Value,
    /// Who wrote it, `kind:name`.
    pub author_id: String,
    /// Free-form string annotations (not part of the content hash, but covered by the
    /// ledger's Merkle leaf, so tampering with them is still detected).
    pub metadata: BTreeMap<String, String>,
}

/// The parts of a validated record that get stored, in canonical form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CanonicalParts {
    /// The content address.
    pub hash: String,
    /// RFC 8785 text of the content.
    pub content: String,
    /// RFC 8785 text of the metadata object.
    pub metadata: String,
}

impl NewRecord {
    /// A record with no metadata.
    pub fn new(record_type: RecordType, content: Content, author_id: impl Into<String>) -> Self {
        NewRecord {
            record_type,
            content: content.into_value(),
            author_id: author_id.into(),
            metadata: BTreeMap::new(),
        }
    }

    /// Checks author, content shape, size and numbers; returns the canonical parts to store.
    pub fn validate(&self) -> Result<CanonicalParts, RecordError> {
        validate_author(&self.author_id)?;
        check_numbers(&self.content)?;
        check_shape(self.record_type, &self.content)?;
        let content =
            canonical_json(&self.content).map_err(|e| RecordError::Canonical(e.to_string()))?;
        if content.len() > MAX_CONTENT_BYTES {
            return Err(RecordError::TooLarge(content.len()));
        }
        let metadata = if self.metadata.is_empty() {
            "{}".to_owned()
        } else {
            canonical_json(&self.metadata).map_err(|e| RecordError::Canonical(e.to_string()))?
        };
        // The content is canonicalized once and hashed in place (same bytes as record_hash).
        let hash = record_hash_from_canonical(self.record_type.as_str(), &content, &self.author_id)
            .map_err(|e| RecordError::Canonical(e.to_string()))?;
        Ok(CanonicalParts {
            hash,
            content,
            metadata,
        })
    }
}

/// The shapes the store accepts, kept apart from the typed contents (which name more keys)
/// so that what a record may hold does not change when a writer's type grows.
mod shape {
    use serde::Deserialize;
    use serde_json::{Map, Value};

    use super::ToolStatus;

    /// A `tool.call`: a tool name and an object of arguments.
    #[derive(Deserialize)]
    pub(super) struct ToolCall {
        pub(super) tool_name: String,
        #[allow(dead_code)]
        arguments: Map<String, Value>,
        #[allow(dead_code)]
        #[serde(default)]
        call_id: Option<String>,
    }

    /// A `tool.result`: a status, and optionally a result, an error and a call id.
    #[derive(Deserialize)]
    #[allow(dead_code)]
    pub(super) struct ToolResult {
        status: ToolStatus,
        #[serde(default)]
        result: Option<Value>,
        #[serde(default)]
        error: Option<String>,
        #[serde(default)]
        call_id: Option<String>,
    }
}

/// Checks that content fits its type's shape, without copying it.
fn check_shape(record_type: RecordType, value: &Value) -> Result<(), RecordError> {
    let invalid = |reason: String| RecordError::InvalidContent {
        record_type,
        reason,
    };
    match record_type {
        RecordType::ToolCall => {
            let call = shape::ToolCall::deserialize(value).map_err(|e| invalid(e.to_string()))?;
            if call.tool_name.trim().is_empty() {
                return Err(invalid("tool_name is empty".into()));
            }
            Ok(())
        }
        RecordType::ToolResult => shape::ToolResult::deserialize(value)
            .map(|_| ())
            .map_err(|e| invalid(e.to_string())),
        _ => Ok(()),
    }
}

/// Checks an author id: `kind:name`, printable, no whitespace, at most 200 bytes.
pub fn validate_author(author: &str) -> Result<(), RecordError> {
    let bad = || RecordError::InvalidAuthor(author.to_owned());
    if author.is_empty() || author.len() > MAX_AUTHOR_BYTES {
        return Err(bad());
    }
    if author.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(bad());
    }
    match author.split_once(':') {
        Some((kind, name)) if !kind.is_empty() && !name.is_empty() => Ok(()),
        _ => Err(bad()),
    }
}

/// Refuses integers that RFC 8785 (which serializes numbers as IEEE doubles) would round,
/// since two different contents would then share one hash.
fn check_numbers(value: &Value) -> Result<(), RecordError> {
    match value {
        Value::Number(n) => {
            let safe = if let Some(u) = n.as_u64() {
                u <= MAX_SAFE_INTEGER
            } else if let Some(i) = n.as_i64() {
                i.unsigned_abs() <= MAX_SAFE_INTEGER
            } else {
                n.as_f64().is_some_and(f64::is_finite)
            };
            if safe {
                Ok(())
            } else {
                Err(RecordError::UnsafeNumber(n.to_string()))
            }
        }
        Value::Array(items) => items.iter().try_for_each(check_numbers),
        Value::Object(map) => map.values().try_for_each(check_numbers),
        _ => Ok(()),
    }
}

/// A stored record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// UUIDv7, time-sortable.
    pub record_id: RecordId,
    /// SHA-256 of the canonical (type, content, author): the content address.
    pub hash: String,
    /// The semantic type.
    pub record_type: RecordType,
    /// The JSON content.
    pub content: Value,
    /// Who wrote it.
    pub author_id: String,
    /// String annotations.
    pub metadata: BTreeMap<String, String>,
    /// RFC 3339 UTC time with microseconds, e.g. `2026-11-21T22:00:00.123456Z`.
    pub created_at: String,
}

/// The raw stored columns of one record, exactly as they sit in SQLite. The Merkle leaf is
/// computed from these bytes, so a change to any column — metadata and time included — is
/// caught by `verify` even when the content hash still matches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RecordColumns<'a> {
    /// `record_id` column.
    pub record_id: &'a str,
    /// `hash` column.
    pub hash: &'a str,
    /// `record_type` column.
    pub record_type: &'a str,
    /// `content` column (canonical JSON text).
    pub content: &'a str,
    /// `author_id` column.
    pub author_id: &'a str,
    /// `metadata` column (canonical JSON text).
    pub metadata: &'a str,
    /// `created_at` column.
    pub created_at: &'a str,
}

/// The leaf document: the seven columns with fields declared in RFC 8785 key order, so plain
/// compact `serde_json` output *is* the canonical form (serde_json escapes strings exactly as
/// RFC 8785 does; `leaf_bytes_are_rfc8785` checks this) — without the canonicalizer's sorting
/// cost on the hot append and verify paths.
#[derive(Serialize)]
struct LeafDoc<'a> {
    author_id: &'a str,
    content: &'a str,
    created_at: &'a str,
    hash: &'a str,
    metadata: &'a str,
    record_id: &'a str,
    record_type: &'a str,
}

impl RecordColumns<'_> {
    fn leaf_doc(&self) -> LeafDoc<'_> {
        LeafDoc {
            author_id: self.author_id,
            content: self.content,
            created_at: self.created_at,
            hash: self.hash,
            metadata: self.metadata,
            record_id: self.record_id,
            record_type: self.record_type,
        }
    }

    /// The unambiguous leaf bytes: RFC 8785 JSON of all seven columns as strings.
    pub fn leaf_bytes(&self) -> Vec<u8> {
        // A struct of string fields always serializes.
        serde_json::to_vec(&self.leaf_doc()).unwrap_or_default()
    }

    /// The RFC 6962 leaf hash, SHA-256(0x00 ‖ leaf bytes), computed without buffering.
    pub fn leaf_hash(&self) -> crate::merkle::Hash {
        // Serialized into one reused buffer and hashed in one go: serde_json writes a string
        // in many small pieces (around every escape), and feeding those to SHA-256 one by
        // one cost verify a fifth of its time.
        thread_local! {
            static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        BUF.with(|buf| {
            let mut buf = buf.borrow_mut();
            buf.clear();
            buf.push(0x00);
            // Writing into a Vec cannot fail.
            let _ = serde_json::to_writer(&mut *buf, &self.leaf_doc());
            let digest: crate::merkle::Hash = Sha256::digest(&buf[..]).into();
            if buf.capacity() > 1 << 20 {
                *buf = Vec::new();
            }
            digest
        })
    }

    /// True when the stored hash is the SHA-256 of the canonical (type, content, author)
    /// document assembled around the **raw** content bytes. No JSON is parsed: if the bytes
    /// were altered in any way (whitespace included), the hash no longer matches.
    pub fn hash_matches(&self) -> bool {
        crate::canonical::hex_matches(
            &crate::canonical::record_digest_from_canonical(
                self.record_type,
                self.content,
                self.author_id,
            ),
            self.hash,
        )
    }

    /// Recomputes the content hash from the raw `record_type`, `content` and `author_id`.
    pub fn recompute_hash(&self) -> Result<String, RecordError> {
        let content: Value =
            serde_json::from_str(self.content).map_err(|e| RecordError::NotJson(e.to_string()))?;
        record_hash(self.record_type, &content, self.author_id)
            .map_err(|e| RecordError::Canonical(e.to_string()))
    }

    /// A short fingerprint of the leaf, handy in reports.
    pub fn leaf_digest(&self) -> String {
        sha256_hex(&self.leaf_bytes())
    }
}

impl Record {
    /// The column view of this record as Kura stores it.
    pub fn to_columns(&self) -> Result<OwnedColumns, RecordError> {
        Ok(OwnedColumns {
            record_id: self.record_id.to_string(),
            hash: self.hash.clone(),
            record_type: self.record_type.as_str().to_owned(),
            content: canonical_json(&self.content)
                .map_err(|e| RecordError::Canonical(e.to_string()))?,
            author_id: self.author_id.clone(),
            metadata: canonical_json(&self.metadata)
                .map_err(|e| RecordError::Canonical(e.to_string()))?,
            created_at: self.created_at.clone(),
        })
    }
}

/// Owned form of [`RecordColumns`], e.g. for carrying a record inside a proof file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OwnedColumns {
    /// `record_id` column.
    pub record_id: String,
    /// `hash` column.
    pub hash: String,
    /// `record_type` column.
    pub record_type: String,
    /// `content` column.
    pub content: String,
    /// `author_id` column.
    pub author_id: String,
    /// `metadata` column.
    pub metadata: String,
    /// `created_at` column.
    pub created_at: String,
}

impl OwnedColumns {
    /// Borrowed view.
    pub fn as_columns(&self) -> RecordColumns<'_> {
        RecordColumns {
            record_id: &self.record_id,
            hash: &self.hash,
            record_type: &self.record_type,
            content: &self.content,
            author_id: &self.author_id,
            metadata: &self.metadata,
            created_at: &self.created_at,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn types_round_trip_and_unknown_is_refused() {
        for t in RecordType::ALL {
            assert_eq!(t.as_str().parse::<RecordType>(), Ok(*t));
        }
        assert_eq!(
            "task.bogus".parse::<RecordType>(),
            Err(RecordError::UnknownType("task.bogus".into()))
        );
    }

    #[test]
    fn tool_call_shape_is_checked() {
        let ok = NewRecord {
            record_type: RecordType::ToolCall,
            content: json!({"tool_name": "fs.read", "arguments": {"path": "a"}}),
            author_id: "agent:hashi".into(),
            metadata: BTreeMap::new(),
        };
        assert!(ok.validate().is_ok());
        let mut bad = ok.clone();
        bad.content = json!({"tool_name": "fs.read", "arguments": "a"});
        assert!(matches!(
            bad.validate(),
            Err(RecordError::InvalidContent { .. })
        ));
        bad.content = json!({"tool_name": " ", "arguments": {}});
        assert!(matches!(
            bad.validate(),
            Err(RecordError::InvalidContent { .. })
        ));
    }

    #[test]
    fn tool_result_status_is_checked() {
        let mut rec = NewRecord::new(
            RecordType::ToolResult,
            Content::ToolResult(ToolResultContent {
                call_id: None,
                ..ToolResultContent::unknown("worker died", "")
            }),
            "agent:hashi",
        );
        assert!(rec.validate().is_ok());
        rec.content = json!({"status": "maybe"});
        assert!(matches!(
            rec.validate(),
            Err(RecordError::InvalidContent { .. })
        ));
    }

    #[test]
    fn authors_are_checked() {
        for good in ["user:oles", "agent:hashi", "sys:aegis", "tool:github/x"] {
            assert!(validate_author(good).is_ok(), "{good}");
        }
        for bad in ["", "oles", ":x", "user:", "user: oles", "user:o\nles"] {
            assert!(validate_author(bad).is_err(), "{bad:?}");
        }
        assert!(validate_author(&format!("user:{}", "x".repeat(300))).is_err());
    }

    #[test]
    fn unsafe_integers_are_refused() {
        let rec = |v: Value| NewRecord {
            record_type: RecordType::MemoryFact,
            content: v,
            author_id: "agent:mikado".into(),
            metadata: BTreeMap::new(),
        };
        assert!(rec(json!({"n": 9007199254740991_u64})).validate().is_ok());
        assert!(matches!(
            rec(json!({"n": [9007199254740993_u64]})).validate(),
            Err(RecordError::UnsafeNumber(_))
        ));
        assert!(matches!(
            rec(json!({"n": -9007199254740993_i64})).validate(),
            Err(RecordError::UnsafeNumber(_))
        ));
    }

    #[test]
    fn oversized_content_is_refused() {
        let rec = NewRecord::new(
            RecordType::AgentThought,
            Content::text("x".repeat(MAX_CONTENT_BYTES)),
            "agent:bmo",
        );
        assert!(matches!(rec.validate(), Err(RecordError::TooLarge(_))));
    }

    #[test]
    fn leaf_covers_every_column() {
        let cols = RecordColumns {
            record_id: "r",
            hash: "h",
            record_type: "t",
            content: "{}",
            author_id: "a:b",
            metadata: "{}",
            created_at: "2026-01-01T00:00:00.000000Z",
        };
        let base = cols.leaf_bytes();
        let variants = [
            RecordColumns {
                record_id: "r2",
                ..cols
            },
            RecordColumns { hash: "h2", ..cols },
            RecordColumns {
                record_type: "t2",
                ..cols
            },
            RecordColumns {
                content: "{ }",
                ..cols
            },
            RecordColumns {
                author_id: "a:c",
                ..cols
            },
            RecordColumns {
                metadata: "{\"k\":\"v\"}",
                ..cols
            },
            RecordColumns {
                created_at: "2026-01-01T00:00:00.000001Z",
                ..cols
            },
        ];
        for v in variants {
            assert_ne!(v.leaf_bytes(), base, "{v:?}");
        }
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-(1i64 << 53) + 1..(1i64 << 53)).prop_map(|n| json!(n)),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(|f| json!(f)),
            ".{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(".{0,8}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// Re-serializes `value` with object keys reversed and arbitrary whitespace.
    fn scramble(value: &Value, ws: &str, out: &mut String) {
        match value {
            Value::Object(map) => {
                out.push('{');
                out.push_str(ws);
                let mut first = true;
                for (k, v) in map.iter().rev() {
                    if !first {
                        out.push(',');
                        out.push_str(ws);
                    }
                    first = false;
                    out.push_str(&serde_json::to_string(k).expect("key"));
                    out.push_str(ws);
                    out.push(':');
                    out.push_str(ws);
                    scramble(v, ws, out);
                }
                out.push_str(ws);
                out.push('}');
            }
            Value::Array(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(ws);
                    scramble(v, ws, out);
                }
                out.push_str(ws);
                out.push(']');
            }
            other => out.push_str(&other.to_string()),
        }
    }

    proptest! {
        #[test]
        fn leaf_bytes_are_rfc8785(cols in prop::collection::vec(any::<String>(), 7)) {
            let c = RecordColumns {
                record_id: &cols[0],
                hash: &cols[1],
                record_type: &cols[2],
                content: &cols[3],
                author_id: &cols[4],
                metadata: &cols[5],
                created_at: &cols[6],
            };
            let canonical = serde_json_canonicalizer::to_vec(&c).expect("canonicalizes");
            prop_assert_eq!(c.leaf_bytes(), canonical.clone());
            prop_assert_eq!(c.leaf_hash(), crate::merkle::leaf_hash(&canonical));
        }

        #[test]
        fn key_order_and_whitespace_never_change_the_hash(
            v in arb_json(),
            ws in prop::sample::select(vec!["", " ", "\n", "\t  ", "\r\n "]),
        ) {
            let mut text = String::new();
            scramble(&v, ws, &mut text);
            let reparsed: Value = serde_json::from_str(&text).expect("scrambled JSON parses");
            let a = record_hash("memory.fact", &v, "agent:x").expect("hash");
            let b = record_hash("memory.fact", &reparsed, "agent:x").expect("hash");
            prop_assert_eq!(a, b);
        }

        #[test]
        fn validate_hashes_exactly_like_record_hash(v in arb_json(), author in "[a-z]{1,8}:[a-z0-9]{1,8}") {
            let new = NewRecord {
                record_type: RecordType::MemoryFact,
                content: v.clone(),
                author_id: author.clone(),
                metadata: BTreeMap::new(),
            };
            if let Ok(parts) = new.validate() {
                prop_assert_eq!(parts.hash, record_hash("memory.fact", &v, &author).expect("hash"));
                prop_assert_eq!(parts.metadata, "{}");
            }
        }

        #[test]
        fn different_content_gives_different_hash(a in arb_json(), b in arb_json()) {
            let ca = canonical_json(&a).expect("canon");
            let cb = canonical_json(&b).expect("canon");
            prop_assume!(ca != cb);
            prop_assert_ne!(
                record_hash("memory.fact", &a, "agent:x").expect("hash"),
                record_hash("memory.fact", &b, "agent:x").expect("hash")
            );
        }
    }
}
