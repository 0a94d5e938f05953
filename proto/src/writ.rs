//! Writs: bounded authority a person grants (Ed25519 over RFC 8785 bytes, kind
//! `kura.writ.v1`), a holder may narrow for a sub-session, and a signed revocation
//! (`kura.revocation.v1`) takes back with every writ delegated from it.
//!
//! The signed bytes are the RFC 8785 JSON of the body, which carries its `kind`: a writ's
//! signature can stand in for no other statement (approvals sign `kura.approval.v1`).

use serde::{Deserialize, Serialize};

use crate::WritId;

use crate::Effect;

/// The `kind` of a writ's body.
pub const WRIT_KIND: &str = "kura.writ.v1";
/// The `kind` of a revocation's body.
pub const REVOCATION_KIND: &str = "kura.revocation.v1";
/// Most tool or path globs one writ names.
pub const MAX_SCOPES: usize = 64;
/// Longest glob, holder or reason.
pub const MAX_FIELD_BYTES: usize = 512;

/// What a writ lets its holder spend; an absent axis is not limited by this writ.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Tool calls run under it (and every writ delegated from it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    /// Model tokens (in + out, as the provider reports them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Money in millionths of the price table's currency.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub money_micros: Option<u64>,
    /// Wall time from the first call run under it, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_ms: Option<u64>,
}

/// What the issuer signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WritBody {
    /// Always [`WRIT_KIND`].
    pub kind: String,
    /// Unique id (a UUID): a writ is stored once, and a second body under a taken id is
    /// refused.
    pub id: WritId,
    /// Who may act under it: `session:<id>` (that session's turns), or an author id
    /// (`agent:<name>` for an outside agent, `user:<name>`) — the sessions it submits and the
    /// calls it files.
    pub holder: String,
    /// Who signed: `user:<name>` for a person's grant, `writ:<parent id>` for a delegation.
    pub issuer: String,
    /// The writ this one narrows, for a delegation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<WritId>,
    /// Tool name globs (`*` any run, `?` one character) a call must match one of.
    pub tools: Vec<String>,
    /// Path globs (normal form: relative, `/`-separated) every path argument of a call must
    /// match one of; `["*"]` allows any path.
    pub paths: Vec<String>,
    /// The highest effect class a call may have.
    pub ceiling: Effect,
    /// What may be spent.
    #[serde(default)]
    pub budget: Budget,
    /// When it was signed (RFC 3339 UTC); not valid before.
    pub issued_at: String,
    /// When it stops being valid (RFC 3339 UTC).
    pub expires_at: String,
    /// Hex Ed25519 public key that may sign writs delegated from this one (the holder's);
    /// absent, it cannot be delegated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegate_key: Option<String>,
}

/// A signed writ, as stored in its `authority.writ` record's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Writ {
    /// What was signed.
    pub body: WritBody,
    /// Hex Ed25519 public key of the signer.
    pub key: String,
    /// Hex Ed25519 signature over [`WritBody::signing_bytes`].
    pub signature: String,
}

impl WritBody {
    /// The RFC 8785 bytes signed.
    pub fn signing_bytes(&self) -> Vec<u8> {
        crate::canonical_json(self)
            .map(String::into_bytes)
            .unwrap_or_default()
    }
}

/// What a revoker signs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RevocationBody {
    /// Always [`REVOCATION_KIND`].
    pub kind: String,
    /// The writ taken back (with every writ delegated from it).
    pub writ_id: WritId,
    /// Who: `user:<name>`, or `writ:<parent id>` for a delegator taking back its child.
    pub by: String,
    /// Why, one line.
    pub reason: String,
    /// When (RFC 3339 UTC).
    pub revoked_at: String,
}

impl RevocationBody {
    /// The RFC 8785 bytes signed.
    pub fn signing_bytes(&self) -> Vec<u8> {
        crate::canonical_json(self)
            .map(String::into_bytes)
            .unwrap_or_default()
    }
}

