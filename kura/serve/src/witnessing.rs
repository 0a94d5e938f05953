//! `kura serve`'s witnesses beyond a directory: answering other Kuras' `add-checkpoint`
//! requests over NATS (c2sp.org/tlog-witness, the body as the payload), asking peer Kuras
//! to cosign this log's checkpoints, and committing checkpoints to git repositories.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use kura_runtime::Bus;
use kura_runtime::bus::Credentials;
use kura_tlog::checkpoint::Signed;
use kura_tlog::cosign::{self, Status, Witness};
use kura_tlog::storage::LogStorage;
use kura_tlog::witness;
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
                status: Status::Malformed,
                body: format!("the request is over {MAX_REQUEST} bytes"),
            }
        } else {
            match std::str::from_utf8(payload) {
                Ok(text) => witness.add_checkpoint(text, now()),
                Err(_) => cosign::Reply {
                    status: Status::Malformed,
                    body: "the request is not UTF-8".into(),
                },
            }
        };
        if reply.status != Status::Cosigned {
            tracing::warn!(status = ?reply.status, why = %reply.body.trim(), "witness request refused");
        }
        (
            vec![(STATUS_HEADER, reply.status.code().to_string())],
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

/// Why a witness answered 403, and what to do: it does not know this log under its origin —
/// it was never given this log's verifier key, or another log already uses the origin there
/// (two Pis left at hostname `raspberrypi` both default to `kura.raspberrypi/…`).
fn forbidden(peer: &WitnessPeer, note: &str, said: &str) -> String {
    let origin = note.lines().next().unwrap_or_default();
    format!(
        "witness {} refuses log {origin:?} (403): it was not given this log's verifier key, or another log already uses the origin {origin:?} there (two machines with one hostname?); give this log a distinct origin (a new log key: kura log-key init --name) or list this log's verifier key in that witness's witness_logs. The witness said: {}",
        peer.name,
        said.trim()
    )
}

/// Asks `peer` to cosign `note` (this log's newest checkpoint), proving consistency from
/// whatever size the peer last saw; checks the cosignature before keeping it.
pub async fn ask(
    peer: &WitnessPeer,
    own: &Credentials,
    subject: &str,
    log: &dyn LogStorage,
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
        let body = match cosign::request_body(log, note, old) {
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
            .and_then(|v| v.as_str().parse::<u16>().ok())
            .and_then(Status::from_code);
        let text = String::from_utf8_lossy(&reply.payload).into_owned();
        match status {
            Some(Status::Cosigned) => {
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
            Some(Status::WrongOld) => match text.trim().parse::<u64>() {
                Ok(size) if size != old => old = size,
                _ => return Asked::Unreachable(format!("{} says 409 {text:?}", peer.name)),
            },
            Some(Status::NotExtending) => {
                return Asked::Refused(format!("witness {} refused: {}", peer.name, text.trim()));
            }
            // Not a network problem: the witness will never cosign until someone acts.
            Some(Status::UnknownLog) => return Asked::Refused(forbidden(peer, note, &text)),
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

/// Settings through which a repository's own config (planted by whoever can write it, or
/// pulled in by an `include`) would make git run a program inside `kura serve`, which
/// holds the log key. A `-c` on the command line wins over every config file for its key.
const SAFE_CONFIG: &[&str] = &[
    "core.hooksPath=/dev/null",
    "core.fsmonitor=false",
    "core.pager=cat",
    "core.editor=false",
    "core.askPass=",
    "core.attributesFile=/dev/null",
    // `-F /dev/null`: ssh reads `~/.ssh/config` from the passwd home (the kura user's
    // /var/lib/kura, which every unit can write), and a `ProxyCommand`, `Match exec`,
    // `LocalCommand` or `KnownHostsCommand` there would run inside kura serve.
    "core.sshCommand=ssh -F /dev/null -o BatchMode=yes -o PermitLocalCommand=no",
    "credential.helper=",
    "commit.gpgSign=false",
    "gpg.program=false",
    "diff.external=",
    "gc.auto=0",
    "maintenance.auto=false",
    "submodule.recurse=false",
    "push.recurseSubmodules=no",
    // Only plain transports: no `ext::` command, no git:// proxy command, no helpers.
    "protocol.allow=never",
    "protocol.file.allow=always",
    "protocol.ssh.allow=always",
    "protocol.https.allow=always",
    "user.name=kura serve",
    "user.email=kura@localhost",
];

/// Refuses a witness repository another user or group could have planted something in: a
/// `.git` that is a symlink or a file (a `gitdir:` pointing elsewhere), or a work tree or
/// `.git` that is group- or world-writable. (Git itself refuses one owned by another user.)
fn private_repo(work: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    for p in [work.to_path_buf(), work.join(".git")] {
        let meta = std::fs::symlink_metadata(&p)
            .with_context(|| format!("cannot read {}", p.display()))?;
        anyhow::ensure!(
            meta.is_dir(),
            "{} is not a directory (a symlink or a gitdir file); refusing to run git there",
            p.display()
        );
        anyhow::ensure!(
            meta.permissions().mode() & 0o022 == 0,
            "{} is writable by group or others; refusing to run git there (chmod go-w it, and keep witness state where only kura serve can write)",
            p.display()
        );
    }
    Ok(())
}

/// Git on the witness repository `work`, as nothing planted there can turn into a program:
/// an empty environment (no `$CREDENTIALS_DIRECTORY`, no `GIT_*`), no system or global
/// config, `HOME` an empty private directory, and every setting in [`SAFE_CONFIG`] fixed.
fn git_cmd(work: &Path) -> anyhow::Result<Command> {
    use std::os::unix::fs::DirBuilderExt as _;
    let git_dir = work.join(".git");
    let home = git_dir.join("kura-home");
    match std::fs::DirBuilder::new().mode(0o700).create(&home) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e).with_context(|| format!("cannot create {}", home.display())),
    }
    let mut cmd = Command::new("git");
    cmd.env_clear()
        .env("HOME", &home)
        .env("LANG", "C")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_TERMINAL_PROMPT", "0")
        .env("GIT_OPTIONAL_LOCKS", "0");
    if let Some(path) = std::env::var_os("PATH") {
        cmd.env("PATH", path);
    }
    for c in SAFE_CONFIG {
        cmd.args(["-c", c]);
    }
    cmd.arg("--git-dir")
        .arg(&git_dir)
        .arg("--work-tree")
        .arg(work)
        .current_dir(work)
        .stdin(Stdio::null());
    Ok(cmd)
}

/// Runs git with `args` (and `input` on stdin); its stdout, trimmed.
fn git(work: &Path, args: &[&str], input: Option<&str>) -> anyhow::Result<String> {
    use std::io::Write as _;
    let mut cmd = git_cmd(work)?;
    cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
    if input.is_some() {
        cmd.stdin(Stdio::piped());
    }
    let mut child = cmd.spawn().context("cannot run git")?;
    if let (Some(text), Some(mut stdin)) = (input, child.stdin.take()) {
        stdin.write_all(text.as_bytes())?;
    }
    let out = child.wait_with_output().context("cannot run git")?;
    anyhow::ensure!(
        out.status.success(),
        "git {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

/// What a witness did with a checkpoint handed to it.
#[derive(Debug)]
pub enum Handed {
    /// Kept (or already held): it extends what the witness saw.
    Kept,
    /// Refused: the witness saw something this log no longer extends (an alarm).
    Refused(String),
}

/// Hands a checkpoint to a git witness: the directory witness's checks and files, then a
/// commit (and a push when configured); a refusal is a [`Handed::Refused`], like a
/// directory's. Only plumbing runs (hash-object without filters, mktree, commit-tree,
/// update-ref), so no index refresh, filter or commit hook is ever involved.
pub fn publish_git(
    g: &GitWitness,
    log: &dyn LogStorage,
    note: &str,
    cp: &Signed,
    vkey: &str,
) -> anyhow::Result<Handed> {
    if !g.path.join(".git").exists() {
        init_repo(&g.path)?;
    }
    private_repo(&g.path)?;
    if let Err(why) = witness::publish(&g.path, log, note, cp, vkey)? {
        return Ok(Handed::Refused(why.to_string()));
    }
    commit(&g.path, cp)?;
    if let Some(remote) = &g.push {
        // --receive-pack: a planted `remote.<name>.receivepack` is a command; ignore it.
        git(
            &g.path,
            &[
                "push",
                "-q",
                "--receive-pack=git-receive-pack",
                remote,
                "HEAD",
            ],
            None,
        )?;
    }
    Ok(Handed::Kept)
}

/// `git init` of a new private witness repository, with no template: nothing (sample hooks
/// included) is copied in.
fn init_repo(path: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .mode(0o700)
        .recursive(true)
        .create(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let out = Command::new("git")
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .args(["init", "-q", "--template="])
        .arg(path)
        .stdin(Stdio::null())
        .output()
        .context("cannot run git")?;
    anyhow::ensure!(
        out.status.success(),
        "git init: {}",
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(())
}

/// Commits the witness files in `work` as they are now, on top of HEAD; nothing when the
/// tree is HEAD's already.
fn commit(work: &Path, cp: &Signed) -> anyhow::Result<()> {
    let tree = write_tree(work)?;
    let parent = git(
        work,
        &["rev-parse", "-q", "--verify", "HEAD^{commit}"],
        None,
    )
    .ok();
    let parent_tree = match &parent {
        Some(p) => Some(git(work, &["rev-parse", &format!("{p}^{{tree}}")], None)?),
        None => None,
    };
    // Nothing new (the same checkpoint again) is not an error, and not a commit.
    if parent_tree.as_deref() == Some(tree.as_str()) {
        return Ok(());
    }
    let message = format!("checkpoint {} size {}", cp.origin, cp.size);
    let mut args = vec!["commit-tree", tree.as_str(), "-m", message.as_str()];
    if let Some(p) = &parent {
        args.extend(["-p", p.as_str()]);
    }
    let commit = git(work, &args, None)?;
    // Moves the branch only from the parent read above (empty: it must not exist yet).
    let old = parent.clone().unwrap_or_default();
    git(
        work,
        &["update-ref", "-m", &message, "HEAD", &commit, &old],
        None,
    )?;
    // The index follows, so a person's `git status` in the work tree is clean.
    git(work, &["read-tree", "HEAD"], None)?;
    Ok(())
}

/// The witness files as blobs in a tree object; its id.
fn write_tree(work: &Path) -> anyhow::Result<String> {
    let (cp_file, leaves) = (
        work.join(witness::CHECKPOINT_FILE),
        work.join(witness::LEAVES_FILE),
    );
    let blobs = git(
        work,
        &[
            "hash-object",
            "-w",
            "--no-filters",
            "--",
            &cp_file.to_string_lossy(),
            &leaves.to_string_lossy(),
        ],
        None,
    )?;
    let mut ids = blobs.lines();
    let (Some(cp_blob), Some(leaves_blob)) = (ids.next(), ids.next()) else {
        anyhow::bail!("git hash-object printed {blobs:?}");
    };
    git(
        work,
        &["mktree"],
        Some(&format!(
            "100644 blob {cp_blob}\t{}\n100644 blob {leaves_blob}\t{}\n",
            witness::CHECKPOINT_FILE,
            witness::LEAVES_FILE
        )),
    )
}
