//! Pointer-only doorbell messages: JSON, unknown fields refused, at most 1 KiB.
//!
//! A doorbell says *where to look* in SQLite, never *what happened*: ids and at most a few
//! small control fields. Consumers must treat every message as a hint and re-read the store.

use crate::ids::{LedgerId, RecordId, RequestId, SessionId, TurnId};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

/// Largest doorbell payload accepted or produced, in bytes.
pub const MAX_DOORBELL_BYTES: usize = 1024;

/// Why a doorbell payload was refused.
#[derive(Debug, thiserror::Error)]
pub enum DoorbellError {
    /// Larger than its cap ([`MAX_DOORBELL_BYTES`], or the cap a subject was served with).
    #[error("the message is {bytes} bytes, over the {cap}-byte cap")]
    Oversized {
        /// Its size.
        bytes: usize,
        /// The cap it passed.
        cap: usize,
    },
    /// Not JSON, wrong shape, or a field this version does not know.
    #[error("malformed doorbell: {0}")]
    Malformed(#[from] serde_json::Error),
}

/// Parses a doorbell of type `T`, enforcing the size cap before touching the bytes.
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, DoorbellError> {
    parse_capped(bytes, MAX_DOORBELL_BYTES)
}

/// [`parse`] with another cap, for the one message that may carry more than pointers (a
/// decision that edits a call's arguments, capped at [`MAX_DECISION_BYTES`]).
pub fn parse_capped<T: DeserializeOwned>(bytes: &[u8], cap: usize) -> Result<T, DoorbellError> {
    if bytes.len() > cap {
        return Err(DoorbellError::Oversized {
            bytes: bytes.len(),
            cap,
        });
    }
    Ok(serde_json::from_slice(bytes)?)
}

/// A decision message's cap when it edits the call: room for edited arguments, well inside
/// a NATS message. A plain approve or deny is a doorbell: at most [`MAX_DOORBELL_BYTES`].
pub const MAX_DECISION_BYTES: usize = 48 * 1024;

/// aegis's answer to a person's decision (and to a question it cannot answer): whether it
/// was accepted, the request's state afterwards (empty when unknown), and what happened, for
/// the person. Signed like every aegis reply; the console and the CLI read this type.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Verdicted {
    /// Whether the decision was accepted.
    pub ok: bool,
    /// The request's state afterwards (when known; left out of the reply when not, as
    /// PROTOCOL.md's two-key refusals show).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub state: String,
    /// What happened, for the person.
    #[serde(default)]
    pub message: String,
}

impl Verdicted {
    /// A refusal saying why.
    pub fn refused(message: impl Into<String>) -> Verdicted {
        Verdicted {
            ok: false,
            state: String::new(),
            message: message.into(),
        }
    }
}

/// aegis's answer to hashi's [`ToolApprove`]: policy has looked at the request, which is
/// now in `state` (decided, or waiting for people).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ToolApproved {
    /// Always true: a refusal is a [`Verdicted`].
    pub ok: bool,
    /// The request.
    pub request_id: RequestId,
    /// Where it is now.
    pub state: crate::states::ApprovalState,
}

/// A decision's note: at most this many characters (Unicode scalar values), and the plain
/// decision that carries it at most [`MAX_DOORBELL_BYTES`] (so a note of four-byte
/// characters is shorter).
pub const MAX_NOTE_CHARS: usize = 200;

/// A decision over PROTOCOL.md's limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecisionLimit {
    /// The note is too long.
    #[error("the note is {0} characters; at most {MAX_NOTE_CHARS} (Unicode scalar values)")]
    Note(usize),
    /// A decision that edits nothing is larger than a doorbell.
    #[error(
        "a decision without edited arguments is {0} bytes; at most {MAX_DOORBELL_BYTES} (shorten the note)"
    )]
    Plain(usize),
}

/// Serializes a doorbell, refusing to produce one over the cap.
pub fn encode<T: Serialize>(message: &T) -> Result<Vec<u8>, DoorbellError> {
    let bytes = serde_json::to_vec(message)?;
    if bytes.len() > MAX_DOORBELL_BYTES {
        return Err(DoorbellError::Oversized {
            bytes: bytes.len(),
            cap: MAX_DOORBELL_BYTES,
        });
    }
    Ok(bytes)
}

/// `minato.cmd.session.create`: an instruction record is waiting to become a session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionCreate {
    /// The `task.instruction` record.
    pub record_id: RecordId,
    /// An existing session to continue, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<SessionId>,
}

/// `hashi.cmd.worker.dispatch`: a turn is ready to be claimed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerDispatch {
    /// The turn row to claim.
    pub turn_id: TurnId,
}

