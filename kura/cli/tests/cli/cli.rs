//! The `kura` binary as a user runs it: every command, its JSON, its exit codes, and bad input.

use std::io::Write;
use std::process::Stdio;

use kura_testkit::cli::Kura;
use serde_json::json;

#[test]
fn full_session_log_show_diff_query_and_verify() {
    let k = Kura::new();
    let d = k.demo_session();

    let log = k.ok(&["log", &d.session, "--records"]);
    assert!(
        log.contains(&format!("ledger {} (HEAD, sealed)", d.out2)),
        "{log}"
    );
    assert!(
        log.contains("turn-1-out") && log.contains("tool.call") && log.contains("two files"),
        "{log}"
    );
    let pos_out2 = log.find(&d.out2).expect("out2 in log");
    let pos_ctx1 = log.find(&d.ctx1).expect("ctx1 in log");
    assert!(pos_out2 < pos_ctx1, "newest first like git log");

    let j = k.json(&["log", &d.session]);
    let ledgers = j["ledgers"].as_array().expect("ledgers");
    assert_eq!(ledgers.len(), 4);
    assert_eq!(ledgers[0]["ledger_id"], json!(d.out2));
    assert_eq!(ledgers[0]["head"], json!(true));
    assert_eq!(ledgers[2]["parent_ids"], json!([d.ctx1]));
    assert_eq!(ledgers[2]["record_count"], json!(4));
    assert_eq!(ledgers[2]["state"], json!("sealed"));
    assert_eq!(ledgers[2]["root_hash"].as_str().map(str::len), Some(64));

    let show = k.json(&["show", &d.call]);
    assert_eq!(show["record"]["record_type"], json!("tool.call"));
    assert_eq!(show["record"]["content"]["tool_name"], json!("fs.list"));
    assert_eq!(show["ledgers"], json!([d.out1]));
    let show_meta = k.json(&["show", &d.thought]);
    assert_eq!(show_meta["record"]["metadata"], json!({"step": "1"}));
    let show_ledger = k.json(&["show", &d.out1]);
    assert_eq!(show_ledger["records"].as_array().map(Vec::len), Some(4));
    let show_session = k.json(&["show", &d.session]);
    assert_eq!(show_session["reflog"].as_array().map(Vec::len), Some(4));
    assert_eq!(show_session["session"]["head_ledger_id"], json!(d.out2));
    assert!(k.ok(&["show", &d.session]).contains("Ref log:"));

    let diff = k.json(&["diff", &d.out1, &d.out2]);
    assert_eq!(diff["only_a"].as_array().map(Vec::len), Some(4));
    assert_eq!(diff["only_b"].as_array().map(Vec::len), Some(1));
    assert_eq!(diff["both"].as_array().map(Vec::len), Some(0));
    let text = k.ok(&["diff", &d.out1, &d.out2]);
    assert!(
        text.contains("4 only in A, 1 only in B, 0 in both"),
        "{text}"
    );

    let q = k.json(&["query", "--type", "task.deliverable"]);
    assert_eq!(q.as_array().map(Vec::len), Some(2));
    let q = k.json(&[
        "query",
        "--type",
        "task.instruction",
        "--author",
        "user:oles",
        "--limit",
        "1",
    ]);
    assert_eq!(q.as_array().map(Vec::len), Some(1));
    assert_eq!(
        q[0]["content"]["text"],
        json!("now name them"),
        "newest first"
    );
    let q = k.json(&["query", "--since", "1h", "--session", &d.session]);
    assert_eq!(q.as_array().map(Vec::len), Some(7));
    let q = k.json(&["query", "--since", "2999-01-01T00:00:00Z"]);
    assert_eq!(q, json!([]));

    assert!(k.ok(&["verify", &d.session]).starts_with("verified:"));
    let v = k.json(&["verify", &d.out2]);
    assert_eq!(v["ok"], json!(true));
    assert_eq!(
        v["ledgers_checked"],
        json!(4),
        "a ledger's verification walks its ancestors"
    );
    let v = k.json(&["verify", "--all"]);
    assert_eq!(v["ok"], json!(true));
    assert_eq!(v["records_checked"], json!(7));
    assert_eq!(v["sessions_checked"], json!(1));
}

