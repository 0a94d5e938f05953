//! The seam between the log's algorithms and the rows they keep: [`LogStorage`] is what the
//! seal log, the sealers' checks, checkpoints and witnesses read and write, and nothing
//! else (trillian-tessera's storage seam). `kura-store` implements it over its connection
//! and calls `seallog::append` inside its sealing transaction, so sealing stays
//! atomic while the hash computation, roots, proofs and checks stay here.

use proto::LedgerId;
use tlog_tiles::Hash;

use crate::error::{Result, TlogError};

/// A leaf as stored, beside the ledger it names as that ledger is now (for the log's check).
#[derive(Debug, Clone)]
pub struct LeafNow {
    /// The stored leaf index.
    pub index: i64,
    /// The ledger id the leaf is stored under.
    pub ledger_id: String,
    /// The stored leaf data.
    pub data: String,
    /// The ledger's session now, if the ledger exists.
    pub session_id: Option<String>,
    /// The ledger's hash now, if any.
    pub ledger_hash: Option<String>,
    /// The ledger's state now, if the ledger exists.
    pub state: Option<String>,
}

/// A sealed ledger's hash and seal as stored (for the sealers' check).
#[derive(Debug, Clone, Default)]
pub struct SealRow {
    /// The ledger's hash.
    pub ledger_hash: Option<String>,
    /// The sealer's public nkey, if it signed.
    pub sealer: Option<String>,
    /// The base64 signature, if it signed.
    pub signature: Option<String>,
    /// The ledger's stored leaf index, if it is logged.
    pub leaf: Option<i64>,
}

/// Where the log's rows live. Every method is one read or write of stored rows; the
/// algorithms over them are this crate's functions taking `&dyn LogStorage`. Scans hand each
/// row to `each`, which answers whether to go on.
pub trait LogStorage {
    /// The highest stored leaf index, as stored (`None`: no leaves).
    fn last_leaf_index(&self) -> Result<Option<i64>>;
    /// The stored hash at tlog storage index `index` (`None`: not stored).
    fn stored_hash(&self, index: u64) -> Result<Option<Vec<u8>>>;
    /// Stores leaf `index` (the ledger it logs and its data) and the hashes it completes,
    /// from storage index `first_hash` on.
    fn put_leaf(
        &self,
        index: u64,
        ledger_id: LedgerId,
        data: &str,
        first_hash: u64,
        hashes: &[Hash],
    ) -> Result<()>;
    /// The stored leaf of a ledger: (leaf index, leaf data).
    fn leaf_of(&self, ledger_id: LedgerId) -> Result<Option<(u64, String)>>;
    /// The leaves with index in `from..to`, in order: (index, ledger id, data).
    fn scan_leaves(
        &self,
        from: u64,
        to: u64,
        each: &mut dyn FnMut(u64, String, String) -> Result<bool>,
    ) -> Result<()>;
    /// Every stored leaf in index order beside its ledger as it is now.
    fn scan_leaves_now(&self, each: &mut dyn FnMut(LeafNow) -> Result<bool>) -> Result<()>;
    /// Up to `limit` sealed ledgers the log has no leaf for.
    fn unlogged(&self, limit: u32) -> Result<Vec<String>>;
    /// How many hashes are stored.
    fn hash_count(&self) -> Result<i64>;
    /// Every stored hash in storage-index order: (index, hash).
    fn scan_hashes(&self, each: &mut dyn FnMut(i64, Vec<u8>) -> Result<bool>) -> Result<()>;
    /// Every sealed ledger in seal order: (ledger id, session id, ledger hash).
    fn sealed_ledgers(&self) -> Result<Vec<(String, String, Option<String>)>>;
    /// Stores a sealer's signature over a ledger's hash.
    fn put_seal(&self, ledger_id: &str, sealer: &str, signature: &str) -> Result<()>;
    /// Who sealed `ledger_id`, if anyone signed: their public nkey.
    fn sealer_of(&self, ledger_id: &str) -> Result<Option<String>>;
    /// The seal-log index from which seals are signed, if recorded.
    fn signing_since(&self) -> Result<Option<i64>>;
    /// The first leaf index each sealer key sealed: (key, index).
    fn first_leaves(&self) -> Result<Vec<(String, i64)>>;
    /// The hash and seal of `ledger_id` if it is sealed.
    fn seal_of(&self, ledger_id: &str) -> Result<Option<SealRow>>;
}

