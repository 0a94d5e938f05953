//! aegis's decision code in-process on a temporary database: a real approval request filed
//! the way hashi files it, decided by signed votes.

use ed25519_dalek::SigningKey;
use kura_store::store::{Store, StoreOptions};
use kura_work::WorkTx;
use kura_work::approvals::{ApprovalState, Effect, approval};
use kura_work::{claim_next, fenced, now_ms};
use proto::RequestId;
use proto::doorbell::ApprovalDecision;
use proto::record::RecordType;

use std::time::Duration;

use crate::limit::Limiter;
use crate::policy::Policy;
use crate::{Approver, Approvers, decide, keys};

/// The default `signed_within_ms`.
const WINDOW: Duration = Duration::from_secs(600);

fn approver(name: &str, key: &SigningKey) -> Approver {
    Approver {
        name: name.into(),
        public_key: hex::encode(key.verifying_key().as_bytes()),
    }
}

fn store_with_request() -> (tempfile::TempDir, Store, proto::RequestId, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = Store::create(dir.path().join("a.db"), &StoreOptions::default()).expect("db");
    let request_id = asked_request(&mut store);
    let hash = approval(store.conn(), request_id)
        .expect("read")
        .expect("row")
        .request_hash;
    (dir, store, request_id, hash)
}

fn count(store: &Store, sql: &str) -> i64 {
    store
        .conn()
        .query_row(sql, [], |r| r.get(0))
        .expect("count")
}

/// A request for an `fs.write` that the default policy asks people about.
fn asked_request(store: &mut Store) -> proto::RequestId {
    kura_testkit::pending_turn(store, "write");
    let claim = claim_next(store, "w", 60_000, now_ms())
        .expect("claim")
        .expect("turn");
    let args = serde_json::Map::new();
    let a = fenced(store, &claim, |tx| {
        tx.request_approval(
            &claim,
            &"call-1".into(),
            "fs.write",
            &args,
            Effect::Write,
            "agent:hashi",
            Default::default(),
        )
    })
    .expect("request");
    let e = decide::evaluate(store, &Policy::default(), &[], 60_000, Some(a.request_id))
        .expect("evaluate")
        .expect("evaluated");
    assert_eq!(
        e.state,
        ApprovalState::Asked,
        "the default policy asks for writes"
    );
    a.request_id
}

fn signed(key: &SigningKey, name: &str, request_id: RequestId, hash: &str) -> ApprovalDecision {
    let mut d = ApprovalDecision {
        request_id,
        decision: proto::Vote::Approve.into(),
        approver: name.into(),
        note: String::new(),
        signed_at: kura_store::time::now(),
        signature: String::new(),
        arguments: None,
    };
    keys::sign(key, &mut d, hash);
    d
}

/// [`decide::decide`] under the default policy and signing window.
fn decide_by_default(
    store: &mut Store,
    approvers: &Approvers,
    limiter: &mut Limiter,
    d: &ApprovalDecision,
) -> decide::Verdicted {
    decide::decide(store, approvers, WINDOW, limiter, d, &Policy::default()).expect("decide")
}

