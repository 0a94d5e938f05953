//! Who sealed a ledger: the sealing daemon signs the ledger hash with its own Ed25519 key
//! (its bus nkey) in the sealing transaction, and `verify` checks the signature — and, given
//! the install's keyring, that the key is one of the install's.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine as _;

use crate::error::{Result, TlogError};
use crate::storage::{LogStorage, SealRow};

/// The domain-separated bytes a sealer signs.
pub fn signing_bytes(ledger_hash: &str) -> Vec<u8> {
    format!("kura.seal.v1\n{ledger_hash}").into_bytes()
}

/// A daemon's sealing key: a NATS user nkey with its seed.
#[derive(Clone)]
pub struct Sealer {
    key: Arc<nkeys::KeyPair>,
}

impl std::fmt::Debug for Sealer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the seed.
        f.debug_struct("Sealer")
            .field("nkey", &self.key.public_key())
            .finish()
    }
}

impl Sealer {
    /// From a user key pair that can sign (it has its seed).
    pub fn new(key: Arc<nkeys::KeyPair>) -> Result<Sealer> {
        if !key.public_key().starts_with('U') || key.seed().is_err() {
            return Err(TlogError::Invalid(
                "a sealer key is a user nkey with its seed".into(),
            ));
        }
        Ok(Sealer { key })
    }

    /// The public nkey recorded beside each seal.
    pub fn public_key(&self) -> String {
        self.key.public_key()
    }

    /// Records this sealer's signature over `ledger_hash` for `ledger_id` (the store calls it
    /// inside the sealing transaction).
    pub fn sign(&self, log: &dyn LogStorage, ledger_id: &str, ledger_hash: &str) -> Result<()> {
        let sig = self
            .key
            .sign(&signing_bytes(ledger_hash))
            .map_err(|e| TlogError::Invalid(format!("cannot sign the seal: {e}")))?;
        log.put_seal(
            ledger_id,
            &self.key.public_key(),
            &base64::engine::general_purpose::STANDARD.encode(sig),
        )
    }
}

/// The install's trusted sealers (from `identities.toml`): each service's statement key and
/// the keys it signed with before a rotation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Keyring {
    keys: BTreeMap<String, KeyEntry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct KeyEntry {
    name: String,
    /// 0: the key in use; n: the key retired n rotations ago.
    generation: usize,
    /// For a retired key: the seal-log size when it was retired, if recorded.
    until: Option<u64>,
}

impl Keyring {
    /// `key` is `name`'s statement key, retired `generation` rotations ago (0: in use) when
    /// the seal log had `until` leaves (if recorded).
    pub fn add(&mut self, key: String, name: String, generation: usize, until: Option<u64>) {
        self.keys.insert(
            key,
            KeyEntry {
                name,
                generation,
                until,
            },
        );
    }

    /// The name `key` belongs to.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.keys.get(key).map(|e| e.name.as_str())
    }

    /// Whether `key` is in the keyring (in use or retired).
    pub fn contains_key(&self, key: &str) -> bool {
        self.keys.contains_key(key)
    }

    /// Every key with its name (what a bundle carries for a checker).
    pub fn names(&self) -> BTreeMap<String, String> {
        self.keys
            .iter()
            .map(|(k, e)| (k.clone(), e.name.clone()))
            .collect()
    }

    /// Where each retired key stopped: the seal-log size recorded when it was retired, or the
    /// first position sealed by any newer key of the same name, whichever is lower. A retired
    /// key verifies only seals below that position.
    fn stops(&self, first_leaf: &BTreeMap<String, u64>) -> BTreeMap<&str, u64> {
        let mut stops = BTreeMap::new();
        for (key, e) in self.keys.iter().filter(|(_, e)| e.generation > 0) {
            let stop = self
                .keys
                .iter()
                .filter(|(_, n)| n.name == e.name && n.generation < e.generation)
                .filter_map(|(k, _)| first_leaf.get(k).copied())
                .chain(e.until)
                .min();
            if let Some(stop) = stop {
                stops.insert(key.as_str(), stop);
            }
        }
        stops
    }
}

/// The first seal-log position each key sealed.
fn first_leaves(log: &dyn LogStorage) -> Result<BTreeMap<String, u64>> {
    Ok(log
        .first_leaves()?
        .into_iter()
        .map(|(key, leaf)| (key, u64::try_from(leaf).unwrap_or(0)))
        .collect())
}

/// Where signing began: ledgers at or after this seal-log index must carry a signature
/// when a keyring is given.
fn signing_since(log: &dyn LogStorage) -> Result<u64> {
    Ok(log
        .signing_since()?
        .map_or(0, |n| u64::try_from(n).unwrap_or(u64::MAX)))
}

/// Checks the seal of each sealed ledger in `ledgers`: (ledger id, check, detail) for every
/// failure — a signature that does not verify (`sealer_signature`), and with a keyring a
/// key not in it (`sealer_unknown`), a retired key sealing after its successor began
/// (`sealer_retired`), or a ledger sealed after signing began without one (`sealer_missing`).
pub fn check<'a>(
    log: &dyn LogStorage,
    ledgers: impl IntoIterator<Item = &'a String>,
    keyring: Option<&Keyring>,
) -> Result<Vec<(String, &'static str, String)>> {
    let since = signing_since(log)?;
    let firsts = match keyring {
        Some(_) => first_leaves(log)?,
        None => BTreeMap::new(),
    };
    let stops = keyring.map(|k| k.stops(&firsts)).unwrap_or_default();
    let mut problems = Vec::new();
    for id in ledgers {
        let Some(SealRow {
            ledger_hash: hash,
            sealer,
            signature,
            leaf,
        }) = log.seal_of(id)?
        else {
            continue;
        };
        let hash = hash.unwrap_or_default();
        match (sealer, signature) {
            (Some(sealer), Some(signature)) => {
                let verified = nkeys::KeyPair::from_public_key(&sealer)
                    .map_err(|e| e.to_string())
                    .and_then(|k| {
                        let sig = base64::engine::general_purpose::STANDARD
                            .decode(&signature)
                            .map_err(|e| e.to_string())?;
                        k.verify(&signing_bytes(&hash), &sig)
                            .map_err(|e| e.to_string())
                    });
                if let Err(e) = verified {
                    problems.push((
                        id.clone(),
                        "sealer_signature",
                        format!("the seal signature by {sealer} does not verify: {e}"),
                    ));
                } else if let Some(ring) = keyring
                    && !ring.contains_key(&sealer)
                {
                    problems.push((
                        id.clone(),
                        "sealer_unknown",
                        format!("sealed by {sealer}, a key not in the keyring"),
                    ));
                } else if let (Some(stop), Some(leaf)) = (
                    stops.get(sealer.as_str()),
                    leaf.and_then(|l| u64::try_from(l).ok()),
                ) && leaf >= *stop
                {
                    problems.push((
                        id.clone(),
                        "sealer_retired",
                        format!(
                            "sealed at seal-log position {leaf} by {sealer}, a key of {} \
                             retired at position {stop}",
                            keyring.and_then(|k| k.get(&sealer)).unwrap_or("?")
                        ),
                    ));
                }
            }
            _ if keyring.is_some()
                && leaf.is_some_and(|l| u64::try_from(l).unwrap_or(0) >= since) =>
            {
                problems.push((
                    id.clone(),
                    "sealer_missing",
                    "sealed without a sealer's signature after sealing began to be signed".into(),
                ));
            }
            _ => {}
        }
    }
    Ok(problems)
}
