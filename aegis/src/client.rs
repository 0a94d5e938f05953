//! The people's side: `aegis pending`, `aegis approve`, `aegis deny` over NATS request/reply.
//! Nothing is shown or signed unverified: every request arrives as its `approval.request`
//! record, and its hash is recomputed here from the very bytes that are then displayed — a
//! responder that shows something other than the request is an error, not a prompt.

use proto::RequestId;
use std::time::Duration;

use anyhow::Context;
use base64::Engine as _;
use proto::doorbell::{ApprovalDecision, PendingQuery, RecordFetch};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::keys;
use crate::pending::{Chunk, PendingItem, PendingPage};
use proto::Vote;
use proto::content::ApprovalRequestContent;
use proto::doorbell::Verdicted;

/// Most pages read (each at most 32 KiB): far more requests than anyone reviews at once.
const MAX_PAGES: usize = 1000;

/// A request as a person sees it: checked against its hash.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Verified {
    /// The request.
    pub request_id: RequestId,
    /// What is signed: its record's content hash, recomputed here.
    pub request_hash: String,
    /// From the verified record: the tool.
    pub tool: String,
    /// From the verified record: its arguments.
    pub arguments: Value,
    /// From the verified record: its effect class.
    pub effect: String,
    /// From the verified record: the session.
    pub session_id: Value,
    /// From the verified record: the turn.
    pub turn_id: Value,
    /// Seconds since it was filed (aegis's word; not signed).
    pub age_s: u64,
    /// The rule that asked (aegis's word; not signed).
    pub rule: String,
    /// Approvals needed.
    pub required: i64,
    /// Approvals so far.
    pub approvals: i64,
}

/// Where and as whom a person talks to aegis.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The NATS URL.
    pub url: String,
    /// Subjects under the installation's prefix.
    pub subjects: proto::subjects::Subjects,
    /// The bus CA to pin (TLS required when set).
    pub ca: Option<std::path::PathBuf>,
    /// The aegis daemon's public nkey: replies not signed by it are refused.
    pub reply_key: String,
    /// The person's key file: it signs decisions and is their bus identity.
    pub key_path: std::path::PathBuf,
}

/// A NATS connection to ask aegis over, as the person whose key it holds.
struct Conn {
    client: async_nats::Client,
    /// Pinned: every reply must be signed by it.
    reply_key: String,
    /// The approver's name and key.
    name: String,
    key: ed25519_dalek::SigningKey,
}

impl Conn {
    async fn new(at: &Endpoint) -> anyhow::Result<Conn> {
        kura_runtime::identity::check_user_nkey(&at.reply_key)
            .map_err(|e| anyhow::anyhow!("[aegis] reply_key: {e}"))?;
        let (name, key) = keys::load(&at.key_path)?;
        // The file's key signs decisions; the bus key is derived from it by `Credentials`.
        let nkey = kura_runtime::identity::root_key_from_secret(key.to_bytes())
            .map_err(anyhow::Error::msg)?;
        let credentials = kura_runtime::bus::Credentials {
            key: Some(std::sync::Arc::new(nkey)),
            ca: at.ca.clone(),
        };
        let client = credentials
            .connect_once(&format!("aegis-cli-{name}"), &at.url)
            .await?;
        Ok(Conn {
            client,
            reply_key: at.reply_key.clone(),
            name,
            key,
        })
    }

    /// Asks aegis and waits for *its* answer: replies not signed by the pinned key are
    /// skipped (see [`kura_runtime::ask`]).
    async fn ask<T: serde::de::DeserializeOwned>(
        &self,
        subject: String,
        body: Vec<u8>,
    ) -> anyhow::Result<T> {
        use kura_runtime::ask::{AskError, ask_signed};
        let reply = ask_signed(
            &self.client,
            subject,
            body,
            &self.reply_key,
            Duration::from_secs(5),
        )
        .await
        .map_err(|e| match e {
            AskError::NoResponders(_) => {
                anyhow::anyhow!("no aegis daemon is listening (is kura-aegis running on the Pi?)")
            }
            AskError::Timeout(_) => {
                anyhow::anyhow!("aegis did not answer in 5 s (is kura-aegis running?)")
            }
            other => anyhow::anyhow!("aegis: {other}"),
        })?;
        serde_json::from_slice(&reply.payload).with_context(|| {
            let text = String::from_utf8_lossy(&reply.payload);
            format!("unexpected answer: {}", proto::text::excerpt(&text, 300))
        })
    }
}