/// One decision through aegis's check with the default window, limiter and policy.
fn decide_with_defaults(
    store: &mut Store,
    approvers: &Approvers,
    d: &proto::doorbell::ApprovalDecision,
) -> decide::Verdicted {
    decide::decide(
        store,
        approvers,
        WINDOW,
        &mut Limiter::default(),
        d,
        &crate::policy::Policy::default(),
    )
    .expect("decide")
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
    let approvers = Approvers::try_from(vec![
        Approver {
            name: "alice".into(),
            public_key: hex::encode(alice.verifying_key().as_bytes()),
        },
        Approver {
            name: "bob".into(),
            public_key: hex::encode(bob.verifying_key().as_bytes()),
        },
    ])
    .expect("approvers");
    // Two approvals needed: raise `required` the way a 2-of-N rule would.
    store
        .conn()
        .execute(
            "UPDATE approvals SET required = 2 WHERE request_id = ?1",
            [request_id.to_string()],
        )
        .expect("required");

    let first = signed(&alice, "alice", request_id, &hash);
    let v = decide::decide(
        &mut store,
        &approvers,
        WINDOW,
        &mut Limiter::default(),
        &first,
        &crate::policy::Policy::default(),
    )
    .expect("decide");
    assert!(v.ok, "{v:?}");
    assert_eq!(v.state, "asked", "1 of 2");
    let before = sys_errors(&store);

    let v = decide::decide(
        &mut store,
        &approvers,
        WINDOW,
        &mut Limiter::default(),
        &first,
        &crate::policy::Policy::default(),
    )
    .expect("decide");
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
        WINDOW,
        &mut Limiter::default(),
        &signed(&bob, "bob", request_id, &hash),
        &crate::policy::Policy::default(),
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

/// Regression (review of the issue-25 re-shape): typing the vote made `"decision": "maybe"`
/// fail to parse, so it was answered "malformed" and never counted or recorded. It parses,
/// and is refused, counted and put on the record like any other bad decision.
#[test]
fn a_vote_that_is_neither_approve_nor_deny_is_refused_and_recorded() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = Store::create(dir.path().join("a.db"), &StoreOptions::default()).expect("db");
    let request_id = asked_request(&mut store);
    let hash = approval(store.conn(), request_id)
        .expect("read")
        .expect("row")
        .request_hash;
    let alice = SigningKey::from_bytes(&[1u8; 32]);
    let approvers = Approvers::try_from(vec![Approver {
        name: "alice".into(),
        public_key: hex::encode(alice.verifying_key().as_bytes()),
    }])
    .expect("approvers");
    let mut wire = serde_json::to_value(signed(&alice, "alice", request_id, &hash)).expect("json");
    wire["decision"] = "maybe".into();
    let d: proto::doorbell::ApprovalDecision = serde_json::from_value(wire).expect("it parses");
    let before = sys_errors(&store);
    let v = decide_with_defaults(&mut store, &approvers, &d);
    assert!(!v.ok);
    assert!(
        v.message
            .contains("decision must be approve or deny, not \"maybe\""),
        "{}",
        v.message
    );
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
        ApprovalState::Asked
    );
}

/// Attack: one key listed under two names satisfied `approvers = 2` alone. Such a config is
/// refused at load, and votes count distinct keys even if one slipped through.
#[test]
fn one_key_under_two_names_is_refused_and_counts_once() {
    let key = SigningKey::from_bytes(&[7u8; 32]);
    let pk = hex::encode(key.verifying_key().as_bytes());
    let toml = format!(
        "approvers = [{{ name = \"eve\", public_key = \"{pk}\" }}, {{ name = \"eve2\", public_key = \"{}\" }}]",
        pk.to_uppercase()
    );
    let err = toml::from_str::<crate::AegisConfig>(&toml).expect_err("refused at load");
    assert!(err.to_string().contains("same public key"), "{err}");
    assert!(
        Approvers::try_from(vec![
            approver("a", &key),
            approver("a", &SigningKey::from_bytes(&[8u8; 32]))
        ])
        .is_err(),
        "a name twice"
    );

    // Past the config check (say, an old database with such votes): still one vote.
    let (_dir, mut store, request_id, hash) = store_with_request();
    store
        .conn()
        .execute(
            "UPDATE approvals SET required = 2 WHERE request_id = ?1",
            [request_id.to_string()],
        )
        .expect("required");
    let twice = Approvers::unchecked(vec![approver("eve", &key), approver("eve2", &key)]);
    assert!(
        decide::decide(
            &mut store,
            &twice,
            WINDOW,
            &mut Limiter::default(),
            &signed(&key, "eve", request_id, &hash),
            &crate::policy::Policy::default()
        )
        .expect("decide")
        .ok
    );
    let v = decide::decide(
        &mut store,
        &twice,
        WINDOW,
        &mut Limiter::default(),
        &signed(&key, "eve2", request_id, &hash),
        &crate::policy::Policy::default(),
    )
    .expect("decide");
    assert!(!v.ok, "the same key votes once: {v:?}");
    assert_eq!(
        approval(store.conn(), request_id)
            .expect("read")
            .expect("row")
            .state,
        ApprovalState::Asked,
        "still 1 of 2"
    );
}

