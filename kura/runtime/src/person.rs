//! A person's key file (`aegis keygen`): one Ed25519 root secret that signs their
//! statements — approvals, writs, revocations, redactions, each under its own `kind` — and
//! from which their bus key is derived.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use ed25519_dalek::SigningKey;
use serde::{Deserialize, Serialize};

/// A person's key file (kept private, mode 0600).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KeyFile {
    /// The person's name; their author id is `user:<name>`.
    pub name: String,
    /// Hex Ed25519 secret key (32 bytes).
    pub secret_key: String,
    /// Hex Ed25519 public key (32 bytes), for the daemons' trust lists.
    pub public_key: String,
}

/// The default key file: `$XDG_CONFIG_HOME/kura/aegis-key.json` (or `~/.config/...`).
pub fn default_key_path() -> PathBuf {
    let base = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("kura").join("aegis-key.json")
}

/// Reads a key file, refusing one others can read (like a seed, or ssh's private keys).
pub fn load(path: &Path) -> anyhow::Result<(String, SigningKey)> {
    use std::os::unix::fs::PermissionsExt as _;
    if let Ok(meta) = std::fs::metadata(path)
        && meta.permissions().mode() & 0o077 != 0
    {
        anyhow::bail!(
            "{}: a key file readable by others (mode {:o}) is refused; chmod 600 it",
            path.display(),
            meta.permissions().mode() & 0o777
        );
    }
    let text = std::fs::read_to_string(path).with_context(|| {
        format!(
            "cannot read key {} (make one with `aegis keygen`)",
            path.display()
        )
    })?;
    let f: KeyFile = serde_json::from_str(&text)
        .with_context(|| format!("invalid key file {}", path.display()))?;
    let bytes: [u8; 32] = hex::decode(&f.secret_key)
        .ok()
        .and_then(|b| b.try_into().ok())
        .context("secret_key is not 32 bytes of hex")?;
    Ok((f.name, SigningKey::from_bytes(&bytes)))
}
