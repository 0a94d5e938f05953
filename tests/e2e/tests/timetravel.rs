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
    s.cli().json(args)
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

/// A stack whose shell may run one side-effect program that logs `$KURA_CALL_ID` per run.
fn sidefx_stack(script: impl Fn(&std::path::Path) -> String) -> (Stack, std::path::PathBuf) {
    let mut s = Stack::new("{\"turns\": []}");
    let sidefx = s.path("sidefx");
    let effects = s.path("effects.log");
    std::fs::write(
        &sidefx,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$KURA_CALL_ID\" >> '{}'\n",
            effects.display()
        ),
    )
    .expect("sidefx");
    let mut perms = std::fs::metadata(&sidefx).expect("meta").permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&sidefx, perms).expect("chmod");
    std::fs::write(&effects, "").expect("log");
    std::fs::write(s.path("script.json"), script(&sidefx)).expect("script");
    s.extra_env = vec![
        (
            "KURA_TOOLS__SHELL_ALLOWLIST".into(),
            format!("[\"{}\"]", sidefx.display()),
        ),
        (
            "KURA_TOOLS__SANDBOX_READ_ONLY".into(),
            format!("[\"{}\"]", sidefx.display()),
        ),
        (
            "KURA_TOOLS__SANDBOX_READ_WRITE".into(),
            format!("[\"{}\"]", effects.display()),
        ),
    ];
    (s, effects)
}

fn three_turns(sidefx: &std::path::Path, word: &str) -> String {
    let turn = |n: u32| {
        format!(
            r#"[{{"thought": "turn {n}: {word}"}},
                {{"tool": "shell.run", "args": {{"argv": ["{}"]}}}},
                {{"tool": "fs.list", "args": {{}}}},
                {{"deliver": "turn {n} done: {{instruction}}"}}]"#,
            sidefx.display()
        )
    };
    format!(r#"{{"turns": [{}, {}, {}]}}"#, turn(1), turn(2), turn(3))
}

