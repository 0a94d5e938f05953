//! Where history is anchored: the log key, the signer's head beside the database,
//! checkpoints signed by hand, consistency proofs, the keyring, and which checkpoint
//! `kura verify` holds the store to — shared by the signer and the `kura` command line.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use base64::Engine as _;
use kura_store::Store;
use kura_store::verify::{Problem, Report};
use kura_tlog::checkpoint::{self, LogKey};
use kura_tlog::{seallog, witness};
use serde::Serialize;

use crate::config::ServeConfig;

/// `kura prove-consistency`'s reply.
#[derive(Debug, Serialize)]
pub struct Consistency {
    /// The newer tree extends the old one.
    pub consistent: bool,
    /// The newer tree's root (base64).
    pub new_root: String,
    /// The newer tree's size.
    pub new_size: u64,
    /// The old tree's root (base64).
    pub old_root: String,
    /// The old tree's size.
    pub old_size: u64,
    /// The log's name.
    pub origin: String,
    /// The RFC 6962 consistency proof, hash by hash (base64).
    pub proof: Vec<String>,
}

/// `kura log-key init`: a new log key written 0600 (never over an existing file); returns
/// its verifier key (as a witness's cosignature key when `witness`).
pub fn init_key(path: &Path, name: &str, witness: bool) -> anyhow::Result<String> {
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let (skey, _) = checkpoint::generate(name)?;
    let vkey = verifier_of(&LogKey::from_text(&skey)?, witness);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {} (never overwritten)", path.display()))?;
    writeln!(f, "{skey}")?;
    f.sync_all()?;
    Ok(vkey)
}

/// A key's verifier key: the log's (signed-note Ed25519), or as a witness (cosignature/v1).
pub fn verifier_of(key: &LogKey, witness: bool) -> String {
    if witness {
        kura_tlog::cosign::witness_verifier(key)
    } else {
        key.verifier().to_owned()
    }
}

/// The serve config `kura verify` and `kura checkpoint` read their defaults from:
/// `$KURA_SERVE_CONFIG`, else `/etc/kura/serve.toml` when it exists.
pub fn serve_config() -> anyhow::Result<Option<ServeConfig>> {
    let path = std::env::var_os("KURA_SERVE_CONFIG")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from("/etc/kura/serve.toml")).filter(|p| p.exists()));
    match path {
        Some(p) => Ok(Some(
            kura_runtime::config::load_with_env::<ServeConfig>(Some(&p), std::iter::empty())?.0,
        )),
        None => Ok(None),
    }
}

/// Reads the signer's head: `None` when there is none; any other failure is an error (an
/// unreadable head is not a missing one).
pub fn read_head(path: &Path) -> anyhow::Result<Option<String>> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => {
            Err(e).with_context(|| format!("cannot read the signer's head {}", path.display()))
        }
    }
}

/// What a person does after a `NoHead` refusal, as one sentence.
pub fn no_head_help(state: &Path, key: Option<&Path>) -> String {
    let key = key.map_or_else(
        || "/etc/kura/log.key".to_owned(),
        |k| k.display().to_string(),
    );
    format!(
        "{} is gone; compare the store with your witnesses (kura verify --all) and, if it is \
         the history you expect, accept it with: kura checkpoint --key {key} --trust-current",
        state.display()
    )
}

/// `kura checkpoint`'s options.
#[derive(Debug, Default)]
pub struct Signing<'a> {
    /// The log key: sign with it (else print the last checkpoint).
    pub key: Option<&'a Path>,
    /// The signer's head, when not the configured one.
    pub state: Option<&'a Path>,
    /// Start the signed history at the log as it is now when the head is missing.
    pub trust_current: bool,
}

