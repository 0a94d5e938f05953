//! `kura writ …`: grant bounded authority with a person's key, narrow it for a sub-session
//! with the holder's key, take it back, and see what was spent under each.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use kura_store::Store;
use kura_work::kura_policy::writ::{self as check};
use kura_work::writs::{self, StoredWrit};
use proto::Effect;
use proto::writ::{Budget, REVOCATION_KIND, RevocationBody, WRIT_KIND, WritBody};

use super::{Ctx, Outcome, use_sealer};
use crate::output::Out;

/// What a writ allows, as given on the command line.
#[derive(Debug, clap::Args)]
pub struct Scope {
    /// Who may act under it: session:ID, role:NAME (turns run as that role), agent:NAME
    /// (an outside agent, and what it submits) or user:NAME (what that person submits).
    #[arg(long)]
    holder: String,
    /// A tool name glob it allows (repeatable), e.g. 'fs.*'.
    #[arg(long = "tool", value_name = "GLOB")]
    tools: Vec<String>,
    /// A path glob every path argument must match (repeatable); default any path.
    #[arg(long = "path", value_name = "GLOB")]
    paths: Vec<String>,
    /// The highest effect class: read, write, external or irreversible.
    #[arg(long)]
    ceiling: Option<Effect>,
    /// Most tool calls.
    #[arg(long)]
    tool_calls: Option<u64>,
    /// Most model tokens (in + out).
    #[arg(long)]
    tokens: Option<u64>,
    /// Most money, in millionths of the price table's currency.
    #[arg(long)]
    money_micros: Option<u64>,
    /// Most wall time from its first call, e.g. 30m.
    #[arg(long, value_parser = humantime::parse_duration)]
    wall: Option<std::time::Duration>,
    /// How long it lasts (e.g. 8h, 7d) or until when (RFC 3339); a grant lasts 24h unless
    /// told, a delegation as long as its parent.
    #[arg(long)]
    expires: Option<String>,
    /// Hex Ed25519 public key that may sign narrower writs for sub-sessions (the holder's
    /// key file's `public_key`); none: it cannot be delegated.
    #[arg(long)]
    delegate_key: Option<String>,
}

/// `kura writ ...`
#[derive(Debug, clap::Subcommand)]
pub enum WritCmd {
    /// Grant a writ, signed with your key file (you must be one of `[writs] issuers`).
    Grant {
        #[command(flatten)]
        scope: Scope,
        /// Your key file (`aegis keygen`).
        #[arg(long, default_value_os_t = kura_serve::runtime::person::default_key_path())]
        key: PathBuf,
        /// An nkey seed that signs the authority ledger's seal (on installs with a keyring).
        #[arg(long)]
        sealer_key: Option<PathBuf>,
    },
    /// Narrow a writ for a sub-session, signed with the key the parent names as its
    /// `delegate_key`; refused unless it is within the parent on every axis.
    Delegate {
        /// The writ to narrow.
        #[arg(long)]
        parent: String,
        #[command(flatten)]
        scope: Scope,
        /// The holder's key file (its public key is the parent's delegate_key).
        #[arg(long)]
        key: PathBuf,
        /// An nkey seed that signs the authority ledger's seal.
        #[arg(long)]
        sealer_key: Option<PathBuf>,
    },
    /// Take a writ back (and every writ delegated from it); the next call under it is refused.
    Revoke {
        /// The writ.
        writ: String,
        /// Why (one line, recorded).
        #[arg(long)]
        reason: String,
        /// Your key file: a `[writs] issuers` person's, or the parent's delegate key.
        #[arg(long, default_value_os_t = kura_serve::runtime::person::default_key_path())]
        key: PathBuf,
        /// Revoke as the delegator of the writ (signed with its parent's delegate key).
        #[arg(long)]
        as_delegator: bool,
        /// An nkey seed that signs the authority ledger's seal.
        #[arg(long)]
        sealer_key: Option<PathBuf>,
    },
    /// Every writ, newest first, with what was spent.
    List,
    /// One writ, whole.
    Show {
        /// The writ.
        writ: String,
    },
}

