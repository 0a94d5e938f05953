//! Inclusion proofs: `kura prove` writes one from the store, `kura verify-proof` checks one
//! offline (no database needed; exit 1 if it fails).

use std::path::PathBuf;

use anyhow::Context;
use proto::proof::InclusionProof;
use serde::Serialize;

use super::Outcome;
use super::{Ctx, id, read_input};
use crate::output::Out;

/// Print an inclusion proof (JSON) that a record is in a sealed ledger.
#[derive(Debug, clap::Args)]
pub struct Prove {
    /// The record id.
    record: String,
    /// The sealed ledger id.
    #[arg(long)]
    ledger: String,
    /// Chain on to this signed checkpoint: the ledger's leaf in the seal log and its
    /// inclusion proof in the checkpoint's tree.
    #[arg(long, value_name = "FILE")]
    checkpoint: Option<PathBuf>,
    /// The log's verifier key the checkpoint must be signed by. Default: `[serve] log_verifier`.
    #[arg(long, env = "KURA_LOG_VERIFIER", value_name = "VKEY")]
    log_key: Option<String>,
}

/// Write a session's proof as one file anyone can check — `kura verify --bundle`, or the
/// static page `docs/verify/index.html` in a browser, offline: its ledgers, records, seals
/// and each ledger's place in a signed checkpoint.
#[derive(Debug, clap::Args)]
pub struct Bundle {
    /// The session.
    session: String,
    /// Where to write it.
    #[arg(long)]
    out: PathBuf,
    /// The signed checkpoint to prove the ledgers in (default: the signer's last).
    #[arg(long, value_name = "FILE")]
    checkpoint: Option<PathBuf>,
    /// The log's verifier key. Default: `[serve] log_verifier`.
    #[arg(long, env = "KURA_LOG_VERIFIER", value_name = "VKEY")]
    log_key: Option<String>,
}

impl Bundle {
    /// Writes the bundle and says what is in it.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let store = ctx.open_store()?;
        let cfg = kura_serve::anchor::serve_config()?;
        let file = self.checkpoint.unwrap_or_else(|| {
            let at = cfg.as_ref().and_then(|c| c.serve.checkpoint_file.clone());
            kura_serve::tlog::witness::head_file(at.as_deref(), store.path())
        });
        let note = std::fs::read_to_string(&file).with_context(|| {
            format!(
                "no checkpoint at {} (sign one: `kura checkpoint`)",
                file.display()
            )
        })?;
        let vkey = kura_serve::anchor::log_verifier(self.log_key)?;
        let names = kura_serve::anchor::keyring(None)?
            .map(|k| k.names())
            .unwrap_or_default();
        let b =
            kura_serve::history::bundle::build(&store, id(&self.session)?, &note, &vkey, names)?;
        let records: usize = b.ledgers.iter().map(|l| l.records.len()).sum();
        std::fs::write(&self.out, serde_json::to_vec(&b)?)
            .with_context(|| format!("cannot write {}", self.out.display()))?;
        ctx.out.line(format!(
            "wrote {}: {} ledgers, {records} records, proved in checkpoint {}; check it with `kura verify --bundle` or docs/verify/index.html",
            self.out.display(),
            b.ledgers.len(),
            note.lines().next().unwrap_or("")
        ))?;
        Ok(Outcome::Ok)
    }
}

/// `kura verify --bundle FILE`: every check the browser page makes, with no database.
pub fn verify_bundle(
    ctx: &mut Ctx,
    file: &std::path::Path,
    log_key: Option<String>,
) -> anyhow::Result<Outcome> {
    // A bundle holds whole sessions: larger than one record may be.
    let text = std::fs::read(file)
        .ok()
        .filter(|b| b.len() <= 1 << 30)
        .with_context(|| format!("cannot read {} (at most 1 GiB)", file.display()))?;
    let b: proto::bundle::Bundle = serde_json::from_slice(&text)
        .map_err(|e| anyhow::anyhow!("{} is not a Kura bundle: {e}", file.display()))?;
    // Checked against a key the person trusts, never the bundle's own: anyone can sign a
    // checkpoint under a log name.
    let trusted = kura_serve::anchor::log_verifier(log_key)
        .context("a bundle is checked against the log key you trust: give --log-key (the Pi's `kura log-key show`)")?;
    let c = kura_serve::tlog::bundle::verify(&b, Some(&trusted));
    if ctx.json {
        ctx.out.json(&c)?;
    } else {
        for p in &c.problems {
            ctx.out
                .line(format!("FAIL {} {}: {}", p.check, p.id, p.detail))?;
        }
        let ok = if c.problems.is_empty() {
            "OK"
        } else {
            "FAILED"
        };
        ctx.out.line(format!(
            "{ok}: {} ledgers, {} records ({} redacted) of session {}, under the trusted log key; a bundle proves what it holds, not that no later ledger was left out",
            c.ledgers, c.records, c.redacted, b.session_id
        ))?;
    }
    Ok(if c.problems.is_empty() {
        Outcome::Ok
    } else {
        Outcome::VerifyFailed
    })
}

/// Check an inclusion proof offline (no database needed); exit 1 if it fails.
#[derive(Debug, clap::Args)]
pub struct VerifyProof {
    /// The proof file (`-` for stdin).
    file: PathBuf,
    /// The root hash or ledger hash you trust; the proof must lead to it.
    #[arg(long, value_name = "HASH")]
    root: Option<String>,
    /// The log's verifier key, to check a proof that chains on to a checkpoint.
    /// Default: `[serve] log_verifier`.
    #[arg(long, env = "KURA_LOG_VERIFIER", value_name = "VKEY")]
    log_key: Option<String>,
}

