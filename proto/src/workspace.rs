//! A workspace's content address as records carry it: git tree and blob ids (SHA-1, as git
//! writes them), and what a side-effecting call changed on disk.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::record::RecordType;

/// The workspace change a record attests, read in this one place: a side effect's
/// `tool.result` (its tree before and after), or a fork from another Pi's replica (the tree
/// it starts from, as both).
pub fn change_of(record_type: RecordType, content: &Value) -> Option<WorkspaceChange> {
    match record_type {
        RecordType::ToolResult => crate::content::ToolResultContent::read(content)?.workspace,
        RecordType::SessionFork => {
            let tree = ObjectId::parse(content.get("workspace")?.as_str()?).ok()?;
            Some(WorkspaceChange {
                before: tree.clone(),
                after: tree,
                unstored: Vec::new(),
                skipped: Vec::new(),
                matched: None,
            })
        }
        _ => None,
    }
}

/// A git object id: 40 lowercase hex digits (SHA-1 over git's object encoding), so
/// `git cat-file` on the same files names the same object.
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ObjectId(String);

/// Why text is not an object id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0:?} is not a git object id (40 lowercase hex digits)")]
pub struct NotAnObjectId(pub String);

impl ObjectId {
    /// The id of `text`, if it is one.
    pub fn parse(text: &str) -> Result<ObjectId, NotAnObjectId> {
        let ok = text.len() == 40 && text.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
        if ok {
            Ok(ObjectId(text.to_owned()))
        } else {
            Err(NotAnObjectId(text.chars().take(80).collect()))
        }
    }

    /// The hex text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The tree of an empty workspace (git's empty tree).
    pub fn empty_tree() -> ObjectId {
        ObjectId("4b825dc642cb6eb9a060e54bf8d69288fbee4904".into())
    }
}

impl TryFrom<String> for ObjectId {
    type Error = NotAnObjectId;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        ObjectId::parse(&s)
    }
}

impl From<ObjectId> for String {
    fn from(o: ObjectId) -> String {
        o.0
    }
}

impl std::fmt::Display for ObjectId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::fmt::Debug for ObjectId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&self.0, f)
    }
}

/// What a side-effecting call did to its session's workspace, attested: the tree before it
/// ran and after. Every object both name is in the object store (written before the record),
/// except the files listed as not stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkspaceChange {
    /// The workspace's tree just before the call ran.
    pub before: ObjectId,
    /// Its tree just after.
    pub after: ObjectId,
    /// Files named in `after` whose bytes were not stored (larger than `[objects]
    /// max_file_bytes`): their path, size and blob id.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unstored: Vec<Unstored>,
    /// What the tree after leaves out, and why (`path: why`): a directory nested too deep
    /// or unreadable, a file too large to hash, past the entry bound.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
    /// A replay that served a recorded result: whether the workspace before it matched the
    /// recorded `before` (false: the replay's files had diverged from the record's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matched: Option<bool>,
}

/// A file a tree names but the object store does not hold.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Unstored {
    /// Its path in the workspace.
    pub path: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Its blob id.
    pub blob: ObjectId,
}

#[cfg(feature = "schema")]
impl schemars::JsonSchema for ObjectId {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "ObjectId".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "pattern": "^[0-9a-f]{40}$",
            "description": "a git object id (a workspace tree)"
        })
    }
}
