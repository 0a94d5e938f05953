//! `kura verify`: recompute every hash of a ledger, a session or the whole store, hold the
//! seal log to a signed checkpoint, and report every problem (exit 1 if any).

use std::path::PathBuf;

use anyhow::bail;
use kura_store::Store;
use kura_store::verify::{Problem, Report, Scope};
use serde::Serialize;

use super::Outcome;
use super::{Ctx, id};
use crate::output::Out;

/// Recompute every hash and report every problem (exit 1 if any).
#[derive(Debug, clap::Args)]
pub struct Verify {
    /// A ledger or session id.
    #[arg(required_unless_present_any = ["all", "workspace", "bundle"], conflicts_with_all = ["all", "workspace", "bundle"])]
    id: Option<String>,
    /// Check a session's files instead: every object its records name is whole, each side
    /// effect began where the last left the files, and the workspace on disk holds what the
    /// records say (a change no recorded call made is drift, named file by file).
    #[arg(long, value_name = "SESSION", conflicts_with = "all")]
    workspace: Option<String>,
    /// Check a bundle (`kura bundle`) instead, with no database: every record, root, ledger
    /// hash, seal and the checkpoint (against --log-key, else the bundle's own key).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["all", "workspace"])]
    bundle: Option<PathBuf>,
    /// Verify the whole database.
    #[arg(long)]
    all: bool,
    /// A ledger hash you noted earlier (e.g. from `kura log`): verification fails if it
    /// is no longer in the history, which catches even a consistent truncation.
    #[arg(long, value_name = "HASH")]
    trusted_head: Option<String>,
    /// A signed checkpoint the store's seal log must extend (repeatable; the newest is
    /// used). Default: the signer's and the witnesses' from the serve config.
    #[arg(long = "checkpoint", value_name = "FILE")]
    checkpoints: Vec<PathBuf>,
    /// A witness directory to take checkpoints (and leaf copies) from (repeatable).
    #[arg(long = "witness", value_name = "DIR")]
    witnesses: Vec<PathBuf>,
    /// The log's verifier key (`name+id+base64`). Default: `[serve] log_verifier`.
    #[arg(long, env = "KURA_LOG_VERIFIER", value_name = "VKEY")]
    log_key: Option<String>,
    /// The install's identities (`identities.toml`): every seal must be signed by one of
    /// them. Default: `[serve] keyring`.
    #[arg(long, env = "KURA_KEYRING", value_name = "FILE")]
    keyring: Option<PathBuf>,
}

/// `kura verify --json`.
#[derive(Serialize)]
struct Verdict<'a> {
    /// Ledgers checked.
    ledgers_checked: u64,
    /// No problem found.
    ok: bool,
    /// Every problem found.
    problems: &'a [Problem],
    /// Records checked.
    records_checked: u64,
    /// Records erased under a valid signed redaction (their leaves verified).
    redacted: &'a [kura_store::verify::RedactedRecord],
    /// Sessions checked.
    sessions_checked: u64,
    /// Records an earlier release left in no ledger (listed at the upgrade; not a problem).
    legacy_loose: u64,
}

impl Verify {
    /// Verifies, prints the report, and says whether it passed.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        if let Some(session) = &self.workspace {
            return super::workspace::verify(ctx, session);
        }
        if let Some(file) = &self.bundle {
            return super::prove::verify_bundle(ctx, file, self.log_key.clone());
        }
        let store = ctx.open_store()?;
        let (out, json) = (&mut ctx.out, ctx.json);
        let scope = scope(&store, self.id, self.all)?;
        // A replica is held to what this Pi pins for its origin, unless told otherwise.
        let told = self.log_key.is_some()
            || !self.checkpoints.is_empty()
            || !self.witnesses.is_empty()
            || self.keyring.is_some();
        let special = match told {
            // Another Pi's history, keys named by the person: nothing from this Pi's [serve].
            true => kura_serve::anchor::told_for_foreign(
                &store,
                self.log_key.clone(),
                self.checkpoints.clone(),
                self.witnesses.clone(),
            )?
            .map(|t| anyhow::Ok((t, kura_serve::anchor::keyring_file(self.keyring.clone())?)))
            .transpose()?,
            false => kura_serve::anchor::replica_trust(&store)?,
        };
        let (trust, keyring) = match special {
            Some(r) => r,
            None => (
                kura_serve::anchor::Trust::resolve(
                    self.log_key,
                    self.checkpoints,
                    self.witnesses,
                    store.path(),
                )?,
                kura_serve::anchor::keyring(self.keyring)?,
            ),
        };
        let people = super::people()?;
        let mut report = kura_store::verify::verify_with(
            &store,
            &scope,
            self.trusted_head.as_deref(),
            keyring.as_ref(),
            &people,
        )?;
        let used = trust.check(&store, &mut report)?;
        print_report(out, json, &report)?;
        // After the verdict: which checkpoint held the store, or that nothing did.
        if let Some(used) = used
            && !json
        {
            out.line(used)?;
        }
        Ok(if report.ok() {
            Outcome::Ok
        } else {
            Outcome::VerifyFailed
        })
    }
}

/// What to verify: `--all`, or the ledger or session the id names.
fn scope(store: &Store, target: Option<String>, all: bool) -> anyhow::Result<Scope> {
    Ok(match (target, all) {
        (_, true) => Scope::All,
        (Some(t), false) => {
            // A ledger or session id: typed once `kind_of` says which.
            let uid = id(&t)?;
            match store.kind_of(uid)? {
                Some("ledger") => Scope::Ledger(uid.into()),
                Some("session") => Scope::Session(uid.into()),
                Some(kind) => {
                    bail!("{uid} is a {kind}; verify a ledger, a session or --all")
                }
                None => bail!("no ledger or session {uid}"),
            }
        }
        (None, false) => bail!("give a ledger or session id, or --all"),
    })
}

fn print_report(out: &mut Out, json: bool, report: &Report) -> anyhow::Result<()> {
    if json {
        out.json_sorted(&Verdict {
            ledgers_checked: report.ledgers_checked,
            ok: report.ok(),
            problems: &report.problems,
            records_checked: report.records_checked,
            redacted: &report.redacted,
            sessions_checked: report.sessions_checked,
            legacy_loose: report.legacy_loose,
        })?;
        return Ok(());
    }
    for p in &report.problems {
        out.line(format!("FAIL {p}"))?;
    }
    for r in &report.redacted {
        out.line(format!(
            "REDACTED record {} (hash {}) by {} at {}: {}",
            r.record_id,
            r.record_hash,
            proto::text::escape_controls(&r.by),
            proto::text::escape_controls(&r.redacted_at),
            proto::text::escape_controls(&r.reason)
        ))?;
    }
    let plural = |n: u64, one: &str| format!("{n} {one}{}", if n == 1 { "" } else { "s" });
    if report.legacy_loose > 0 {
        out.line(format!(
            "NOTE {} an earlier release left in no ledger (listed when the database was upgraded; hashes checked, never packed into a context)",
            plural(report.legacy_loose, "record")
        ))?;
    }
    let summary = format!(
        "{}, {}, {} checked",
        plural(report.records_checked, "record"),
        plural(report.ledgers_checked, "ledger"),
        plural(report.sessions_checked, "session")
    );
    if report.ok() {
        out.line(format!("verified: {summary}; every hash matches"))?;
    } else {
        out.line(format!(
            "VERIFICATION FAILED: {} problems; {summary}",
            report.problems.len()
        ))?;
    }
    Ok(())
}
