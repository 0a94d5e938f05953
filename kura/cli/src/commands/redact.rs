//! `kura redact`: erase a record's content with a person's signed redaction; the record's
//! leaf stays, so the history still verifies and the record is reported redacted.

use std::path::PathBuf;

use anyhow::Context as _;
use kura_work::kura_policy::writ::{format_time, sign_redaction};
use proto::writ::{REDACTION_KIND, RedactionBody};

use super::{Ctx, Outcome, id, use_sealer};

/// Erase a record's content (a secret a tool printed, data someone asked to be forgotten).
#[derive(Debug, clap::Args)]
pub struct Redact {
    /// The record.
    record: String,
    /// Why (one line, recorded in the signed redaction).
    #[arg(long)]
    reason: String,
    /// Your key file (you must be one of `[writs] issuers`).
    #[arg(long, default_value_os_t = kura_serve::runtime::person::default_key_path())]
    key: PathBuf,
    /// An nkey seed that signs the authority ledger's seal (on installs with a keyring).
    #[arg(long)]
    sealer_key: Option<PathBuf>,
}

impl Redact {
    /// Signs and applies the redaction; prints the `sys.redaction` record's id.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let mut store = ctx.open_store()?;
        use_sealer(&mut store, self.sealer_key.as_deref())?;
        let record_id: proto::RecordId = id(&self.record)?;
        let record = store
            .read_record(record_id)
            .with_context(|| format!("no record {record_id} (see `kura log --records`)"))?;
        let (name, key) = kura_serve::runtime::person::load(&self.key)?;
        let body = RedactionBody {
            kind: REDACTION_KIND.into(),
            record_id: record_id.to_string(),
            record_hash: record.hash,
            by: format!("user:{name}"),
            reason: proto::text::escape_controls(&self.reason).into_owned(),
            redacted_at: format_time(kura_work::now_ms()),
        };
        let people = super::people()?;
        let done = store
            .redact(
                &sign_redaction(&key, body),
                &people,
                &format!("user:{name}"),
            )
            .map_err(|e| {
                anyhow::anyhow!("{e} (serve.toml's [writs] issuers, or KURA_WRITS__ISSUERS)")
            })?;
        if ctx.json {
            ctx.out.json(&Redacted {
                record: &record_id.to_string(),
                redaction_record: &done.to_string(),
            })?;
        } else {
            ctx.out.line(format!(
                "record {record_id} redacted (sys.redaction {done})"
            ))?;
        }
        Ok(Outcome::Ok)
    }
}

/// `kura redact --json`.
#[derive(serde::Serialize)]
struct Redacted<'a> {
    /// The record whose content was erased.
    record: &'a str,
    /// The `sys.redaction` record.
    redaction_record: &'a str,
}
