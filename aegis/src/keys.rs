//! Approver keys: Ed25519 key files for people, trusted public keys for the daemon.

use std::path::Path;

use anyhow::Context;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use proto::doorbell::ApprovalDecision;

pub use kura_runtime::person::{KeyFile, default_key_path, load};

/// Makes a new key for `name` and writes it to `path` (refusing to overwrite).
pub fn keygen(name: &str, path: &Path) -> anyhow::Result<KeyFile> {
    if name.is_empty()
        || name
            .chars()
            .any(|c| c.is_whitespace() || c == ':' || c.is_control())
    {
        anyhow::bail!("invalid approver name {name:?}: one word, no ':'");
    }
    if path.exists() {
        anyhow::bail!("{} already exists; not overwriting a key", path.display());
    }
    let mut secret = [0u8; 32];
    getrandom::fill(&mut secret).map_err(|e| anyhow::anyhow!("no randomness: {e}"))?;
    let key = SigningKey::from_bytes(&secret);
    let file = KeyFile {
        name: name.to_owned(),
        secret_key: hex::encode(key.to_bytes()),
        public_key: hex::encode(key.verifying_key().to_bytes()),
    };
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let text = serde_json::to_string_pretty(&file)?;
    write_private(path, text.as_bytes())?;
    Ok(file)
}

fn write_private(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    f.write_all(bytes)?;
    Ok(())
}

/// Signs `d` for a request with content hash `request_hash`.
pub fn sign(key: &SigningKey, d: &mut ApprovalDecision, request_hash: &str) {
    d.signature = hex::encode(key.sign(&d.signing_bytes(request_hash)).to_bytes());
}

/// Why a decision's signature is not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// The trusted key in aegis's config is not 32 bytes of hex.
    #[error("trusted public key is not 32 bytes of hex")]
    KeyNotHex,
    /// The trusted key is not an Ed25519 point.
    #[error("trusted public key is invalid: {0}")]
    KeyInvalid(String),
    /// The decision carries no signature, or not 64 bytes of hex.
    #[error("signature is missing or not 64 bytes of hex")]
    Missing,
    /// The signature is not this key's over this decision and request.
    #[error("signature does not verify for this request and key")]
    Mismatch,
}

/// Checks `d`'s signature with `public_key` (hex) against `request_hash`.
pub fn verify(
    public_key: &str,
    d: &ApprovalDecision,
    request_hash: &str,
) -> Result<(), SignatureError> {
    let pk: [u8; 32] = hex::decode(public_key)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(SignatureError::KeyNotHex)?;
    let vk =
        VerifyingKey::from_bytes(&pk).map_err(|e| SignatureError::KeyInvalid(e.to_string()))?;
    let sig: [u8; 64] = hex::decode(&d.signature)
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(SignatureError::Missing)?;
    vk.verify(&d.signing_bytes(request_hash), &Signature::from_bytes(&sig))
        .map_err(|_| SignatureError::Mismatch)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decision(id: proto::RequestId) -> ApprovalDecision {
        ApprovalDecision {
            request_id: id,
            decision: proto::Vote::Approve.into(),
            approver: "oles".into(),
            note: "ok".into(),
            signed_at: "2026-11-21T00:00:00Z".into(),
            signature: String::new(),
            arguments: None,
        }
    }

    #[test]
    fn sign_verify_and_every_forgery_fails() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("k.json");
        let kf = keygen("oles", &path).expect("keygen");
        assert!(keygen("oles", &path).is_err(), "never overwrites");
        let (name, key) = load(&path).expect("load");
        assert_eq!(name, "oles");
        // A key file others can read is refused, like a seed.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
        let err = load(&path).expect_err("readable by others").to_string();
        assert!(err.contains("chmod 600"), "{err}");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        let id = proto::RequestId::new();
        let mut d = decision(id);
        sign(&key, &mut d, "hash-a");
        verify(&kf.public_key, &d, "hash-a").expect("genuine");
        assert!(
            verify(&kf.public_key, &d, "hash-b").is_err(),
            "another request's content"
        );
        let mut other = d.clone();
        other.request_id = proto::RequestId::new();
        assert!(
            verify(&kf.public_key, &other, "hash-a").is_err(),
            "another request id"
        );
        let mut flipped = d.clone();
        flipped.decision = proto::Vote::Deny.into();
        assert!(
            verify(&kf.public_key, &flipped, "hash-a").is_err(),
            "altered decision"
        );
        let other_key = keygen("eve", &dir.path().join("e.json")).expect("keygen");
        assert!(
            verify(&other_key.public_key, &d, "hash-a").is_err(),
            "wrong key"
        );
        let mut unsigned = d.clone();
        unsigned.signature.clear();
        assert!(
            verify(&kf.public_key, &unsigned, "hash-a").is_err(),
            "unsigned"
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777,
            0o600
        );
    }
}
