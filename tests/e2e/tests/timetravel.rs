//! Rewinds and forks with the real daemons: after `kura session reset`, minato continues
//! from the new head; `minato submit --from` forks another session's middle ledger and
//! continues there. Nothing is copied or deleted, and the whole store still verifies.

use std::process::Command;
use std::time::Duration;

use kura_testkit::bin;
use kura_testkit::stack::Stack;
use serde_json::Value;

const MINUTE: Duration = Duration::from_secs(60);
const SCRIPT: &str = r#"{"turns": [
  [{"deliver": "turn one: {instruction}"}],
  [{"deliver": "turn two: {instruction}"}],
  [{"deliver": "turn three: {instruction}"}]
]}"#;

fn kura(s: &Stack, args: &[&str]) -> Value {
    let out = Command::new(bin("kura"))
        .args(["--db"])
        .arg(&s.db)
        .arg("--json")
        .args(args)
        .env_remove("KURA_SERVE_CONFIG")
        .output()
        .expect("kura");
    assert!(
        out.status.success(),
        "kura {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// The ledgers of `session`, oldest first: (id, label, parents).
fn ledgers(s: &Stack, session: &str) -> Vec<(String, String, Vec<String>)> {
    let log = kura(s, &["log", session]);
    let mut v: Vec<_> = log["ledgers"]
        .as_array()
        .expect("ledgers")
        .iter()
        .map(|l| {
            (
                l["ledger_id"].as_str().unwrap_or("").to_owned(),
                l["label"].as_str().unwrap_or("").to_owned(),
                serde_json::from_value(l["parent_ids"].clone()).unwrap_or_default(),
            )
        })
        .collect();
    v.reverse();
    v
}

#[test]
fn a_rewound_session_continues_from_its_new_head_and_a_fork_continues_elsewhere() {
    let mut s = Stack::new(SCRIPT);
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi");
    s.spawn("aegis", "aegis");
    let first = s.wait_complete(s.submit("buy rice"), MINUTE);
    let session = first.session_id.expect("session").to_string();
    s.wait_complete(s.submit_with("buy miso", &["--session", &session]), MINUTE);
    let before = ledgers(&s, &session);
    let labels: Vec<&str> = before.iter().map(|l| l.1.as_str()).collect();
    assert_eq!(
        labels,
        ["turn-1-ctx", "turn-1-out", "turn-2-ctx", "turn-2-out"]
    );
    let turn1_out = before[1].0.clone();

    // Turn 2 went wrong: move the head back to turn 1's output and continue from there.
    kura(
        &s,
        &[
            "session",
            "reset",
            &session,
            &turn1_out,
            "--reason",
            "miso was a mistake",
        ],
    );
    s.wait_complete(s.submit_with("buy nori", &["--session", &session]), MINUTE);
    let after = ledgers(&s, &session);
    let ctx3 = after
        .iter()
        .find(|l| l.1 == "turn-3-ctx")
        .expect("turn 3 context");
    assert_eq!(
        ctx3.2,
        std::slice::from_ref(&turn1_out),
        "the next context grows from the reset head"
    );
    let log = kura(&s, &["log", &session]);
    let unreachable: Vec<&str> = log["ledgers"]
        .as_array()
        .expect("ledgers")
        .iter()
        .filter(|l| l["unreachable"] == true)
        .filter_map(|l| l["label"].as_str())
        .collect();
    assert_eq!(unreachable, ["turn-2-out", "turn-2-ctx"]);

    // Fork the first session's middle ledger into a new session and continue there.
    let forked = s.wait_complete(
        s.submit_with("what if wakame", &["--from", &turn1_out]),
        MINUTE,
    );
    let fork = forked.session_id.expect("fork").to_string();
    assert_ne!(fork, session);
    let fl = ledgers(&s, &fork);
    assert_eq!(fl[0].1, "fork");
    assert_eq!(
        fl[0].2,
        std::slice::from_ref(&turn1_out),
        "the fork's first ledger grows from the origin"
    );
    assert_eq!(
        fl[1].2,
        std::slice::from_ref(&fl[0].0),
        "its first context grows from the fork ledger"
    );
    let show = kura(&s, &["show", &session]);
    assert_eq!(show["forks"][0]["session_id"], fork.as_str());
    s.verify_all();
    s.shutdown_cleanly();
}