/// A signed revocation, as stored in its `authority.revocation` record's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Revocation {
    /// What was signed.
    pub body: RevocationBody,
    /// Hex Ed25519 public key of the signer.
    pub key: String,
    /// Hex Ed25519 signature over [`RevocationBody::signing_bytes`].
    pub signature: String,
}

/// A holder name that is none of the four kinds (the refused name, bounded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid holder {0:?}: expected session:<id>, agent:<name>, user:<name> or role:<name>")]
pub struct InvalidHolder(pub String);

/// Why a holder name is refused.
pub fn check_holder(holder: &str) -> Result<(), InvalidHolder> {
    let ok = holder.len() <= MAX_FIELD_BYTES
        && holder.split_once(':').is_some_and(|(k, n)| {
            matches!(k, "session" | "agent" | "user" | "role")
                && !n.is_empty()
                && n.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-".contains(c))
        });
    if ok {
        Ok(())
    } else {
        Err(InvalidHolder(crate::text::excerpt(holder, 80)))
    }
}

/// Where a model step's usage is recorded: the provider, model and tokens as the
/// OpenAI-compatible API reported them, and what they cost by the price table.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// The provider kind (`openai`, `scripted`, `command`).
    pub provider: String,
    /// The model name the server answered with (else the one asked for).
    pub model: String,
    /// Prompt tokens.
    pub tokens_in: u64,
    /// Completion tokens.
    pub tokens_out: u64,
    /// Cost in millionths of the price table's currency (0 when the model has no price).
    pub money_micros: u64,
}

impl Usage {
    /// Tokens in and out.
    pub fn tokens(&self) -> u64 {
        self.tokens_in.saturating_add(self.tokens_out)
    }
}

/// The `kind` of a redaction's body.
pub const REDACTION_KIND: &str = "kura.redaction.v1";

/// What a person signs to erase a record's content: the record (by id and content hash),
/// who, when and why. The record's leaf stays, so every root, ledger hash and checkpoint
/// still verifies; `kura verify` reports the record as redacted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RedactionBody {
    /// Always [`REDACTION_KIND`].
    pub kind: String,
    /// The record erased.
    pub record_id: String,
    /// Its content hash (what it was).
    pub record_hash: String,
    /// Who: `user:<name>`.
    pub by: String,
    /// Why, one line.
    pub reason: String,
    /// When (RFC 3339 UTC).
    pub redacted_at: String,
}

impl RedactionBody {
    /// The RFC 8785 bytes signed.
    pub fn signing_bytes(&self) -> Vec<u8> {
        crate::canonical_json(self)
            .map(String::into_bytes)
            .unwrap_or_default()
    }
}

/// A signed redaction, as stored in its `sys.redaction` record's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Redaction {
    /// What was signed.
    pub body: RedactionBody,
    /// Hex Ed25519 public key of the signer.
    pub key: String,
    /// Hex Ed25519 signature over [`RedactionBody::signing_bytes`].
    pub signature: String,
}

/// The content a redacted record's row holds instead of its own: which `sys.redaction`
/// record erased it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Tombstone {
    /// The `sys.redaction` record's id.
    pub redacted: String,
}

#[cfg(feature = "testing")]
impl WritBody {
    /// The one writ tests start from: `holder` may use `fs.*` on any path up to `write`,
    /// granted by `user:ana` from 2026 to 2099, no budget, no delegate key. A test changes
    /// only what it probes.
    /// `id` must be a UUID (a test's constant).
    pub fn fixture(id: &str, holder: &str) -> WritBody {
        WritBody {
            kind: WRIT_KIND.into(),
            id: id.parse().unwrap_or_else(|_| WritId::new()),
            holder: holder.into(),
            issuer: "user:ana".into(),
            parent: None,
            tools: vec!["fs.*".into()],
            paths: vec!["*".into()],
            ceiling: crate::Effect::Write,
            budget: Budget::default(),
            issued_at: "2026-01-01T00:00:00Z".into(),
            expires_at: "2099-01-01T00:00:00Z".into(),
            delegate_key: None,
        }
    }
}