fn replay(s: &Stack, session: &str, extra: &[&str]) -> Value {
    let mut cmd = Command::new(bin("minato"));
    cmd.args(["replay", session, "--json", "--timeout", "60"])
        .args(extra);
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("KURA_")) {
        cmd.env_remove(k);
    }
    cmd.env("KURA_DB", &s.db)
        .env("KURA_NATS_URL", s.nats.url())
        .env(
            "KURA_NATS_SEED",
            s.nats.seed(kura_runtime::identity::Role::Submit),
        )
        .env("KURA_NATS_CA", s.nats.ca());
    let out = cmd.output().expect("replay");
    assert!(
        out.status.success(),
        "replay: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// (type, hash) of every record in `session`'s output ledgers, in order.
fn outputs(s: &Stack, session: &str) -> Vec<(String, String, Value)> {
    let store = s.store();
    let id = kura_store::store::parse_id(session).expect("id");
    kura_testkit::stack::session_records(&store, id)
        .into_iter()
        .map(|r| {
            (
                r.record_type.as_str().to_owned(),
                r.hash.clone(),
                r.content.clone(),
            )
        })
        .collect()
}

fn effects_log(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .expect("log")
        .lines()
        .map(str::to_owned)
        .collect()
}

/// A recorded three-turn session replayed with its recorded steps reproduces every thought,
/// call and deliverable record (the same hashes); its side effects are served from the
/// record and never run again; a live replay with another script cannot repeat them either.
#[test]
fn a_replay_reproduces_the_recorded_records_and_never_repeats_a_side_effect() {
    let (mut s, effects) = sidefx_stack(|p| three_turns(p, "recorded"));
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi");
    s.spawn("aegis", "aegis");
    let first = s.wait_complete(s.submit("tidy the pantry"), MINUTE);
    let session = first.session_id.expect("session").to_string();
    for i in ["buy rice", "cook dinner"] {
        s.wait_complete(s.submit_with(i, &["--session", &session]), MINUTE);
    }
    let ran = effects_log(&effects);
    assert_eq!(ran.len(), 3, "one side effect per recorded turn: {ran:?}");

    let r = replay(&s, &session, &[]);
    let replayed = r["session_id"].as_str().expect("session").to_owned();
    assert_eq!(r["turns"].as_array().map(Vec::len), Some(3));
    let (a, b) = (outputs(&s, &session), outputs(&s, &replayed));
    let kinds = |v: &[(String, String, Value)], t: &str| -> Vec<String> {
        v.iter().filter(|x| x.0 == t).map(|x| x.1.clone()).collect()
    };
    for (t, n) in [
        ("agent.thought", 3),
        ("tool.call", 6),
        ("task.deliverable", 3),
    ] {
        let (ka, kb) = (kinds(&a, t), kinds(&b, t));
        assert_eq!(ka.len(), n, "{t}");
        assert_eq!(ka, kb, "the replay reproduces every {t} record");
    }
    // The side effects were served, naming the records they replay; nothing ran again.
    let served: Vec<&Value> = b
        .iter()
        .filter(|x| x.0 == "tool.result" && x.2.get("replayed").is_some())
        .map(|x| &x.2)
        .collect();
    assert_eq!(served.len(), 3, "{b:?}");
    // Each names the recorded result it serves, which is in the recorded session.
    for v in &served {
        let id = v["replayed"].as_str().expect("id");
        assert!(
            a.iter()
                .any(|x| x.0 == "tool.result" && x.2["call_id"] == v["call_id"]),
            "{id}"
        );
    }
    assert_eq!(effects_log(&effects), ran, "no side effect ran again");

    // A live replay with another script: the model decides, the side effects still do not run.
    std::fs::write(
        s.path("script.json"),
        three_turns(&s.path("sidefx"), "a different path"),
    )
    .expect("script");
    s.signal("hashi", "TERM");
    s.wait_exit("hashi", MINUTE);
    s.spawn("hashi", "hashi");
    let live = replay(&s, &session, &["--live", "--from-turn", "2"]);
    let live_session = live["session_id"].as_str().expect("session").to_owned();
    assert_eq!(live["turns"].as_array().map(Vec::len), Some(2));
    let thoughts: Vec<String> = outputs(&s, &live_session)
        .into_iter()
        .filter(|x| x.0 == "agent.thought")
        .filter_map(|x| x.2["text"].as_str().map(str::to_owned))
        .collect();
    assert!(
        thoughts.iter().all(|t| t.contains("a different path")),
        "{thoughts:?}"
    );
    assert_eq!(
        effects_log(&effects),
        ran,
        "each call id once: nothing ran again"
    );
    s.verify_all();
    s.shutdown_cleanly();
}

/// `--rerun`: a replay's side effect is asked about again, even though the policy allows it,
/// and runs again only once a person approves it through aegis.
#[test]
fn a_replayed_side_effect_runs_again_only_when_a_person_approves() {
    let (mut s, effects) = sidefx_stack(|p| three_turns(p, "recorded"));
    let key = s.path("ana.key");
    let made = Command::new(bin("aegis"))
        .args(["keygen", "--name", "ana", "--key"])
        .arg(&key)
        .output()
        .expect("keygen");
    assert!(made.status.success());
    s.add_approver("ana", &key);
    let k: Value =
        serde_json::from_str(&std::fs::read_to_string(&key).expect("key")).expect("json");
    s.extra_env.push((
        "KURA_AEGIS__APPROVERS".into(),
        format!(
            "[{{ name = \"ana\", public_key = \"{}\" }}]",
            k["public_key"].as_str().expect("pk")
        ),
    ));
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi");
    s.spawn("aegis", "aegis");
    let first = s.wait_complete(s.submit("tidy the pantry"), MINUTE);
    let session = first.session_id.expect("session").to_string();
    assert_eq!(effects_log(&effects).len(), 1);

    // The replay waits for a person: nothing runs until then.
    let replaying = {
        let mut cmd = Command::new(bin("minato"));
        cmd.args(["replay", &session, "--rerun", "--json", "--timeout", "60"]);
        for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("KURA_")) {
            cmd.env_remove(k);
        }
        cmd.env("KURA_DB", &s.db)
            .env("KURA_NATS_URL", s.nats.url())
            .env(
                "KURA_NATS_SEED",
                s.nats.seed(kura_runtime::identity::Role::Submit),
            )
            .env("KURA_NATS_CA", s.nats.ca())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("replay")
    };
    let mut request = String::new();
    s.wait_until("the rerun asked", MINUTE, |store| {
        store
            .conn()
            .query_row(
                "SELECT request_id FROM approvals WHERE state = 'asked' AND rule = 'replay-rerun'",
                [],
                |r| r.get::<_, String>(0),
            )
            .map(|id| request = id)
            .is_ok()
    });
    assert_eq!(
        effects_log(&effects).len(),
        1,
        "not run before a person decides"
    );
    let out = Command::new(bin("aegis"))
        .args(["approve", &request, "--note", "run it again", "--key"])
        .arg(&key)
        .env("KURA_NATS_URL", s.nats.url())
        .env("KURA_NATS_CA", s.nats.ca())
        .env(
            "KURA_AEGIS__REPLY_KEY",
            s.nats.signer(kura_runtime::identity::Role::Aegis),
        )
        .output()
        .expect("approve");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let done = replaying.wait_with_output().expect("replay");
    assert!(done.status.success());
    let ran = effects_log(&effects);
    let replayed: Value = serde_json::from_slice(&done.stdout).expect("json");
    let results: Vec<Value> = outputs(&s, replayed["session_id"].as_str().expect("session"))
        .into_iter()
        .filter(|x| x.0 == "tool.result")
        .map(|x| x.2)
        .collect();
    assert_eq!(ran.len(), 2, "approved, it ran again: {ran:?} {results:?}");
    // The re-run's result is a record of its own: it names the approval it ran under, so it
    // is never the recorded run's record (identical records are stored once).
    let rerun: Vec<&Value> = results
        .iter()
        .filter(|v| v.get("rerun").is_some())
        .collect();
    assert_eq!(rerun.len(), 1, "{results:?}");
    assert_eq!(rerun[0]["rerun"]["approval_request"], request.as_str());
    s.verify_all();
    s.shutdown_cleanly();
}

