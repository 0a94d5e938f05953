//! The seal log's signing side from the command line: `kura checkpoint`, `kura log-key …`
//! and `kura prove-consistency` (the work itself is in [`kura_serve::anchor`]).

use std::path::PathBuf;

use super::Ctx;
use super::Outcome;

/// Sign (with --key) or print the latest checkpoint of the seal log (C2SP signed note).
#[derive(Debug, clap::Args)]
pub struct Checkpoint {
    /// The log key; signing refuses a log that does not extend the last checkpoint.
    #[arg(long, env = "KURA_LOG_KEY")]
    key: Option<PathBuf>,
    /// The signer's last checkpoint. Default: `[serve] checkpoint_file`, else `DB.checkpoint`.
    #[arg(long)]
    state: Option<PathBuf>,
    /// With --key, when the last checkpoint is missing but the log has leaves: trust the
    /// log as it is now and start the signed history here (compare it with your
    /// witnesses first; a rewrite made before now is accepted).
    #[arg(long, requires = "key")]
    trust_current: bool,
}

/// An RFC 6962 consistency proof from an old checkpoint to a newer one (default: the
/// store's log now), as JSON; exit 2 if the store does not extend it.
#[derive(Debug, clap::Args)]
pub struct ProveConsistency {
    /// The old checkpoint file.
    old: PathBuf,
    /// The newer checkpoint file.
    new: Option<PathBuf>,
}

/// `kura log-key ...`
#[derive(Debug, clap::Subcommand)]
pub enum LogKeyCmd {
    /// Make a log key (0600, never overwriting) and print its verifier key.
    Init {
        /// Where to write it.
        #[arg(long)]
        out: PathBuf,
        /// The log's name: every checkpoint's origin, unique as witnesses know a log by it
        /// (e.g. `kura.HOST/log/RANDOM`); for a witness key, its name (e.g. `HOST.witness`).
        #[arg(long)]
        name: String,
        /// A witness key: print its cosignature (c2sp.org/tlog-cosignature) verifier key.
        #[arg(long)]
        witness: bool,
    },
    /// Print a key's verifier key (to pin it elsewhere).
    Show {
        /// The key file.
        #[arg(long)]
        key: PathBuf,
        /// As a witness key (its cosignature verifier key).
        #[arg(long)]
        witness: bool,
    },
}

impl Checkpoint {
    /// Signs (with `--key`) or prints the latest checkpoint.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let store = ctx.open_store()?;
        let Checkpoint {
            key,
            state,
            trust_current,
        } = self;
        let db = store.path().to_path_buf();
        let signing = kura_serve::anchor::Signing {
            key: key.as_deref(),
            state: state.as_deref(),
            trust_current,
        };
        let note = kura_serve::anchor::checkpoint(&store, &db, &signing)?;
        ctx.out.line(note.trim_end())?;
        Ok(Outcome::Ok)
    }
}

impl ProveConsistency {
    /// Prints the proof; an error when the store does not extend OLD.
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let store = ctx.open_store()?;
        let proof = kura_serve::anchor::prove_consistency(&store, &self.old, self.new.as_deref())?;
        ctx.out.json_sorted(&proof)?;
        anyhow::ensure!(
            proof.consistent,
            "the store's log does not extend that checkpoint"
        );
        Ok(Outcome::Ok)
    }
}

impl LogKeyCmd {
    /// Runs one `kura log-key` subcommand (no store needed).
    pub fn run(self, ctx: &mut Ctx) -> anyhow::Result<Outcome> {
        let (out, json) = (&mut ctx.out, ctx.json);
        match self {
            LogKeyCmd::Init {
                out: path,
                name,
                witness,
            } => {
                let vkey = kura_serve::anchor::init_key(&path, &name, witness)?;
                if json {
                    out.json_sorted(&NewKey {
                        key: &path,
                        verifier: &vkey,
                    })?;
                } else {
                    out.line(format!(
                        "log key written to {} (0600; hand it to kura serve only)",
                        path.display()
                    ))?;
                    out.line(if witness {
                        "give its cosignature verifier key to the Kura it witnesses ([[serve.witness_peers]] vkey):"
                    } else {
                        "pin its verifier key in /etc/kura/serve.toml ([serve] log_verifier) and with every witness:"
                    })?;
                    out.line(vkey)?;
                }
            }
            LogKeyCmd::Show { key, witness } => {
                let key = kura_serve::tlog::checkpoint::LogKey::load(&key)?;
                out.line(kura_serve::anchor::verifier_of(&key, witness))?;
            }
        }
        Ok(Outcome::Ok)
    }
}

/// `kura log-key init --json`.
#[derive(serde::Serialize)]
struct NewKey<'a> {
    /// Where the key was written.
    key: &'a std::path::Path,
    /// Its verifier key, to pin.
    verifier: &'a str,
}
