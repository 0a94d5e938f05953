//! Writs and budgets with the real daemons on the fake OpenAI-compatible server (which
//! reports usage): a person's grant with a token budget stops a run and says so; a
//! delegated writ refuses a wider call; a revocation stops the next call; a writ signed by
//! someone who is not an issuer is refused; and the whole history still verifies.

use std::process::{Command, Output};
use std::time::Duration;

use kura_testkit::{Stack, bin, openai};
use proto::record::RecordType;
use serde_json::{Value, json};

/// The fake model: "loop" reads a file forever (only a budget stops it); "write" writes one
/// file then answers; "read" reads one then answers.
fn model(body: &Value) -> Value {
    let instruction = openai::instruction(body);
    let done = openai::has_tool_result(body);
    if instruction.starts_with("loop") {
        openai::call("fs_read", json!({"path": "a.txt"}))
    } else if done {
        openai::say("done")
    } else if instruction.starts_with("write") {
        openai::call("fs_write", json!({"path": "x.txt", "content": "wide"}))
    } else {
        openai::call("fs_read", json!({"path": "a.txt"}))
    }
}

fn public_key(key_file: &std::path::Path) -> String {
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(key_file).expect("key")).expect("json");
    v["public_key"].as_str().expect("public_key").to_owned()
}

/// `kura ARGS --db DB`; a writ command seals its authority ledger with the operator's seed,
/// as every ledger of this install is sealed by a key in its keyring.
fn kura(s: &Stack, args: &[&str]) -> Output {
    let seed = s.nats.seed(kura_runtime::identity::Role::Operator);
    let mut all = args.to_vec();
    if args[0] == "redact"
        || (args[0] == "writ" && ["grant", "delegate", "revoke"].contains(&args[1]))
    {
        all.extend(["--sealer-key", seed.to_str().expect("utf8 path")]);
    }
    s.cli().run(&all)
}

