//! Witnessing another Kura's seal log: the c2sp.org/tlog-witness `add-checkpoint` exchange
//! (carried over NATS by `kura serve`) and the cosignatures a witness returns, in the
//! c2sp.org/tlog-cosignature `cosignature/v1` format — so two Pis can witness each other and
//! any tool of that ecosystem can check the result.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use base64::Engine as _;
use ed25519_dalek::{Signer as _, VerifyingKey};
use sha2::{Digest as _, Sha256};
use signed_note::{Note, NoteError, VerifierList};
use tlog_tiles::Hash;

use crate::checkpoint::{self, LogKey, Signed};
use crate::error::{Result, TlogError};

/// The signature type byte of c2sp.org/tlog-cosignature's `cosignature/v1`.
const ALG_COSIGNATURE_V1: u8 = 0x04;
/// A consistency proof has at most this many hashes (c2sp.org/tlog-witness).
const MAX_PROOF: usize = 63;

use crate::error::invalid;

fn b64() -> base64::engine::GeneralPurpose {
    base64::engine::general_purpose::STANDARD
}

/// What a witness signs: the spec's header, the time, then the checkpoint text.
fn signed_message(time: u64, checkpoint: &[u8]) -> Vec<u8> {
    let mut m = format!("cosignature/v1\ntime {time}\n").into_bytes();
    m.extend_from_slice(checkpoint);
    m
}

fn key_id(name: &str, public: &VerifyingKey) -> (u32, Vec<u8>) {
    let mut encoded = vec![ALG_COSIGNATURE_V1];
    encoded.extend_from_slice(public.as_bytes());
    (signed_note::key_id(name, &encoded), encoded)
}

/// A witness's cosignature verifier key (`<name>+<id>+base64(0x04 ‖ public key)`).
pub fn verifier_key(name: &str, public: &VerifyingKey) -> String {
    let (id, encoded) = key_id(name, public);
    format!("{name}+{id:08x}+{}", b64().encode(encoded))
}

/// The cosignature verifier key of a witness signing with `key`.
pub fn witness_verifier(key: &LogKey) -> String {
    verifier_key(key.name(), &key.secret().verifying_key())
}

/// Signs as a witness at a fixed time (the signed-note signer interface has no clock).
struct Cosigner<'a> {
    name: &'a str,
    key: &'a ed25519_dalek::SigningKey,
    time: u64,
}

impl signed_note::Signer for Cosigner<'_> {
    fn name(&self) -> &str {
        self.name
    }
    fn key_id(&self) -> u32 {
        key_id(self.name, &self.key.verifying_key()).0
    }
    fn sign(&self, msg: &[u8]) -> std::result::Result<Vec<u8>, ed25519_dalek::SignatureError> {
        let mut out = self.time.to_be_bytes().to_vec();
        out.extend_from_slice(&self.key.sign(&signed_message(self.time, msg)).to_bytes());
        Ok(out)
    }
}

/// Checks `cosignature/v1` signatures made with one witness key.
pub struct CosignatureVerifier {
    name: String,
    id: u32,
    key: VerifyingKey,
}

impl CosignatureVerifier {
    /// From a witness's verifier key text.
    pub fn new(vkey: &str) -> Result<CosignatureVerifier> {
        let bad = || invalid(format!("{vkey:?} is not a witness (cosignature/v1) key"));
        let mut parts = vkey.trim().splitn(3, '+');
        let (Some(name), Some(id), Some(key)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(bad());
        };
        let id = u32::from_str_radix(id, 16).map_err(|_| bad())?;
        let raw = b64().decode(key).map_err(|_| bad())?;
        let (Some(&ALG_COSIGNATURE_V1), Some(public)) = (raw.first(), raw.get(1..)) else {
            return Err(bad());
        };
        let public: [u8; 32] = public.try_into().map_err(|_| bad())?;
        let key = VerifyingKey::from_bytes(&public).map_err(|_| bad())?;
        if !signed_note::is_key_name_valid(name) || key_id(name, &key).0 != id {
            return Err(bad());
        }
        Ok(CosignatureVerifier {
            name: name.to_owned(),
            id,
            key,
        })
    }
}