/// `hashi.evt.worker.complete`: a turn's output ledger is sealed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerComplete {
    /// The finished turn.
    pub turn_id: TurnId,
    /// Its sealed output ledger.
    pub ledger_id: LedgerId,
}

/// `minato.evt.session.complete`: a session reached its end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SessionComplete {
    /// The finished session.
    pub session_id: SessionId,
}

/// `mikado.evt.record.written`: a new record is in the store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordWritten {
    /// The record.
    pub record_id: RecordId,
}

/// `aegis.cmd.tool.approve`: a tool call waits for a decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolApprove {
    /// The approval request row / record.
    pub request_id: RequestId,
}

/// `aegis.evt.approval.decided`: a request was decided (by policy, people or expiry); an
/// outside agent waiting on it is woken (the decision itself is read from SQLite).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalDecided {
    /// The decided request.
    pub request_id: RequestId,
}

/// `aegis.cmd.approval.pending`: a person asks what is waiting for them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingQuery {
    /// Resume after this queue position (the previous page's `next`); none: from the start
    /// (the field is then absent, as PROTOCOL.md says, never `null`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<i64>,
}

/// `aegis.cmd.approval.fetch`: a piece of a waiting request's record content too big to send
/// inline with the pending list (the client reassembles it and checks its hash).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RecordFetch {
    /// The approval request (record id).
    pub request_id: RequestId,
    /// Byte offset into the record's canonical content text.
    #[serde(default)]
    pub offset: u64,
}

/// A decision's vote as it was sent: `approve`, `deny`, or any other word.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum SentVote {
    /// `approve` or `deny`.
    Known(crate::states::Vote),
    /// Anything else: refused by aegis (and recorded as a refusal), never counted as a vote.
    Other(String),
}

impl SentVote {
    /// The vote, when it is one.
    pub fn known(&self) -> Option<crate::states::Vote> {
        match self {
            SentVote::Known(v) => Some(*v),
            SentVote::Other(_) => None,
        }
    }
}

impl From<crate::states::Vote> for SentVote {
    fn from(v: crate::states::Vote) -> Self {
        SentVote::Known(v)
    }
}

/// `aegis.cmd.approval.decide`: a person's decision on one request, signed with their
/// Ed25519 key over [`ApprovalDecision::signing_bytes`]. Small control data, not a payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApprovalDecision {
    /// The approval request (record id).
    pub request_id: RequestId,
    /// `approve` or `deny` (any other word still parses, so that aegis refuses, counts and
    /// records it like any other bad decision).
    pub decision: SentVote,
    /// The approver's name (their author id is `user:<name>`).
    pub approver: String,
    /// A short note or reason.
    #[serde(default)]
    pub note: String,
    /// When it was signed (RFC 3339 UTC; aegis refuses one far from its clock).
    #[serde(default)]
    pub signed_at: String,
    /// Hex Ed25519 signature. Optional in parsing only so that an unsigned decision reaches
    /// aegis and is refused (and counted) like any other bad one.
    #[serde(default)]
    pub signature: String,
    /// An edit: approve the call with these arguments instead of the requested ones (the
    /// same tool). Signed with the rest; absent for a plain approve or deny.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Map<String, serde_json::Value>>,
}

impl ApprovalDecision {
    /// Checks PROTOCOL.md's limits: the note's length, and a plain decision's size as JSON
    /// (an edit may use up to [`MAX_DECISION_BYTES`], which the subject's cap enforces).
    pub fn check_limits(&self) -> Result<(), DecisionLimit> {
        let chars = self.note.chars().count();
        if chars > MAX_NOTE_CHARS {
            return Err(DecisionLimit::Note(chars));
        }
        if self.arguments.is_none() {
            let bytes = serde_json::to_vec(self).map_or(usize::MAX, |b| b.len());
            if bytes > MAX_DOORBELL_BYTES {
                return Err(DecisionLimit::Plain(bytes));
            }
        }
        Ok(())
    }

    /// The bytes an approver signs: RFC 8785 JSON binding the decision to this exact
    /// request (its id *and* its content hash) and, for an edit, to the new arguments.
    pub fn signing_bytes(&self, request_hash: &str) -> Vec<u8> {
        let mut doc = serde_json::json!({
            "kind": "kura.approval.v1",
            "request_id": self.request_id,
            "request_hash": request_hash,
            "decision": self.decision,
            "approver": self.approver,
            "note": self.note,
            "signed_at": self.signed_at,
        });
        if let Some(args) = &self.arguments {
            doc["arguments"] = serde_json::Value::Object(args.clone());
        }
        crate::canonical::canonical_json(&doc)
            .map(String::into_bytes)
            .unwrap_or_default()
    }
}

