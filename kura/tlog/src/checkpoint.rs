//! Signed checkpoints of the seal log: a c2sp.org/tlog-checkpoint body (origin, tree size,
//! base64 root hash) in a c2sp.org/signed-note signed with the store's Ed25519 log key —
//! the formats of `tlog_tiles` and `signed_note` — and the check that the store's log
//! extends a checkpoint.

use std::path::Path;

use base64::Engine as _;
use signed_note::{Note, StandardSigner, StandardVerifier, VerifierList};
use tlog_tiles::{Checkpoint, Hash};

use crate::error::{Result, TlogError, invalid};

/// The log's signing key (`PRIVATE+KEY+<name>+<id>+<base64>`, as Go's note package writes
/// it); its name is the log's origin.
pub struct LogKey {
    signer: StandardSigner,
    secret: ed25519_dalek::SigningKey,
    name: String,
    verifier: String,
}

impl std::fmt::Debug for LogKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key itself.
        f.debug_struct("LogKey")
            .field("verifier", &self.verifier)
            .finish()
    }
}

/// A new key pair for the log `name`: (signer key text, verifier key text).
pub fn generate(name: &str) -> Result<(String, String)> {
    if !signed_note::is_key_name_valid(name) {
        return Err(invalid(format!(
            "{name:?} is not a valid log name (no spaces or '+')"
        )));
    }
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| invalid(format!("no randomness: {e}")))?;
    let key = ed25519_dalek::SigningKey::from_bytes(&seed);
    let vkey = signed_note::new_ed25519_verifier_key(name, &key.verifying_key());
    let mut public = vec![0x01];
    public.extend_from_slice(key.verifying_key().as_bytes());
    let mut private = vec![0x01];
    private.extend_from_slice(&seed);
    let skey = format!(
        "PRIVATE+KEY+{name}+{:08x}+{}",
        signed_note::key_id(name, &public),
        base64::engine::general_purpose::STANDARD.encode(private)
    );
    Ok((skey, vkey))
}

impl LogKey {
    /// From signer key text.
    pub fn from_text(skey: &str) -> Result<LogKey> {
        let skey = skey.trim();
        let signer =
            StandardSigner::new(skey).map_err(|e| invalid(format!("not a log key: {e}")))?;
        let mut parts = skey.splitn(5, '+');
        let (Some(_), Some(_), Some(name), Some(_), Some(b64)) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(invalid("not a log key"));
        };
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|_| invalid("not a log key"))?;
        let seed: [u8; 32] = bytes
            .get(1..)
            .and_then(|b| b.try_into().ok())
            .ok_or_else(|| invalid("not an Ed25519 log key"))?;
        let secret = ed25519_dalek::SigningKey::from_bytes(&seed);
        Ok(LogKey {
            signer,
            name: name.to_owned(),
            verifier: signed_note::new_ed25519_verifier_key(name, &secret.verifying_key()),
            secret,
        })
    }

    /// Reads a key file, refusing one others can read.
    pub fn load(path: &Path) -> Result<LogKey> {
        use std::os::unix::fs::PermissionsExt as _;
        let io = |source| TlogError::Io {
            path: path.to_path_buf(),
            source,
        };
        let meta = std::fs::metadata(path).map_err(io)?;
        if meta.permissions().mode() & 0o077 != 0 {
            return Err(invalid(format!(
                "{}: a log key readable by others is refused; chmod 600 it",
                path.display()
            )));
        }
        LogKey::from_text(&std::fs::read_to_string(path).map_err(io)?)
    }

    /// The log's name, which is every checkpoint's origin.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The verifier key people pin (`<name>+<id>+<base64>`).
    pub fn verifier(&self) -> &str {
        &self.verifier
    }

    /// The Ed25519 key itself (a witness cosigns with it).
    pub(crate) fn secret(&self) -> &ed25519_dalek::SigningKey {
        &self.secret
    }

    /// A signed checkpoint for the tree of `size` leaves with root `root`.
    pub fn sign(&self, size: u64, root: Hash) -> Result<String> {
        let body = Checkpoint::new(&self.name, size, root, "")
            .map_err(|_| invalid("cannot form a checkpoint"))?;
        let mut note =
            Note::new(&body.to_bytes(), &[]).map_err(|e| invalid(format!("note: {e}")))?;
        note.add_sigs(&[&self.signer])
            .map_err(|e| invalid(format!("cannot sign: {e}")))?;
        String::from_utf8(note.to_bytes()).map_err(|_| invalid("a note is UTF-8"))
    }
}

/// A checkpoint whose signature was checked.
#[derive(Debug, Clone, PartialEq)]
pub struct Signed {
    /// The log's name.
    pub origin: String,
    /// Leaves in the tree it commits to.
    pub size: u64,
    /// That tree's root.
    pub root: Hash,
}

/// Checks that `vkey` is a log verifier key (`<name>+<id>+<base64 key>`).
pub fn open_verifier(vkey: &str) -> Result<()> {
    StandardVerifier::new(vkey.trim())
        .map(|_| ())
        .map_err(|e| invalid(format!("not a log verifier key: {e}")))
}

