//! What people are shown, built so they can check it: the pending list is paged to fit a
//! NATS message, each request travels as its `approval.request` record (type, author and
//! canonical content: what its hash covers), and content too big to send inline is fetched
//! in pieces. The client recomputes every hash before it shows or signs anything (see
//! `client`), so a rogue responder cannot put words in a request.

use base64::Engine as _;
use kura_store::Store;
use kura_work::approvals::{self, Approval, asked};
use proto::RequestId;
use serde::{Deserialize, Serialize};

/// Largest reply aegis sends on these subjects, well under the bundled server's 64 KiB
/// `max_payload`.
pub const MAX_REPLY_BYTES: usize = 40 * 1024;
/// Largest pending page, serialized.
pub const PAGE_BYTES: usize = 32 * 1024;
/// Largest record content sent inline; bigger content is fetched in pieces.
pub const INLINE_BYTES: usize = 8 * 1024;
/// Bytes of content per fetched piece (before base64).
pub const CHUNK_BYTES: usize = 24 * 1024;

/// A request's `approval.request` record: exactly what its hash is computed over.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RequestRecord {
    /// `approval.request`.
    pub record_type: String,
    /// Who filed it (hashi's author id).
    pub author_id: String,
    /// Bytes of the canonical content text.
    pub content_bytes: u64,
    /// The canonical content text (RFC 8785), when at most [`INLINE_BYTES`]; otherwise fetch
    /// it with `approval.fetch`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// One request waiting for people, on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingItem {
    /// The request (its record's id).
    pub request_id: RequestId,
    /// Its record's content hash: what an approver signs.
    pub request_hash: String,
    /// The record itself.
    pub record: RequestRecord,
    /// Seconds since it was filed.
    pub age_s: u64,
    /// The rule that asked.
    pub rule: String,
    /// Approvals needed.
    pub required: i64,
    /// Approvals so far.
    pub approvals: i64,
}

/// One page of the pending list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PendingPage {
    /// Requests, oldest first.
    pub items: Vec<PendingItem>,
    /// Ask again with `after` = this for the next page; none when this was the last.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next: Option<i64>,
}

/// A piece of a request's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Chunk {
    /// The request.
    pub request_id: RequestId,
    /// Where this piece starts.
    pub offset: u64,
    /// Bytes of the whole content.
    pub total: u64,
    /// The piece, base64.
    pub data: String,
}

fn item(
    conn: &Store,
    a: Approval,
    now: std::time::SystemTime,
) -> kura_store::Result<Option<PendingItem>> {
    let Some((record_type, author_id, content)) = approvals::request_record(conn, a.request_id)?
    else {
        return Ok(None);
    };
    let approvals = approvals::approvals_so_far(conn, a.request_id)?;
    let age_s = humantime::parse_rfc3339(&a.created_at)
        .ok()
        .and_then(|t| now.duration_since(t).ok())
        .map(|d| d.as_secs())
        .unwrap_or(0);
    Ok(Some(PendingItem {
        request_id: a.request_id,
        request_hash: a.request_hash,
        record: RequestRecord {
            record_type,
            author_id,
            content_bytes: content.len() as u64,
            content: (content.len() <= INLINE_BYTES).then_some(content),
        },
        age_s,
        rule: a.rule.unwrap_or_default(),
        required: a.required,
        approvals,
    }))
}

/// The requests waiting for people after queue position `after`, as many as fit one page.
pub fn page(store: &Store, after: Option<i64>) -> kura_store::Result<PendingPage> {
    let conn = store;
    let now = std::time::SystemTime::now();
    let mut out = PendingPage::default();
    let (mut size, mut last_seq) = (64, 0);
    for a in asked(conn)?
        .into_iter()
        .filter(|a| after.is_none_or(|x| a.approval_seq > x))
    {
        let seq = a.approval_seq;
        let Some(it) = item(conn, a, now)? else {
            continue;
        };
        let bytes = serde_json::to_vec(&it).map_or(PAGE_BYTES, |v| v.len());
        if !out.items.is_empty() && size + bytes > PAGE_BYTES {
            out.next = Some(last_seq);
            break;
        }
        size += bytes + 1;
        last_seq = seq;
        out.items.push(it);
    }
    Ok(out)
}

/// A piece of a waiting request's content, from `offset`.
pub fn fetch(
    store: &Store,
    request_id: RequestId,
    offset: u64,
) -> kura_store::Result<Option<Chunk>> {
    let Some((_, _, content)) = approvals::request_record(store, request_id)? else {
        return Ok(None);
    };
    let bytes = content.as_bytes();
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    let end = (start + CHUNK_BYTES).min(bytes.len());
    Ok(Some(Chunk {
        request_id,
        offset: start as u64,
        total: bytes.len() as u64,
        data: base64::engine::general_purpose::STANDARD.encode(&bytes[start..end]),
    }))
}