/// Wraps a storage backend's own error.
pub fn storage_error(e: impl std::error::Error + Send + Sync + 'static) -> TlogError {
    TlogError::Storage(Box::new(e))
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::collections::BTreeMap;

    use proto::{LedgerId, SessionId};
    use tlog_tiles::Hash;

    use super::{LeafNow, LogStorage, SealRow};
    use crate::error::Result;
    use crate::{checkpoint, seallog};

    /// The log's rows in memory: what a replica or a third party could keep without SQLite.
    #[derive(Default)]
    struct Memory {
        leaves: RefCell<Vec<(LedgerId, String)>>,
        hashes: RefCell<BTreeMap<u64, Vec<u8>>>,
    }

    impl LogStorage for Memory {
        fn last_leaf_index(&self) -> Result<Option<i64>> {
            Ok(self.leaves.borrow().len().checked_sub(1).map(|n| n as i64))
        }
        fn stored_hash(&self, index: u64) -> Result<Option<Vec<u8>>> {
            Ok(self.hashes.borrow().get(&index).cloned())
        }
        fn put_leaf(
            &self,
            _: u64,
            id: LedgerId,
            data: &str,
            first: u64,
            hs: &[Hash],
        ) -> Result<()> {
            self.leaves.borrow_mut().push((id, data.to_owned()));
            let mut hashes = self.hashes.borrow_mut();
            for (k, h) in (first..).zip(hs) {
                hashes.insert(k, h.0.to_vec());
            }
            Ok(())
        }
        fn leaf_of(&self, id: LedgerId) -> Result<Option<(u64, String)>> {
            let leaves = self.leaves.borrow();
            let mut found = (0u64..).zip(leaves.iter()).filter(|(_, (l, _))| *l == id);
            Ok(found.next().map(|(i, (_, d))| (i, d.clone())))
        }
        fn scan_leaves(
            &self,
            from: u64,
            to: u64,
            each: &mut dyn FnMut(u64, String, String) -> Result<bool>,
        ) -> Result<()> {
            let leaves = self.leaves.borrow().clone();
            for (i, (l, d)) in (0u64..).zip(leaves).skip(from as usize) {
                if i >= to || !each(i, l.to_string(), d)? {
                    break;
                }
            }
            Ok(())
        }
        fn scan_leaves_now(&self, _: &mut dyn FnMut(LeafNow) -> Result<bool>) -> Result<()> {
            Ok(())
        }
        fn unlogged(&self, _: u32) -> Result<Vec<String>> {
            Ok(Vec::new())
        }
        fn hash_count(&self) -> Result<i64> {
            Ok(self.hashes.borrow().len() as i64)
        }
        fn scan_hashes(&self, _: &mut dyn FnMut(i64, Vec<u8>) -> Result<bool>) -> Result<()> {
            Ok(())
        }
        fn sealed_ledgers(&self) -> Result<Vec<(String, String, Option<String>)>> {
            Ok(Vec::new())
        }
        fn put_seal(&self, _: &str, _: &str, _: &str) -> Result<()> {
            Ok(())
        }
        fn sealer_of(&self, _: &str) -> Result<Option<String>> {
            Ok(None)
        }
        fn signing_since(&self) -> Result<Option<i64>> {
            Ok(None)
        }
        fn first_leaves(&self) -> Result<Vec<(String, i64)>> {
            Ok(Vec::new())
        }
        fn seal_of(&self, _: &str) -> Result<Option<SealRow>> {
            Ok(None)
        }
    }

    #[test]
    fn the_log_runs_over_any_storage() {
        let log = Memory::default();
        let mut ids = Vec::new();
        for n in 0..13u64 {
            let id = LedgerId::new();
            ids.push(id);
            let at =
                seallog::append(&log, id, SessionId::new(), &format!("{n:064x}")).expect("append");
            assert_eq!(at, n);
        }
        assert_eq!(seallog::size(&log).expect("size"), 13);
        let (skey, vkey) = checkpoint::generate("test/log").expect("generate");
        let key = checkpoint::LogKey::from_text(&skey).expect("key");
        for old in 0..=13 {
            let note = key
                .sign(old, seallog::root(&log, old).expect("root"))
                .expect("sign");
            let cp = checkpoint::open(&note, &vkey).expect("open");
            assert!(checkpoint::extends(&log, &cp).expect("extends").is_ok());
        }
        let root = seallog::root(&log, 13).expect("root");
        let (i, data) = log.leaf_of(ids[5]).expect("leaf").expect("logged");
        let path = seallog::inclusion_proof(&log, i, 13).expect("proof");
        let leaf = tlog_tiles::record_hash(data.as_bytes());
        assert!(tlog_tiles::check_record(&path, 13, root, i, leaf).is_ok());
        // A forged root is not extended.
        let forged = key.sign(7, Hash([1; 32])).expect("sign");
        let cp = checkpoint::open(&forged, &vkey).expect("open");
        assert!(checkpoint::extends(&log, &cp).expect("extends").is_err());
    }
}
