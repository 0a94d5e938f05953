//! The checkpoint signer: signs the seal log as it grows (refusing a log that does not extend
//! its last checkpoint), has peer witnesses cosign, hands the note to every witness.

use std::path::PathBuf;

use kura_runtime::bus::Credentials;
use kura_store::Store;
use kura_tlog::checkpoint::LogKey;
use kura_tlog::witness;

use crate::anchor;
use crate::config::ServeConfig;
use crate::witnessing::{self, Asked, GitWitness, Handed, WitnessPeer};

/// The checkpoint signer: the log key, where its last checkpoint lives, its witnesses.
pub(crate) struct Signer {
    key: LogKey,
    /// The key's file when configured (a person signs with it by hand).
    key_path: Option<PathBuf>,
    state: PathBuf,
    /// Rounds refused since start (an ALARM each).
    refused: std::sync::atomic::AtomicU64,
    witnesses: Vec<PathBuf>,
    git: Vec<GitWitness>,
    peers: Vec<WitnessPeer>,
    /// This daemon's bus identity (peers list it) and the subjects' prefix.
    own: Credentials,
    subject: String,
    runtime: tokio::runtime::Handle,
    /// One round at a time (the scheduler and the fleet publisher both sign).
    lock: std::sync::Mutex<()>,
}

impl Signer {
    /// The configured key (or systemd's `log.key` credential); none means no signing. A key
    /// other than the pinned `log_verifier` is refused.
    pub(crate) fn load(config: &ServeConfig) -> anyhow::Result<Option<Signer>> {
        let path = config.serve.log_key.clone().or_else(|| {
            std::env::var_os("CREDENTIALS_DIRECTORY")
                .map(|d| PathBuf::from(d).join("log.key"))
                .filter(|p| p.exists())
        });
        let Some(path) = path else {
            return Ok(None);
        };
        let key = LogKey::load(&path)?;
        if let Some(pinned) = &config.serve.log_verifier
            && pinned.trim() != key.verifier()
        {
            anyhow::bail!(
                "the log key {} is not the pinned [serve] log_verifier ({pinned})",
                path.display()
            );
        }
        Ok(Some(Signer {
            key,
            key_path: config.serve.log_key.clone(),
            refused: std::sync::atomic::AtomicU64::new(0),
            state: kura_tlog::witness::head_file(
                config.serve.checkpoint_file.as_deref(),
                &config.common.db,
            ),
            witnesses: config.serve.witness_dirs.clone(),
            git: config.serve.witness_git.clone(),
            peers: config.serve.witness_peers.clone(),
            own: if config.serve.witness_peers.iter().any(|p| p.seed.is_none()) {
                Credentials::from_common(&config.common)?
            } else {
                Credentials::default()
            },
            subject: config.common.subjects()?.witness_add_checkpoint(),
            runtime: tokio::runtime::Handle::current(),
            lock: std::sync::Mutex::new(()),
        }))
    }

    /// Logs and counts a refusal to sign; what `kura status` shows until it is resolved.
    fn alarm(&self, why: String) -> Round {
        let n = self
            .refused
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        tracing::error!(%why, refused_rounds = n, "ALARM: not signing a checkpoint");
        Round::Alarm(format!("{why} ({n} rounds refused since start)"))
    }

