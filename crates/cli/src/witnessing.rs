//! `kura serve`'s witnesses beyond a directory: answering other Kuras' `add-checkpoint`
//! requests over NATS (c2sp.org/tlog-witness, the body as the payload), asking peer Kuras
//! to cosign this log's checkpoints, and committing checkpoints to git repositories.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kura_runtime::Bus;
use kura_runtime::bus::Credentials;
use kura_store::checkpoint::Signed;
use kura_store::cosign::{self, Witness};
use kura_store::witness;
use serde::{Deserialize, Serialize};

/// The reply header carrying c2sp.org/tlog-witness's status code (200, 400, 403, 409, 422).
pub const STATUS_HEADER: &str = "Kura-Witness-Status";
/// A request larger than this is refused unread (a proof has at most 63 hashes).
const MAX_REQUEST: usize = 16 * 1024;

/// Another Kura that witnesses this one's log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WitnessPeer {
    /// What the journal and `kura status` call it.
    pub name: String,
    /// Its bus (`tls://HOST:4222`).
    pub url: String,
    /// Its bus CA (its `nats-ca.pem`), pinned.
    pub ca: PathBuf,
    /// The seed this Kura connects with; unset: this daemon's own (`serve`) seed, which the
    /// peer lists with `kura keys add-peer`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<PathBuf>,
    /// Its cosignature verifier key (`kura log-key show --witness` on that machine).
    pub vkey: String,
}

/// A git repository that receives every checkpoint (and the leaf copy) as a commit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GitWitness {
    /// The work tree (made with `git init` when it does not exist).
    pub path: PathBuf,
    /// A remote (name or URL) to push to after each commit; unset: no push.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub push: Option<String>,
}

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default()
}

/// Answers `add-checkpoint` requests for the logs `witness` witnesses.
pub async fn answer(
    bus: &Bus,
    witness: Arc<Witness>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    bus.serve_raw(bus.subjects.witness_add_checkpoint(), move |payload| {
        let reply = if payload.len() > MAX_REQUEST {
            cosign::Reply {
                status: 400,
                body: format!("the request is over {MAX_REQUEST} bytes"),
            }
        } else {
            match std::str::from_utf8(payload) {
                Ok(text) => witness.add_checkpoint(text, now()),
                Err(_) => cosign::Reply {
                    status: 400,
                    body: "the request is not UTF-8".into(),
                },
            }
        };
        if reply.status != 200 {
            tracing::warn!(status = reply.status, why = %reply.body.trim(), "witness request refused");
        }
        (
            vec![(STATUS_HEADER, reply.status.to_string())],
            reply.body.into_bytes(),
        )
    })
    .await
}

/// What asking one peer gave.
#[derive(Debug)]
pub enum Asked {
    /// The note with the peer's checked cosignature appended.
    Cosigned(String),
    /// The peer refused: it saw something this log no longer extends (an alarm).
    Refused(String),
    /// The peer could not be asked (down, unreachable, misconfigured).
    Unreachable(String),
}

/// Asks `peer` to cosign `note` (this log's newest checkpoint), proving consistency from
/// whatever size the peer last saw; checks the cosignature before keeping it.
pub async fn ask(
    peer: &WitnessPeer,
    own: &Credentials,
    subject: &str,
    conn: &rusqlite::Connection,
    note: &str,
) -> Asked {
    let creds = match &peer.seed {
        Some(seed) => match kura_runtime::identity::read_seed(seed) {
            Ok(k) => Credentials {
                key: Some(Arc::new(k)),
                ca: Some(peer.ca.clone()),
            },
            Err(e) => return Asked::Unreachable(e.to_string()),
        },
        None => Credentials {
            key: own.key.clone(),
            ca: Some(peer.ca.clone()),
        },
    };
    let client = match creds.connect_once("kura-serve-witness", &peer.url).await {
        Ok(c) => c,
        Err(e) => return Asked::Unreachable(format!("{e:#}")),
    };
    // Start from 0; a peer that saw more says its size (409) and we prove from there.
    let mut old = 0;
    for _ in 0..2 {
        let body = match cosign::request_body(conn, note, old) {
            Ok(b) => b,
            Err(e) => return Asked::Unreachable(e.to_string()),
        };
        let reply = match tokio::time::timeout(
            Duration::from_secs(5),
            client.request(subject.to_owned(), body.into()),
        )
        .await
        {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => return Asked::Unreachable(e.to_string()),
            Err(_) => return Asked::Unreachable("no answer in 5 s".into()),
        };
        let status = reply
            .headers
            .as_ref()
            .and_then(|h| h.get(STATUS_HEADER))
            .and_then(|v| v.as_str().parse::<u16>().ok());
        let text = String::from_utf8_lossy(&reply.payload).into_owned();
        match status {
            Some(200) => {
                let cosigned = format!("{note}{text}");
                return match cosign::cosigned_by(&cosigned, std::slice::from_ref(&peer.vkey)) {
                    Ok(by) if !by.is_empty() => Asked::Cosigned(cosigned),
                    Ok(_) => Asked::Unreachable(format!(
                        "{} answered without a cosignature by its pinned key",
                        peer.name
                    )),
                    Err(e) => Asked::Refused(format!("{}'s cosignature is forged: {e}", peer.name)),
                };
            }
            Some(409) => match text.trim().parse::<u64>() {
                Ok(size) if size != old => old = size,
                _ => return Asked::Unreachable(format!("{} says 409 {text:?}", peer.name)),
            },
            Some(422) => {
                return Asked::Refused(format!("witness {} refused: {}", peer.name, text.trim()));
            }
            other => {
                return Asked::Unreachable(format!(
                    "{} answered {:?}: {}",
                    peer.name,
                    other,
                    text.trim()
                ));
            }
        }
    }
    Asked::Unreachable(format!("{} kept changing its size", peer.name))
}

fn git(dir: &Path, args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args([
            "-c",
            "user.name=kura serve",
            "-c",
            "user.email=kura@localhost",
        ])
        .args(args)
        .output()
        .context("cannot run git")?;
    anyhow::ensure!(
        out.status.success(),
        "git {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// Hands a checkpoint to a git witness: the directory witness's checks and files, then a
/// commit (and a push when configured). `Ok(Err(why))` is a refusal, like a directory's.
pub fn publish_git(
    g: &GitWitness,
    conn: &rusqlite::Connection,
    note: &str,
    cp: &Signed,
    vkey: &str,
) -> anyhow::Result<Result<(), String>> {
    if !g.path.join(".git").exists() {
        std::fs::create_dir_all(&g.path)?;
        git(&g.path, &["init", "-q"])?;
    }
    if let Err(why) = witness::publish(&g.path, conn, note, cp, vkey)? {
        return Ok(Err(why));
    }
    git(
        &g.path,
        &["add", witness::CHECKPOINT_FILE, witness::LEAVES_FILE],
    )?;
    // Nothing new (the same checkpoint again) is not an error.
    let unchanged = Command::new("git")
        .arg("-C")
        .arg(&g.path)
        .args(["diff", "--cached", "--quiet"])
        .status()
        .context("cannot run git")?
        .success();
    if !unchanged {
        git(
            &g.path,
            &[
                "commit",
                "-q",
                "-m",
                &format!("checkpoint {} size {}", cp.origin, cp.size),
            ],
        )?;
    }
    if let Some(remote) = &g.push {
        git(&g.path, &["push", "-q", remote, "HEAD"])?;
    }
    Ok(Ok(()))
}