impl signed_note::Verifier for CosignatureVerifier {
    fn name(&self) -> &str {
        &self.name
    }
    fn key_id(&self) -> u32 {
        self.id
    }
    fn verify(&self, msg: &[u8], sig: &[u8]) -> bool {
        let (Some(time), Some(sig)) = (sig.get(..8), sig.get(8..)) else {
            return false;
        };
        let (Ok(time), Ok(sig)) = (
            <[u8; 8]>::try_from(time),
            ed25519_dalek::Signature::from_slice(sig),
        ) else {
            return false;
        };
        self.key
            .verify_strict(&signed_message(u64::from_be_bytes(time), msg), &sig)
            .is_ok()
    }
}

/// A checked cosignature: which witness, and when it says it saw the checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cosigned {
    /// The witness's name.
    pub witness: String,
    /// Seconds since the Unix epoch.
    pub time: u64,
}

/// The cosignatures on `note` made by any of the witness keys `vkeys`, each checked. A
/// signature that names a known witness but does not verify is an error (a forgery).
pub fn cosigned_by(note: &str, vkeys: &[String]) -> Result<Vec<Cosigned>> {
    let mut verifiers: Vec<Box<dyn signed_note::Verifier>> = Vec::new();
    for v in vkeys {
        verifiers.push(Box::new(CosignatureVerifier::new(v)?));
    }
    let note = Note::from_bytes(note.as_bytes())
        .map_err(|e| invalid(format!("not a signed note: {e}")))?;
    match note.verify(&VerifierList::new(verifiers)) {
        Ok((verified, _)) => Ok(verified
            .iter()
            .map(|s| Cosigned {
                witness: s.name().to_owned(),
                time: s
                    .signature()
                    .get(..8)
                    .and_then(|t| <[u8; 8]>::try_from(t).ok())
                    .map(u64::from_be_bytes)
                    .unwrap_or_default(),
            })
            .collect()),
        Err(NoteError::UnverifiedNote) => Ok(Vec::new()),
        Err(e) => Err(invalid(format!("a cosignature does not verify: {e}"))),
    }
}

fn checkpoint_body(note: &str) -> Result<tlog_tiles::Checkpoint> {
    let note = Note::from_bytes(note.as_bytes())
        .map_err(|e| invalid(format!("not a signed note: {e}")))?;
    tlog_tiles::Checkpoint::from_bytes(note.text())
        .map_err(|_| invalid("the note is not a tlog checkpoint"))
}

/// An `add-checkpoint` request body: `old <size>`, the consistency proof from that size to
/// the checkpoint's (one base64 hash per line), an empty line, the signed checkpoint.
pub fn request_body(log: &dyn crate::storage::LogStorage, note: &str, old: u64) -> Result<String> {
    let new = checkpoint_body(note)?.size();
    let proof = if old > 0 && old < new {
        crate::seallog::consistency_proof(log, old, new)?
    } else {
        Vec::new()
    };
    let mut out = format!("old {old}\n");
    for h in &proof {
        out.push_str(&b64().encode(h.0));
        out.push('\n');
    }
    out.push('\n');
    out.push_str(note);
    Ok(out)
}

/// A witness's answer, with c2sp.org/tlog-witness's status codes: 200 (the body is the
/// cosignature line), 400 (malformed), 403 (not a log this witness knows, or a bad
/// signature), 409 (the request's `old` is not the size the witness knows; the body is that
/// size), 422 (the proof does not show the log extends what the witness saw: a rewrite or
/// a fork).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status.
    pub status: Status,
    /// The cosignature line, the witness's size, or why.
    pub body: String,
}

/// c2sp.org/tlog-witness's answers, each with its HTTP status code on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Status {
    /// 200: cosigned; the body is the cosignature line.
    Cosigned,
    /// 400: the request is malformed.
    Malformed,
    /// 403: not a log this witness knows, or a bad signature.
    UnknownLog,
    /// 409: the request's `old` is not the size the witness knows; the body is that size.
    WrongOld,
    /// 422: the proof does not show the log extends what the witness saw.
    NotExtending,
    /// 500: the witness failed.
    Failed,
}