/// The number of turns `session` has.
fn turn_count(s: &Stack, session: &str) -> i64 {
    s.store()
        .conn()
        .query_row(
            "SELECT count(*) FROM turns WHERE session_id = ?1",
            [session],
            |r| r.get(0),
        )
        .expect("turns")
}

/// The session a recorded request ran in, waited for.
fn recorded_session(s: &Stack) -> String {
    let first = s.wait_complete(s.submit("write x"), MINUTE);
    first.session_id.expect("session").to_string()
}

/// Attack (issue 24 item 6): a replay of turns whose deliverables say `"final": false` let
/// minato's completion rule add live turns between the replayed ones, and a live `fs.write`
/// ran for real in the fork. A replay has exactly the recorded turns, each served.
#[test]
fn a_replay_of_unfinished_turns_adds_no_live_turn_and_runs_no_side_effect() {
    // The script is in place before hashi starts: hashi loads it when it starts, and an
    // empty one stops it (the race this test once lost).
    let mut s = Stack::new(
        r#"{"turns": [[{"deliver": "one", "final": false}],
            [{"tool": "fs.write", "args": {"path": "x.txt", "content": "x"}},
             {"deliver": "two", "final": true}]]}"#,
    );
    s.extra_env
        .push(("KURA_WORKER__APPROVALS".into(), "off".into()));
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi");
    let session = recorded_session(&s);
    assert_eq!(turn_count(&s, &session), 2);
    let r = replay(&s, &session, &[]);
    let fork = r["session_id"].as_str().expect("session").to_owned();
    assert_eq!(r["turns"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        turn_count(&s, &fork),
        2,
        "a replay has exactly the recorded turns"
    );
    let results: Vec<Value> = outputs(&s, &fork)
        .into_iter()
        .filter(|x| x.0 == "tool.result")
        .map(|x| x.2)
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        results.iter().all(|v| v.get("replayed").is_some()),
        "every side effect in the fork is served from the record, none ran: {results:?}"
    );
    s.verify_all();
    s.shutdown_cleanly();
}

/// Attack (issue 24 item 6): with `worker.approvals = off`, `--rerun` re-ran a write with no
/// approval at all. A re-run always needs a person: without aegis it is refused, not run.
#[test]
fn a_rerun_with_approvals_off_is_refused_and_never_runs() {
    let (mut s, effects) = sidefx_stack(|p| three_turns(p, "recorded"));
    s.extra_env
        .push(("KURA_WORKER__APPROVALS".into(), "off".into()));
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi");
    let first = s.wait_complete(s.submit("tidy the pantry"), MINUTE);
    let session = first.session_id.expect("session").to_string();
    let ran = effects_log(&effects);
    assert_eq!(ran.len(), 1);
    let r = replay(&s, &session, &["--rerun"]);
    let fork = r["session_id"].as_str().expect("session").to_owned();
    let refused: Vec<Value> = outputs(&s, &fork)
        .into_iter()
        .filter(|x| x.0 == "tool.result" && x.2["status"] == "error")
        .map(|x| x.2)
        .collect();
    assert!(
        refused.iter().any(|v| v["error"]
            .as_str()
            .is_some_and(|e| e.contains("needs a person"))),
        "{refused:?}"
    );
    assert_eq!(effects_log(&effects), ran, "nothing ran again");
    s.verify_all();
    s.shutdown_cleanly();
}
