//! The one gate under attack: a path in another spelling meets the rule for its normal form,
//! a writ's refusal is recorded as the request's decision, and a person's later approval or
//! edit is held to the writ the call runs under.

use kura_policy::Policy;
use kura_policy::writ::sign_revocation;
use kura_policy::writ::sign_writ;
use kura_store::{Store, StoreOptions};
use proto::writ::{REVOCATION_KIND, RevocationBody};
use proto::{ApprovalState, Effect};
use serde_json::{Map, Value, json};

use crate::gate::{self, EditRefusal, GateCall, Refusal, Ruled};
use crate::tests::pending_turn;
use crate::writ_tests::{grant_body, issuers, key};
use crate::{Claim, WorkTx, approvals, claim_next, fenced, now_ms, writs};

const WRIT: &str = "01930000-0000-7000-8000-0000000000a1";

const POLICY: &str = r#"
[[rules]]
name = "secrets"
args = { file_path = "/home/ana/proj/secrets/*" }
decision = "deny"
[[rules]]
name = "project"
args = { file_path = "/home/ana/proj/*" }
decision = "allow"
[[rules]]
name = "rel-secrets"
args = { path = "secrets/*" }
decision = "deny"
[[rules]]
name = "notes"
args = { path = "notes/*" }
decision = "allow"
"#;

fn claimed() -> (tempfile::TempDir, Store, Claim) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut store =
        Store::create(dir.path().join("g.db"), &StoreOptions::default()).expect("create");
    pending_turn(&mut store);
    let claim = claim_next(&mut store, "w1", 60_000, now_ms())
        .expect("claim")
        .expect("a turn");
    (dir, store, claim)
}

fn args(v: Value) -> Map<String, Value> {
    v.as_object().cloned().expect("object")
}

/// Files `call` in the claimed turn under `policy` (published) and the turn's writs.
fn file(store: &mut Store, claim: &Claim, call: &GateCall, policy: Option<&Policy>) -> gate::Filed {
    let hash = policy.map(|p| store.write(|tx| tx.publish_policy(p)).expect("publish"));
    let writs = gate::writs_of_turn(store, claim.turn_id).expect("writs");
    let call_id = proto::CallId::new(proto::new_id().to_string());
    fenced(store, claim, |tx| {
        gate::file(
            tx,
            &gate::Filing {
                claim,
                call_id: &call_id,
                call,
                author: "agent:laptop",
                metadata: Default::default(),
                writs: &writs,
                issuers: &issuers(),
                policy: hash.as_deref().zip(policy),
            },
        )
    })
    .expect("file")
}

fn grant_paths(store: &mut Store, claim: &Claim, paths: &[&str]) {
    let mut body = grant_body(WRIT, &format!("session:{}", claim.session_id));
    body.paths = paths.iter().map(|p| p.to_string()).collect();
    body.tools = vec!["*".into()];
    body.budget = Default::default();
    let w = sign_writ(&key(1), body);
    store
        .write(|tx| writs::grant(tx, &w, "user:ana", None))
        .expect("tx")
        .expect("granted");
}

/// Attack (issue 34, High): an outside agent spells a path so that a deny rule misses it or
/// an allow rule takes it. Every spelling meets the rule for its one normal form, and the
/// request records that form.
#[test]
fn a_path_in_another_spelling_meets_the_rule_for_its_normal_form() {
    let (_d, mut store, claim) = claimed();
    let policy: Policy = toml::from_str(POLICY).expect("policy");
    let denied = |r: &str| Ruled::Refused(Refusal::Policy(r.into()));
    for (key, given, want) in [
        (
            "file_path",
            "/home/ana/proj//secrets/key",
            denied("secrets"),
        ),
        (
            "file_path",
            "/home/ana/proj/./secrets/key",
            denied("secrets"),
        ),
        (
            "file_path",
            "/home/ana/proj/src/../secrets/key",
            denied("secrets"),
        ),
        ("file_path", "/home/ana/proj/../.bashrc", Ruled::Pending),
        (
            "file_path",
            "/home/ana/proj/a/../../.ssh/id",
            Ruled::Pending,
        ),
        ("path", "notes/../secrets/x", denied("rel-secrets")),
        (
            "path",
            "notes//./secrets/x",
            Ruled::Allowed {
                rule: "notes".into(),
            },
        ),
    ] {
        let call = GateCall::new("Write", Effect::Write, args(json!({ key: given })));
        let filed = file(&mut store, &claim, &call, Some(&policy));
        assert_eq!(filed.ruled, want, "{given}");
        let stored =
            approvals::request_arguments(&store, filed.approval.request_id).expect("arguments");
        assert_eq!(
            stored[key],
            call.arguments()[key],
            "{given}: the request holds the normal form"
        );
    }
    for climbs in ["/..", "../x", "notes/../../x"] {
        let call = GateCall::new("Write", Effect::Write, args(json!({ "path": climbs })));
        let filed = file(&mut store, &claim, &call, Some(&policy));
        assert!(
            matches!(filed.ruled, Ruled::Refused(Refusal::Path(_))),
            "{climbs}: {:?}",
            filed.ruled
        );
        let a = approvals::approval(&store, filed.approval.request_id)
            .expect("read")
            .expect("row");
        assert_eq!(
            a.state,
            ApprovalState::Denied,
            "{climbs}: recorded as its decision"
        );
    }
}