fn ok(s: &Stack, args: &[&str]) -> String {
    let out = kura(s, args);
    assert!(
        out.status.success(),
        "kura {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn session_of(s: &Stack, request: i64) -> proto::SessionId {
    s.wait_complete(request, Duration::from_secs(60))
        .session_id
        .expect("session")
}

fn texts(s: &Stack, session: proto::SessionId, t: RecordType) -> Vec<String> {
    kura_testkit::stack::session_records(&s.store(), session)
        .into_iter()
        .filter(|r| r.record_type == t)
        .map(|r| r.content["text"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn a_writ_with_a_token_budget_stops_a_run_its_delegation_refuses_a_wider_call_and_revocation_stops_the_next()
 {
    let url = openai::start((40, 10), model);
    let mut s = Stack::new("[]");
    let ana = s.new_approver("ana");
    let bob = s.path("bob.key");
    let out = Command::new(bin("aegis"))
        .args(["keygen", "--name", "bob", "--key"])
        .arg(&bob)
        .output()
        .expect("keygen");
    assert!(out.status.success());
    let issuers = format!(
        "[{{name = \"ana\", public_key = \"{}\"}}]",
        public_key(&ana)
    );
    s.extra_env.extend([
        ("KURA_WRITS__ISSUERS".to_owned(), issuers),
        ("KURA_PROVIDER__KIND".to_owned(), "openai".to_owned()),
        ("KURA_PROVIDER__BASE_URL".to_owned(), url),
        (
            "KURA_PROVIDER__MODEL".to_owned(),
            "tiny-test-model".to_owned(),
        ),
        (
            "KURA_PROVIDER__PRICES".to_owned(),
            "{tiny-test-model = {input = 150000, output = 600000}}".to_owned(),
        ),
        ("KURA_WORKER__MAX_STEPS".to_owned(), "50".to_owned()),
    ]);
    for d in ["minato", "hashi", "aegis"] {
        s.spawn(d, d);
    }
    let ana = ana.to_string_lossy().into_owned();
    let bob = bob.to_string_lossy().into_owned();

    // Someone who is not an issuer cannot grant.
    let forged = kura(
        &s,
        &[
            "writ",
            "grant",
            "--key",
            &bob,
            "--holder",
            "user:oles",
            "--tool",
            "*",
            "--ceiling",
            "irreversible",
        ],
    );
    assert_eq!(forged.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&forged.stderr).contains("not a writ issuer"),
        "{forged:?}"
    );

    // A grant with a 200-token budget: the looping model is stopped by it.
    let budgeted = ok(
        &s,
        &[
            "writ",
            "grant",
            "--key",
            &ana,
            "--holder",
            "user:oles",
            "--tool",
            "fs.*",
            "--ceiling",
            "write",
            "--tokens",
            "200",
            "--expires",
            "1h",
        ],
    );
    let session = session_of(
        &s,
        s.submit_with("loop until stopped", &["--author", "user:oles"]),
    );
    let deliverables = texts(&s, session, RecordType::TaskDeliverable);
    let last = deliverables.last().expect("a deliverable");
    assert!(
        last.contains(&format!(
            "writ {budgeted}'s tokens budget is spent (200 of 200)"
        )),
        "{last}"
    );
    let store = s.store();
    let usage = kura_work::writs::session_usage(&store, session)
        .expect("usage")
        .expect("some");
    assert_eq!(
        usage,
        (4, 160, 40, 4 * (6 + 6)),
        "four answers of 40 in and 10 out, at 0.15 and 0.60 per million"
    );
    let calls: Vec<_> = kura_testkit::stack::session_records(&store, session)
        .into_iter()
        .filter(|r| r.record_type == RecordType::ToolCall)
        .collect();
    assert_eq!(calls.len(), 4);
    assert!(
        calls.iter().all(|c| c.content["writ"] == budgeted.as_str()),
        "every call names its writ"
    );
    assert_eq!(
        calls[0].metadata.get("model").map(String::as_str),
        Some("tiny-test-model")
    );
    // `kura log` shows what each step cost and what the session spent.
    let log = ok(&s, &["log", &session.to_string()]);
    assert!(
        log.contains("4 model answers (tiny-test-model), 160+40 tokens, 48 millionths"),
        "{log}"
    );
    assert!(
        log.contains("spent: 4 model answers, 160+40 tokens, 48 millionths"),
        "{log}"
    );

    // A new grant with a delegate key; bob narrows it to reads for one session.
    let parent = ok(
        &s,
        &[
            "writ",
            "grant",
            "--key",
            &ana,
            "--holder",
            "user:oles",
            "--tool",
            "fs.*",
            "--ceiling",
            "write",
            "--tokens",
            "1000",
            "--delegate-key",
            &public_key(std::path::Path::new(&bob)),
        ],
    );
    let sub = ok(&s, &["session", "new", "--label", "sub"]);
    let holder = format!("session:{sub}");
    let wider = kura(
        &s,
        &[
            "writ",
            "delegate",
            "--parent",
            &parent,
            "--holder",
            &holder,
            "--tool",
            "shell.run",
            "--key",
            &bob,
        ],
    );
    assert_eq!(
        wider.status.code(),
        Some(2),
        "a child wider than its parent"
    );
    assert!(
        String::from_utf8_lossy(&wider.stderr).contains("wider than its parent"),
        "{wider:?}"
    );
    let child = ok(
        &s,
        &[
            "writ",
            "delegate",
            "--parent",
            &parent,
            "--holder",
            &holder,
            "--tool",
            "fs.read",
            "--ceiling",
            "read",
            "--tokens",
            "500",
            "--key",
            &bob,
        ],
    );
    let sub_session = session_of(
        &s,
        s.submit_with("write x.txt", &["--author", "user:oles", "--session", &sub]),
    );
    let errors = texts(&s, sub_session, RecordType::SysError);
    assert!(
        errors
            .iter()
            .any(|e| e.contains(&format!("outside writ {child}'s scope: tool \"fs.write\""))),
        "{errors:?}"
    );
    assert!(
        !s.path(&format!("ws/{sub}/x.txt")).exists(),
        "the wider call did not run"
    );

    // Revoked: the next call under the parent (and its child) is refused at once.
    ok(
        &s,
        &[
            "writ", "revoke", &parent, "--key", &ana, "--reason", "enough",
        ],
    );
    let after = session_of(&s, s.submit_with("read a.txt", &["--author", "user:oles"]));
    let errors = texts(&s, after, RecordType::SysError);
    assert!(
        errors
            .iter()
            .any(|e| e.contains(&format!("writ {parent} was revoked"))),
        "{errors:?}"
    );
    let list = ok(&s, &["writ", "list"]);
    assert!(list.contains(&format!("{parent}  revoked")), "{list}");
    assert!(
        list.contains(&format!("{child}  live")) && list.contains(&format!("from {parent}")),
        "{list}"
    );

    // The console shows each writ with what was spent, and each session's spend.
    let port = kura_testkit::free_port();
    let person = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    s.extra_env.extend([
        ("KURA_CONSOLE__LISTEN".into(), format!("127.0.0.1:{port}")),
        (
            "KURA_CONSOLE__USERS".into(),
            format!(
                "[{{ name = \"ana\", public_key = \"{}\" }}]",
                hex::encode(person.verifying_key().as_bytes())
            ),
        ),
    ]);
    s.spawn("kura", "serve");
    kura_testkit::console::wait_http(port);
    let cookie = kura_testkit::console::login(port, &person);
    let get =
        |path: &str| kura_testkit::console::http(port, "GET", path, &[("Cookie", &cookie)], "");
    let (status, _, page) = get("/writs");
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains(&budgeted[..8])
            && page.contains("200/200 tokens")
            && page.contains("revoked"),
        "{page}"
    );
    let (status, _, page) = get(&format!("/s/{session}"));
    assert_eq!(status, 200);
    assert!(
        page.contains("Spent: 4 model answers, 160+40 tokens, 48 millionths"),
        "{page}"
    );
    assert!(
        page.contains(&format!("Its calls ran under writ <code>{budgeted}</code>")),
        "{page}"
    );

    // Grants and revocations are sealed records: everything verifies.
    s.verify_all();

    // A checkpoint now, then a tool result of the first session redacted.
    let log_key = s.path("log.key").to_string_lossy().into_owned();
    let vkey = ok(
        &s,
        &["log-key", "init", "--out", &log_key, "--name", "writs.test"],
    )
    .lines()
    .last()
    .expect("vkey")
    .trim()
    .to_owned();
    ok(&s, &["checkpoint", "--key", &log_key, "--trust-current"]);
    let before = s.path("before.checkpoint");
    std::fs::copy(s.path("kura.db.checkpoint"), &before).expect("keep the checkpoint");
    let result = kura_testkit::stack::session_records(&s.store(), session)
        .into_iter()
        .find(|r| r.record_type == RecordType::ToolResult)
        .expect("a tool result");
    let ledger = s
        .store()
        .ledgers_containing(result.record_id)
        .expect("ledgers")[0]
        .to_string();
    let forged = kura(
        &s,
        &[
            "redact",
            &result.record_id.to_string(),
            "--reason",
            "x",
            "--key",
            &bob,
        ],
    );
    assert_eq!(forged.status.code(), Some(2), "bob may not redact");
    ok(
        &s,
        &[
            "redact",
            &result.record_id.to_string(),
            "--reason",
            "held a customer's address",
            "--key",
            &ana,
        ],
    );
    let keyring = s
        .nats
        .keys_dir()
        .join(kura_runtime::identity::IDENTITIES_FILE);
    let keyring = keyring.to_string_lossy().into_owned();
    let before = before.to_string_lossy().into_owned();
    let verified = ok(
        &s,
        &[
            "verify",
            "--all",
            "--keyring",
            &keyring,
            "--log-key",
            &vkey,
            "--checkpoint",
            &before,
        ],
    );
    assert!(
        verified.contains(&format!("REDACTED record {}", result.record_id)),
        "{verified}"
    );
    assert!(
        verified.contains("by user:ana") && verified.contains("held a customer's address"),
        "{verified}"
    );
    assert!(verified.contains("verified:"), "{verified}");
    // Its place in the ledger is still proved, and the proof says it was redacted.
    let proof = ok(
        &s,
        &["prove", &result.record_id.to_string(), "--ledger", &ledger],
    );
    std::fs::write(s.path("proof.json"), proof).expect("proof");
    let checked = ok(
        &s,
        &["verify-proof", &s.path("proof.json").to_string_lossy()],
    );
    assert!(
        checked.contains("proof ok") && checked.contains("REDACTED"),
        "{checked}"
    );
    // Someone who does not know who may redact cannot tell it from tampering.
    let mut blind = Command::new(bin("kura"));
    blind
        .args(["verify", "--all", "--db"])
        .arg(&s.db)
        .env_remove("KURA_WRITS__ISSUERS")
        .env_remove("KURA_SERVE_CONFIG");
    let blind = blind.output().expect("verify");
    assert_eq!(blind.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&blind.stdout).contains("redaction"),
        "{blind:?}"
    );
    assert!(s.exited().is_empty(), "a daemon died:\n{}", s.logs());
}
