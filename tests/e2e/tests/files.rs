//! Time travel for files (issue 38), with the real daemons: korg's demo — a wrong edit, a
//! validator's test command failing, the session reset to the ledger before the edit with the
//! file back byte for byte, the right fix — then a fork and a replay that start from the
//! recorded files, drift named, a tampered object caught, a hashi killed mid-side-effect.

use std::time::Duration;

use kura_testkit::stack::Stack;
use serde_json::{Value, json};

const MINUTE: Duration = Duration::from_secs(60);

const GOOD: &str = "add() { echo $(($1 + $2)); }\n";
const WRONG: &str = "add() { echo $(($1 - $2)); }\n";
const FIXED: &str = "# add A B: their sum\nadd() {\n  echo $(($1 + $2))\n}\n";
const TEST: &str = ". ./calc.sh\ntest \"$(add 2 3)\" = 5\n";

fn write(path: &str, content: &str) -> Value {
    json!({"tool": "fs.write", "args": {"path": path, "content": content}})
}

/// Turns by session sequence: the work's turns, each validator turn a placeholder (a command
/// validator asks no model).
fn script() -> String {
    let unused = json!([{"deliver": "not used"}]);
    json!({"turns": [
        [write("calc.sh", GOOD), write("test.sh", TEST), {"deliver": "calculator written"}],
        [write("calc.sh", WRONG), {"deliver": "add rewritten"}],
        unused,
        [{"deliver": "it looks right to me"}],
        unused,
        [write("calc.sh", FIXED), {"deliver": "add fixed"}],
        unused,
        [{"tool": "shell.run", "args": {"argv": ["sh", "-c", "echo half > part.txt; sleep 30"]}},
         {"deliver": "slow work"}]
    ]})
    .to_string()
}

/// `(ledger id, label)` of `session`, oldest first.
fn ledgers(s: &Stack, session: &str) -> Vec<(String, String)> {
    let log = s.cli().json(&["log", session]);
    let mut v: Vec<_> = log["ledgers"]
        .as_array()
        .expect("ledgers")
        .iter()
        .map(|l| {
            let text = |k: &str| l[k].as_str().unwrap_or("").to_owned();
            (text("ledger_id"), text("label"))
        })
        .collect();
    v.reverse();
    v
}

fn ledger(s: &Stack, session: &str, label: &str) -> String {
    ledgers(s, session)
        .into_iter()
        .rfind(|l| l.1 == label)
        .unwrap_or_else(|| panic!("no ledger {label} in {:?}", ledgers(s, session)))
        .0
}

/// The attested changes in `session`'s records, in order.
fn changes(s: &Stack, session: &str) -> Vec<Value> {
    let id = kura_store::store::parse_id(session).expect("id");
    kura_testkit::stack::session_records(&s.store(), id)
        .into_iter()
        .filter(|r| r.record_type == proto::record::RecordType::ToolResult)
        .filter_map(|r| r.content.get("workspace").cloned())
        .collect()
}