/// Attack: `signed_at` was never checked (`"not-a-time-9999"` was accepted).
#[test]
fn stale_or_malformed_signed_at_is_refused() {
    let (_dir, mut store, request_id, hash) = store_with_request();
    let alice = SigningKey::from_bytes(&[1u8; 32]);
    let approvers = Approvers::try_from(vec![approver("alice", &alice)]).expect("approvers");
    for (when, why) in [
        ("not-a-time-9999", "not an RFC 3339"),
        ("2020-01-01T00:00:00Z", "decisions must be signed within"),
        ("2999-01-01T00:00:00Z", "decisions must be signed within"),
    ] {
        let mut d = signed(&alice, "alice", request_id, &hash);
        d.signed_at = when.into();
        keys::sign(&alice, &mut d, &hash);
        let v = decide::decide(
            &mut store,
            &approvers,
            WINDOW,
            &mut Limiter::default(),
            &d,
            &crate::policy::Policy::default(),
        )
        .expect("decide");
        assert!(!v.ok && v.message.contains(why), "{when}: {v:?}");
    }
    let v = decide::decide(
        &mut store,
        &approvers,
        WINDOW,
        &mut Limiter::default(),
        &signed(&alice, "alice", request_id, &hash),
        &crate::policy::Policy::default(),
    )
    .expect("decide");
    assert!(v.ok, "a fresh one counts: {v:?}");
}

/// Attack: every forged decision wrote a row and a permanent `sys.error` record (20 s of
/// flooding: 0.2 MB to 412 MB). Refusals are all counted, a few recorded.
#[test]
fn a_flood_of_forged_decisions_leaves_the_store_bounded() {
    let (_dir, mut store, request_id, hash) = store_with_request();
    let alice = SigningKey::from_bytes(&[1u8; 32]);
    let mallory = SigningKey::from_bytes(&[66u8; 32]);
    let approvers = Approvers::try_from(vec![approver("alice", &alice)]).expect("approvers");
    let records_before = count(&store, "SELECT count(*) FROM records");
    let mut limiter = Limiter::default();
    let n = 300;
    for i in 0..n {
        // Forged by an untrusted key, as "alice"; and unsigned ones; and unknown requests.
        let mut d = signed(&mallory, "alice", request_id, &hash);
        d.note = format!("forgery {i}");
        assert!(
            !decide::decide(
                &mut store,
                &approvers,
                WINDOW,
                &mut limiter,
                &d,
                &crate::policy::Policy::default()
            )
            .expect("decide")
            .ok
        );
        let mut unsigned = signed(&alice, "alice", request_id, &hash);
        unsigned.signature = String::new();
        assert!(
            !decide::decide(
                &mut store,
                &approvers,
                WINDOW,
                &mut limiter,
                &unsigned,
                &crate::policy::Policy::default()
            )
            .expect("decide")
            .ok
        );
        let unknown = signed(&mallory, &format!("x{i}"), proto::RequestId::new(), &hash);
        assert!(
            !decide::decide(
                &mut store,
                &approvers,
                WINDOW,
                &mut limiter,
                &unknown,
                &crate::policy::Policy::default()
            )
            .expect("decide")
            .ok
        );
    }
    let new_records = count(&store, "SELECT count(*) FROM records") - records_before;
    assert!(
        new_records <= 3,
        "{new_records} records from {} refusals",
        3 * n
    );
    let rows = count(&store, "SELECT count(*) FROM approval_rejections");
    assert!(rows <= 3 + 100, "{rows} rejection rows");
    // The rate limit held most back from the database; they join the count in one write.
    let held_counts = count(&store, "SELECT sum(refused) FROM approval_rejection_counts");
    assert!(
        held_counts < 3 * 20,
        "{held_counts} refusals written one by one"
    );
    decide::add_refusals(&mut store, &limiter.drain(std::time::Instant::now())).expect("add");
    let counted = count(&store, "SELECT sum(refused) FROM approval_rejection_counts");
    assert_eq!(counted, 3 * n, "every refusal is counted");
    let keys = count(&store, "SELECT count(*) FROM approval_rejection_counts");
    assert!(
        keys <= 2,
        "{keys} count rows: invented names must not multiply them"
    );
    // The request is still decidable by its real approver.
    let v = decide::decide(
        &mut store,
        &approvers,
        WINDOW,
        &mut limiter,
        &signed(&alice, "alice", request_id, &hash),
        &crate::policy::Policy::default(),
    )
    .expect("decide");
    assert!(v.ok, "{v:?}");
}