/// `kura verify-proof --json`.
#[derive(Serialize)]
struct Checked<'a> {
    /// Where the ledger sits in a signed checkpoint, when the proof chains on to one.
    checkpoint: Option<Chained<'a>>,
    /// Why the proof failed, if it did.
    error: Option<&'a str>,
    /// The proved ledger's chained hash.
    ledger_hash: &'a str,
    /// The proved ledger.
    ledger_id: &'a str,
    /// The proof holds.
    ok: bool,
    /// The proved record.
    record_id: &'a str,
    /// Who erased the record's content, when it was redacted (its place is still proved).
    #[serde(skip_serializing_if = "Option::is_none")]
    redacted_by: Option<&'a str>,
    /// The ledger's Merkle root.
    root_hash: &'a str,
}

/// The checkpoint part of `kura verify-proof --json`.
#[derive(Serialize)]
struct Chained<'a> {
    /// The ledger's leaf in the seal log.
    leaf_index: u64,
    /// The log's name.
    origin: &'a str,
    /// The checkpoint's tree size.
    size: u64,
}

impl Prove {
    /// Prints the proof as JSON (always JSON: it is meant to be handed on).
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let store = ctx.open_store()?;
        let Prove {
            record,
            ledger,
            checkpoint,
            log_key,
        } = self;
        let mut proof = kura_store::proof::prove(&store, id(&record)?, id(&ledger)?)?;
        if let Some(file) = checkpoint {
            let vkey = kura_serve::anchor::log_verifier(log_key)?;
            let note = std::fs::read_to_string(&file)
                .with_context(|| format!("cannot read {}", file.display()))?;
            kura_serve::history::proof::link_to_checkpoint(&store, &mut proof, &note, &vkey)?;
        }
        ctx.out.json(&proof)?;
        Ok(Outcome::Ok)
    }
}

impl VerifyProof {
    /// Checks the proof (and its chain to a checkpoint, if it has one) and says so.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let VerifyProof {
            file,
            root,
            log_key,
        } = self;
        let root = root.as_deref();
        let text = read_input(&file)?;
        let proof: InclusionProof = serde_json::from_str(&text).map_err(|e| {
            anyhow::anyhow!("{} is not a Kura inclusion proof: {e}", file.display())
        })?;
        let vkey = match proof.seal_log {
            Some(_) => Some(kura_serve::anchor::log_verifier(log_key)?),
            None => None,
        };
        let mut chained = None;
        let people = match &proof.redacted {
            Some(_) => super::people()?,
            None => Vec::new(),
        };
        let result = proof
            .verify(root)
            .map_err(|e| e.to_string())
            .and_then(|()| match &proof.redacted {
                Some(r) => kura_work::kura_policy::writ::verify_redaction(&r.redaction, &people)
                    .map_err(|e| format!("the record is redacted, but {e}")),
                None => Ok(()),
            })
            .and_then(|()| match &vkey {
                Some(v) => kura_serve::tlog::proof::verify_link(&proof, v)
                    .map(|c| chained = Some(c))
                    .map_err(|e| e.to_string()),
                None => Ok(()),
            });
        let out = &mut ctx.out;
        if ctx.json {
            out.json_sorted(&Checked {
                checkpoint: chained.as_ref().map(|c| Chained {
                    leaf_index: c.leaf_index,
                    origin: &c.origin,
                    size: c.size,
                }),
                error: result.as_ref().err().map(String::as_str),
                ledger_hash: &proof.ledger_hash,
                ledger_id: &proof.ledger_id,
                ok: result.is_ok(),
                record_id: &proof.record.record_id,
                redacted_by: proof
                    .redacted
                    .as_ref()
                    .map(|r| r.redaction.body.by.as_str()),
                root_hash: &proof.root_hash,
            })?;
        } else {
            match &result {
                Ok(()) => print_ok(
                    out,
                    &proof,
                    root.is_some(),
                    chained
                        .as_ref()
                        .map(|c| (c.leaf_index, c.origin.as_str(), c.size)),
                )?,
                Err(e) => out.line(format!("PROOF FAILED: {e}"))?,
            }
        }
        Ok(if result.is_ok() {
            Outcome::Ok
        } else {
            Outcome::VerifyFailed
        })
    }
}

/// The lines of a proof that holds: where the record sits, and where its ledger does.
fn print_ok(
    out: &mut Out,
    proof: &InclusionProof,
    trusted_root: bool,
    chained: Option<(u64, &str, u64)>,
) -> std::io::Result<()> {
    out.line(format!(
        "proof ok: record {} is leaf {} of {} in ledger {} (root {}, ledger hash {}){}",
        proof.record.record_id,
        proof.leaf_index,
        proof.tree_size,
        proof.ledger_id,
        proof.root_hash,
        proof.ledger_hash,
        if trusted_root {
            ", which is the trusted hash"
        } else {
            ""
        }
    ))?;
    if let Some(r) = &proof.redacted {
        let b = &r.redaction.body;
        out.line(format!(
            "REDACTED: the record's content was erased by {} at {} ({}); its hash {} and place are proved, its content is not",
            proto::text::escape_controls(&b.by),
            proto::text::escape_controls(&b.redacted_at),
            proto::text::escape_controls(&b.reason),
            b.record_hash
        ))?;
    }
    if let Some((leaf_index, origin, size)) = chained {
        out.line(format!(
            "chain ok: the ledger is leaf {} of the seal log in checkpoint {} of size {}, signed by the log key",
            leaf_index, origin, size
        ))?;
    }
    Ok(())
}