#[test]
fn a_wrong_edit_is_rewound_with_its_ledger_and_the_right_fix_follows() {
    let mut s = Stack::new(&script());
    s.extra_env
        .push(("KURA_TOOLS__SHELL_ALLOWLIST".into(), r#"["sh"]"#.into()));
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi");
    s.spawn("aegis", "aegis");
    let first = s.wait_complete(s.submit("write a calculator"), MINUTE);
    let session = first.session_id.expect("session").to_string();
    let calc = s.path("ws").join(&session).join("calc.sh");
    assert_eq!(std::fs::read_to_string(&calc).expect("calc"), GOOD);

    // The wrong edit; the validator's test command fails it (twice: the work ends failed).
    let wrong = s.submit_with(
        "make add faster",
        &["--session", &session, "--validate-cmd", "sh test.sh"],
    );
    let done = s.wait_complete(wrong, MINUTE);
    let said = done.deliverable.expect("deliverable");
    assert_eq!(said.content["error"], true, "{said:?}");
    assert_eq!(std::fs::read_to_string(&calc).expect("calc"), WRONG);

    // Reset to the ledger before the edit: the file is back byte for byte.
    let (before_edit, edit) = (
        ledger(&s, &session, "turn-1-out"),
        ledger(&s, &session, "turn-2-out"),
    );
    let said = s.cli().ok(&[
        "session",
        "reset",
        &session,
        &before_edit,
        "--reason",
        "the edit broke add",
    ]);
    assert!(said.contains("put back as of"), "{said}");
    assert_eq!(std::fs::read(&calc).expect("calc"), GOOD.as_bytes());
    let moves = s.cli().json(&["workspace", "log", &session]);
    assert_eq!(moves.as_array().map(Vec::len), Some(1), "{moves}");
    // The wrong state stays reachable: the move's `from` is the tree the edit left.
    let attested = changes(&s, &session);
    assert_eq!(
        moves[0]["from"],
        attested[attested.len() - 1]["after"],
        "{attested:?}"
    );

    // The next turn makes the right fix, and the test passes.
    let fix = s.submit_with(
        "fix add properly",
        &["--session", &session, "--validate-cmd", "sh test.sh"],
    );
    let done = s.wait_complete(fix, MINUTE);
    assert_eq!(
        done.deliverable.expect("deliverable").content["text"],
        "add fixed"
    );
    assert_eq!(std::fs::read_to_string(&calc).expect("calc"), FIXED);

    // `kura diff` shows both changes, file by file, beside the records.
    let wrong_diff = s.cli().ok(&["diff", &before_edit, &edit]);
    assert!(wrong_diff.contains("changed calc.sh"), "{wrong_diff}");
    assert!(
        wrong_diff.contains("-add() { echo $(($1 + $2)); }")
            && wrong_diff.contains("+add() { echo $(($1 - $2)); }"),
        "{wrong_diff}"
    );
    let fixed = ledger(&s, &session, "turn-6-out");
    let right_diff = s.cli().json(&["diff", &before_edit, &fixed]);
    let files = right_diff["files"]["files"].as_array().expect("files");
    assert_eq!(files.len(), 1, "{right_diff}");
    assert_eq!(files[0]["path"], "calc.sh");
    assert!(
        files[0]["diff"]
            .as_str()
            .unwrap_or("")
            .contains("+# add A B: their sum"),
        "{right_diff}"
    );
    let ok = s.cli().ok(&["verify", "--workspace", &session]);
    assert!(ok.ends_with("OK"), "{ok}");
    the_console_shows_the_file_changes(&mut s, &before_edit, &edit);
    a_sessions_files_are_put_where_asked(&s, &session);

    forks_and_replays_start_from_the_recorded_files(&s, &session, &before_edit);
    drift_and_tampering_are_named(&s, &session);
    a_killed_side_effect_leaves_no_dangling_tree(&mut s, &session);
    a_redacted_files_bytes_are_gone_and_its_id_stays(&s, &session);
    s.verify_all();
    s.shutdown_cleanly();
}

/// The console's diff page shows the files beside the records.
fn the_console_shows_the_file_changes(s: &mut Stack, a: &str, b: &str) {
    use kura_testkit::console::{http, login, wait_http};
    let key = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    let port = kura_testkit::free_port();
    let users = format!(
        "[{{ name = \"ana\", public_key = \"{}\" }}]",
        hex::encode(key.verifying_key().as_bytes())
    );
    crate::console::console_env(s, port, &users);
    s.spawn("kura", "serve");
    wait_http(port);
    let cookie = login(port, &key);
    let (status, _, page) = http(
        port,
        "GET",
        &format!("/diff?a={a}&b={b}"),
        &[("Cookie", &cookie)],
        "",
    );
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("Files (1)") && page.contains("<code>calc.sh</code>"),
        "{page}"
    );
    assert!(
        page.contains("+add() { echo $(($1 - $2)); }"),
        "the unified diff: {page}"
    );
}

/// `kura workspace restore` puts a session's files into an empty directory (say, where an
/// outside agent works), and never into one holding other files.
fn a_sessions_files_are_put_where_asked(s: &Stack, session: &str) {
    let dir = s.path("checkout");
    let said = s.cli().ok(&[
        "workspace",
        "restore",
        session,
        "--root",
        dir.to_str().expect("utf8"),
    ]);
    assert!(said.contains("(2 written"), "{said}");
    assert_eq!(
        std::fs::read_to_string(dir.join("calc.sh")).expect("calc"),
        FIXED
    );
    let (_, err) = s.cli().fails(
        2,
        &[
            "workspace",
            "restore",
            session,
            "--root",
            s.path("ws").to_str().expect("utf8"),
        ],
    );
    assert!(err.contains("is not empty"), "{err}");
}

/// A fork starts with its parent ledger's files; a replay's served side effects move the
/// files as recorded, each checked against where the record began.
fn forks_and_replays_start_from_the_recorded_files(s: &Stack, session: &str, from: &str) {
    let forked = s.wait_complete(
        s.submit_with("another calculator", &["--from", from]),
        MINUTE,
    );
    let fork = forked.session_id.expect("fork").to_string();
    assert_ne!(fork, session);
    let first = &changes(s, &fork)[0];
    let at_from = s.cli().json(&["workspace", "files", from]);
    assert!(
        at_from.as_array().is_some_and(|f| f.len() == 2),
        "{at_from}"
    );
    assert_ne!(
        first["before"],
        json!(proto::workspace::ObjectId::empty_tree()),
        "the fork began with its parent's files: {first}"
    );

    let mut cmd = std::process::Command::new(kura_testkit::bin("minato"));
    cmd.args(["replay", session, "--json", "--timeout", "60"]);
    s.env(&mut cmd, "minato");
    let out = cmd.output().expect("replay");
    assert!(
        out.status.success(),
        "replay: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let replayed: Value = serde_json::from_slice(&out.stdout).expect("json");
    let r = replayed["session_id"].as_str().expect("session");
    let served = changes(s, r);
    assert!(
        !served.is_empty(),
        "the replay served side effects with their files"
    );
    assert!(
        served.iter().all(|c| c["matched"] == true),
        "every recorded tree matched: {served:?}"
    );
    let ws = s.path("ws").join(r).join("calc.sh");
    assert_eq!(
        std::fs::read_to_string(ws).expect("replayed calc"),
        FIXED,
        "the replay ends where the session did"
    );
}

/// A file changed outside Kura is named as drift; a tampered object fails verify.
fn drift_and_tampering_are_named(s: &Stack, session: &str) {
    let test = s.path("ws").join(session).join("test.sh");
    std::fs::write(&test, "exit 0\n").expect("edit by hand");
    let (out, _) = s.cli().fails(1, &["verify", "--workspace", session]);
    assert!(
        out.contains("DRIFT now") && out.contains("changed test.sh"),
        "{out}"
    );
    std::fs::write(&test, TEST).expect("undo");
    s.cli().ok(&["verify", "--workspace", session]);

    let calc_blob = s
        .cli()
        .json(&["workspace", "files", &ledger(s, session, "turn-2-out")]);
    let blob = calc_blob
        .as_array()
        .and_then(|f| f.iter().find(|x| x[0] == "calc.sh"))
        .and_then(|x| x[1].as_str())
        .expect("calc.sh's blob")
        .to_owned();
    let file = s
        .path("kura.objects/objects")
        .join(&blob[..2])
        .join(&blob[2..]);
    let kept = std::fs::read(&file).expect("blob");
    std::fs::write(&file, b"add() { echo 5; }\n").expect("tamper");
    let (out, _) = s.cli().fails(1, &["verify", "--workspace", session]);
    assert!(
        out.contains(&format!("TAMPERED: calc.sh ({blob})")),
        "{out}"
    );
    std::fs::write(&file, kept).expect("restore the blob");
}

/// hashi killed during a side effect: the tree before it is already in the store, the
/// resumed turn attests what the files did across it, and every tree on record is whole.
fn a_killed_side_effect_leaves_no_dangling_tree(s: &mut Stack, session: &str) {
    let slow = s.submit_with("do slow work", &["--session", session]);
    let part = s.path("ws").join(session).join("part.txt");
    s.wait_until("the side effect began", MINUTE, |_| part.exists());
    s.signal("hashi", "KILL");
    s.wait_exit("hashi", MINUTE);
    s.spawn("hashi", "hashi");
    s.wait_complete(slow, MINUTE);
    let last = changes(s, session).pop().expect("the lost call's change");
    assert_ne!(
        last["before"], last["after"],
        "part.txt is attested: {last}"
    );
    let ok = s.cli().ok(&["verify", "--workspace", session]);
    assert!(ok.ends_with("OK"), "{ok}");
}

/// A secret written to a file: its bytes erased from the object store, its id kept, so every
/// tree still verifies and says what was redacted.
fn a_redacted_files_bytes_are_gone_and_its_id_stays(s: &Stack, session: &str) {
    let files = s
        .cli()
        .json(&["workspace", "files", &ledger(s, session, "turn-1-out")]);
    let blob = files
        .as_array()
        .and_then(|f| f.iter().find(|x| x[0] == "test.sh"))
        .and_then(|x| x[1].as_str())
        .expect("test.sh's blob")
        .to_owned();
    let file = s
        .path("kura.objects/objects")
        .join(&blob[..2])
        .join(&blob[2..]);
    assert!(file.exists());
    let said = s.cli().ok(&[
        "workspace",
        "redact",
        session,
        "test.sh",
        "--reason",
        "it held a secret",
    ]);
    assert!(said.contains("erased 1 version"), "{said}");
    assert!(!file.exists(), "the bytes are gone");
    let ok = s.cli().ok(&["verify", "--workspace", session]);
    assert!(
        ok.contains(&format!("redacted: test.sh ({blob})")) && ok.ends_with("OK"),
        "{ok}"
    );
    let (_, err) = s.cli().fails(
        2,
        &[
            "workspace",
            "redact",
            session,
            "nothing.txt",
            "--reason",
            "x",
        ],
    );
    assert!(err.contains("no tree of session"), "{err}");
}