/// `kura checkpoint`: with a key, sign the log as it is now (refusing a tree that does not
/// extend the last one signed, or a non-empty log with no last one unless the person says
/// `--trust-current`) and return it; without, return the last one signed.
pub fn checkpoint(store: &Store, db: &Path, signing: &Signing<'_>) -> anyhow::Result<String> {
    let config = serve_config()?;
    let state = kura_tlog::witness::head_file(
        signing.state.or(config
            .as_ref()
            .and_then(|c| c.serve.checkpoint_file.as_deref())),
        db,
    );
    let last = read_head(&state)?;
    let Some(key_path) = signing.key else {
        let note = last.with_context(|| {
            format!(
                "no checkpoint signed yet ({} is missing); sign one with --key or run kura serve",
                state.display()
            )
        })?;
        return Ok(note);
    };
    let key = LogKey::load(key_path)?;
    match witness::sign_next(
        &store.seal_log(),
        &key,
        last.as_deref(),
        signing.trust_current,
    )? {
        Ok((note, cp)) => {
            if last.is_none() && cp.size > 0 {
                eprintln!(
                    "trusting the seal log as it is now ({} leaves): the signed history starts here",
                    cp.size
                );
            }
            witness::save_last(&state, &note)?;
            Ok(note)
        }
        Err(why @ witness::Refusal::NoHead { .. }) => {
            bail!("{why}: {}", no_head_help(&state, Some(key_path)))
        }
        Err(why) => bail!("{why}"),
    }
}

fn read_body(path: &Path) -> anyhow::Result<tlog_tiles::Checkpoint> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))?;
    let note = signed_note::Note::from_bytes(text.as_bytes())
        .map_err(|e| anyhow::anyhow!("{}: not a signed note: {e}", path.display()))?;
    tlog_tiles::Checkpoint::from_bytes(note.text())
        .map_err(|_| anyhow::anyhow!("{}: not a tlog checkpoint", path.display()))
}

/// `kura prove-consistency OLD [NEW]`: the RFC 6962 proof that the tree of NEW (default:
/// the store's log now) extends the tree of OLD, from the store's hashes. The reply says
/// whether it does (`consistent`); the caller prints it, then fails when it does not.
pub fn prove_consistency(
    store: &Store,
    old: &Path,
    new: Option<&Path>,
) -> anyhow::Result<Consistency> {
    let old = read_body(old)?;
    let (new_size, new_root) = match new {
        Some(p) => {
            let c = read_body(p)?;
            (c.size(), *c.hash())
        }
        None => {
            let n = seallog::size(&store.seal_log())?;
            (n, seallog::root(&store.seal_log(), n)?)
        }
    };
    let proof = seallog::consistency_proof(&store.seal_log(), old.size(), new_size)?;
    let b64 = |h: &tlog_tiles::Hash| base64::engine::general_purpose::STANDARD.encode(h.0);
    let ok = old.size() == 0
        || (old.size() == new_size && *old.hash() == new_root)
        || (old.size() < new_size
            && tlog_tiles::check_tree(&proof, new_size, new_root, old.size(), *old.hash()).is_ok());
    Ok(Consistency {
        consistent: ok,
        new_root: b64(&new_root),
        new_size,
        old_root: b64(old.hash()),
        old_size: old.size(),
        origin: old.origin().to_owned(),
        proof: proof.iter().map(b64).collect(),
    })
}

/// The log's verifier key: given, else `[serve] log_verifier`.
pub fn log_verifier(given: Option<String>) -> anyhow::Result<String> {
    match given {
        Some(v) => Ok(v),
        None => serve_config()?
            .and_then(|c| c.serve.log_verifier)
            .context("a checkpoint is checked with the log's verifier key: give --log-key"),
    }
}

/// Where to read a configured keyring: the path itself, or — under systemd, where the unit
/// cannot read root's keys directory — the copy systemd hands over as a credential.
pub fn readable_keyring(configured: &std::path::Path) -> PathBuf {
    if std::fs::File::open(configured).is_err()
        && let Some(copy) = std::env::var_os("CREDENTIALS_DIRECTORY")
            .map(|d| PathBuf::from(d).join(kura_runtime::identity::IDENTITIES_FILE))
            .filter(|p| p.exists())
    {
        return copy;
    }
    configured.to_path_buf()
}

/// The keyring `kura verify` checks sealers against: the file given, else `[serve] keyring`;
/// every service in it by its statement key (`signer`; a bus key never seals).
pub fn keyring(file: Option<PathBuf>) -> anyhow::Result<Option<kura_tlog::sealer::Keyring>> {
    let file = match file {
        Some(f) => Some(f),
        None => serve_config()?.and_then(|c| c.serve.keyring),
    };
    keyring_file(file)
}