impl Status {
    /// The HTTP status code the protocol gives it.
    pub fn code(self) -> u16 {
        match self {
            Status::Cosigned => 200,
            Status::Malformed => 400,
            Status::UnknownLog => 403,
            Status::WrongOld => 409,
            Status::NotExtending => 422,
            Status::Failed => 500,
        }
    }

    /// The status a code stands for; `None` for one the protocol does not define.
    pub fn from_code(code: u16) -> Option<Status> {
        [
            Status::Cosigned,
            Status::Malformed,
            Status::UnknownLog,
            Status::WrongOld,
            Status::NotExtending,
            Status::Failed,
        ]
        .into_iter()
        .find(|s| s.code() == code)
    }
}

impl Reply {
    fn new(status: Status, body: impl Into<String>) -> Reply {
        Reply {
            status,
            body: body.into(),
        }
    }
}

/// A witness: its key, the logs it witnesses (their verifier keys), and where it keeps the
/// last checkpoint it cosigned for each (outside any database it could be asked about).
pub struct Witness {
    key: LogKey,
    logs: Vec<String>,
    dir: PathBuf,
    lock: Mutex<()>,
}

impl std::fmt::Debug for Witness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Witness")
            .field("verifier", &self.verifier())
            .field("logs", &self.logs)
            .finish()
    }
}

impl Witness {
    /// A witness signing with `key` for the logs `logs` (each checked), keeping state in `dir`.
    pub fn new(key: LogKey, logs: Vec<String>, dir: &Path) -> Result<Witness> {
        for v in &logs {
            signed_note::StandardVerifier::new(v.trim())
                .map_err(|e| invalid(format!("witnessed log key {v:?}: {e}")))?;
        }
        std::fs::create_dir_all(dir).map_err(|source| TlogError::Io {
            path: dir.to_path_buf(),
            source,
        })?;
        Ok(Witness {
            key,
            logs,
            dir: dir.to_path_buf(),
            lock: Mutex::new(()),
        })
    }

    /// The verifier key people pin to check this witness's cosignatures.
    pub fn verifier(&self) -> String {
        witness_verifier(&self.key)
    }

    fn state_path(&self, origin: &str) -> PathBuf {
        let digest = Sha256::digest(origin.as_bytes());
        let name: String = digest.iter().take(12).map(|b| format!("{b:02x}")).collect();
        self.dir.join(name)
    }

    /// Handles one `add-checkpoint` request at time `now` (Unix seconds). A new checkpoint
    /// is kept (durably) before it is cosigned; the one already kept is not written again.
    pub fn add_checkpoint(&self, request: &str, now: u64) -> Reply {
        let _one_at_a_time = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        match self.add(request, now) {
            Ok(reply) => reply,
            Err(e) => Reply::new(Status::Failed, e.to_string()),
        }
    }