/// Files `sizes.len()` asked `fs.write` requests on one turn, with contents of those sizes.
fn asked_requests(store: &mut Store, sizes: &[usize]) -> Vec<proto::RequestId> {
    kura_testkit::pending_turn(store, "write many");
    let claim = claim_next(store, "w", 60_000, now_ms())
        .expect("claim")
        .expect("turn");
    sizes
        .iter()
        .enumerate()
        .map(|(i, n)| {
            let args = serde_json::json!({"path": format!("f{i}"), "content": "x".repeat(*n)})
                .as_object()
                .cloned()
                .expect("object");
            let a = fenced(store, &claim, |tx| {
                tx.request_approval(
                    &claim,
                    &format!("call-{i}").into(),
                    "fs.write",
                    &args,
                    Effect::Write,
                    "agent:hashi",
                    Default::default(),
                )
            })
            .expect("request");
            decide::evaluate(store, &Policy::default(), &[], 60_000, Some(a.request_id))
                .expect("evaluate");
            a.request_id
        })
        .collect()
}

/// Attack: one pending `fs.write` of 70 KB made the pending reply exceed `max_payload`, so
/// `aegis pending`, `approve` and `deny` failed for every request. Pages now fit a message,
/// big contents come in pieces, and each request still verifies against its hash.
#[test]
fn a_large_request_does_not_block_the_pending_list() {
    use base64::Engine as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = Store::create(dir.path().join("a.db"), &StoreOptions::default()).expect("db");
    let mut sizes = vec![70_000, 10, 3_000_000];
    sizes.extend(std::iter::repeat_n(5_000, 20));
    let ids = asked_requests(&mut store, &sizes);
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = crate::pending::page(&store, after).expect("page");
        let bytes = serde_json::to_vec(&page).expect("json").len();
        assert!(
            bytes <= crate::pending::MAX_REPLY_BYTES,
            "a page of {bytes} bytes"
        );
        for item in &page.items {
            let content = match &item.record.content {
                Some(c) => c.clone(),
                None => {
                    let mut buf = Vec::new();
                    while (buf.len() as u64) < item.record.content_bytes {
                        let chunk =
                            crate::pending::fetch(&store, item.request_id, buf.len() as u64)
                                .expect("fetch")
                                .expect("known");
                        let data = base64::engine::general_purpose::STANDARD
                            .decode(&chunk.data)
                            .expect("base64");
                        assert!(
                            serde_json::to_vec(&chunk).expect("json").len()
                                <= crate::pending::MAX_REPLY_BYTES
                        );
                        buf.extend(data);
                    }
                    String::from_utf8(buf).expect("utf8")
                }
            };
            let v = crate::client::verify(item, &content).expect("verifies");
            assert_eq!(v.tool, "fs.write");
            // What a rogue would show instead: refused, not displayed.
            let forged = content.replacen("\"f", "\"g", 1);
            assert!(crate::client::verify(item, &forged).is_err());
            seen.push(item.request_id);
        }
        match page.next {
            Some(n) => after = Some(n),
            None => break,
        }
    }
    assert_eq!(seen, ids, "every request, once, in order");
}

