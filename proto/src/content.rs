//! Typed record contents: the JSON each record type carries, as serde structs that every
//! writer and reader shares. Each serializes to exactly the JSON value the daemons wrote
//! before (same keys, absent vs `null` as before), so content hashes stay byte-identical.

use crate::ids::{CallId, LedgerId, RecordId, RequestId, SessionId, TurnId};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::states::{Effect, Outcome, Vote};

fn is_false(b: &bool) -> bool {
    !*b
}

/// A present key deserializes to `Some`, even when its value is `null` (a tool may return
/// `null`; the record says so), an absent key to `None` (with `#[serde(default)]`).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

/// The content as the JSON value a record stores. Plain structs with string keys always
/// serialize; `Null` is the never-taken fallback rather than a panic.
fn to_value<T: Serialize>(content: &T) -> Value {
    serde_json::to_value(content).unwrap_or(Value::Null)
}

/// Plain text content: `{"text": "..."}` (`agent.thought`, `sys.error`, instructions).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TextContent {
    /// The text itself.
    pub text: String,
}

impl TextContent {
    /// Text content.
    pub fn new(text: impl Into<String>) -> Self {
        TextContent { text: text.into() }
    }

    /// The JSON value a record stores.
    pub fn to_value(&self) -> Value {
        to_value(self)
    }
}

/// What a `tool.call` too big to record keeps of its arguments: their size and digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OmittedArguments {
    /// Bytes of the call as JSON.
    pub bytes: u64,
    /// Hex SHA-256 of the call as JSON.
    pub sha256: String,
}

/// Content of a `tool.call` record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCallContent {
    /// Which tool, e.g. `fs.write`.
    pub tool_name: String,
    /// The tool's arguments, always a JSON object (normal form, as the tool sees them).
    pub arguments: Map<String, Value>,
    /// A caller-chosen id pairing this call with its result, when the caller has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<CallId>,
    /// The arguments as the model spelled them, when normalising changed them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_as_given: Option<Map<String, Value>>,
    /// Set (and `arguments` empty) when the call was too big to record; it was not run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_omitted: Option<OmittedArguments>,
    /// The writ the call runs under (its id), when its session or submitter holds one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub writ: Option<String>,
    /// Why the call could not run as the model wrote it (no name, arguments that were not
    /// a JSON object): recorded so the model is told, and so a replay tells it the same
    /// rather than running it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub malformed: Option<String>,
    /// A call that ran without being declared to Kura first (the agent's PreToolUse hook was
    /// missing, killed or timed out): how it was noticed. Nobody ruled on it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ungated: Option<String>,
    /// A call read from an agent's transcript after the fact (`kura hook import`): where
    /// from. Nobody ruled on it when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub imported: Option<String>,
}

impl ToolCallContent {
    /// A call of `tool_name` with `arguments`, paired by `call_id`.
    pub fn new(
        tool_name: impl Into<String>,
        arguments: Map<String, Value>,
        call_id: impl Into<CallId>,
    ) -> Self {
        ToolCallContent {
            tool_name: tool_name.into(),
            arguments,
            call_id: Some(call_id.into()),
            arguments_as_given: None,
            arguments_omitted: None,
            writ: None,
            malformed: None,
            ungated: None,
            imported: None,
        }
    }

    /// Reads a stored `tool.call` content; `None` when it does not have this shape.
    pub fn read(content: &Value) -> Option<Self> {
        Self::deserialize(content).ok()
    }

    /// The JSON value a record stores.
    pub fn to_value(&self) -> Value {
        to_value(self)
    }
}

/// How a tool call ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolStatus {
    /// The tool ran and succeeded.
    Success,
    /// The tool ran, or was refused, and failed.
    Error,
    /// Nobody knows whether the side effect happened (e.g. the worker died mid-call).
    Unknown,
}

/// A re-run's mark on its result: the approval it ran under.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Rerun {
    /// The `approval.request` record the re-run was approved by.
    pub approval_request: RequestId,
}

