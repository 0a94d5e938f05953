//! Writs in the store: a replayed id refused, a wider delegation refused before it is
//! stored, a revocation that stops the writ and its delegations at once, budgets debited on
//! the whole chain, and the grant itself a sealed, verifying record.

use ed25519_dalek::SigningKey;
use kura_policy::writ::{Issuer, WritError, sign_revocation, sign_writ};
use kura_store::{Store, StoreOptions};
use proto::Effect;
use proto::writ::{Budget, REVOCATION_KIND, RevocationBody, Usage, WritBody};
use serde_json::{Map, Value, json};

use crate::writs;

pub(crate) fn key(b: u8) -> SigningKey {
    SigningKey::from_bytes(&[b; 32])
}

pub(crate) fn issuers() -> Vec<Issuer> {
    vec![Issuer {
        name: "ana".into(),
        public_key: hex::encode(key(1).verifying_key().to_bytes()),
    }]
}

pub(crate) fn grant_body(id: &str, holder: &str) -> WritBody {
    WritBody {
        budget: Budget {
            tool_calls: Some(3),
            tokens: Some(100),
            ..Budget::default()
        },
        delegate_key: Some(hex::encode(key(2).verifying_key().to_bytes())),
        ..WritBody::fixture(id, holder)
    }
}

const ROOT: &str = "01930000-0000-7000-8000-000000000001";
const CHILD: &str = "01930000-0000-7000-8000-000000000002";

fn child_body(tools: &[&str], calls: u64) -> WritBody {
    WritBody {
        id: CHILD.parse().expect("id"),
        holder: "session:01930000-0000-7000-8000-0000000000bb".into(),
        issuer: format!("writ:{ROOT}"),
        parent: Some(ROOT.parse().expect("id")),
        tools: tools.iter().map(|t| t.to_string()).collect(),
        budget: Budget {
            tool_calls: Some(calls),
            tokens: Some(50),
            ..Budget::default()
        },
        delegate_key: None,
        ..grant_body(CHILD, "session:x")
    }
}

fn store() -> (tempfile::TempDir, Store) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::create(dir.path().join("w.db"), &StoreOptions::default()).expect("create");
    (dir, store)
}

fn call(store: &mut Store, id: &str, tool: &str) -> Result<(), WritError> {
    let args: Map<String, Value> = json!({"path": "a.txt"}).as_object().cloned().expect("obj");
    let call = crate::gate::GateCall::new(tool, Effect::Read, args);
    let held = crate::gate::TurnWrits::of(vec![wid(id)]);
    store
        .write(|tx| crate::gate::check_writs(tx, &held, &issuers(), &call))
        .expect("check")
}

#[test]
fn a_replayed_writ_id_is_refused() {
    let (_d, mut store) = store();
    let w = sign_writ(&key(1), grant_body(ROOT, "user:oles"));
    store
        .write(|tx| writs::grant(tx, &w, "user:ana", None))
        .expect("grant")
        .expect("ok");
    // The same signed writ again, and another body under the taken id.
    let again = store
        .write(|tx| writs::grant(tx, &w, "user:ana", None))
        .expect("tx");
    assert_eq!(again, Err(WritError::Taken(wid(ROOT))));
    let other = sign_writ(&key(1), grant_body(ROOT, "agent:laptop"));
    let r = store
        .write(|tx| writs::grant(tx, &other, "user:ana", None))
        .expect("tx");
    assert_eq!(r, Err(WritError::Taken(wid(ROOT))));
    assert_eq!(writs::list(&store).expect("list").len(), 1);
    // The grant is a sealed record of the authority session, and the store verifies.
    let report = kura_store::verify::verify(&store, &kura_store::verify::Scope::All, None, None)
        .expect("verify");
    assert!(report.ok(), "{:?}", report.problems);
}

