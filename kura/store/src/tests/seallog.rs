//! The seal log as the store keeps it: its roots and proofs against an independent RFC 6962
//! implementation, append-only triggers, and the migration that backfills it.

use crate::{Store, StoreOptions};
use kura_tlog::seallog::{self, *};

/// A store with `n` sealed (empty) ledgers.
fn sealed(n: usize) -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store =
        Store::create(dir.path().join("k.db"), &StoreOptions::default()).expect("create");
    let session = store.create_session("s").expect("session").session_id;
    for i in 0..n {
        let l = store
            .open_ledger(session, &format!("l{i}"), &[])
            .expect("open");
        store.seal_ledger(l.ledger_id).expect("seal");
    }
    (dir, store)
}

fn leaf_hashes(store: &Store) -> Vec<[u8; 32]> {
    let mut stmt = store
        .conn()
        .prepare("SELECT leaf_data FROM seal_log_leaves ORDER BY leaf_index")
        .expect("prepare");
    stmt.query_map([], |r| r.get::<_, String>(0))
        .expect("query")
        .map(|d| proto::merkle::leaf_hash(d.expect("row").as_bytes()))
        .collect()
}

/// RFC 6962 section 2.1.2's SUBPROOF, written from the RFC's text over our own
/// (`rs_merkle`-based) subtree roots: a second implementation to hold `tlog_tiles` to.
fn subproof(m: usize, leaves: &[[u8; 32]], complete: bool) -> Vec<[u8; 32]> {
    let n = leaves.len();
    if m == n {
        return if complete {
            vec![]
        } else {
            vec![proto::merkle::root(leaves)]
        };
    }
    let k = n.next_power_of_two() / 2;
    if m <= k {
        let mut p = subproof(m, &leaves[..k], complete);
        p.push(proto::merkle::root(&leaves[k..]));
        p
    } else {
        let mut p = subproof(m - k, &leaves[k..], false);
        p.push(proto::merkle::root(&leaves[..k]));
        p
    }
}

#[test]
fn roots_and_consistency_proofs_match_an_independent_rfc_6962_implementation() {
    let (_d, store) = sealed(21);
    let leaves = leaf_hashes(&store);
    assert_eq!(leaves.len(), 21);
    for n in 1..=21u64 {
        let ours = proto::merkle::root(&leaves[..n as usize]);
        let root = seallog::root(&store.seal_log(), n).expect("root");
        assert_eq!(root.0, ours, "root of {n}");
        for m in 1..n {
            let proof = consistency_proof(&store.seal_log(), m, n).expect("proof");
            let want = subproof(m as usize, &leaves[..n as usize], true);
            let got: Vec<[u8; 32]> = proof.iter().map(|h| h.0).collect();
            assert_eq!(got, want, "consistency proof {m} -> {n}");
            let old = seallog::root(&store.seal_log(), m).expect("old root");
            tlog_tiles::check_tree(&proof, n, root, m, old).expect("checks");
            // A proof for another old tree does not check.
            let wrong = tlog_tiles::Hash(proto::merkle::root(&leaves[..m as usize - 1]));
            assert!(m == 1 || tlog_tiles::check_tree(&proof, n, root, m, wrong).is_err());
        }
        for i in 0..n {
            let proof = inclusion_proof(&store.seal_log(), i, n).expect("inclusion");
            let path = proto::merkle::audit_path(&leaves[..n as usize], i as usize).expect("path");
            let got: Vec<[u8; 32]> = proof.iter().map(|h| h.0).collect();
            assert_eq!(got, path, "inclusion {i} of {n}");
        }
    }
    assert!(check(&store.seal_log()).expect("check").is_empty());
}

#[test]
fn every_seal_is_a_leaf_in_seal_order_and_the_log_is_append_only() {
    let (_d, store) = sealed(3);
    let rows: Vec<(i64, String)> = store
        .conn()
        .prepare(
            "SELECT s.leaf_index, l.ledger_id FROM seal_log_leaves s
                   JOIN ledgers l ON l.ledger_id = s.ledger_id ORDER BY l.sealed_at, l.ledger_id",
        )
        .expect("prepare")
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows");
    assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), [0, 1, 2]);
    for sql in [
        "UPDATE seal_log_leaves SET leaf_data = 'x' WHERE leaf_index = 0",
        "DELETE FROM seal_log_hashes WHERE hash_index = 0",
    ] {
        let err = store.conn().execute(sql, []).expect_err(sql);
        assert!(err.to_string().contains("append-only"), "{err}");
    }
}

#[test]
fn migration_008_backfills_an_older_store_in_seal_order() {
    let (dir, store) = sealed(9);
    let before = leaf_hashes(&store);
    let root = seallog::root(&store.seal_log(), 9).expect("root");
    // What a version-7 store looks like: no seal log (and none of what came after).
    crate::store::back_to_version_7(store.conn());
    drop(store);
    let store = Store::open(dir.path().join("k.db"), &StoreOptions::default()).expect("open");
    assert_eq!(leaf_hashes(&store), before);
    assert_eq!(seallog::root(&store.seal_log(), 9).expect("root"), root);
    assert!(check(&store.seal_log()).expect("check").is_empty());
}

/// Attack: a crafted database claims a leaf at the integer limit, where the tlog
/// arithmetic would overflow: a clear error, no panic, nothing written.
#[test]
fn a_crafted_leaf_index_is_a_clear_error() {
    let (_d, mut store) = sealed(1);
    store
        .conn()
        .execute_batch("PRAGMA foreign_keys = OFF")
        .expect("fk");
    store
        .conn()
        .execute(
            "INSERT INTO seal_log_leaves VALUES (9223372036854775807, 'x', '{}')",
            [],
        )
        .expect("craft");
    let err = size(&store.seal_log()).expect_err("out of range");
    assert!(err.is_corruption(), "{err}");
    let session = store.create_session("t").expect("session").session_id;
    let l = store.open_ledger(session, "l", &[]).expect("open");
    assert!(
        store.seal_ledger(l.ledger_id).is_err(),
        "sealing refuses too"
    );
    assert!(
        check(&store.seal_log())
            .is_ok_and(|p| p.iter().any(|(_, check, _)| *check == "seal_log_gap"))
    );
}

/// Attack: rewrite a sealed ledger's hash (as a consistent rewrite would): the log's
/// leaf no longer names the ledger as it is.
#[test]
fn a_rewritten_ledger_no_longer_matches_its_leaf() {
    let (_d, store) = sealed(4);
    let c = store.conn();
    c.execute_batch("DROP TRIGGER IF EXISTS ledgers_sealed_immutable")
        .expect("drop");
    let triggers: Vec<String> = c
        .prepare("SELECT name FROM sqlite_schema WHERE type = 'trigger' AND tbl_name = 'ledgers'")
        .expect("prepare")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<rusqlite::Result<_>>()
        .expect("rows");
    for t in triggers {
        c.execute_batch(&format!("DROP TRIGGER {t}")).expect("drop");
    }
    c.execute(
        "UPDATE ledgers SET ledger_hash = 'ff' || substr(ledger_hash, 3)
              WHERE ledger_id = (SELECT ledger_id FROM seal_log_leaves WHERE leaf_index = 2)",
        [],
    )
    .expect("rewrite");
    let problems = check(&crate::SealLog(c)).expect("check");
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].1, "seal_log_leaf");
    assert!(problems[0].2.starts_with("leaf 2 "), "{problems:?}");
}