/// When a writ granted now with `--expires` ends.
fn expiry(text: &str, now_ms: i64) -> anyhow::Result<String> {
    if let Ok(d) = humantime::parse_duration(text) {
        let ms = i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        let until = now_ms.saturating_add(ms);
        if until > 253_402_300_799_000 {
            bail!("--expires {text:?} is past the year 9999; give a shorter time");
        }
        return Ok(check::format_time(until));
    }
    check::parse_time(text)
        .map(|_| text.to_owned())
        .map_err(|_| {
            anyhow::anyhow!("--expires {text:?}: give a duration (8h) or an RFC 3339 time")
        })
}

impl Scope {
    /// The body of a writ with this scope; `parent` fills what is not given.
    fn body(self, issuer: String, parent: Option<&WritBody>) -> anyhow::Result<WritBody> {
        let now = kura_work::now_ms();
        let pick = |given: Vec<String>, from: Option<&Vec<String>>, default: &str| {
            if !given.is_empty() {
                given
            } else {
                from.cloned().unwrap_or_else(|| vec![default.to_owned()])
            }
        };
        let tools = pick(self.tools, parent.map(|p| &p.tools), "");
        if tools == [""] {
            bail!("give at least one --tool glob (e.g. --tool 'fs.*')");
        }
        let pb = parent.map(|p| &p.budget);
        let budget = Budget {
            tool_calls: self.tool_calls.or(pb.and_then(|b| b.tool_calls)),
            tokens: self.tokens.or(pb.and_then(|b| b.tokens)),
            money_micros: self.money_micros.or(pb.and_then(|b| b.money_micros)),
            wall_ms: self
                .wall
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
                .or(pb.and_then(|b| b.wall_ms)),
        };
        let expires_at = match (&self.expires, parent) {
            (Some(e), _) => expiry(e, now)?,
            (None, Some(p)) => p.expires_at.clone(),
            (None, None) => expiry("24h", now)?,
        };
        Ok(WritBody {
            kind: WRIT_KIND.into(),
            id: proto::WritId::new(),
            holder: self.holder,
            issuer,
            parent: parent.map(|p| p.id),
            paths: pick(self.paths, parent.map(|p| &p.paths), "*"),
            tools,
            ceiling: self
                .ceiling
                .or(parent.map(|p| p.ceiling))
                .unwrap_or(Effect::Read),
            budget,
            issued_at: check::format_time(now),
            expires_at,
            delegate_key: self.delegate_key.map(|k| k.to_ascii_lowercase()),
        })
    }
}

impl WritCmd {
    /// Runs one `kura writ` subcommand.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let mut store = ctx.open_store()?;
        let (out, json) = (&mut ctx.out, ctx.json);
        match self {
            WritCmd::Grant {
                scope,
                key,
                sealer_key,
            } => {
                use_sealer(&mut store, sealer_key.as_deref())?;
                grant(&mut store, out, json, scope, &key)
            }
            WritCmd::Delegate {
                parent,
                scope,
                key,
                sealer_key,
            } => {
                use_sealer(&mut store, sealer_key.as_deref())?;
                delegate(&mut store, out, json, &parent, scope, &key)
            }
            WritCmd::Revoke {
                writ,
                reason,
                key,
                as_delegator,
                sealer_key,
            } => {
                use_sealer(&mut store, sealer_key.as_deref())?;
                revoke(&mut store, out, json, &writ, &reason, &key, as_delegator)
            }
            WritCmd::List => list(&store, out, json),
            WritCmd::Show { writ } => show(&store, out, &writ),
        }?;
        Ok(Outcome::Ok)
    }
}

fn grant(
    store: &mut Store,
    out: &mut Out,
    json: bool,
    scope: Scope,
    key: &std::path::Path,
) -> anyhow::Result<()> {
    let (name, signing) = kura_serve::runtime::person::load(key)?;
    let w = check::sign_writ(&signing, scope.body(format!("user:{name}"), None)?);
    let issuers = super::people()?;
    check::verify_grant(&w, &issuers).map_err(|e| match e {
        check::WritError::Untrusted(why) => anyhow::anyhow!(
            "{why} (serve.toml's [writs] issuers, or KURA_WRITS__ISSUERS; hashi and aegis need the same)"
        ),
        other => other.into(),
    })?;
    let sealer = store.sealer().cloned();
    let author = format!("user:{name}");
    store.write(|tx| writs::grant(tx, &w, &author, sealer.as_ref()))??;
    print_granted(out, json, &w.body)
}