#[test]
fn a_child_writ_wider_than_its_parent_is_refused_and_not_stored() {
    let (_d, mut store) = store();
    let w = sign_writ(&key(1), grant_body(ROOT, "user:oles"));
    store
        .write(|tx| writs::grant(tx, &w, "user:ana", None))
        .expect("grant")
        .expect("ok");
    let wide = sign_writ(&key(2), child_body(&["shell.run"], 2));
    let r = store
        .write(|tx| writs::grant(tx, &wide, "agent:hashi", None))
        .expect("tx");
    assert!(matches!(r, Err(WritError::Wider(_))), "{r:?}");
    assert!(
        writs::writ(&store, CHILD.parse().expect("id"))
            .expect("read")
            .is_none()
    );
}

#[test]
fn a_call_right_after_revocation_is_refused_with_its_delegations() {
    let (_d, mut store) = store();
    let w = sign_writ(&key(1), grant_body(ROOT, "user:oles"));
    store
        .write(|tx| writs::grant(tx, &w, "user:ana", None))
        .expect("grant")
        .expect("ok");
    let c = sign_writ(&key(2), child_body(&["fs.read"], 2));
    store
        .write(|tx| writs::grant(tx, &c, "agent:hashi", None))
        .expect("tx")
        .expect("ok");
    assert_eq!(call(&mut store, CHILD, "fs.read"), Ok(()));
    // The child's call is debited on the parent too.
    assert_eq!(
        writs::writ(&store, ROOT.parse().expect("id"))
            .expect("r")
            .expect("w")
            .calls_used,
        1
    );
    let rev = |key_byte: u8| {
        sign_revocation(
            &key(key_byte),
            RevocationBody {
                kind: REVOCATION_KIND.into(),
                writ_id: ROOT.parse().expect("id"),
                by: "user:ana".into(),
                reason: "done".into(),
                revoked_at: "2026-11-26T12:00:00Z".into(),
            },
        )
    };
    // A revocation without a valid signature changes nothing.
    let forged = store
        .write(|tx| writs::revoke(tx, &rev(9), &issuers(), "user:eve", None))
        .expect("tx");
    assert!(matches!(forged, Err(WritError::Untrusted(_))), "{forged:?}");
    assert_eq!(call(&mut store, CHILD, "fs.read"), Ok(()));
    store
        .write(|tx| writs::revoke(tx, &rev(1), &issuers(), "user:ana", None))
        .expect("tx")
        .expect("ok");
    assert_eq!(
        call(&mut store, ROOT, "fs.read"),
        Err(WritError::Revoked(wid(ROOT)))
    );
    assert_eq!(
        call(&mut store, CHILD, "fs.read"),
        Err(WritError::Revoked(wid(ROOT)))
    );
    assert_eq!(
        writs::writ(&store, CHILD.parse().expect("id"))
            .expect("r")
            .expect("w")
            .refused,
        1
    );
}