/// The keyring in `file` alone (no default from serve.toml), if one is given.
pub fn keyring_file(file: Option<PathBuf>) -> anyhow::Result<Option<kura_tlog::sealer::Keyring>> {
    let file = file.map(|f| readable_keyring(&f));
    let Some(file) = file else {
        return Ok(None);
    };
    let ids = kura_runtime::identity::Identities::load_file(&file)?;
    let mut ring = kura_tlog::sealer::Keyring::default();
    for id in ids.list {
        if let Some(signer) = id.signer {
            ring.add(signer, id.name.clone(), 0, None);
        }
        for (n, r) in id.retired.into_iter().enumerate() {
            ring.add(r.key, id.name.clone(), n + 1, r.until);
        }
    }
    Ok(Some(ring))
}

/// Said when no log key is configured: nothing outside the file holds its history.
const NO_LOG_KEY: &str = "WARNING: history is anchored nowhere: no log key signs checkpoints \
     ([serve] log_verifier, or --log-key), so a consistent rewrite of the database would pass; \
     set up a log key and a witness (README: The seal log, checkpoints and witnesses)";

/// Said when a checkpoint is found but no witness keeps one.
const NO_WITNESS: &str = "; WARNING: no witness keeps a copy (only the signer's own head \
     does): add witness_dirs, witness_git or witness_peers to serve.toml";

/// `kura status`'s line on where history is anchored: the newest signed checkpoint the
/// serve config leads to and who keeps it, or a warning that nothing does.
pub fn anchoring(db: &Path) -> String {
    let trust = match Trust::resolve(None, Vec::new(), Vec::new(), db) {
        Ok(t) => t,
        Err(e) => return format!("history: cannot read the serve config: {e:#}"),
    };
    let Some(vkey) = &trust.vkey else {
        return NO_LOG_KEY.to_owned();
    };
    let Some(found) = witness::newest(&trust.files, &trust.dirs, vkey).0 else {
        return trust.nowhere();
    };
    let mut line = format!(
        "history: anchored by checkpoint size {} from {}",
        found.checkpoint.size,
        found.source.display()
    );
    if trust.dirs.is_empty() && trust.cosigners.is_empty() {
        line.push_str(NO_WITNESS);
    } else {
        line.push_str(&format!(
            "; witnesses: {} directories, {} peers",
            trust.dirs.len(),
            trust.cosigners.len()
        ));
    }
    line
}

/// What `kura verify` holds the store to: the log's verifier key, checkpoint files and
/// witness directories — given on the command line, else from the serve config.
#[derive(Debug, Default)]
pub struct Trust {
    /// The log's verifier key.
    pub vkey: Option<String>,
    /// Checkpoint files.
    pub files: Vec<PathBuf>,
    /// Witness directories (and git witnesses' work trees).
    pub dirs: Vec<PathBuf>,
    /// Peer witnesses' cosignature verifier keys, to say who cosigned the checkpoint used.
    pub cosigners: Vec<String>,
    /// When the store is another Pi's replica: that Pi's name.
    pub replica_of: Option<String>,
}