fn delegate(
    store: &mut Store,
    out: &mut Out,
    json: bool,
    parent: &str,
    scope: Scope,
    key: &std::path::Path,
) -> anyhow::Result<()> {
    let p = writs::writ(store, parent.parse()?)?
        .with_context(|| format!("no writ {parent} here (see `kura writ list`)"))?;
    let (name, signing) = kura_serve::runtime::person::load(key)?;
    let body = scope.body(format!("writ:{parent}"), Some(&p.writ.body))?;
    let w = check::sign_writ(&signing, body);
    let sealer = store.sealer().cloned();
    let author = if p.writ.body.holder.starts_with("session:") {
        format!("user:{name}")
    } else {
        p.writ.body.holder.clone()
    };
    store.write(|tx| writs::grant(tx, &w, &author, sealer.as_ref()))??;
    print_granted(out, json, &w.body)
}

fn print_granted(out: &mut Out, json: bool, w: &WritBody) -> anyhow::Result<()> {
    if json {
        out.json(w)?;
    } else {
        out.line(w.id.to_string())?;
    }
    Ok(())
}

fn revoke(
    store: &mut Store,
    out: &mut Out,
    json: bool,
    id: &str,
    reason: &str,
    key: &std::path::Path,
    as_delegator: bool,
) -> anyhow::Result<()> {
    let target = writs::writ(store, id.parse()?)?
        .with_context(|| format!("no writ {id} here (see `kura writ list`)"))?;
    let (name, signing) = kura_serve::runtime::person::load(key)?;
    let by = match (&target.writ.body.parent, as_delegator) {
        (Some(p), true) => format!("writ:{p}"),
        (None, true) => {
            bail!("writ {id} was granted by a person, not delegated: drop --as-delegator")
        }
        (_, false) => format!("user:{name}"),
    };
    let body = RevocationBody {
        kind: REVOCATION_KIND.into(),
        writ_id: target.writ.body.id,
        by: by.clone(),
        reason: proto::text::escape_controls(reason).into_owned(),
        revoked_at: check::format_time(kura_work::now_ms()),
    };
    let r = check::sign_revocation(&signing, body);
    let issuers = super::people()?;
    let sealer = store.sealer().cloned();
    let record = store.write(|tx| writs::revoke(tx, &r, &issuers, &by, sealer.as_ref()))??;
    if json {
        out.json(&Revoked {
            writ: id,
            revocation_record: &record.to_string(),
        })?;
    } else {
        out.line(format!("writ {id} revoked (record {record})"))?;
    }
    Ok(())
}

fn state(w: &StoredWrit, now: i64) -> &'static str {
    let expired = check::parse_time(&w.writ.body.expires_at).is_ok_and(|t| now >= t);
    match (w.revoked_by.is_some(), expired) {
        (true, _) => "revoked",
        (false, true) => "expired",
        _ => "live",
    }
}

fn limit(v: Option<u64>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

fn list(store: &Store, out: &mut Out, json: bool) -> anyhow::Result<()> {
    let all = writs::list(store)?;
    if json {
        return out.json(&all);
    }
    let now = kura_work::now_ms();
    for w in &all {
        let b = &w.writ.body;
        out.line(format!(
            "{}  {:<7} {}  tools {}  ceiling {}  calls {}/{}  tokens {}/{}  money {}/{}  refused {}  until {}{}",
            b.id,
            state(w, now),
            proto::text::escape_controls(&b.holder).into_owned(),
            proto::text::escape_controls(&b.tools.join(",")).into_owned(),
            b.ceiling,
            w.calls_used,
            limit(b.budget.tool_calls),
            w.tokens_used,
            limit(b.budget.tokens),
            w.money_used,
            limit(b.budget.money_micros),
            w.refused,
            b.expires_at,
            b.parent.map(|p| format!("  from {p}")).unwrap_or_default(),
        ))?;
    }
    Ok(())
}

fn show(store: &Store, out: &mut Out, id: &str) -> anyhow::Result<()> {
    let w = writs::writ(store, id.parse()?)?
        .with_context(|| format!("no writ {id} here (see `kura writ list`)"))?;
    out.json(&w)
}

/// `kura writ revoke --json`.
#[derive(serde::Serialize)]
struct Revoked<'a> {
    /// The writ revoked.
    writ: &'a str,
    /// The `sys.revocation` record.
    revocation_record: &'a str,
}