/// Content of a `tool.result` record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResultContent {
    /// The outcome.
    pub status: ToolStatus,
    /// What the tool returned, if anything (`Some(Null)` when it returned `null`).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub result: Option<Value>,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The `call_id` of the `tool.call` this answers, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub call_id: Option<CallId>,
    /// A replay's served result: the recorded `tool.result` it repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replayed: Option<RecordId>,
    /// What ran instead of the call the model asked for: arguments people edited.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments_edited: Option<Map<String, Value>>,
    /// A replay's re-run of a side effect: the approval it ran under.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun: Option<Rerun>,
    /// A side effect's attested change to the workspace: its tree before and after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<crate::workspace::WorkspaceChange>,
    /// Any other key a writer put beside these (kept as is, so a served copy hashes alike).
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ToolResultContent {
    fn bare(status: ToolStatus, call_id: impl Into<CallId>) -> Self {
        ToolResultContent {
            status,
            result: None,
            error: None,
            call_id: Some(call_id.into()),
            replayed: None,
            arguments_edited: None,
            rerun: None,
            workspace: None,
            extra: Map::new(),
        }
    }

    /// A success returning `result`.
    pub fn success(result: Value, call_id: impl Into<CallId>) -> Self {
        ToolResultContent {
            result: Some(result),
            ..Self::bare(ToolStatus::Success, call_id)
        }
    }

    /// A failure (or refusal) saying why.
    pub fn error(error: impl Into<String>, call_id: impl Into<CallId>) -> Self {
        ToolResultContent {
            error: Some(error.into()),
            ..Self::bare(ToolStatus::Error, call_id)
        }
    }

    /// A call whose outcome nobody knows, saying why.
    pub fn unknown(error: impl Into<String>, call_id: impl Into<CallId>) -> Self {
        ToolResultContent {
            error: Some(error.into()),
            ..Self::bare(ToolStatus::Unknown, call_id)
        }
    }

    /// Reads a stored `tool.result` content; `None` when it does not have this shape.
    pub fn read(content: &Value) -> Option<Self> {
        Self::deserialize(content).ok()
    }

    /// The JSON value a record stores.
    pub fn to_value(&self) -> Value {
        to_value(self)
    }
}

/// The tool that puts a question to people (`{"question", "choices"?}`): it runs only with a
/// person's signed answer, given as the `answer` argument of an approval with edited
/// arguments, and its `tool.result` is that answer, authored by the person.
pub const PERSON_ASK: &str = "person.ask";

/// The longest answer a person may give (bytes).
pub const MAX_ANSWER_BYTES: usize = 4096;

/// The `call_id` a `tool.call` or `tool.result` content carries, if any.
pub fn call_id_of(content: &Value) -> Option<&str> {
    #[derive(Deserialize)]
    struct Pairing<'a> {
        #[serde(borrow)]
        call_id: Option<&'a str>,
    }
    Pairing::deserialize(content).ok().and_then(|c| c.call_id)
}

/// The `text` a content carries (instructions, thoughts, deliverables, memory), if any.
pub fn text_of(content: &Value) -> Option<&str> {
    #[derive(Deserialize)]
    struct Text<'a> {
        #[serde(borrow)]
        text: Option<&'a str>,
    }
    Text::deserialize(content).ok().and_then(|t| t.text)
}

/// A deliverable's `final` flag, if it has one (`false` asks for another turn).
pub fn final_of(content: &Value) -> Option<bool> {
    #[derive(Deserialize)]
    struct Final {
        #[serde(rename = "final")]
        is_final: Option<bool>,
    }
    Final::deserialize(content).ok().and_then(|f| f.is_final)
}

/// Content of a `task.deliverable` record: a turn's output.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DeliverableContent {
    /// The output's text.
    pub text: String,
    /// Whether the turn ends with it.
    #[serde(rename = "final")]
    pub is_final: bool,
    /// Set when the turn failed (the text says how).
    #[serde(default, skip_serializing_if = "is_false")]
    pub error: bool,
    /// What else the model delivered (e.g. `facts`, `decisions`), kept as given.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl DeliverableContent {
    /// A model's deliverable: `text` and `is_final` over whatever else it delivered (its own
    /// `text` or `final` keys, if any, give way).
    pub fn new(text: impl Into<String>, is_final: bool, mut extra: Map<String, Value>) -> Self {
        extra.remove("text");
        extra.remove("final");
        DeliverableContent {
            text: text.into(),
            is_final,
            error: false,
            extra,
        }
    }

    /// The final deliverable of a failed turn.
    pub fn failed(text: impl Into<String>) -> Self {
        DeliverableContent {
            text: text.into(),
            is_final: true,
            error: true,
            extra: Map::new(),
        }
    }

    /// The JSON value a record stores.
    pub fn to_value(&self) -> Value {
        to_value(self)
    }
}