/// What a replica (`replicas/<pi>.db`) is held to: the log key and keyring this Pi pins for
/// that peer in serve.toml (`[[fleet.peers]]`), and the signed checkpoint it was last
/// verified against, kept beside it — never this Pi's own log key and keyring (every ledger
/// would fail `sealer_unknown`), and never keys found in the data's own directory. `None`
/// when `store` is not the replica of a configured peer (its one inbox origin, a valid Pi
/// name, in a file named `<pi>.db`).
pub fn replica_trust(
    store: &Store,
) -> anyhow::Result<Option<(Trust, Option<kura_tlog::sealer::Keyring>)>> {
    let Some(config) = serve_config()? else {
        return Ok(None);
    };
    let dir = store.path().parent().unwrap_or(Path::new("."));
    let canonical = |p: &Path| std::fs::canonicalize(p).ok();
    let in_replicas = match &config.fleet.replicas_dir {
        Some(d) => canonical(d).is_some_and(|d| canonical(dir) == Some(d)),
        None => canonical(dir).is_some_and(|d| d.ends_with("replicas")),
    };
    let own = canonical(&config.common.db).is_some_and(|d| canonical(store.path()) == Some(d));
    // Decided first by where the file is — `<peer>.db` in the replicas directory is that
    // peer's replica, whatever its own tables say — then by what it says it replicates.
    let named = config.fleet.peers.iter().find(|p| {
        proto::fleet::check_pi_name(&p.name).is_ok()
            && store.path().file_name() == Some(std::ffi::OsStr::new(&format!("{}.db", p.name)))
    });
    let peer = match named {
        Some(p) if in_replicas && !own => p,
        _ => {
            let foreign = foreign_origins(store, &config)?;
            if foreign.is_empty() {
                return Ok(None);
            }
            // It says it replicates another Pi, but it is not the replica of a peer this Pi
            // pins: nothing here may choose the keys it is held to.
            bail!(
                "{} replicates {} but is not a replica of a [[fleet.peers]] this Pi pins (in the replicas directory, named <pi>.db): pass --log-key, --checkpoint and --keyring (that Pi's) to verify it",
                store.path().display(),
                foreign.join(", ")
            );
        }
    };
    let origin = &peer.name;
    let keyring = match &peer.keyring {
        Some(k) => keyring(Some(k.clone()))?,
        None => None,
    };
    let trust = Trust {
        vkey: Some(peer.log_verifier.trim().to_owned()),
        files: vec![kura_fleet::receive::checkpoint_path(dir, origin)],
        replica_of: Some(origin.clone()),
        ..Trust::default()
    };
    Ok(Some((trust, keyring)))
}

/// The Pis other than this one whose history `store` says it replicates (none for this Pi's
/// own database, even restored from the hub).
pub fn foreign_origins(store: &Store, config: &ServeConfig) -> anyhow::Result<Vec<String>> {
    Ok(kura_store::replica::origins(store)?
        .into_iter()
        .filter(|o| config.fleet.name.as_deref() != Some(o.as_str()))
        .collect())
}

/// What another Pi's history is held to when the person names it: only the flags, nothing
/// from this Pi's `[serve]` (its witnesses keep this Pi's checkpoints, not that Pi's).
pub fn told_for_foreign(
    store: &Store,
    vkey: Option<String>,
    files: Vec<PathBuf>,
    dirs: Vec<PathBuf>,
) -> anyhow::Result<Option<Trust>> {
    let Some(config) = serve_config()? else {
        return Ok(None);
    };
    if foreign_origins(store, &config)?.is_empty() {
        return Ok(None);
    }
    Ok(Some(Trust {
        vkey,
        files,
        dirs,
        ..Trust::default()
    }))
}

impl Trust {
    /// From the flags, filled in from the serve config.
    pub fn resolve(
        vkey: Option<String>,
        files: Vec<PathBuf>,
        dirs: Vec<PathBuf>,
        db: &Path,
    ) -> anyhow::Result<Trust> {
        let mut t = Trust {
            vkey,
            files,
            dirs,
            cosigners: Vec::new(),
            replica_of: None,
        };
        if let Some(c) = serve_config()? {
            if t.vkey.is_none() {
                t.vkey = c.serve.log_verifier.clone();
            }
            if t.dirs.is_empty() {
                t.dirs = c.serve.witness_dirs.clone();
                t.dirs
                    .extend(c.serve.witness_git.iter().map(|g| g.path.clone()));
            }
            t.cosigners = c
                .serve
                .witness_peers
                .iter()
                .map(|p| p.vkey.clone())
                .collect();
            // A config without a log key (or a checkpoint file) asks for no checkpoint check.
            if t.files.is_empty() && (t.vkey.is_some() || c.serve.checkpoint_file.is_some()) {
                t.files.push(kura_tlog::witness::head_file(
                    c.serve.checkpoint_file.as_deref(),
                    db,
                ));
            }
        }
        if t.vkey.is_some() && t.files.is_empty() {
            t.files.push(kura_tlog::witness::head_file(None, db));
        }
        Ok(t)
    }