/// The content of `item`'s record: inline, or fetched piece by piece.
async fn content(
    conn: &Conn,
    subjects: &proto::subjects::Subjects,
    item: &PendingItem,
) -> anyhow::Result<String> {
    if let Some(c) = &item.record.content {
        return Ok(c.clone());
    }
    let total = item.record.content_bytes;
    anyhow::ensure!(
        total <= proto::record::MAX_CONTENT_BYTES as u64,
        "request {} claims {total} bytes of content, more than a record holds",
        item.request_id
    );
    let mut bytes = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    while (bytes.len() as u64) < total {
        let chunk: Chunk = conn
            .ask(
                subjects.approval_fetch(),
                proto::doorbell::encode(&RecordFetch {
                    request_id: item.request_id,
                    offset: bytes.len() as u64,
                })?,
            )
            .await?;
        let data = base64::engine::general_purpose::STANDARD
            .decode(&chunk.data)
            .context("a fetched piece is not base64")?;
        anyhow::ensure!(
            chunk.offset == bytes.len() as u64 && chunk.total == total && !data.is_empty(),
            "aegis sent a piece that does not continue request {}'s content",
            item.request_id
        );
        bytes.extend_from_slice(&data);
    }
    anyhow::ensure!(
        bytes.len() as u64 == total,
        "request {}'s content overran its size",
        item.request_id
    );
    String::from_utf8(bytes).context("request content is not UTF-8")
}

/// Checks `item` against its hash and returns what may be shown; an error if it does not
/// match (someone answered with something other than the request).
pub fn verify(item: &PendingItem, content: &str) -> anyhow::Result<Verified> {
    anyhow::ensure!(
        item.record.record_type == "approval.request",
        "request {} arrived as a {:?} record",
        item.request_id,
        item.record.record_type
    );
    let hash = proto::canonical::record_hash_from_canonical(
        &item.record.record_type,
        content,
        &item.record.author_id,
    )?;
    anyhow::ensure!(
        hash == item.request_hash,
        "the answer for request {} does not match its hash (content hashes to {}…, the request is {}…): \
         someone other than aegis answered, or aegis is broken; refusing to show or sign it",
        item.request_id,
        &hash[..12.min(hash.len())],
        &item.request_hash[..12.min(item.request_hash.len())]
    );
    let v: Value = serde_json::from_str(content).context("request content is not JSON")?;
    let request = ApprovalRequestContent::read(&v).with_context(|| {
        format!(
            "request {} is not an approval request's content",
            item.request_id
        )
    })?;
    Ok(Verified {
        request_id: item.request_id,
        request_hash: hash,
        tool: request.tool_name,
        arguments: Value::Object(request.arguments),
        effect: request.effect.as_str().to_owned(),
        session_id: Value::String(request.session_id.to_string()),
        turn_id: Value::String(request.turn_id.to_string()),
        age_s: item.age_s,
        rule: item.rule.clone(),
        required: item.required,
        approvals: item.approvals,
    })
}

async fn pending_on(
    conn: &Conn,
    subjects: &proto::subjects::Subjects,
) -> anyhow::Result<Vec<Verified>> {
    let mut out = Vec::new();
    let mut after = None;
    for _ in 0..MAX_PAGES {
        let page: PendingPage = conn
            .ask(
                subjects.approval_pending(),
                proto::doorbell::encode(&PendingQuery { after })?,
            )
            .await?;
        for item in &page.items {
            let text = content(conn, subjects, item).await?;
            out.push(verify(item, &text)?);
        }
        match page.next {
            Some(n) if after.is_none_or(|a| n > a) && !page.items.is_empty() => after = Some(n),
            _ => return Ok(out),
        }
    }
    Ok(out)
}