/// What aegis tells people's notification targets when a request waits for them (the JSON
/// webhook's body): enough to find the card, never the arguments unless configured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ApprovalWaiting {
    /// Always `approval.waiting`.
    pub event: String,
    /// The request.
    pub request_id: RequestId,
    /// The tool it would run.
    pub tool: String,
    /// The session's label.
    pub session_label: String,
    /// The session.
    pub session_id: crate::SessionId,
    /// Who filed it (`agent:hashi`, `agent:<name>`).
    pub requested_by: String,
    /// The rule that asks.
    pub rule: String,
    /// Approvals needed.
    pub required: i64,
    /// The console's approvals page, when aegis knows the console's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
    /// The call's arguments, only when the target is configured to receive them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arguments: Option<serde_json::Value>,
}

/// A notice that a tool call ran without Kura's gate (an agent's PreToolUse hook was missing,
/// killed or timed out): what aegis tells people, beside [`ApprovalWaiting`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallUngated {
    /// Always `call.ungated`.
    pub event: String,
    /// The `tool.call` record that says so.
    pub record_id: crate::RecordId,
    /// The tool that ran.
    pub tool: String,
    /// The session's label.
    pub session_label: String,
    /// The session.
    pub session_id: crate::SessionId,
    /// Who ran it (`agent:<name>`).
    pub by: String,
    /// How it was noticed.
    pub noticed_by: String,
    /// The console's status page, when aegis knows the console's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub link: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use uuid::Uuid;

    fn uuid_strategy() -> impl Strategy<Value = Uuid> {
        any::<u128>().prop_map(Uuid::from_u128)
    }

    /// Broke (issue 24 item 15): `aegis pending` sent `{"after":null}` where PROTOCOL.md says
    /// the field is absent or an integer.
    #[test]
    fn a_first_page_query_leaves_after_out() {
        let first = encode(&PendingQuery::default()).expect("encode");
        assert_eq!(first, b"{}");
        let next = encode(&PendingQuery { after: Some(7) }).expect("encode");
        assert_eq!(next, br#"{"after":7}"#);
    }

    proptest! {
        #[test]
        fn worker_complete_round_trips(t in uuid_strategy(), l in uuid_strategy()) {
            let m = WorkerComplete { turn_id: t.into(), ledger_id: l.into() };
            let bytes = encode(&m).expect("encodes");
            prop_assert!(bytes.len() <= MAX_DOORBELL_BYTES);
            prop_assert_eq!(parse::<WorkerComplete>(&bytes).expect("parses"), m);
        }

        #[test]
        fn session_create_round_trips(r in uuid_strategy(), s in proptest::option::of(uuid_strategy())) {
            let m = SessionCreate { record_id: r.into(), session_id: s.map(Into::into) };
            let bytes = encode(&m).expect("encodes");
            prop_assert_eq!(parse::<SessionCreate>(&bytes).expect("parses"), m);
        }

        #[test]
        fn other_doorbells_round_trip(a in uuid_strategy()) {
            let d = WorkerDispatch { turn_id: a.into() };
            prop_assert_eq!(parse::<WorkerDispatch>(&encode(&d).expect("e")).expect("p"), d);
            let s = SessionComplete { session_id: a.into() };
            prop_assert_eq!(parse::<SessionComplete>(&encode(&s).expect("e")).expect("p"), s);
            let r = RecordWritten { record_id: a.into() };
            prop_assert_eq!(parse::<RecordWritten>(&encode(&r).expect("e")).expect("p"), r);
            let t = ToolApprove { request_id: a.into() };
            prop_assert_eq!(parse::<ToolApprove>(&encode(&t).expect("e")).expect("p"), t);
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
            let _ = parse::<WorkerComplete>(&bytes);
            let _ = parse::<SessionCreate>(&bytes);
        }
    }

    #[test]
    fn unknown_fields_are_refused() {
        let id = Uuid::now_v7();
        let text = format!(r#"{{"turn_id":"{id}","content":"no payloads here"}}"#);
        assert!(matches!(
            parse::<WorkerDispatch>(text.as_bytes()),
            Err(DoorbellError::Malformed(_))
        ));
    }

    #[test]
    fn oversized_is_refused_before_parsing() {
        let id = Uuid::now_v7();
        let text = format!(r#"{{"turn_id":"{id}"}}{}"#, " ".repeat(MAX_DOORBELL_BYTES));
        assert!(matches!(
            parse::<WorkerDispatch>(text.as_bytes()),
            Err(DoorbellError::Oversized { bytes: n, .. }) if n == text.len()
        ));
    }

    #[test]
    fn malformed_is_refused() {
        for bad in [&b""[..], b"{", b"null", b"{\"turn_id\":\"nope\"}", b"{}"] {
            assert!(
                matches!(
                    parse::<WorkerDispatch>(bad),
                    Err(DoorbellError::Malformed(_))
                ),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }
}
