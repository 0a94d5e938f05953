//! aegis's decision code in-process on a temporary database: a real approval request filed
//! the way hashi files it, decided by signed votes.

use ed25519_dalek::SigningKey;
use kura_store::store::{Store, StoreOptions};
use kura_store::work::approvals::{ApprovalState, Effect, approval, request_approval_in};
use kura_store::work::{claim_next, fenced, now_ms};
use proto::doorbell::ApprovalDecision;
use proto::record::RecordType;

use crate::policy::Policy;
use crate::{Approver, decide, keys};

/// A request for an `fs.write` that the default policy asks people about.
fn asked_request(store: &mut Store) -> uuid::Uuid {
    kura_testkit::pending_turn(store, "write");
    let claim = claim_next(store, "w", 60_000, now_ms())
        .expect("claim")
        .expect("turn");
    let args = serde_json::Map::new();
    let a = fenced(store, &claim, |tx| {
        request_approval_in(
            tx,
            &claim,
            "call-1",
            "fs.write",
            &args,
            Effect::Write,
            "agent:hashi",
            Default::default(),
        )
    })
    .expect("request");
    let e = decide::evaluate(store, &Policy::default(), 60_000, Some(a.request_id))
        .expect("evaluate")
        .expect("evaluated");
    assert_eq!(
        e.state,
        ApprovalState::Asked,
        "the default policy asks for writes"
    );
    a.request_id
}

fn signed(key: &SigningKey, name: &str, request_id: uuid::Uuid, hash: &str) -> ApprovalDecision {
    let mut d = ApprovalDecision {
        request_id,
        decision: "approve".into(),
        approver: name.into(),
        note: String::new(),
        signed_at: kura_store::time::now(),
        signature: String::new(),
    };
    keys::sign(key, &mut d, hash);
    d
}

fn sys_errors(store: &Store) -> i64 {
    store
        .conn()
        .query_row(
            "SELECT count(*) FROM records WHERE record_type = ?1",
            [RecordType::SysError.as_str()],
            |r| r.get(0),
        )
        .expect("count")
}

#[test]
fn a_replayed_vote_is_refused_as_a_duplicate_and_recorded_and_the_count_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = Store::create(dir.path().join("a.db"), &StoreOptions::default()).expect("db");
    let request_id = asked_request(&mut store);
    let hash = approval(store.conn(), request_id)
        .expect("read")
        .expect("row")
        .request_hash;
    let (alice, bob) = (
        SigningKey::from_bytes(&[1u8; 32]),
        SigningKey::from_bytes(&[2u8; 32]),
    );
    let approvers = [
        Approver {
            name: "alice".into(),
            public_key: hex::encode(alice.verifying_key().as_bytes()),
        },
        Approver {
            name: "bob".into(),
            public_key: hex::encode(bob.verifying_key().as_bytes()),
        },
    ];
    // Two approvals needed: raise `required` the way a 2-of-N rule would.
    store
        .conn()
        .execute(
            "UPDATE approvals SET required = 2 WHERE request_id = ?1",
            [request_id.to_string()],
        )
        .expect("required");

    let first = signed(&alice, "alice", request_id, &hash);
    let v = decide::decide(&mut store, &approvers, &first).expect("decide");
    assert!(v.ok, "{v:?}");
    assert_eq!(v.state, "asked", "1 of 2");
    let before = sys_errors(&store);

    let v = decide::decide(&mut store, &approvers, &first).expect("decide");
    assert!(!v.ok);
    assert!(v.message.contains("duplicate or replayed"), "{}", v.message);
    assert_eq!(
        sys_errors(&store),
        before + 1,
        "the refusal is on the record"
    );
    assert_eq!(
        approval(store.conn(), request_id)
            .expect("read")
            .expect("row")
            .state,
        ApprovalState::Asked,
        "a replay does not count as the second approval"
    );

    let v = decide::decide(
        &mut store,
        &approvers,
        &signed(&bob, "bob", request_id, &hash),
    )
    .expect("decide");
    assert!(v.ok, "{v:?}");
    assert_eq!(
        approval(store.conn(), request_id)
            .expect("read")
            .expect("row")
            .state,
        ApprovalState::Approved
    );
}
