//! Redaction: a record's content erased under a person's signed redaction, its leaf kept —
//! the store still verifies (the record reported redacted), a checkpoint taken before still
//! matches, the bytes are gone from the file; and every way around it refused or caught.

use std::sync::Arc;

use ed25519_dalek::SigningKey;
use kura_policy::writ::{Issuer, sign_redaction};
use proto::record::{NewRecord, RecordType};
use proto::writ::{REDACTION_KIND, RedactionBody};

use crate::verify::{Scope, verify, verify_with};
use crate::{Store, StoreOptions};

const SECRET: &str = "sk-canary-7f3a9c1e";

fn people() -> Vec<Issuer> {
    vec![Issuer {
        name: "ana".into(),
        public_key: hex::encode(SigningKey::from_bytes(&[1; 32]).verifying_key().to_bytes()),
    }]
}

fn text(t: &str) -> NewRecord {
    NewRecord {
        record_type: RecordType::ToolResult,
        content: serde_json::json!({ "status": "success", "result": t, "call_id": "c" }),
        author_id: "agent:hashi".into(),
        metadata: Default::default(),
    }
}

/// A signed store with one sealed ledger: "before", the secret, "after".
fn store() -> (tempfile::TempDir, Store, Vec<proto::Record>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut s = Store::create(dir.path().join("r.db"), &StoreOptions::default()).expect("create");
    let key = Arc::new(nkeys::KeyPair::new_user());
    s.set_sealer(Some(kura_tlog::sealer::Sealer::new(key).expect("sealer")));
    let session = s.create_session("s").expect("session").session_id;
    let l = s.open_ledger(session, "turn-1-out", &[]).expect("open");
    let mut records = Vec::new();
    for t in ["before", SECRET, "after"] {
        records.push(s.append(l.ledger_id, &text(t)).expect("append").record);
    }
    s.seal_ledger(l.ledger_id).expect("seal");
    (dir, s, records)
}

fn redaction(key: u8, r: &proto::Record) -> proto::writ::Redaction {
    sign_redaction(
        &SigningKey::from_bytes(&[key; 32]),
        RedactionBody {
            kind: REDACTION_KIND.into(),
            record_id: r.record_id.to_string(),
            record_hash: r.hash.clone(),
            by: "user:ana".into(),
            reason: "a key leaked into a tool result".into(),
            redacted_at: "2026-11-26T12:00:00Z".into(),
        },
    )
}

/// Whether any of the database's files holds `needle`.
fn on_disk(dir: &std::path::Path, needle: &str) -> bool {
    std::fs::read_dir(dir).expect("dir").any(|e| {
        let bytes = std::fs::read(e.expect("entry").path()).unwrap_or_default();
        bytes.windows(needle.len()).any(|w| w == needle.as_bytes())
    })
}

#[test]
fn a_redacted_record_verifies_as_redacted_and_a_checkpoint_taken_before_still_verifies() {
    let (dir, mut s, records) = store();
    let size = kura_tlog::seallog::size(&s.seal_log()).expect("size");
    let before = kura_tlog::seallog::root(&s.seal_log(), size).expect("root");
    s.conn()
        .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("ckpt");
    assert!(
        on_disk(dir.path(), SECRET),
        "the secret is in the file before"
    );
    s.redact(&redaction(1, &records[1]), &people(), "user:ana")
        .expect("redact");
    assert!(
        !on_disk(dir.path(), SECRET),
        "the secret's bytes are gone from the database and its WAL"
    );
    // The seal log grew by the authority ledger; its first `size` leaves are unchanged.
    assert_eq!(
        kura_tlog::seallog::root(&s.seal_log(), size).expect("root"),
        before
    );
    let report = verify_with(&s, &Scope::All, None, None, &people()).expect("verify");
    assert!(report.ok(), "{:?}", report.problems);
    assert_eq!(report.redacted.len(), 1);
    assert_eq!(
        report.redacted[0].record_id,
        records[1].record_id.to_string()
    );
    assert_eq!(report.redacted[0].by, "user:ana");
    // Without the people who may redact, verify cannot tell a redaction from tampering.
    let blind = verify(&s, &Scope::All, None, None).expect("verify");
    assert!(
        blind.problems.iter().any(|p| p.check == "redaction"),
        "{:?}",
        blind.problems
    );
    // The row says where its content went; the neighbours are untouched.
    let r = s.read_record(records[1].record_id).expect("read");
    assert!(r.content.get("redacted").is_some(), "{}", r.content);
    assert_eq!(
        s.read_record(records[0].record_id).expect("read").content,
        records[0].content
    );
    // Twice is refused.
    assert!(
        s.redact(&redaction(1, &records[1]), &people(), "user:ana")
            .is_err()
    );
}

#[test]
fn a_redaction_without_a_valid_signature_is_refused_and_changes_nothing() {
    let (_dir, mut s, records) = store();
    let count = |s: &Store| -> i64 {
        s.conn()
            .query_row("SELECT count(*) FROM records", [], |r| r.get(0))
            .expect("n")
    };
    let n = count(&s);
    let mut forged = redaction(1, &records[1]);
    forged.body.record_id = records[0].record_id.to_string();
    forged.body.record_hash = records[0].hash.clone();
    let untrusted = redaction(9, &records[1]);
    let mut unsigned = redaction(1, &records[1]);
    unsigned.signature = "00".repeat(64);
    for (what, r) in [
        ("altered", forged),
        ("untrusted key", untrusted),
        ("bad signature", unsigned),
    ] {
        let e = s.redact(&r, &people(), "user:eve").expect_err(what);
        assert!(
            e.to_string().contains("signature") || e.to_string().contains("may redact"),
            "{what}: {e}"
        );
    }
    assert_eq!(count(&s), n, "nothing was written");
    assert_eq!(
        s.read_record(records[1].record_id).expect("read").content,
        records[1].content
    );
    assert!(
        verify_with(&s, &Scope::All, None, None, &people())
            .expect("verify")
            .ok()
    );
}