#[test]
fn a_call_past_the_writs_budget_is_refused_and_usage_is_debited_on_the_chain() {
    let (_d, mut store) = store();
    let w = sign_writ(&key(1), grant_body(ROOT, "user:oles"));
    store
        .write(|tx| writs::grant(tx, &w, "user:ana", None))
        .expect("grant")
        .expect("ok");
    let c = sign_writ(&key(2), child_body(&["fs.*"], 3));
    store
        .write(|tx| writs::grant(tx, &c, "agent:hashi", None))
        .expect("tx")
        .expect("ok");
    // Tokens: 60 spent under the child (limit 50) end its model steps and its calls, and
    // are debited on the parent (limit 100), which goes on.
    let session = proto::new_id().into();
    let usage = Usage {
        provider: "openai".into(),
        model: "m".into(),
        tokens_in: 40,
        tokens_out: 20,
        money_micros: 0,
    };
    store
        .write(|tx| writs::debit_usage(tx, session, &[wid(CHILD)], &usage))
        .expect("debit");
    let now = crate::now_ms();
    let r = writs::check_model_step(&store, wid(CHILD), &issuers(), now).expect("check");
    assert!(
        matches!(r, Err(WritError::BudgetSpent { axis: "tokens", .. })),
        "{r:?}"
    );
    let r = call(&mut store, CHILD, "fs.read");
    assert!(
        matches!(r, Err(WritError::BudgetSpent { axis: "tokens", .. })),
        "{r:?}"
    );
    assert_eq!(
        writs::check_model_step(&store, wid(ROOT), &issuers(), now).expect("check"),
        Ok(())
    );
    assert_eq!(
        writs::writ(&store, ROOT.parse().expect("id"))
            .expect("r")
            .expect("w")
            .tokens_used,
        60
    );
    assert_eq!(
        writs::session_usage(&store, session).expect("usage"),
        Some((1, 40, 20, 0))
    );
    // Calls: the parent's three, spent through the chain, and then none is left for
    // anyone under it — a child cannot multiply them.
    for _ in 0..3 {
        assert_eq!(call(&mut store, ROOT, "fs.read"), Ok(()));
    }
    let r = call(&mut store, ROOT, "fs.read");
    assert!(
        matches!(
            r,
            Err(WritError::BudgetSpent {
                axis: "tool_calls",
                ..
            })
        ),
        "{r:?}"
    );
    let r = writs::check_model_step(&store, wid(ROOT), &issuers(), now).expect("check");
    assert!(
        matches!(
            r,
            Err(WritError::BudgetSpent {
                axis: "tool_calls",
                ..
            })
        ),
        "{r:?}"
    );
}

#[test]
fn a_grant_by_an_untrusted_key_stores_but_never_runs_a_call() {
    let (_d, mut store) = store();
    let w = sign_writ(&key(5), grant_body(ROOT, "user:oles"));
    store
        .write(|tx| writs::grant(tx, &w, "user:mallory", None))
        .expect("grant")
        .expect("stored");
    let r = call(&mut store, ROOT, "fs.read");
    assert!(matches!(r, Err(WritError::Untrusted(_))), "{r:?}");
}

/// Attack: a submitter held to a narrow writ names a role whose writ is wider. The role's
/// writ never replaces the session's or the submitter's: it narrows them.
#[test]
fn a_roles_writ_never_widens_the_submitters() {
    let (_d, mut store) = store();
    let ids = [
        "01930000-0000-7000-8000-0000000000c1",
        "01930000-0000-7000-8000-0000000000c2",
        "01930000-0000-7000-8000-0000000000c3",
    ];
    let session: proto::SessionId =
        kura_store::store::parse_id("01930000-0000-7000-8000-0000000000bb").expect("id");
    let held = |store: &Store, role: Option<&str>, who: Option<&str>| {
        crate::gate::writs_for(store, session, role, who)
            .expect("read")
            .ids()
            .iter()
            .map(|w| w.to_string())
            .collect::<Vec<_>>()
    };
    let grant = |store: &mut Store, id: &str, holder: &str| {
        let w = sign_writ(&key(1), grant_body(id, holder));
        store
            .write(|tx| writs::grant(tx, &w, "user:ana", None))
            .expect("tx")
            .expect("granted");
    };
    grant(&mut store, ids[1], "role:looker");
    assert_eq!(held(&store, Some("looker"), Some("user:oles")), [ids[1]]);
    assert!(held(&store, Some("writer"), Some("user:oles")).is_empty());
    grant(&mut store, ids[0], "user:oles");
    assert_eq!(
        held(&store, Some("looker"), Some("user:oles")),
        [ids[0], ids[1]],
        "the submitter's writ binds, whatever role they name, and the role's narrows it"
    );
    assert_eq!(held(&store, Some("writer"), Some("user:oles")), [ids[0]]);
    grant(&mut store, ids[2], &format!("session:{session}"));
    assert_eq!(
        held(&store, Some("looker"), Some("user:oles")),
        [ids[2], ids[1]]
    );
}

/// A test's writ id constant as a [`proto::WritId`].
fn wid(id: &str) -> proto::WritId {
    id.parse().expect("a writ id")
}