/// The test vectors of PROTOCOL.md, recomputed from the code.
#[test]
fn protocol_md_test_vectors_match_the_code() {
    let doc = include_str!("../../PROTOCOL.md");
    let value = |name: &str| -> String {
        let prefix = format!("{name}: ");
        doc.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .unwrap_or_else(|| panic!("PROTOCOL.md has no test vector line `{name}: …`"))
            .trim()
            .to_owned()
    };
    let secret: [u8; 32] = hex::decode(value("secret_key"))
        .expect("hex")
        .try_into()
        .expect("32 bytes");
    let key = SigningKey::from_bytes(&secret);
    let public = hex::encode(key.verifying_key().as_bytes());
    let content: serde_json::Value =
        serde_json::from_str(&value("request_content")).expect("content JSON");
    let canonical = proto::canonical::canonical_json(&content).expect("canonical");
    let hash = proto::canonical::record_hash_from_canonical(
        &value("request_record_type"),
        &canonical,
        &value("request_author_id"),
    )
    .expect("hash");
    let mut d = ApprovalDecision {
        request_id: value("request_id").parse().expect("uuid"),
        decision: value("decision")
            .parse::<proto::Vote>()
            .expect("vote")
            .into(),
        approver: value("approver"),
        note: value("note"),
        signed_at: value("signed_at"),
        signature: String::new(),
        arguments: None,
    };
    let signing = String::from_utf8(d.signing_bytes(&hash)).expect("utf8");
    keys::sign(&key, &mut d, &hash);
    // The bus side: the approver's bus key derived from their secret, aegis's reply signed
    // by its statement key (its seed's own).
    use base64::Engine as _;
    use kura_runtime::identity::{
        bus_key_from_secret, inbox_prefix, reply_signing_bytes, root_key_from_secret,
    };
    let approver_nkey = bus_key_from_secret(secret).expect("nkey").public_key();
    let aegis_secret: [u8; 32] = hex::decode(value("aegis_secret_key"))
        .expect("hex")
        .try_into()
        .expect("32 bytes");
    let aegis = root_key_from_secret(aegis_secret).expect("nkey");
    let reply_to = format!("{}.r1", inbox_prefix(&approver_nkey));
    let payload = value("reply_payload");
    let reply_sig = base64::engine::general_purpose::STANDARD.encode(
        aegis
            .sign(&reply_signing_bytes(&reply_to, payload.as_bytes()))
            .expect("sign"),
    );
    kura_runtime::identity::verify_reply(
        &aegis.public_key(),
        &reply_to,
        payload.as_bytes(),
        &reply_sig,
    )
    .expect("the reply verifies");
    let computed = [
        ("approver_nkey", approver_nkey),
        ("aegis_nkey", aegis.public_key()),
        ("reply_to", reply_to),
        ("reply_signature", reply_sig),
        ("public_key", public),
        ("request_content_canonical", canonical),
        ("request_hash", hash.clone()),
        ("signing_bytes", signing),
        ("signature", d.signature.clone()),
        ("decision_message", serde_json::to_string(&d).expect("json")),
    ];
    let mut wrong = Vec::new();
    for (name, got) in &computed {
        if std::panic::catch_unwind(|| value(name)).ok().as_deref() != Some(got.as_str()) {
            wrong.push(format!("{name}: {got}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "PROTOCOL.md's vectors differ from the code; the code computes:\n{}",
        wrong.join("\n")
    );
    keys::verify(&hex::encode(key.verifying_key().as_bytes()), &d, &hash).expect("verifies");
}

fn edit(
    key: &SigningKey,
    name: &str,
    request_id: RequestId,
    hash: &str,
    path: &str,
) -> ApprovalDecision {
    let mut d = signed(key, name, request_id, hash);
    let args = serde_json::json!({"path": path, "content": "- rice\n"});
    d.arguments = args.as_object().cloned();
    keys::sign(key, &mut d, hash);
    d
}

/// Attack: a relay (the console's server, or anyone between a person and aegis) swaps the
/// arguments a person approved for its own. The edit is signed with the decision, so the
/// swap breaks the signature; the signed edit is recorded and bound to the request.
#[test]
fn edited_arguments_swapped_after_signing_are_refused_and_a_signed_edit_is_bound() {
    let (_dir, mut store, request_id, hash) = store_with_request();
    let alice = SigningKey::from_bytes(&[7u8; 32]);
    let approvers = Approvers::try_from(vec![approver("alice", &alice)]).expect("approvers");
    let mut swapped = edit(&alice, "alice", request_id, &hash, "lists/shopping.md");
    swapped.arguments =
        serde_json::json!({"path": ".ssh/authorized_keys", "content": "ssh-ed25519 AAAA"})
            .as_object()
            .cloned();
    let v = decide_by_default(&mut store, &approvers, &mut Limiter::default(), &swapped);
    assert!(!v.ok && v.message.contains("signature"), "{v:?}");
    let a = approval(store.conn(), request_id)
        .expect("read")
        .expect("row");
    assert_eq!((a.state, a.edited_arguments), (ApprovalState::Asked, None));

    let good = edit(&alice, "alice", request_id, &hash, "lists/shopping.md");
    let v = decide_by_default(&mut store, &approvers, &mut Limiter::default(), &good);
    assert!(v.ok && v.message.contains("edited"), "{v:?}");
    let a = approval(store.conn(), request_id)
        .expect("read")
        .expect("row");
    assert_eq!(a.state, ApprovalState::Approved);
    assert_eq!(
        a.edited_arguments.as_deref(),
        Some(r#"{"content":"- rice\n","path":"lists/shopping.md"}"#)
    );
    // The decision record carries the signed arguments, so anyone can re-check the signature.
    let content: String = store
        .conn()
        .query_row(
            "SELECT content FROM records WHERE record_type = 'approval.decision' AND author_id = 'user:alice'",
            [],
            |r| r.get(0),
        )
        .expect("decision record");
    let rec: serde_json::Value = serde_json::from_str(&content).expect("json");
    assert_eq!(rec["arguments"]["path"], "lists/shopping.md");
}

/// An edit policy would deny is refused (a person cannot approve their way past a deny
/// rule), a deny cannot carry arguments, and with two approvers every approval must bind
/// the same arguments.
#[test]
fn an_edit_policy_denies_or_that_disagrees_with_other_approvals_is_refused() {
    let (_dir, mut store, request_id, hash) = store_with_request();
    let (alice, bob) = (
        SigningKey::from_bytes(&[8u8; 32]),
        SigningKey::from_bytes(&[9u8; 32]),
    );
    let approvers = Approvers::try_from(vec![approver("alice", &alice), approver("bob", &bob)])
        .expect("approvers");
    store
        .conn()
        .execute(
            "UPDATE approvals SET required = 2 WHERE request_id = ?1",
            [request_id.to_string()],
        )
        .expect("required");
    let policy: Policy = toml::from_str(
        r#"[[rules]]
name = "no-secrets"
tool = "fs.*"
args = { path = "secrets/*" }
decision = "deny""#,
    )
    .expect("policy");
    let mut limiter = Limiter::default();
    let mut run = |d: &ApprovalDecision| {
        decide::decide(&mut store, &approvers, WINDOW, &mut limiter, d, &policy).expect("decide")
    };
    let v = run(&edit(&alice, "alice", request_id, &hash, "secrets/token"));
    assert!(
        !v.ok && v.message.contains("denied by policy (no-secrets)"),
        "{v:?}"
    );
    let mut deny = edit(&alice, "alice", request_id, &hash, "lists/a.md");
    deny.decision = proto::Vote::Deny.into();
    keys::sign(&alice, &mut deny, &hash);
    let v = run(&deny);
    assert!(!v.ok && v.message.contains("only an approval"), "{v:?}");

    let v = run(&edit(&alice, "alice", request_id, &hash, "lists/a.md"));
    assert!(v.ok && v.message.contains("1 of 2"), "{v:?}");
    let v = run(&signed(&bob, "bob", request_id, &hash));
    assert!(!v.ok && v.message.contains("edited arguments"), "{v:?}");
    let v = run(&edit(&bob, "bob", request_id, &hash, "lists/b.md"));
    assert!(
        !v.ok && v.message.contains("other edited arguments"),
        "{v:?}"
    );
    let v = run(&edit(&bob, "bob", request_id, &hash, "lists/a.md"));
    assert!(v.ok && v.state == "approved", "{v:?}");
}

/// Attack (issue 24 item 2): "approve edited" around a two-person rule. A write filed under
/// `default:write` (one approver) is approved-edited by one person to a path a stricter rule
/// covers; it must then need that rule's two people, and the request must say which rule.
/// An edit in a spelling hashi would respell (or refuse) is refused, not approved.
#[test]
fn approve_edited_cannot_get_around_a_two_person_rule() {
    let (_dir, mut store, request_id, hash) = store_with_request();
    let (alice, bob) = (
        SigningKey::from_bytes(&[10u8; 32]),
        SigningKey::from_bytes(&[11u8; 32]),
    );
    let approvers = Approvers::try_from(vec![approver("alice", &alice), approver("bob", &bob)])
        .expect("approvers");
    let before = approval(store.conn(), request_id)
        .expect("read")
        .expect("row");
    assert_eq!(
        (before.rule.as_deref(), before.required),
        (Some("default:write"), 1)
    );
    let policy: Policy = toml::from_str(
        r#"[[rules]]
name = "secrets-need-two-people"
tool = "fs.*"
args = { path = "secrets/*" }
decision = "ask"
approvers = 2"#,
    )
    .expect("policy");
    let mut limiter = Limiter::default();
    let mut run = |store: &mut Store, d: &ApprovalDecision| {
        decide::decide(store, &approvers, WINDOW, &mut limiter, d, &policy).expect("decide")
    };
    for respelled in ["./secrets/x", "a/../secrets/x", "../secrets/x"] {
        let v = run(
            &mut store,
            &edit(&alice, "alice", request_id, &hash, respelled),
        );
        assert!(
            !v.ok && v.message.contains("the edited arguments"),
            "{respelled}: {v:?}"
        );
    }
    let v = run(
        &mut store,
        &edit(&alice, "alice", request_id, &hash, "secrets/x"),
    );
    assert!(
        v.ok && v.state == "asked" && v.message.contains("1 of 2"),
        "{v:?}"
    );
    let a = approval(store.conn(), request_id)
        .expect("read")
        .expect("row");
    assert_eq!(
        (a.state, a.rule.as_deref(), a.required),
        (ApprovalState::Asked, Some("secrets-need-two-people"), 2)
    );
    let v = run(
        &mut store,
        &edit(&bob, "bob", request_id, &hash, "secrets/x"),
    );
    assert!(v.ok && v.state == "approved", "{v:?}");
}

/// Broke (issue 24 item 10): a plain decision could be 10 KB though PROTOCOL.md says 1,024
/// bytes, and a note 10,000 characters though it says 200. Both limits are kept now, each
/// refusal says which, and nothing is recorded as a vote.
#[test]
fn a_plain_decision_over_1024_bytes_or_a_note_over_200_characters_is_refused() {
    let (_dir, mut store, request_id, hash) = store_with_request();
    let alice = SigningKey::from_bytes(&[12u8; 32]);
    let approvers = Approvers::try_from(vec![approver("alice", &alice)]).expect("approvers");
    let mut limiter = Limiter::default();
    for (note, says) in [
        ("x".repeat(10_000), "at most 200"),
        ("x".repeat(201), "201 characters"),
        // 200 characters, but 800 bytes of them: the plain message passes 1,024 bytes.
        ("\u{1F600}".repeat(200), "at most 1024"),
    ] {
        let mut d = signed(&alice, "alice", request_id, &hash);
        d.note = note;
        keys::sign(&alice, &mut d, &hash);
        let v = decide_by_default(&mut store, &approvers, &mut limiter, &d);
        assert!(!v.ok && v.message.contains(says), "{says}: {v:?}");
    }
    assert_eq!(
        count(&store, "SELECT count(*) FROM approval_votes"),
        0,
        "no vote recorded"
    );
    // At the limit it counts.
    let mut d = signed(&alice, "alice", request_id, &hash);
    d.note = "x".repeat(200);
    keys::sign(&alice, &mut d, &hash);
    let v = decide_by_default(&mut store, &approvers, &mut limiter, &d);
    assert!(v.ok, "{v:?}");
    // A 50 KB message is refused at the subject's cap, and the refusal names that cap.
    let big = vec![b' '; 50 * 1024];
    let err = proto::doorbell::parse_capped::<ApprovalDecision>(
        &big,
        proto::doorbell::MAX_DECISION_BYTES,
    )
    .expect_err("oversized")
    .to_string();
    assert!(err.contains("49152-byte cap"), "{err}");
}

/// Attack (issue 24 item 1, after an upgrade): an approver listed by an older Kura logs in
/// with their decision key itself, so whoever plays the bus server can get a decision
/// signed as a login nonce. aegis refuses an approver whose decision key is listed as a bus
/// login key, and one `kura keys remove` recorded as removed.
#[test]
fn an_approver_whose_decision_key_logs_in_or_who_was_removed_is_refused() {
    use kura_runtime::identity::{Identities, Identity, Role, root_key_from_secret};
    let (old, fresh, gone) = (
        SigningKey::from_bytes(&[21u8; 32]),
        SigningKey::from_bytes(&[22u8; 32]),
        SigningKey::from_bytes(&[23u8; 32]),
    );
    let login = |k: &SigningKey| {
        root_key_from_secret(k.to_bytes())
            .expect("nkey")
            .public_key()
    };
    let ids = Identities {
        removed: vec!["gone".into()],
        list: vec![
            Identity {
                name: "old".into(),
                role: Role::Approver,
                nkey: login(&old),
                signer: None,
                retired: Vec::new(),
            },
            Identity {
                name: "fresh".into(),
                role: Role::Approver,
                nkey: kura_runtime::identity::bus_key_from_secret(fresh.to_bytes())
                    .expect("bus")
                    .public_key(),
                signer: None,
                retired: Vec::new(),
            },
        ],
    };
    let approvers = Approvers::try_from(vec![
        approver("old", &old),
        approver("fresh", &fresh),
        approver("gone", &gone),
    ])
    .expect("approvers")
    .listed_in(&ids);
    assert_eq!(
        approvers
            .iter()
            .map(|a| a.name.as_str())
            .collect::<Vec<_>>(),
        ["fresh"]
    );
    assert!(
        approvers
            .refused("old")
            .is_some_and(|w| w.contains("logs in"))
    );
    assert!(
        approvers
            .refused("gone")
            .is_some_and(|w| w.contains("removed"))
    );
    // And a decision by one of them says why.
    let (_dir, mut store, request_id, hash) = store_with_request();
    let v = decide_by_default(
        &mut store,
        &approvers,
        &mut Limiter::default(),
        &signed(&old, "old", request_id, &hash),
    );
    assert!(!v.ok && v.message.contains("logs in to the bus"), "{v:?}");
}

/// Attack: an outside agent holding a writ for reads asks to run a write; refused by the writ
/// before policy (whose default would have asked people), recorded, counted on the writ.
#[test]
fn an_outside_agents_call_outside_its_writ_is_refused_before_policy() {
    use kura_policy::writ::{Issuer, sign_writ};
    use proto::writ::WritBody;
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store = Store::create(dir.path().join("a.db"), &StoreOptions::default()).expect("db");
    let ana = SigningKey::from_bytes(&[1; 32]);
    let issuers = vec![Issuer {
        name: "ana".into(),
        public_key: hex::encode(ana.verifying_key().to_bytes()),
    }];
    let writ = sign_writ(
        &ana,
        WritBody {
            tools: vec!["Read".into(), "Bash".into()],
            ceiling: Effect::Read,
            ..WritBody::fixture("01930000-0000-7000-8000-0000000000a1", "agent:laptop")
        },
    );
    store
        .write(|tx| kura_work::writs::grant(tx, &writ, "user:ana", None))
        .expect("tx")
        .expect("granted");
    let instruction = store
        .write_record(&proto::record::NewRecord {
            record_type: RecordType::TaskInstruction,
            content: serde_json::json!({"text": "tidy"}),
            author_id: "agent:laptop".into(),
            metadata: Default::default(),
        })
        .expect("instruction")
        .0
        .record_id;
    let ask = |store: &mut Store, tool: &str, effect: Effect, call: &str| {
        let claim = store
            .write(|tx| {
                kura_work::agents::open_agent_turn(
                    tx,
                    &kura_work::agents::AgentStart {
                        agent: "agent:laptop",
                        instruction,
                        session: kura_work::agents::AgentSession::New("laptop"),
                        memory: &[],
                    },
                    None,
                )
            })
            .expect("turn");
        let args = serde_json::json!({"command": "rm -rf build"})
            .as_object()
            .cloned()
            .expect("o");
        let a = fenced(store, &claim, |tx| {
            tx.request_approval(
                &claim,
                &call.into(),
                tool,
                &args,
                effect,
                "agent:laptop",
                Default::default(),
            )
        })
        .expect("request");
        decide::evaluate(
            store,
            &Policy::default(),
            &issuers,
            60_000,
            Some(a.request_id),
        )
        .expect("evaluate")
        .expect("evaluated")
        .state
    };
    assert_eq!(
        ask(&mut store, "Bash", Effect::External, "c1"),
        ApprovalState::Denied
    );
    assert_eq!(
        ask(&mut store, "Write", Effect::Read, "c2"),
        ApprovalState::Denied
    );
    assert_eq!(
        ask(&mut store, "Read", Effect::Read, "c3"),
        ApprovalState::Approved
    );
    let w = kura_work::writs::writ(&store, writ.body.id)
        .expect("read")
        .expect("writ");
    // aegis holds the call to its writ again (the gateway charged it when it was declared).
    assert_eq!((w.refused, w.calls_used), (2, 0));
    let rule: String = store
        .conn()
        .query_row("SELECT rule FROM approvals WHERE call_id = 'c1'", [], |r| {
            r.get(0)
        })
        .expect("rule");
    assert!(
        rule.contains("above writ") && rule.contains("ceiling"),
        "{rule}"
    );
}