/// Every request waiting for people, each verified against its hash.
pub async fn pending(at: &Endpoint) -> anyhow::Result<Vec<Verified>> {
    pending_on(&Conn::new(at).await?, &at.subjects).await
}

/// Signs and sends a decision on a verified request; returns aegis's verdict.
/// `edit`: approve the call with these arguments instead (signed with them).
pub async fn decide(
    at: &Endpoint,
    request_id: RequestId,
    approve: bool,
    note: &str,
    edit: Option<serde_json::Map<String, serde_json::Value>>,
) -> anyhow::Result<Verdicted> {
    let person = Person::connect(at).await?;
    let d = person.sign(request_id, approve, note, edit).await?;
    person.send(&d).await
}

/// Answers a question (a `person.ask` request): an approval whose signed arguments are the
/// question's with `answer` added.
pub async fn answer(
    at: &Endpoint,
    request_id: RequestId,
    answer: &str,
    note: &str,
) -> anyhow::Result<Verdicted> {
    let person = Person::connect(at).await?;
    let items = person.pending().await?;
    let item = items
        .iter()
        .find(|i| i.request_id == request_id)
        .with_context(|| format!("request {request_id} is not waiting for a decision"))?;
    anyhow::ensure!(
        item.tool == proto::content::PERSON_ASK,
        "request {request_id} is a call of {}, not a question: approve or deny it",
        item.tool
    );
    let mut args = item.arguments.as_object().cloned().unwrap_or_default();
    args.insert("answer".into(), answer.into());
    let d = person.sign(request_id, true, note, Some(args)).await?;
    person.send(&d).await
}

/// A person connected to aegis: what waits for them, and their signed decisions, over one
/// connection (the console's relay and the benches keep one open; the CLI makes one per run).
pub struct Person {
    conn: Conn,
    subjects: proto::subjects::Subjects,
}

impl Person {
    /// Connects as the person whose key `at` names.
    pub async fn connect(at: &Endpoint) -> anyhow::Result<Person> {
        Ok(Person {
            conn: Conn::new(at).await?,
            subjects: at.subjects.clone(),
        })
    }

    /// The requests waiting for people, each verified against its hash.
    pub async fn pending(&self) -> anyhow::Result<Vec<Verified>> {
        pending_on(&self.conn, &self.subjects).await
    }

    /// A signed decision on `request_id`, which must be waiting: the hash signed is the one
    /// recomputed from what was verified, never the one a responder claimed. `edit`: an
    /// approval that runs the call with these arguments instead (they are in the signed
    /// bytes, as the console's edit).
    pub async fn sign(
        &self,
        request_id: RequestId,
        approve: bool,
        note: &str,
        edit: Option<serde_json::Map<String, serde_json::Value>>,
    ) -> anyhow::Result<ApprovalDecision> {
        anyhow::ensure!(
            approve || edit.is_none(),
            "an edit is an approval with other arguments: a denial has none"
        );
        let items = self.pending().await?;
        let item = items
            .iter()
            .find(|i| i.request_id == request_id)
            .with_context(|| format!("request {request_id} is not waiting for a decision"))?;
        let mut d = ApprovalDecision {
            request_id,
            decision: if approve { Vote::Approve } else { Vote::Deny }.into(),
            approver: self.conn.name.clone(),
            note: note.to_owned(),
            signed_at: humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string(),
            signature: String::new(),
            arguments: edit,
        };
        // Refused here rather than cut: a person signs exactly the note they wrote.
        d.check_limits()
            .map_err(|e| anyhow::anyhow!("{e}; give a shorter --note or a smaller --edit"))?;
        keys::sign(&self.conn.key, &mut d, &item.request_hash);
        Ok(d)
    }

    /// Sends a signed decision; returns aegis's verdict.
    pub async fn send(&self, d: &ApprovalDecision) -> anyhow::Result<Verdicted> {
        self.conn
            .ask(self.subjects.approval_decide(), proto::doorbell::encode(d)?)
            .await
    }
}