    /// Signs the log as it is now unless it does not extend the last checkpoint, has peers
    /// cosign it, then hands it to every witness. Returns what `kura status` should show.
    pub(crate) fn round(&self, store: &Store) -> Round {
        let _one = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let last = match anchor::read_head(&self.state) {
            Ok(last) => last,
            Err(e) => return self.alarm(format!("{e:#}; not signing")),
        };
        let (mut note, cp) =
            match witness::sign_next(&store.seal_log(), &self.key, last.as_deref(), false) {
                Ok(Ok(signed)) => signed,
                Ok(Err(why @ witness::Refusal::NoHead { .. })) => {
                    let help = anchor::no_head_help(&self.state, self.key_path.as_deref());
                    return self.alarm(format!("{why}: {help}"));
                }
                Ok(Err(why)) => return self.alarm(why.to_string()),
                Err(e) => {
                    tracing::error!(error = %e, "cannot sign a checkpoint");
                    return Round::Failed(e.to_string());
                }
            };
        let mut alarms = Vec::new();
        let mut cosigned = Vec::new();
        for peer in &self.peers {
            let asked = self.runtime.block_on(witnessing::ask(
                peer,
                &self.own,
                &self.subject,
                &store.seal_log(),
                &note,
            ));
            match asked {
                Asked::Cosigned(with) => {
                    note = with;
                    cosigned.push(peer.name.clone());
                }
                Asked::Refused(why) => {
                    tracing::error!(witness = %peer.name, %why, "ALARM: a witness refused the checkpoint");
                    alarms.push(why);
                }
                Asked::Unreachable(why) => {
                    tracing::warn!(witness = %peer.name, %why, "witness not reachable")
                }
            }
        }
        // Unchanged (the log did not grow and no peer cosigned anew): no write.
        if last.as_deref() != Some(note.as_str())
            && let Err(e) = witness::save_last(&self.state, &note)
        {
            tracing::error!(error = %e, "cannot keep the checkpoint");
        }
        let vkey = self.key.verifier();
        let dirs = self.witnesses.iter().map(|d| {
            (
                d.display().to_string(),
                witness::publish(d, &store.seal_log(), &note, &cp, vkey)
                    .map(|answer| match answer {
                        Ok(()) => Handed::Kept,
                        Err(why) => Handed::Refused(why.to_string()),
                    })
                    .map_err(anyhow::Error::from),
            )
        });
        let gits = self.git.iter().map(|g| {
            (
                g.path.display().to_string(),
                witnessing::publish_git(g, &store.seal_log(), &note, &cp, vkey),
            )
        });
        for (name, outcome) in dirs.chain(gits) {
            match outcome {
                Ok(Handed::Kept) => {}
                Ok(Handed::Refused(why)) => {
                    tracing::error!(witness = %name, %why, "ALARM: a witness refused the checkpoint");
                    alarms.push(why);
                }
                Err(e) => tracing::warn!(witness = %name, error = %e, "witness not reachable"),
            }
        }
        tracing::info!(size = cp.size, cosigned_by = ?cosigned, "checkpoint signed");
        match alarms.first() {
            Some(why) => Round::Alarm(why.clone()),
            None => Round::Signed {
                size: cp.size,
                cosigned,
            },
        }
    }
}

impl crate::replicate::SignAt for Signer {
    /// The signer's last checkpoint when it is at `size` (after a round when the log grew
    /// past it); for a smaller size, a checkpoint of that prefix, signed only while the log
    /// still extends the last checkpoint (so it is consistent with everything signed).
    fn note_at(&self, store: &Store, size: u64) -> Option<String> {
        let head = |s: &Signer| {
            let note = anchor::read_head(&s.state).ok()??;
            let cp = kura_tlog::checkpoint::open(&note, s.key.verifier()).ok()?;
            Some((note, cp))
        };
        let mut last = head(self);
        if last.as_ref().is_none_or(|(_, cp)| cp.size < size) {
            if let Round::Alarm(_) = self.round(store) {
                return None;
            }
            last = head(self);
        }
        let (note, cp) = last?;
        if cp.size == size {
            return Some(note);
        }
        let _one = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        if !matches!(
            kura_tlog::checkpoint::extends(&store.seal_log(), &cp),
            Ok(Ok(()))
        ) || size > cp.size
        {
            return None;
        }
        let root = kura_tlog::seallog::root(&store.seal_log(), size).ok()?;
        self.key.sign(size, root).ok()
    }
}

/// What one signing round came to; `kura status` shows it beside the daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Round {
    /// Signed at this size, and cosigned by these peers.
    Signed {
        /// The log's size signed.
        size: u64,
        /// Peers that cosigned it.
        cosigned: Vec<String>,
    },
    /// Refused to sign, or a witness refused what was signed: an ALARM.
    Alarm(String),
    /// Could not sign at all (the store or the key).
    Failed(String),
}

impl Round {
    /// What `kura status` shows beside the daemon: an ALARM as an ALARM.
    pub(crate) fn detail(&self) -> kura_work::ops::Detail {
        match self {
            Round::Alarm(why) => kura_work::ops::Detail::alarm(why),
            other => other.to_string().into(),
        }
    }
}

impl std::fmt::Display for Round {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Round::Signed { size, cosigned } if cosigned.is_empty() => {
                write!(f, "checkpoint {size}")
            }
            Round::Signed { size, cosigned } => {
                write!(f, "checkpoint {size} cosigned by {}", cosigned.join(", "))
            }
            Round::Alarm(why) => write!(f, "ALARM: {why}"),
            Round::Failed(why) => write!(f, "checkpoint failed: {why}"),
        }
    }
}
