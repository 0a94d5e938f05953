//! Agent identities: a bearer token per outside agent, shown once and kept only as its
//! SHA-256 in `agents.toml`. `kura serve` reads the file again whenever it changes, so a
//! removed or rotated agent's token is refused on its very next call.

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use base64::Engine;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// The file, beside the bus identities in the keys directory.
pub const AGENTS_FILE: &str = "agents.toml";
/// Every token starts with this, so a leaked one is recognisable (and greppable).
pub const TOKEN_PREFIX: &str = "kura_agent_";

/// What went wrong with the agents file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RegistryError {
    /// A name that is not `[a-z0-9._-]{1,64}`.
    #[error("agent name {0:?}: use 1-64 of a-z, 0-9, '.', '_' and '-'")]
    Name(String),
    /// One of Kura's own names.
    #[error(
        "agent name {0:?} is Kura's own (its records would pass for Kura's worker); choose another"
    )]
    Reserved(String),
    /// Adding a name that is taken.
    #[error("agent {0} exists already; `kura keys rotate-agent --name {0}` gives it a new token")]
    Exists(String),
    /// Removing or rotating a name that is not there.
    #[error("no agent {0} in {1}; `kura keys list-agents` shows who is")]
    Unknown(String, String),
    /// The file cannot be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// Why.
        source: std::io::Error,
    },
    /// The file is not what Kura writes.
    #[error("{path} is not an agents file: {detail}")]
    Format {
        /// The file.
        path: String,
        /// What is wrong.
        detail: String,
    },
    /// No randomness.
    #[error("no randomness for a token: {0}")]
    Random(String),
}

/// One agent as stored: no token, only its hash.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Agent {
    /// Its name; its records are authored `agent:<name>`.
    pub name: String,
    /// SHA-256 (hex) of its token.
    pub token_sha256: String,
    /// When the current token was issued (RFC 3339).
    pub issued_at: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    agent: Vec<Agent>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> RegistryError + '_ {
    move |source| RegistryError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn load(path: &Path) -> Result<Vec<Agent>, RegistryError> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(path)(e)),
    };
    let f: File = toml::from_str(&text).map_err(|e| RegistryError::Format {
        path: path.display().to_string(),
        detail: e.message().to_owned(),
    })?;
    Ok(f.agent)
}

/// Writes the list whole to a new file and renames it over the old, owner-only (its
/// directory made owner-only when it is new).
fn store(path: &Path, agents: Vec<Agent>) -> Result<(), RegistryError> {
    let text = toml::to_string(&File { agent: agents }).map_err(|e| RegistryError::Format {
        path: path.display().to_string(),
        detail: e.to_string(),
    })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    if !dir.as_os_str().is_empty() && !dir.exists() {
        use std::os::unix::fs::DirBuilderExt;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(io(path))?;
    }
    let mut tmp = tempfile::NamedTempFile::new_in(dir).map_err(io(path))?;
    std::io::Write::write_all(&mut tmp, text.as_bytes()).map_err(io(path))?;
    tmp.as_file().sync_all().map_err(io(path))?;
    // NamedTempFile is created 0600 already; the rename keeps it.
    tmp.persist(path).map_err(|e| io(path)(e.error))?;
    Ok(())
}

/// Names Kura's own processes author records as (`agent:hashi`, `agent:mikado`, …): an
/// outside agent by one of them would pass for Kura's own worker, in the ledger and in rules.
const RESERVED: [&str; 8] = [
    "hashi", "mikado", "minato", "aegis", "kura", "serve", "sys", "system",
];

fn check_name(name: &str) -> Result<(), RegistryError> {
    if RESERVED.contains(&name) {
        return Err(RegistryError::Reserved(name.to_owned()));
    }
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"._-".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(RegistryError::Name(name.to_owned()))
    }
}

/// SHA-256 (hex) of a token.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

fn new_token() -> Result<String, RegistryError> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).map_err(|e| RegistryError::Random(e.to_string()))?;
    Ok(format!(
        "{TOKEN_PREFIX}{}",
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
    ))
}

fn now() -> String {
    humantime::format_rfc3339_seconds(SystemTime::now()).to_string()
}

/// The agents file in keys directory `dir`.
pub fn path_in(dir: &Path) -> PathBuf {
    dir.join(AGENTS_FILE)
}

/// Adds agent `name` and returns its token (the only time it is shown).
pub fn add(path: &Path, name: &str) -> Result<String, RegistryError> {
    check_name(name)?;
    let mut agents = load(path)?;
    if agents.iter().any(|a| a.name == name) {
        return Err(RegistryError::Exists(name.to_owned()));
    }
    let token = new_token()?;
    agents.push(Agent {
        name: name.to_owned(),
        token_sha256: token_hash(&token),
        issued_at: now(),
    });
    store(path, agents)?;
    Ok(token)
}