/// Opens a signed checkpoint: the signature must be the log key `vkey`'s, and the origin
/// its name. Anything else (another key, an edited body, not a checkpoint) is an error.
pub fn open(note: &str, vkey: &str) -> Result<Signed> {
    let verifier =
        StandardVerifier::new(vkey.trim()).map_err(|e| invalid(format!("log key: {e}")))?;
    let name = vkey.trim().split('+').next().unwrap_or_default().to_owned();
    let note = Note::from_bytes(note.as_bytes())
        .map_err(|e| invalid(format!("not a signed note: {e}")))?;
    note.verify(&VerifierList::new(vec![Box::new(verifier)]))
        .map_err(|e| invalid(format!("the checkpoint is not signed by {name}: {e}")))?;
    let body = Checkpoint::from_bytes(note.text())
        .map_err(|_| invalid("the note is not a tlog checkpoint"))?;
    if body.origin() != name {
        return Err(invalid(format!(
            "the checkpoint is for log {:?}, not {name:?}",
            body.origin()
        )));
    }
    Ok(Signed {
        origin: body.origin().to_owned(),
        size: body.size(),
        root: *body.hash(),
    })
}

/// Why the store does not extend a checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Inconsistency {
    /// The store's log is shorter than the checkpoint: leaves were removed.
    Shorter {
        /// Leaves now.
        now: u64,
    },
    /// The store's first `size` leaves no longer hash to the checkpoint's root.
    Rewritten,
}

impl std::fmt::Display for Inconsistency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Inconsistency::Shorter { now } => {
                write!(f, "the seal log has only {now} leaves now")
            }
            Inconsistency::Rewritten => {
                f.write_str("the seal log no longer extends it (its history was rewritten)")
            }
        }
    }
}

/// Whether the store's seal log extends `cp`: its first `cp.size` leaves still hash to
/// `cp.root`, proved with an RFC 6962 consistency proof from the store's hashes and checked
/// against the checkpoint's root.
pub fn extends(
    log: &dyn crate::storage::LogStorage,
    cp: &Signed,
) -> Result<std::result::Result<(), Inconsistency>> {
    use crate::seallog;
    let now = seallog::size(log)?;
    if now < cp.size {
        return Ok(Err(Inconsistency::Shorter { now }));
    }
    let root_now = seallog::root(log, now)?;
    let ok = if cp.size == 0 {
        true
    } else if cp.size == now {
        root_now == cp.root
    } else {
        let proof = seallog::consistency_proof(log, cp.size, now)?;
        tlog_tiles::check_tree(&proof, now, root_now, cp.size, cp.root).is_ok()
    };
    Ok(if ok {
        Ok(())
    } else {
        Err(Inconsistency::Rewritten)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    // The Go reference implementation's example (golang.org/x/mod/sumdb/note): a second
    // implementation of the note format that we did not write.
    const GO_SKEY: &str =
        "PRIVATE+KEY+PeterNeumann+c74f20a3+AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz";
    const GO_VKEY: &str = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
    const GO_TEXT: &str = "If you think cryptography is the answer to your problem,\nthen you don't know what your problem is.\n";
    const GO_SIG: &str = "— PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n";

    #[test]
    fn notes_match_the_go_reference_vector() {
        let key = LogKey::from_text(GO_SKEY).expect("key");
        assert_eq!(key.verifier(), GO_VKEY);
        let mut note = Note::new(GO_TEXT.as_bytes(), &[]).expect("note");
        note.add_sigs(&[&key.signer]).expect("sign");
        let text = String::from_utf8(note.to_bytes()).expect("utf8");
        assert_eq!(text, format!("{GO_TEXT}\n{GO_SIG}"));
    }

    #[test]
    fn a_checkpoint_round_trips_and_every_forgery_is_refused() {
        let (skey, vkey) = generate("kura.example/log").expect("generate");
        let key = LogKey::from_text(&skey).expect("key");
        assert_eq!(key.verifier(), vkey);
        let root = Hash([7; 32]);
        let note = key.sign(5, root).expect("sign");
        // c2sp.org/tlog-checkpoint: origin, size, base64 root, each on its own line.
        let body = format!(
            "kura.example/log\n5\n{}\n",
            base64::engine::general_purpose::STANDARD.encode([7u8; 32])
        );
        assert!(note.starts_with(&body), "{note}");
        assert!(note.contains("\n— kura.example/log "), "{note}");
        let cp = open(&note, &vkey).expect("open");
        assert_eq!((cp.size, cp.root), (5, root));
        // Edited size, another key, garbage.
        assert!(open(&note.replacen("\n5\n", "\n6\n", 1), &vkey).is_err());
        let (_, other) = generate("kura.example/log").expect("generate");
        assert!(open(&note, &other).is_err());
        assert!(open("not a note", &vkey).is_err());
        assert!(open(&note, "garbage").is_err());
    }
}