/// Content of an `approval.request` record: the call waiting for a decision.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalRequestContent {
    /// The call's pairing id.
    pub call_id: CallId,
    /// Which tool.
    pub tool_name: String,
    /// The arguments as the tool would run them.
    pub arguments: Map<String, Value>,
    /// What the tool can do.
    pub effect: Effect,
    /// The turn that asks.
    pub turn_id: TurnId,
    /// Its session.
    pub session_id: SessionId,
    /// A replay's repeated side effect: the output ledger of the recorded turn it repeats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rerun_of: Option<LedgerId>,
}

impl ApprovalRequestContent {
    /// Reads a stored `approval.request` content; `None` when it does not have this shape.
    pub fn read(content: &Value) -> Option<Self> {
        Self::deserialize(content).ok()
    }

    /// The JSON value a record stores.
    pub fn to_value(&self) -> Value {
        to_value(self)
    }
}

/// Content of a person's `approval.decision` record: their signed vote, with what anyone
/// needs to check the signature.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SignedVoteContent {
    /// The approval request (record id).
    pub request_id: RequestId,
    /// The request record's content hash the vote is bound to.
    pub request_hash: String,
    /// The vote.
    pub outcome: Vote,
    /// `user:<name>`.
    pub approver: String,
    /// The person's note.
    pub note: String,
    /// When it was signed (RFC 3339 UTC).
    pub signed_at: String,
    /// Hex Ed25519 signature over the decision's signing bytes.
    pub signature: String,
    /// The approver's hex public key.
    pub public_key: String,
    /// The rule that sent the request to people (`null` when none is known).
    pub rule: Option<String>,
    /// The edited arguments the vote approves, when it edits (signed with the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<Map<String, Value>>,
}

impl SignedVoteContent {
    /// The JSON value a record stores.
    pub fn to_value(&self) -> Value {
        to_value(self)
    }
}

/// Content of an `approval.decision` record aegis writes when nobody decided in time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExpiryContent {
    /// The approval request (record id).
    pub request_id: RequestId,
    /// Always a denial.
    pub outcome: Outcome,
    /// The rule that sent the request to people.
    pub rule: String,
    /// Who decided: `expiry`.
    pub by: String,
    /// Why, for people.
    pub reason: String,
}

impl ExpiryContent {
    /// The denial of `request_id`, asked under `rule`, past its deadline.
    pub fn new(request_id: RequestId, rule: String) -> Self {
        ExpiryContent {
            request_id,
            outcome: Outcome::Deny,
            rule,
            by: "expiry".into(),
            reason: "no decision before the deadline".into(),
        }
    }

    /// The JSON value a record stores.
    pub fn to_value(&self) -> Value {
        to_value(self)
    }
}

/// Content of an `approval.decision` record the published policy decided.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PolicyDecisionContent {
    /// The approval request (record id).
    pub request_id: RequestId,
    /// Allow or deny.
    pub outcome: Outcome,
    /// The rule that decided.
    pub rule: String,
    /// Who decided: `policy`.
    pub by: String,
    /// The published policy's hash.
    pub policy: String,
}

impl PolicyDecisionContent {
    /// The JSON value a record stores.
    pub fn to_value(&self) -> Value {
        to_value(self)
    }
}

/// Content of the `sys.error` record kept for a refused approval decision (a forged, stale or
/// malformed vote): what was refused, by whom it claimed to be, and when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RejectionContent {
    /// `rejected approval decision: <reason>`.
    pub text: String,
    /// The approval request the decision named (record id).
    pub request_id: RequestId,
    /// The approver the decision claimed, if it named one (`null` otherwise).
    pub approver: Option<String>,
    /// The refused message as received.
    pub message: String,
    /// When it was refused (RFC 3339 UTC); with the message, it makes each rejection its own
    /// record.
    pub at: String,
}

impl RejectionContent {
    /// The JSON value a record stores.
    pub fn to_value(&self) -> Value {
        to_value(self)
    }
}

/// Content of a `session.fork` record: the sealed ledger a forked session starts from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionForkContent {
    /// The origin ledger.
    pub origin_ledger: LedgerId,
    /// The origin ledger's session.
    pub origin_session: SessionId,
    /// The origin ledger's hash.
    pub origin_hash: String,
    /// The origin's label, if it had one (`null` otherwise).
    pub origin_label: Option<String>,
    /// The Pi the origin ledger was sealed on, when it came from that Pi's verified replica
    /// (absent for a fork within this database, so those hash as before).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_pi: Option<String>,
    /// That Pi's signed checkpoint the replica was verified against, which covers the
    /// origin ledger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin_checkpoint: Option<String>,
    /// The workspace's tree as of the origin ledger, when it came from another Pi's replica
    /// (whose earlier ledgers are not copied): the files the forked session starts with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace: Option<crate::workspace::ObjectId>,
}