    /// The loud line for "no signed checkpoint found", naming where it looked.
    fn nowhere(&self) -> String {
        let looked: Vec<String> = self
            .files
            .iter()
            .cloned()
            .chain(self.dirs.iter().map(|d| d.join(witness::CHECKPOINT_FILE)))
            .map(|p| p.display().to_string())
            .collect();
        format!(
            "WARNING: history is anchored nowhere: no signed checkpoint found to check against \
             (looked in {}); a consistent rewrite of the database would pass. If kura serve \
             signs with a log key, `kura status` says why it has not",
            if looked.is_empty() {
                "nothing".to_owned()
            } else {
                looked.join(", ")
            }
        )
    }

    /// Checks the store against the newest checkpoint found; adds problems to `report` and
    /// returns a line saying which checkpoint was used (or why none).
    pub fn check(&self, store: &Store, report: &mut Report) -> anyhow::Result<Option<String>> {
        let Some(vkey) = &self.vkey else {
            if !self.files.is_empty() || !self.dirs.is_empty() {
                bail!("checking a checkpoint needs the log's verifier key (--log-key)");
            }
            return Ok(Some(NO_LOG_KEY.into()));
        };
        let (found, refused) = witness::newest(&self.files, &self.dirs, vkey);
        for r in refused {
            report.problems.push(Problem {
                kind: "checkpoint",
                id: String::new(),
                check: "checkpoint_signature",
                detail: r,
            });
        }
        let Some(found) = found else {
            // A replica is verified only against its origin's checkpoint: without it, nothing
            // outside the file holds the replica's history, and that is a failure, not a note.
            if let Some(origin) = &self.replica_of {
                report.problems.push(Problem {
                    kind: "checkpoint",
                    id: String::new(),
                    check: "checkpoint_missing",
                    detail: format!(
                        "no checkpoint of {origin} beside the replica ({}): kura serve keeps it \
                         there after every verified batch; pass --checkpoint FILE and --log-key",
                        self.files
                            .iter()
                            .map(|f| f.display().to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                });
            }
            return Ok(Some(self.nowhere()));
        };
        let cp = &found.checkpoint;
        let mut used = format!(
            "checked against checkpoint {} (size {}) from {}",
            cp.origin,
            cp.size,
            found.source.display()
        );
        if !self.cosigners.is_empty() {
            let text = std::fs::read_to_string(&found.source).unwrap_or_default();
            match kura_tlog::cosign::cosigned_by(&text, &self.cosigners) {
                Ok(by) if by.is_empty() => used.push_str(", cosigned by no witness yet"),
                Ok(by) => {
                    let names: Vec<String> = by
                        .iter()
                        .map(|c| {
                            let at = std::time::UNIX_EPOCH + std::time::Duration::from_secs(c.time);
                            format!("{} at {}", c.witness, kura_store::time::format(at))
                        })
                        .collect();
                    used.push_str(&format!(", cosigned by {}", names.join(", ")));
                }
                Err(e) => report.problems.push(Problem {
                    kind: "checkpoint",
                    id: String::new(),
                    check: "checkpoint_cosignature",
                    detail: format!("{}: {e}", found.source.display()),
                }),
            }
        }
        if let Some(origin) = &self.replica_of {
            used = format!(
                "a replica of {origin}, held to the log key and keyring [[fleet.peers]] pins for it: {used}"
            );
        } else if self.dirs.is_empty() && self.cosigners.is_empty() {
            used.push_str(NO_WITNESS);
        }
        if let Err(why) = checkpoint::extends(&store.seal_log(), cp)? {
            let first = witness::first_difference(&store.seal_log(), &self.dirs, cp.size)?;
            let (id, detail) = match first {
                Some((i, ledger, what)) => (
                    ledger,
                    format!("{why}; the first changed leaf is {i}: {what}"),
                ),
                None => (String::new(), why.to_string()),
            };
            report.problems.push(Problem {
                kind: "checkpoint",
                id,
                check: "checkpoint_consistency",
                detail: format!(
                    "checkpoint size {} from {}: {detail}",
                    cp.size,
                    found.source.display()
                ),
            });
        }
        Ok(Some(used))
    }
}