    fn add(&self, request: &str, now: u64) -> Result<Reply> {
        let (old, proof, note) = match parse_request(request) {
            Ok(parts) => parts,
            Err(reply) => return Ok(reply),
        };
        let (cp, vkey) = match self.open_witnessed(note) {
            Ok(opened) => opened,
            Err(reply) => return Ok(reply),
        };
        if old > cp.size {
            return Ok(Reply::new(
                Status::Malformed,
                "old is larger than the checkpoint",
            ));
        }
        let path = self.state_path(&cp.origin);
        let known: Option<Signed> = match std::fs::read_to_string(&path) {
            Ok(text) => Some(checkpoint::open(&text, vkey)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(source) => return Err(TlogError::Io { path, source }),
        };
        let known_size = known.as_ref().map_or(0, |k| k.size);
        if old != known_size {
            return Ok(Reply::new(Status::WrongOld, format!("{known_size}\n")));
        }
        if let Err(reply) = extends_known(&cp, known.as_ref(), &proof) {
            return Ok(reply);
        }
        // The very checkpoint already kept (a peer asking again): answer from what is
        // stored, without another durable write.
        if known.as_ref() != Some(&cp) {
            crate::witness::save_last(&path, note)?;
        }
        Ok(Reply::new(Status::Cosigned, self.cosignature(note, now)?))
    }

    /// Opens a checkpoint of a log this witness witnesses, under that log's key (403 if it
    /// is another log, or the known origin under another key).
    fn open_witnessed(&self, note: &str) -> std::result::Result<(Signed, &str), Reply> {
        let Ok(body) = checkpoint_body(note) else {
            return Err(Reply::new(
                Status::Malformed,
                "not a signed tlog checkpoint",
            ));
        };
        let Some(vkey) = self
            .logs
            .iter()
            .find(|v| v.trim().split('+').next() == Some(body.origin()))
        else {
            return Err(Reply::new(
                Status::UnknownLog,
                format!(
                    "this witness does not witness log {:?}; add its verifier key to the witness's witness_logs",
                    body.origin()
                ),
            ));
        };
        match checkpoint::open(note, vkey) {
            Ok(cp) => Ok((cp, vkey.as_str())),
            // The origin is one this witness knows, the key is not: most likely two logs
            // share one origin (two Pis left at hostname `raspberrypi`), else a forgery.
            Err(e) => Err(Reply::new(
                Status::UnknownLog,
                format!(
                    "log {:?} is known to this witness under another key ({e}): two logs share that origin, or the checkpoint is forged; give each log a distinct origin (a new log key with kura log-key init --name) and list its verifier key in the witness's witness_logs",
                    body.origin()
                ),
            )),
        }
    }

    /// This witness's cosignature line over the bare checkpoint `note` at time `now`.
    fn cosignature(&self, note: &str, now: u64) -> Result<String> {
        let signed = Note::from_bytes(note.as_bytes())
            .map_err(|e| invalid(format!("not a signed note: {e}")))?;
        let cosigner = Cosigner {
            name: self.key.name(),
            key: self.key.secret(),
            time: now,
        };
        // Sign the bare checkpoint: drop every signature, add ours, keep only our line.
        let mut bare = Note::new(signed.text(), &[]).map_err(|e| invalid(e.to_string()))?;
        bare.add_sigs(&[&cosigner])
            .map_err(|e| invalid(format!("cannot cosign: {e}")))?;
        let text = String::from_utf8(bare.to_bytes()).map_err(|_| invalid("not UTF-8"))?;
        Ok(text
            .rsplit_once("\n\n")
            .map(|(_, sig)| sig.to_owned())
            .unwrap_or_default())
    }
}

/// Splits an `add-checkpoint` request into `old`, the proof and the note (400 if malformed).
fn parse_request(request: &str) -> std::result::Result<(u64, Vec<Hash>, &str), Reply> {
    let Some((head, note)) = request.split_once("\n\n") else {
        return Err(Reply::new(
            Status::Malformed,
            "no empty line before the checkpoint",
        ));
    };
    let mut lines = head.lines();
    let Some(old) = lines
        .next()
        .and_then(|l| l.strip_prefix("old "))
        .and_then(|n| n.parse::<u64>().ok())
    else {
        return Err(Reply::new(
            Status::Malformed,
            "the first line is not `old <size>`",
        ));
    };
    let mut proof = Vec::new();
    for line in lines {
        let Some(h) = b64()
            .decode(line)
            .ok()
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
        else {
            return Err(Reply::new(
                Status::Malformed,
                "a proof line is not a base64 SHA-256 hash",
            ));
        };
        proof.push(Hash(h));
    }
    if proof.len() > MAX_PROOF {
        return Err(Reply::new(Status::Malformed, "the proof is too long"));
    }
    Ok((old, proof, note))
}

/// Whether `cp` extends the checkpoint the witness `known` (422 if not: a rewrite or a fork).
#[allow(clippy::ptr_arg)] // tlog_tiles::check_tree takes a &Vec
fn extends_known(
    cp: &Signed,
    known: Option<&Signed>,
    proof: &Vec<Hash>,
) -> std::result::Result<(), Reply> {
    let Some(k) = known else {
        return if proof.is_empty() {
            Ok(())
        } else {
            Err(Reply::new(
                Status::Malformed,
                "a proof from size 0 is empty",
            ))
        };
    };
    let consistent = if cp.size == k.size {
        cp.root == k.root
    } else {
        tlog_tiles::check_tree(proof, cp.size, cp.root, k.size, k.root).is_ok()
    };
    if consistent {
        Ok(())
    } else {
        Err(Reply::new(
            Status::NotExtending,
            format!(
                "refusing to cosign: log {} at size {} does not extend the checkpoint of size {} this witness cosigned (a rewrite or a fork)",
                cp.origin, cp.size, k.size
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn witness(dir: &Path, log_vkey: &str) -> Witness {
        let (skey, _) = checkpoint::generate("pi-b.witness").expect("generate");
        Witness::new(
            LogKey::from_text(&skey).expect("key"),
            vec![log_vkey.to_owned()],
            dir,
        )
        .expect("witness")
    }

    #[test]
    fn a_cosignature_is_the_c2sp_layout_checked_by_hand() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (skey, vkey) = checkpoint::generate("pi-a").expect("generate");
        let log = LogKey::from_text(&skey).expect("key");
        let w = witness(tmp.path(), &vkey);
        let note = log.sign(3, Hash([9; 32])).expect("sign");
        let reply = w.add_checkpoint(&format!("old 0\n\n{note}"), 1_700_000_000);
        assert_eq!(reply.status, Status::Cosigned, "{}", reply.body);
        // By hand, from c2sp.org/tlog-cosignature: `— <name> base64(key id ‖ time ‖ sig)`,
        // key id = SHA-256(name ‖ "\n" ‖ 0x04 ‖ public key)[:4], time big-endian, and the
        // signature over "cosignature/v1\ntime <t>\n" ‖ checkpoint text.
        let line = reply.body.trim_end();
        let rest = line.strip_prefix("— pi-b.witness ").expect("line");
        let raw = b64().decode(rest).expect("base64");
        assert_eq!(raw.len(), 4 + 8 + 64);
        let public = w.key.secret().verifying_key();
        let mut h = Sha256::new();
        h.update(b"pi-b.witness\n\x04");
        h.update(public.as_bytes());
        assert_eq!(raw[..4], h.finalize()[..4]);
        assert_eq!(raw[4..12], 1_700_000_000u64.to_be_bytes());
        let text = note.split_once("\n\n").expect("text").0.to_owned() + "\n";
        let msg = format!("cosignature/v1\ntime 1700000000\n{text}");
        let sig = ed25519_dalek::Signature::from_slice(&raw[12..]).expect("sig");
        public
            .verify_strict(msg.as_bytes(), &sig)
            .expect("signature");
        // And through the verifier, on the note with the line appended.
        let cosigned = format!("{note}{}", reply.body);
        let by = cosigned_by(&cosigned, &[w.verifier()]).expect("cosigned");
        assert_eq!(
            by,
            vec![Cosigned {
                witness: "pi-b.witness".into(),
                time: 1_700_000_000
            }]
        );
        // A flipped bit in the cosignature is a forgery, not "no cosignature".
        let forged = cosigned.replacen(rest, &b64().encode([&raw[..12], &[0u8; 64]].concat()), 1);
        assert!(cosigned_by(&forged, &[w.verifier()]).is_err());
    }

    #[test]
    fn the_witness_keeps_its_size_and_refuses_a_fork() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (skey, vkey) = checkpoint::generate("pi-a").expect("generate");
        let log = LogKey::from_text(&skey).expect("key");
        let w = witness(tmp.path(), &vkey);
        let first = log.sign(3, Hash([1; 32])).expect("sign");
        assert_eq!(
            w.add_checkpoint(&format!("old 0\n\n{first}"), 1).status,
            Status::Cosigned
        );
        // A stale `old` is told the witness's size.
        let again = w.add_checkpoint(&format!("old 0\n\n{first}"), 2);
        assert_eq!(
            (again.status, again.body.as_str()),
            (Status::WrongOld, "3\n")
        );
        // The same size with another root: a fork, refused.
        let fork = log.sign(3, Hash([2; 32])).expect("sign");
        assert_eq!(
            w.add_checkpoint(&format!("old 3\n\n{fork}"), 3).status,
            Status::NotExtending
        );
        // A bigger tree without a valid proof: refused, and the witness still says 3.
        let bigger = log.sign(5, Hash([3; 32])).expect("sign");
        let bogus = b64().encode([0u8; 32]);
        assert_eq!(
            w.add_checkpoint(&format!("old 3\n{bogus}\n\n{bigger}"), 4)
                .status,
            Status::NotExtending
        );
        assert_eq!(
            w.add_checkpoint(&format!("old 0\n\n{bigger}"), 5).body,
            "3\n"
        );
        // Another log's checkpoint, garbage: refused without a change.
        let (other, _) = checkpoint::generate("pi-c").expect("generate");
        let other = LogKey::from_text(&other)
            .expect("key")
            .sign(1, Hash([4; 32]));
        assert_eq!(
            w.add_checkpoint(&format!("old 0\n\n{}", other.expect("sign")), 6)
                .status,
            Status::UnknownLog
        );
        assert_eq!(w.add_checkpoint("garbage", 7).status, Status::Malformed);
        assert_eq!(
            w.add_checkpoint("old x\n\nnote", 7).status,
            Status::Malformed
        );
    }

    /// Attack (cost): a peer sent the same checkpoint again and again, and each request was
    /// a durable write (300 requests, 982 writes on the SD card). A checkpoint identical to
    /// the last one cosigned is answered from what is stored: the state file and its
    /// directory are untouched.
    #[test]
    fn a_repeated_checkpoint_is_cosigned_without_a_write() {
        use std::os::unix::fs::MetadataExt as _;
        let tmp = tempfile::tempdir().expect("tmp");
        let (skey, vkey) = checkpoint::generate("pi-a").expect("generate");
        let log = LogKey::from_text(&skey).expect("key");
        let w = witness(tmp.path(), &vkey);
        let note = log.sign(3, Hash([5; 32])).expect("sign");
        let request = format!("old 0\n\n{note}");
        let state = w.state_path("pi-a");
        // The control: a checkpoint the witness has not seen is kept (written) first.
        assert!(!state.exists());
        assert_eq!(w.add_checkpoint(&request, 1).status, Status::Cosigned);
        assert!(
            state.exists(),
            "a new checkpoint is kept before it is cosigned"
        );
        let stamp = |p: &Path| {
            let m = std::fs::metadata(p).expect("metadata");
            (m.ino(), m.mtime(), m.mtime_nsec(), m.ctime_nsec(), m.len())
        };
        let (file, dir) = (stamp(&state), stamp(tmp.path()));
        let again = format!("old 3\n\n{note}");
        for t in 0..300 {
            let reply = w.add_checkpoint(&again, 2 + t);
            assert_eq!(reply.status, Status::Cosigned, "{}", reply.body);
            let by = cosigned_by(&format!("{note}{}", reply.body), &[w.verifier()])
                .expect("cosignature");
            assert_eq!(by.len(), 1);
        }
        assert_eq!(stamp(&state), file, "the state file was rewritten");
        assert_eq!(
            stamp(tmp.path()),
            dir,
            "a file was made in the state directory"
        );
    }

    /// Two Pis left at one hostname sign under one origin with different keys: the witness
    /// that knows the first refuses the second with a 403 that says why and what to do.
    #[test]
    fn a_second_log_under_a_known_origin_is_refused_naming_the_clash() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (_, vkey) = checkpoint::generate("kura.raspberrypi/log").expect("generate");
        let w = witness(tmp.path(), &vkey);
        let (other, _) = checkpoint::generate("kura.raspberrypi/log").expect("generate");
        let note = LogKey::from_text(&other)
            .expect("key")
            .sign(1, Hash([6; 32]))
            .expect("sign");
        let reply = w.add_checkpoint(&format!("old 0\n\n{note}"), 1);
        assert_eq!(reply.status, Status::UnknownLog, "{}", reply.body);
        assert!(reply.body.contains("another key"), "{}", reply.body);
        assert!(reply.body.contains("distinct origin"), "{}", reply.body);
    }
}