impl SessionForkContent {
    /// The JSON value a record stores.
    pub fn to_value(&self) -> Value {
        to_value(self)
    }
}

/// `fs.write`'s result (the `result` of its `tool.result`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsWritten {
    /// The file, in normal form.
    pub path: String,
    /// Bytes written.
    pub bytes: u64,
}

/// One entry of an `fs.list` result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsEntry {
    /// Its name.
    pub name: String,
    /// `file`, `dir`, `symlink` or another file type's name.
    pub kind: String,
    /// Its size in bytes.
    pub size: i64,
}

/// `fs.list`'s result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FsListing {
    /// The directory, in normal form.
    pub path: String,
    /// Its entries, by name.
    pub entries: Vec<FsEntry>,
    /// Set when there were more entries than a listing holds.
    #[serde(default, skip_serializing_if = "is_false")]
    pub truncated: bool,
}

/// An output (a file's content, a program's stdout or stderr) as a built-in tool's result
/// records it under a name: `name` holds the text (all of it, its head, or `""` when it is
/// binary), and `name_truncated`, `name_binary`, `name_base64` (a binary head),
/// `name_bytes` and `name_sha256` (the whole's size and digest) say how it was cut.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RecordedOutput {
    /// The text kept.
    pub text: String,
    /// Set when only the head is kept.
    #[serde(skip_serializing_if = "is_false")]
    pub truncated: bool,
    /// Set when the output is not text.
    #[serde(skip_serializing_if = "is_false")]
    pub binary: bool,
    /// A binary output's head, base64.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base64: Option<String>,
    /// The whole output's size, when not all of it is kept as text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The whole output's hex SHA-256, when not all of it is kept as text.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

impl RecordedOutput {
    /// Adds this output's fields to a result, under `name`.
    pub fn insert_into(&self, name: &str, into: &mut Map<String, Value>) {
        if let Value::Object(fields) = to_value(self) {
            for (key, value) in fields {
                let key = if key == "text" {
                    name.to_owned()
                } else {
                    format!("{name}_{key}")
                };
                into.insert(key, value);
            }
        }
    }
}

/// How a program `shell.run` started ended: its exit code (`null` when a signal ended it)
/// and the signal, if one did. Its outputs join these fields ([`RecordedOutput`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramExit {
    /// The exit code.
    pub exit_code: Option<i32>,
    /// The signal that ended it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<i32>,
}

/// A tool's result too big for a record, replaced by what identifies it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OversizedResult {
    /// Always true.
    pub truncated: bool,
    /// Bytes of the result as JSON.
    pub bytes: u64,
    /// Hex SHA-256 of the result as JSON.
    pub sha256: String,
    /// Its beginning.
    pub excerpt: String,
}