/// Gives agent `name` a new token (the old one is refused from now on) and returns it.
pub fn rotate(path: &Path, name: &str) -> Result<String, RegistryError> {
    let mut agents = load(path)?;
    let token = new_token()?;
    let a = agents
        .iter_mut()
        .find(|a| a.name == name)
        .ok_or_else(|| RegistryError::Unknown(name.to_owned(), path.display().to_string()))?;
    a.token_sha256 = token_hash(&token);
    a.issued_at = now();
    store(path, agents)?;
    Ok(token)
}

/// Removes agent `name`: its token is refused from the next call on.
pub fn remove(path: &Path, name: &str) -> Result<(), RegistryError> {
    let mut agents = load(path)?;
    let before = agents.len();
    agents.retain(|a| a.name != name);
    if agents.len() == before {
        return Err(RegistryError::Unknown(
            name.to_owned(),
            path.display().to_string(),
        ));
    }
    store(path, agents)
}

/// The agents (names and when their tokens were issued; never a token).
pub fn list(path: &Path) -> Result<Vec<Agent>, RegistryError> {
    load(path)
}

/// A file's (modification time, size, inode).
type Stamp = (SystemTime, u64, u64);

/// The agents file as `kura serve` checks tokens against it: read again whenever its
/// modification time or size changes, so a removal takes effect on the next call.
#[derive(Debug)]
pub struct Registry {
    path: PathBuf,
    /// The file's (modification time, size, inode) when last read, and what it held. Every
    /// write renames a new file into place, so the inode alone tells a change even within
    /// the clock's granularity.
    cached: Mutex<(Option<Stamp>, Vec<Agent>)>,
}

impl Registry {
    /// A registry over `path` (read on first use).
    pub fn new(path: PathBuf) -> Self {
        Registry {
            path,
            cached: Mutex::new((None, Vec::new())),
        }
    }

    /// The agent `token` belongs to, if any. A file that cannot be read refuses everyone.
    /// (`kura serve` runs on Linux; the inode is how a replaced file is told apart.)
    pub fn authenticate(&self, token: &str) -> Option<String> {
        let stamp = std::fs::metadata(&self.path).ok().and_then(|m| {
            use std::os::unix::fs::MetadataExt;
            Some((m.modified().ok()?, m.len(), m.ino()))
        });
        let mut guard = self.cached.lock().unwrap_or_else(|p| p.into_inner());
        if stamp.is_none() || guard.0 != stamp {
            let agents = match load(&self.path) {
                Ok(a) => a,
                Err(e) => {
                    tracing::error!(error = %e, "agents file unreadable: every agent refused");
                    Vec::new()
                }
            };
            *guard = (stamp, agents);
        }
        let presented = token_hash(token);
        // Compare every entry in full: the time taken says nothing about which one matched.
        let mut found = None;
        for a in &guard.1 {
            let same = a
                .token_sha256
                .bytes()
                .zip(presented.bytes())
                .fold(a.token_sha256.len() ^ presented.len(), |acc, (x, y)| {
                    acc | usize::from(x ^ y)
                });
            if same == 0 {
                found = Some(a.name.clone());
            }
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_shown_once_kept_as_a_hash_and_refused_once_removed_or_rotated() {
        let dir = tempfile::tempdir().expect("dir");
        let path = path_in(dir.path());
        let token = add(&path, "laptop").expect("add");
        assert!(token.starts_with(TOKEN_PREFIX));
        let text = std::fs::read_to_string(&path).expect("file");
        assert!(!text.contains(&token), "the token itself is never stored");
        assert!(text.contains(&token_hash(&token)));
        let reg = Registry::new(path.clone());
        assert_eq!(reg.authenticate(&token).as_deref(), Some("laptop"));
        assert_eq!(reg.authenticate("kura_agent_guess"), None);
        assert!(matches!(
            add(&path, "laptop"),
            Err(RegistryError::Exists(_))
        ));
        assert!(matches!(
            add(&path, "Bad Name"),
            Err(RegistryError::Name(_))
        ));
        let newer = rotate(&path, "laptop").expect("rotate");
        assert_eq!(
            reg.authenticate(&token),
            None,
            "the old token is refused at once"
        );
        assert_eq!(reg.authenticate(&newer).as_deref(), Some("laptop"));
        remove(&path, "laptop").expect("remove");
        assert_eq!(
            reg.authenticate(&newer),
            None,
            "a removed agent is refused at once"
        );
        assert!(matches!(
            remove(&path, "laptop"),
            Err(RegistryError::Unknown(..))
        ));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).expect("meta").permissions().mode();
            assert_eq!(mode & 0o077, 0, "owner-only");
        }
    }
}