/// A writ's refusal is the request's decision, recorded and counted the same whoever asks.
#[test]
fn a_call_outside_its_writ_is_refused_and_recorded_as_its_decision() {
    let (_d, mut store, claim) = claimed();
    grant_paths(&mut store, &claim, &["notes/*"]);
    let call = GateCall::new(
        "fs.write",
        Effect::Write,
        args(json!({"path": "notes/../secrets/x"})),
    );
    let filed = file(&mut store, &claim, &call, None);
    assert!(
        matches!(filed.ruled, Ruled::Refused(Refusal::Writ(_))),
        "{:?}",
        filed.ruled
    );
    let a = approvals::approval(&store, filed.approval.request_id)
        .expect("read")
        .expect("row");
    assert_eq!(a.state, ApprovalState::Denied);
    assert!(
        a.rule.as_deref().is_some_and(|r| r.starts_with("writ:")),
        "{:?}",
        a.rule
    );
    let w = writs::writ(&store, WRIT.parse().expect("id"))
        .expect("read")
        .expect("writ");
    assert_eq!((w.refused, w.calls_used), (1, 0));
}

/// Attack (issue 34, Medium): a person approves a call after its writ was revoked. The
/// approval is held to the writ: the request is denied by it, and nothing can run it.
#[test]
fn an_approval_after_the_writ_was_revoked_denies_the_request() {
    let (_d, mut store, claim) = claimed();
    grant_paths(&mut store, &claim, &["notes/*"]);
    let call = GateCall::new("fs.write", Effect::Write, args(json!({"path": "notes/a"})));
    let filed = file(&mut store, &claim, &call, None);
    assert_eq!(filed.ruled, Ruled::Pending);
    let a = filed.approval;
    store
        .write(|tx| tx.mark_asked(a.request_id, "people", 1, now_ms() + 60_000))
        .expect("asked");
    let held = store
        .write(|tx| gate::hold_approval(tx, &a, &issuers(), "p"))
        .expect("hold");
    assert!(held.is_ok(), "a live writ lets the approval stand");
    let rev = sign_revocation(
        &key(1),
        RevocationBody {
            kind: REVOCATION_KIND.into(),
            writ_id: WRIT.parse().expect("id"),
            by: "user:ana".into(),
            reason: "enough".into(),
            revoked_at: "2026-11-27T12:00:00Z".into(),
        },
    );
    store
        .write(|tx| writs::revoke(tx, &rev, &issuers(), "user:ana", None))
        .expect("tx")
        .expect("revoked");
    let held = store
        .write(|tx| gate::hold_approval(tx, &a, &issuers(), "p"))
        .expect("hold");
    assert!(matches!(held, Err((Refusal::Writ(_), _))), "{held:?}");
    let a = approvals::approval(&store, a.request_id)
        .expect("read")
        .expect("row");
    assert_eq!(a.state, ApprovalState::Denied);
}

/// Attack (issue 34, Medium): a person's edit moves the call outside its writ's paths. The
/// edit is refused, whatever the policy says of it.
#[test]
fn an_edit_outside_the_writs_paths_is_refused() {
    let (_d, mut store, claim) = claimed();
    grant_paths(&mut store, &claim, &["notes/*"]);
    let call = GateCall::new("fs.write", Effect::Write, args(json!({"path": "notes/a"})));
    let a = file(&mut store, &claim, &call, None).approval;
    let allow_all: Policy = toml::from_str("[defaults]\nwrite = \"allow\"\n").expect("policy");
    let mut edit = |p: &str| {
        store
            .write(|tx| gate::rule_edit(tx, &a, &args(json!({"path": p})), &allow_all, &issuers()))
            .expect("rule")
    };
    assert!(edit("notes/b").is_ok());
    assert!(matches!(edit("secrets/key"), Err(EditRefusal::Writ(_))));
    assert!(matches!(
        edit("notes/../secrets/key"),
        Err(EditRefusal::NotNormal(_))
    ));
}

/// One decision, one place: outside the gate (and the pure checks it calls), no code
/// evaluates a policy on a call or checks a call against a writ. The rest of the workspace
/// can only reach them through the gate's types.
#[test]
fn only_the_gate_rules_on_a_call() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // What rules on a call, and the only files that may say it.
    let rulings: [(&str, &[&str]); 4] = [
        ("kura_policy::Call {", &["kura/work/src/gate.rs"]),
        (
            ".evaluate(&",
            &["kura/work/src/gate.rs", "kura/policy/src/lib.rs"],
        ),
        (
            "check_call(",
            &[
                "kura/work/src/writs.rs",
                "kura/policy/src/writ.rs",
                "kura/work/src/gate.rs",
            ],
        ),
        (
            "check_scope(",
            &["kura/work/src/writs.rs", "kura/policy/src/writ.rs"],
        ),
    ];
    let mut stack = vec![root.clone()];
    let mut found = Vec::new();
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if !["target", ".git", "node_modules", "fuzz"].contains(&name.as_str()) {
                    stack.push(p);
                }
                continue;
            }
            // Tests may call the pure checks directly; they rule on nothing that runs.
            let rel = p
                .strip_prefix(&root)
                .unwrap_or(&p)
                .to_string_lossy()
                .into_owned();
            if !name.ends_with(".rs") || name.contains("test") || rel.starts_with("tests/") {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            // Everything from the first `#[cfg(test)]` on is a file's tests.
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (needle, allowed) in rulings {
                if code.contains(needle) && !allowed.contains(&rel.as_str()) {
                    found.push(format!("{rel}: {needle}"));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "a call is ruled on outside the gate: {found:?}"
    );
}