#[test]
fn same_content_twice_is_one_record() {
    let k = Kura::new();
    let s = k.ok(&["session", "new"]);
    let l = k.ok(&["ledger", "open", "--session", &s, "--label", "l"]);
    let args = [
        "record",
        "add",
        "--ledger",
        &l,
        "--type",
        "memory.fact",
        "--author",
        "agent:mikado",
        "--content",
        r#"{"b":1,"a":[true,null]}"#,
    ];
    let first = k.json(&args);
    let spaced = [
        "record",
        "add",
        "--ledger",
        &l,
        "--type",
        "memory.fact",
        "--author",
        "agent:mikado",
        "--content",
        r#"{ "a" : [ true , null ] , "b" : 1.0 }"#,
    ];
    let second = k.json(&spaced);
    assert_eq!(first["deduplicated"], json!(false));
    assert_eq!(second["deduplicated"], json!(true));
    assert_eq!(first["record"]["record_id"], second["record"]["record_id"]);
    assert_eq!(second["position"], json!(1));
}

#[test]
fn prove_and_verify_proof_offline() {
    let k = Kura::new();
    let d = k.demo_session();
    let proof = k.ok(&["prove", &d.result, "--ledger", &d.out1]);
    let path = k.dir.path().join("proof.json");
    std::fs::write(&path, &proof).expect("write proof");
    let p: serde_json::Value = serde_json::from_str(&proof).expect("proof JSON");
    assert_eq!(p["leaf_index"], json!(2));
    assert_eq!(p["tree_size"], json!(4));
    let root = p["root_hash"].as_str().expect("root").to_owned();
    let lhash = p["ledger_hash"].as_str().expect("hash").to_owned();

    // Offline: no database needed at all.
    let elsewhere = Kura::uninit();
    let path_s = path.to_str().expect("utf8");
    assert!(
        elsewhere
            .ok(&["verify-proof", path_s])
            .starts_with("proof ok")
    );
    elsewhere.ok(&["verify-proof", path_s, "--root", &root]);
    elsewhere.ok(&["verify-proof", path_s, "--root", &lhash]);
    assert!(!elsewhere.db.exists());

    let (out, _) = elsewhere.fails(1, &["verify-proof", path_s, "--root", &"ab".repeat(32)]);
    assert!(
        out.contains("PROOF FAILED") && out.contains("neither is the trusted"),
        "{out}"
    );

    // A forged proof: the record's content changed.
    let forged = proof.replace(r#"\"result\":[\"a\",\"b\"]"#, r#"\"result\":[\"a\",\"c\"]"#);
    assert_ne!(forged, proof);
    let fpath = k.dir.path().join("forged.json");
    std::fs::write(&fpath, &forged).expect("write");
    let (out, _) = elsewhere.fails(1, &["verify-proof", fpath.to_str().expect("utf8")]);
    assert!(out.contains("content hash is"), "{out}");

    // Read from stdin too.
    let mut child = k
        .cmd(&["verify-proof", "-", "--json"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(proof.as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!(v["ok"], json!(true));

    // Not a proof at all.
    let junk = k.dir.path().join("junk.json");
    std::fs::write(&junk, "{\"hello\":1}").expect("write");
    let (_, err) = k.fails(2, &["verify-proof", junk.to_str().expect("utf8")]);
    assert!(err.contains("is not a Kura inclusion proof"), "{err}");

    // Open ledgers cannot be proven.
    let s = k.ok(&["session", "new"]);
    let l = k.ok(&["ledger", "open", "--session", &s, "--label", "l"]);
    let r = k.ok(&[
        "record",
        "add",
        "--ledger",
        &l,
        "--type",
        "agent.thought",
        "--author",
        "agent:x",
        "--text",
        "hi",
    ]);
    let (_, err) = k.fails(2, &["prove", &r, "--ledger", &l]);
    assert!(err.contains("still open"), "{err}");
    let (_, err) = k.fails(2, &["prove", &d.instr, "--ledger", &d.out1]);
    assert!(err.contains("is not in ledger"), "{err}");
}

#[test]
fn bad_input_is_a_clear_error_exit_2_and_leaves_the_store_unchanged() {
    let k = Kura::new();
    let d = k.demo_session();
    let s = k.ok(&["session", "new"]);
    let open = k.ok(&["ledger", "open", "--session", &s, "--label", "open-one"]);
    let before = k.fingerprint();
    let missing = "01900000-0000-7000-8000-000000000000";
    let big = k.dir.path().join("big.json");
    std::fs::write(
        &big,
        format!("{{\"text\":\"{}\"}}", "x".repeat(5 * 1024 * 1024)),
    )
    .expect("write");
    let notjson = k.dir.path().join("bad.json");
    std::fs::write(&notjson, "{not json").expect("write");
    let big_s = big.to_str().expect("utf8").to_owned();
    let notjson_s = notjson.to_str().expect("utf8").to_owned();

    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec![
                "record",
                "add",
                "--ledger",
                &open,
                "--type",
                "agent.thought",
                "--author",
                "agent:x",
                "--content",
                "{oops",
            ],
            "invalid JSON",
        ),
        (
            vec![
                "record",
                "add",
                "--ledger",
                &open,
                "--type",
                "agent.dream",
                "--author",
                "agent:x",
                "--text",
                "t",
            ],
            "unknown record type \"agent.dream\"",
        ),
        (
            vec![
                "record",
                "add",
                "--ledger",
                &open,
                "--type",
                "agent.thought",
                "--author",
                "nobody",
                "--text",
                "t",
            ],
            "invalid author id",
        ),
        (
            vec![
                "record",
                "add",
                "--ledger",
                &open,
                "--type",
                "tool.call",
                "--author",
                "agent:x",
                "--content",
                "{\"tool_name\":\"x\"}",
            ],
            "invalid content for tool.call",
        ),
        (
            vec![
                "record",
                "add",
                "--ledger",
                &open,
                "--type",
                "memory.fact",
                "--author",
                "agent:x",
                "--content",
                "{\"n\":9007199254740993}",
            ],
            "outside the exactly representable range",
        ),
        (
            vec![
                "record",
                "add",
                "--ledger",
                &d.out1,
                "--type",
                "agent.thought",
                "--author",
                "agent:x",
                "--text",
                "late",
            ],
            "is sealed",
        ),
        (
            vec![
                "record",
                "add",
                "--ledger",
                missing,
                "--type",
                "agent.thought",
                "--author",
                "agent:x",
                "--text",
                "t",
            ],
            "not found",
        ),
        (
            vec![
                "record",
                "add",
                "--ledger",
                "not-a-uuid",
                "--type",
                "agent.thought",
                "--author",
                "agent:x",
                "--text",
                "t",
            ],
            "invalid id",
        ),
        (
            vec![
                "record",
                "add",
                "--ledger",
                &open,
                "--type",
                "agent.thought",
                "--author",
                "agent:x",
                "--content-file",
                &big_s,
            ],
            "content limit",
        ),
        (
            vec![
                "record",
                "add",
                "--ledger",
                &open,
                "--type",
                "agent.thought",
                "--author",
                "agent:x",
                "--content-file",
                &notjson_s,
            ],
            "invalid JSON",
        ),
        (
            vec![
                "record",
                "add",
                "--ledger",
                &open,
                "--type",
                "agent.thought",
                "--author",
                "agent:x",
                "--content-file",
                "/nonexistent/file",
            ],
            "cannot read",
        ),
        (
            vec![
                "record",
                "add",
                "--ledger",
                &open,
                "--type",
                "agent.thought",
                "--author",
                "agent:x",
                "--text",
                "t",
                "--meta",
                "novalue",
            ],
            "expected KEY=VALUE",
        ),
        (
            vec![
                "record",
                "add",
                "--ledger",
                &open,
                "--type",
                "agent.thought",
                "--author",
                "agent:x",
            ],
            "one of --text, --content or --content-file",
        ),
        (
            vec!["ledger", "open", "--session", missing, "--label", "x"],
            "session 01900000-0000-7000-8000-000000000000 not found",
        ),
        (
            vec![
                "ledger",
                "open",
                "--session",
                &s,
                "--label",
                "x",
                "--parent",
                &open,
            ],
            "still open",
        ),
        (
            vec!["ledger", "open", "--session", &s, "--label", ""],
            "invalid label",
        ),
        (vec!["ledger", "seal", missing], "not found"),
        (vec!["log", missing], "not found"),
        (vec!["show", missing], "no record, ledger or session"),
        (vec!["diff", &d.out1, missing], "not found"),
        (vec!["verify", missing], "no ledger or session"),
        (vec!["verify", &d.call], "is a record"),
        (vec!["query", "--type", "bogus.type"], "unknown record type"),
        (vec!["query", "--since", "last tuesday"], "invalid time"),
        // Regression: an age reaching before 1970 panicked.
        (vec!["query", "--since", "300000years"], "before 1970"),
        (vec!["prove", missing, "--ledger", &d.out1], "not found"),
        (
            vec!["--synchronous", "sometimes", "session", "new"],
            "invalid synchronous mode",
        ),
    ];
    for (args, expect) in cases {
        let (stdout, stderr) = k.fails(2, &args);
        assert!(stdout.is_empty(), "{args:?} printed to stdout: {stdout}");
        assert!(stderr.starts_with("kura: error: "), "{args:?}: {stderr}");
        assert_eq!(
            stderr.trim_end().lines().count(),
            1,
            "{args:?}: one line, got {stderr}"
        );
        assert!(
            stderr.contains(expect),
            "{args:?}: expected {expect:?} in {stderr}"
        );
        assert!(
            !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
            "{stderr}"
        );
        assert_eq!(k.fingerprint(), before, "{args:?} changed the store");
    }
    // clap usage errors are exit 2 too.
    k.fails(2, &["record", "add", "--ledger", &open]);
    k.fails(2, &["frobnicate"]);
    k.fails(2, &["verify"]);
    assert_eq!(k.fingerprint(), before);
}

#[test]
fn missing_corrupt_and_foreign_databases_are_refused_untouched() {
    let k = Kura::uninit();
    let (_, err) = k.fails(2, &["session", "new"]);
    assert!(
        err.contains("no Kura database") && err.contains("kura init"),
        "{err}"
    );
    assert!(
        !k.db.exists(),
        "a read or write command must not create the database"
    );

    std::fs::write(
        &k.db,
        b"SQLite format 3\0 but then garbage garbage garbage ".repeat(100),
    )
    .expect("write");
    let before = std::fs::read(&k.db).expect("read");
    for args in [
        &["log", "01900000-0000-7000-8000-000000000000"][..],
        &["verify", "--all"],
        &["init"],
    ] {
        let (_, err) = k.fails(2, args);
        assert!(err.contains("is not a Kura database"), "{args:?}: {err}");
    }
    assert_eq!(std::fs::read(&k.db).expect("read"), before);

    let other = Kura::uninit();
    {
        let c = rusqlite::Connection::open(&other.db).expect("sqlite");
        c.execute_batch("CREATE TABLE notes (t TEXT); INSERT INTO notes VALUES ('mine');")
            .expect("schema");
    }
    let before = std::fs::read(&other.db).expect("read");
    for args in [&["session", "new"][..], &["init"]] {
        let (_, err) = other.fails(2, args);
        assert!(err.contains("is not a Kura database"), "{err}");
    }
    assert_eq!(std::fs::read(&other.db).expect("read"), before);
}

#[test]
fn init_is_idempotent_and_db_comes_from_env() {
    let k = Kura::uninit();
    let j = k.json(&["init"]);
    assert_eq!(j["created"], json!(true));
    let j = k.json(&["init"]);
    assert_eq!(j["created"], json!(false));
    let out = std::process::Command::new(kura_testkit::cli::bin())
        .args(["session", "new", "--label", "env"])
        .env("KURA_DB", &k.db)
        .current_dir(k.dir.path())
        .output()
        .expect("run");
    assert!(out.status.success());
    assert_eq!(
        k.json(&["session", "list"]).as_array().map(Vec::len),
        Some(1)
    );
}

#[test]
fn closed_stdout_is_not_an_error_in_any_output_mode() {
    let k = Kura::new();
    let d = k.demo_session();
    // More than any output buffer holds, so the failing write happens mid-document.
    k.seal_text(&d.session, "long", &"paid 10 EUR to alice; ".repeat(2_000));
    // Like `kura log ... | head -0`: the reader is gone before the first byte, in text and
    // in JSON (a JSON writer wraps the pipe's error; it must still read as a closed pipe).
    for args in [
        vec!["log", &d.session, "--records"],
        vec!["log", &d.session, "--records", "--json"],
        vec!["log", &d.session, "--graph"],
        vec!["show", &d.session, "--json"],
        vec!["session", "list", "--json"],
        vec!["verify", "--all", "--json"],
    ] {
        let mut child = k
            .cmd(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn");
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait");
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(out.stderr.is_empty(), "{args:?}: {err}");
    }
}

#[test]
fn help_and_version_exit_0() {
    let k = Kura::uninit();
    assert!(k.ok(&["--help"]).contains("verify-proof"));
    assert!(
        k.ok(&["record", "add", "--help"])
            .contains("--content-file")
    );
    assert!(k.ok(&["--version"]).starts_with("kura "));
}

/// Attack: model-written text with terminal escapes (retitle the window, move the cursor,
/// hide text with a bidi override) reached the terminal raw through `kura log`, `show` and
/// `query`.
#[test]
fn model_text_cannot_drive_the_terminal() {
    let k = Kura::new();
    let s = k.ok(&["session", "new"]);
    let l = k.ok(&["ledger", "open", "--session", &s, "--label", "l"]);
    let rec = k.ok(&[
        "record",
        "add",
        "--ledger",
        &l,
        "--type",
        "agent.thought",
        "--author",
        "agent:x",
        "--content",
        r#"{"text": "ok\u001b]0;pwned\u0007\u001b[2Jgone\u202eevil\r\nnext"}"#,
    ]);
    for args in [
        vec!["show", rec.as_str()],
        vec!["show", l.as_str()],
        vec!["log", s.as_str(), "--records"],
        vec!["query", "--type", "agent.thought"],
    ] {
        let out = k.ok(&args);
        for bad in ['\u{1b}', '\u{7}', '\u{202e}', '\r'] {
            assert!(!out.contains(bad), "{args:?} printed {bad:?} raw: {out:?}");
        }
        assert!(
            out.contains("pwned"),
            "{args:?}: the text is still shown, escaped: {out}"
        );
    }
}

/// Broke (issue 24 item 14): a `memory.fact` added with `kura record add` was never found by
/// `kura search` — only mikado's extraction indexed memory. Every writer's memory is found,
/// once a sealed ledger holds it (issue 35 item 12: an unsealed record is unaccounted for).
#[test]
fn a_fact_added_by_hand_is_found_by_search() {
    let k = Kura::new();
    let session = k.ok(&["session", "new"]);
    let ledger = k.ok(&["ledger", "open", "--session", &session, "--label", "notes"]);
    k.ok(&[
        "record",
        "add",
        "--ledger",
        &ledger,
        "--type",
        "memory.fact",
        "--author",
        "user:oles",
        "--text",
        "the shopping list lives in lists/shopping.md",
    ]);
    let early = k.ok(&["search", "shopping", "--json"]);
    assert!(
        !early.contains("lists/shopping.md"),
        "found before its ledger was sealed: {early}"
    );
    k.ok(&["ledger", "seal", &ledger]);
    let found = k.ok(&["search", "shopping", "--json"]);
    assert!(found.contains("lists/shopping.md"), "{found}");
    // A thought is not memory: not indexed.
    let ledger = k.ok(&["ledger", "open", "--session", &session, "--label", "more"]);
    k.ok(&[
        "record",
        "add",
        "--ledger",
        &ledger,
        "--type",
        "agent.thought",
        "--author",
        "agent:x",
        "--text",
        "walrus thoughts",
    ]);
    k.ok(&["ledger", "seal", &ledger]);
    let none = k.ok(&["search", "walrus", "--json"]);
    assert!(!none.contains("walrus thoughts"), "{none}");
}

/// Issue 35 (4): `kura hook claude-code --check-settings FILE` exits 1 naming a PreToolUse
/// hook whose `--wait` Claude Code's timeout would cut short (the call would then run
/// ungated), and 0 for settings that leave room.
#[test]
fn the_hook_checks_claude_codes_settings_for_room_to_refuse() {
    let k = Kura::uninit();
    let write = |name: &str, command: &str, timeout: u64| {
        let path = k.dir.path().join(name);
        let settings = format!(
            r#"{{"hooks": {{"PreToolUse": [{{"matcher": "*", "hooks": [{{"type": "command", "command": "{command}", "timeout": {timeout}}}]}}]}}}}"#
        );
        std::fs::write(&path, settings).expect("write");
        path.display().to_string()
    };
    let tight = write(
        "tight.json",
        "kura hook claude-code PreToolUse --wait 12",
        15,
    );
    let (out, _) = k.fails(1, &["hook", "claude-code", "--check-settings", &tight]);
    assert!(out.contains("at least 22"), "{out}");
    let roomy = write("roomy.json", "kura hook claude-code PreToolUse", 600);
    let out = k.ok(&["hook", "claude-code", "--check-settings", &roomy]);
    assert!(out.starts_with("ok:"), "{out}");
}