/// Any of these as the JSON value a record stores.
pub fn to_json<T: Serialize>(content: &T) -> Value {
    to_value(content)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::canonical_json;
    use serde_json::json;
    use uuid::Uuid;

    fn same(typed: Value, old: Value) {
        assert_eq!(
            canonical_json(&typed).expect("canonical"),
            canonical_json(&old).expect("canonical")
        );
    }

    fn args() -> Map<String, Value> {
        json!({"path": "a.txt", "content": "x"})
            .as_object()
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn text_hashes_as_before() {
        same(TextContent::new("hi").to_value(), json!({"text": "hi"}));
    }

    #[test]
    fn tool_call_hashes_as_before() {
        let mut c = ToolCallContent::new("fs.write", args(), "c1");
        same(
            c.to_value(),
            json!({"tool_name": "fs.write", "arguments": args(), "call_id": "c1"}),
        );
        c.arguments_as_given = Some(Map::new());
        same(
            c.to_value(),
            json!({"tool_name": "fs.write", "arguments": args(), "call_id": "c1", "arguments_as_given": {}}),
        );
        let omitted = ToolCallContent {
            arguments_omitted: Some(OmittedArguments {
                bytes: 9,
                sha256: "ab".into(),
            }),
            ..ToolCallContent::new("fs.write", Map::new(), "c1")
        };
        same(
            omitted.to_value(),
            json!({"tool_name": "fs.write", "arguments": {}, "call_id": "c1",
                   "arguments_omitted": {"bytes": 9, "sha256": "ab"}}),
        );
        assert_eq!(ToolCallContent::read(&omitted.to_value()), Some(omitted));
    }

    #[test]
    fn tool_result_hashes_as_before() {
        same(
            ToolResultContent::success(json!({"n": 1}), "c").to_value(),
            json!({"status": ToolStatus::Success, "result": {"n": 1}, "call_id": "c"}),
        );
        same(
            ToolResultContent::success(Value::Null, "c").to_value(),
            json!({"status": "success", "result": null, "call_id": "c"}),
        );
        same(
            ToolResultContent::error("no", "c").to_value(),
            json!({"status": ToolStatus::Error, "error": "no", "call_id": "c"}),
        );
        same(
            ToolResultContent::unknown("lost", "c").to_value(),
            json!({"status": "unknown", "error": "lost", "call_id": "c"}),
        );
        let id = Uuid::nil();
        let edited = ToolResultContent {
            arguments_edited: Some(args()),
            rerun: Some(Rerun {
                approval_request: id.into(),
            }),
            replayed: Some(id.into()),
            ..ToolResultContent::success(json!(3), "c")
        };
        same(
            edited.to_value(),
            json!({"status": "success", "result": 3, "call_id": "c", "arguments_edited": args(),
                   "rerun": {"approval_request": id}, "replayed": id}),
        );
        // A stored result read back keeps every key, a `null` result and unknown ones too.
        let odd = json!({"status": "success", "result": null, "call_id": "c", "other": [1]});
        let read = ToolResultContent::read(&odd).expect("reads");
        same(read.to_value(), odd.clone());
        assert_eq!(call_id_of(&odd), Some("c"));
        assert_eq!(call_id_of(&json!({"call_id": 5})), None);
        assert_eq!(text_of(&json!({"text": "t", "x": 1})), Some("t"));
        assert_eq!(text_of(&json!({"text": 1})), None);
        assert_eq!(text_of(&json!("t")), None);
        assert_eq!(final_of(&json!({"text": "t", "final": false})), Some(false));
        assert_eq!(final_of(&json!({"text": "t"})), None);
        assert_eq!(final_of(&json!({"final": "no"})), None);
    }

    #[test]
    fn deliverable_hashes_as_before() {
        let mut extra = Map::new();
        extra.insert("facts".into(), json!(["a"]));
        extra.insert("text".into(), json!("overridden"));
        same(
            DeliverableContent::new("done", true, extra).to_value(),
            json!({"facts": ["a"], "text": "done", "final": true}),
        );
        same(
            DeliverableContent::failed("the turn failed: x").to_value(),
            json!({"text": "the turn failed: x", "final": true, "error": true}),
        );
        let mut own = Map::new();
        own.insert("error".into(), json!(false));
        same(
            DeliverableContent::new("t", false, own).to_value(),
            json!({"text": "t", "final": false, "error": false}),
        );
    }

    #[test]
    fn approval_contents_hash_as_before() {
        let (r, t, s) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        let request = ApprovalRequestContent {
            call_id: "c".into(),
            tool_name: "fs.write".into(),
            arguments: args(),
            effect: Effect::Write,
            turn_id: t.into(),
            session_id: s.into(),
            rerun_of: None,
        };
        let old = json!({"call_id": "c", "tool_name": "fs.write", "arguments": args(),
                         "effect": Effect::Write, "turn_id": t, "session_id": s});
        same(request.to_value(), old.clone());
        assert_eq!(ApprovalRequestContent::read(&old), Some(request.clone()));
        let rerun = ApprovalRequestContent {
            rerun_of: Some(r.into()),
            ..request
        };
        let mut old_rerun = old;
        old_rerun["rerun_of"] = json!(r);
        same(rerun.to_value(), old_rerun);

        let vote = SignedVoteContent {
            request_id: r.into(),
            request_hash: "h".into(),
            outcome: Vote::Approve,
            approver: "user:alice".into(),
            note: "ok".into(),
            signed_at: "2026-01-01T00:00:00Z".into(),
            signature: "sig".into(),
            public_key: "pk".into(),
            rule: None,
            arguments: None,
        };
        let old_vote = json!({
            "request_id": r, "request_hash": "h", "outcome": "approve",
            "approver": "user:alice", "note": "ok", "signed_at": "2026-01-01T00:00:00Z",
            "signature": "sig", "public_key": "pk", "rule": Option::<String>::None,
        });
        same(vote.to_value(), old_vote.clone());
        let edit = SignedVoteContent {
            arguments: Some(args()),
            rule: Some("r".into()),
            ..vote
        };
        let mut old_edit = old_vote;
        old_edit["arguments"] = Value::Object(args());
        old_edit["rule"] = json!("r");
        same(edit.to_value(), old_edit);

        same(
            ExpiryContent::new(r.into(), "people".into()).to_value(),
            json!({"request_id": r, "outcome": Outcome::Deny, "rule": "people", "by": "expiry",
                   "reason": "no decision before the deadline"}),
        );
        same(
            PolicyDecisionContent {
                request_id: r.into(),
                outcome: Outcome::Allow,
                rule: "reads".into(),
                by: "policy".into(),
                policy: "ph".into(),
            }
            .to_value(),
            json!({"request_id": r, "outcome": Outcome::Allow, "rule": "reads", "by": "policy", "policy": "ph"}),
        );
    }

    #[test]
    fn rejection_hashes_as_before() {
        let r = Uuid::from_u128(7);
        for approver in [Some("user:ann"), None] {
            same(
                RejectionContent {
                    text: "rejected approval decision: bad signature".into(),
                    request_id: r.into(),
                    approver: approver.map(str::to_owned),
                    message: "{}".into(),
                    at: "2026-01-01T00:00:00Z".into(),
                }
                .to_value(),
                json!({
                    "text": format!("rejected approval decision: {}", "bad signature"),
                    "request_id": r,
                    "approver": approver,
                    "message": "{}",
                    "at": "2026-01-01T00:00:00Z",
                }),
            );
        }
    }

    #[test]
    fn session_fork_hashes_as_before() {
        let (l, s) = (Uuid::from_u128(1), Uuid::from_u128(2));
        for label in [None, Some("v1".to_owned())] {
            same(
                SessionForkContent {
                    origin_ledger: l.into(),
                    origin_session: s.into(),
                    origin_hash: "h".into(),
                    origin_label: label.clone(),
                    origin_pi: None,
                    origin_checkpoint: None,
                    workspace: None,
                }
                .to_value(),
                json!({"origin_ledger": l, "origin_session": s, "origin_hash": "h", "origin_label": label}),
            );
        }
    }
    #[test]
    fn built_in_tool_results_hash_as_before() {
        same(
            to_json(&FsWritten {
                path: "a".into(),
                bytes: 3,
            }),
            json!({"path": "a", "bytes": 3usize}),
        );
        let entries = vec![FsEntry {
            name: "x".into(),
            kind: "file".into(),
            size: 5,
        }];
        for truncated in [false, true] {
            let mut old =
                json!({"path": ".", "entries": [{"name": "x", "kind": "file", "size": 5i64}]});
            if truncated {
                old["truncated"] = json!(true);
            }
            same(
                to_json(&FsListing {
                    path: ".".into(),
                    entries: entries.clone(),
                    truncated,
                }),
                old,
            );
        }
        same(
            to_json(&OversizedResult {
                truncated: true,
                bytes: 9,
                sha256: "ab".into(),
                excerpt: "{".into(),
            }),
            json!({"truncated": true, "bytes": 9usize, "sha256": "ab", "excerpt": "{"}),
        );
    }
    #[test]
    fn recorded_outputs_hash_as_before() {
        let mut typed = Map::new();
        RecordedOutput {
            text: "he".into(),
            truncated: true,
            bytes: Some(11),
            sha256: Some("ab".into()),
            ..RecordedOutput::default()
        }
        .insert_into("out", &mut typed);
        RecordedOutput {
            binary: true,
            base64: Some("AAE=".into()),
            bytes: Some(2),
            sha256: Some("cd".into()),
            ..RecordedOutput::default()
        }
        .insert_into("err", &mut typed);
        RecordedOutput {
            text: "all".into(),
            ..RecordedOutput::default()
        }
        .insert_into("whole", &mut typed);
        same(
            Value::Object(typed),
            json!({"out": "he", "out_truncated": true, "out_bytes": 11u64, "out_sha256": "ab",
                   "err": "", "err_binary": true, "err_base64": "AAE=", "err_bytes": 2u64,
                   "err_sha256": "cd", "whole": "all"}),
        );
        same(
            to_json(&ProgramExit {
                exit_code: None,
                signal: Some(9),
            }),
            json!({"exit_code": Option::<i32>::None, "signal": 9}),
        );
        same(
            to_json(&ProgramExit {
                exit_code: Some(0),
                signal: None,
            }),
            json!({"exit_code": Some(0)}),
        );
    }
}