#[test]
fn a_redaction_planted_by_hand_is_caught_by_verify() {
    let (_dir, mut s, records) = store();
    // Someone with the file erases the secret and plants a redaction signed by their own key.
    let fake = redaction(9, &records[1]);
    let leaf = hex::encode(
        proto::record::RecordColumns {
            record_id: &records[1].record_id.to_string(),
            hash: &records[1].hash,
            record_type: "tool.result",
            content: &proto::canonical_json(&records[1].content).expect("c"),
            author_id: "agent:hashi",
            metadata: "{}",
            created_at: &records[1].created_at,
        }
        .leaf_hash(),
    );
    let planted = s
        .write(|tx| {
            tx.write_record(&NewRecord {
                record_type: RecordType::SysRedaction,
                content: serde_json::to_value(&fake).expect("json"),
                author_id: "user:ana".into(),
                metadata: Default::default(),
            })
        })
        .expect("plant");
    s.conn()
        .execute_batch("DROP TRIGGER records_no_update")
        .expect("whoever has the file");
    s.conn()
        .execute(
            "UPDATE records SET content = '{\"redacted\":\"x\"}' WHERE record_id = ?1",
            [records[1].record_id.to_string()],
        )
        .expect("erase");
    s.conn()
        .execute(
            "INSERT INTO redactions VALUES (?1, ?2, ?3, ?4)",
            [
                records[1].record_id.to_string(),
                records[1].hash.clone(),
                leaf,
                planted.record_id.to_string(),
            ],
        )
        .expect("row");
    let report = verify_with(&s, &Scope::All, None, None, &people()).expect("verify");
    let checks: Vec<&str> = report.problems.iter().map(|p| p.check).collect();
    assert!(checks.contains(&"redaction"), "{checks:?}");
    assert!(
        checks.contains(&"record_hash"),
        "the erased content is tampering: {checks:?}"
    );
    assert!(report.redacted.is_empty());
}

#[test]
fn a_redaction_of_a_record_to_hide_tampering_of_its_neighbours_is_still_caught() {
    let (_dir, mut s, records) = store();
    // A neighbour's content is altered on disk, then the record next to it redacted.
    s.conn().execute_batch("DROP TRIGGER records_no_update; CREATE TRIGGER records_no_update BEFORE UPDATE ON records WHEN 0 BEGIN SELECT 1; END;").expect("whoever has the file");
    s.conn()
        .execute(
            "UPDATE records SET content = replace(content, 'after', 'AFTER') WHERE record_id = ?1",
            [records[2].record_id.to_string()],
        )
        .expect("tamper");
    s.redact(&redaction(1, &records[1]), &people(), "user:ana")
        .expect("redact");
    let report = verify_with(&s, &Scope::All, None, None, &people()).expect("verify");
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.id == records[2].record_id.to_string() && p.check == "record_hash"),
        "{:?}",
        report.problems
    );
    // And the tampered record itself cannot be redacted to make it go away.
    let e = s
        .redact(&redaction(1, &records[2]), &people(), "user:ana")
        .expect_err("refused");
    assert!(e.to_string().contains("cannot hide tampering"), "{e}");
}

/// A redacted record packed into a later ledger (as minato packs a previous deliverable)
/// joins with its kept leaf; proofs of it and of its neighbours still hold, the redacted
/// one saying so.
#[test]
fn a_redacted_record_still_proves_its_place_and_joins_new_ledgers() {
    let (_dir, mut s, records) = store();
    s.redact(&redaction(1, &records[1]), &people(), "user:ana")
        .expect("redact");
    let ledger = s.ledgers_containing(records[1].record_id).expect("ledgers")[0];
    let neighbour = crate::proof::prove(&s, records[0].record_id, ledger).expect("prove");
    assert!(neighbour.redacted.is_none());
    neighbour.verify(None).expect("a neighbour's proof holds");
    let proof = crate::proof::prove(&s, records[1].record_id, ledger).expect("prove");
    proof
        .verify(None)
        .expect("the redacted record's place holds");
    assert_eq!(
        proof
            .redacted
            .as_ref()
            .map(|r| r.redaction.body.by.as_str()),
        Some("user:ana")
    );
    // Its content cannot be swapped back in under the proof.
    let mut lie = proof.clone();
    lie.redacted = None;
    assert!(
        lie.verify(None).is_err(),
        "the tombstone is not the content that was sealed"
    );
    let session = s.create_session("next").expect("session").session_id;
    let next = s
        .open_ledger(session, "turn-2-ctx", &[ledger])
        .expect("open");
    s.write(|tx| tx.append_existing(next.ledger_id, records[1].record_id))
        .expect("pack");
    s.seal_ledger(next.ledger_id).expect("seal");
    let report = verify_with(&s, &Scope::All, None, None, &people()).expect("verify");
    assert!(report.ok(), "{:?}", report.problems);
}
