//! Outside agents end to end: a real MCP client (the official Python `mcp`, pinned, in a venv
//! this test makes) drives a turn over Streamable HTTP against `kura serve` and the real
//! daemons; a person approves its declared write with a signed decision; the JSON routes
//! refuse what the attacks below try.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use kura_runtime::identity::Role;
use kura_testkit::console::{http, wait_http};
use kura_testkit::stack::{Stack, session_records};
use kura_testkit::{bin, free_port};
use serde_json::Value;

const MINUTE: Duration = Duration::from_secs(60);
const POLICY: &str = "[defaults]\nread = \"allow\"\nwrite = \"ask\"\nexternal = \"ask\"\n\n\
[[rules]]\nname = \"no-rm\"\ntool = \"Bash\"\nargs = { command = \"rm *\" }\ndecision = \"deny\"\n\n\
[[rules]]\nname = \"other-may-not-write\"\nauthor = \"agent:other\"\neffect = \"write\"\ndecision = \"deny\"\n\n\
[[rules]]\nname = \"other-may-not-list\"\nauthor = \"agent:other\"\ntool = \"fs.list\"\ndecision = \"deny\"\n";

pub(crate) use kura_testkit::python::mcp_python;

/// A stack with aegis trusting `ana`, a console port serving the agents' surface, and an
/// agent `laptop` whose token is returned.
fn agent_stack(port: u16) -> (Stack, String) {
    agent_stack_with(port, &[])
}

/// [`agent_stack`] with more settings for the daemons.
pub(crate) fn agent_stack_with(port: u16, extra: &[(&str, String)]) -> (Stack, String) {
    agent_stack_under(POLICY, port, extra)
}

/// [`agent_stack_with`] under another aegis policy.
pub(crate) fn agent_stack_under(
    policy: &str,
    port: u16,
    extra: &[(&str, String)],
) -> (Stack, String) {
    // hashi runs what an agent delegates: this script's one turn.
    let mut s = Stack::new(
        r#"{"turns": [[{"tool": "fs.list", "args": {}}, {"deliver": "the workspace is tidy"}]]}"#,
    );
    std::fs::write(s.path("policy.toml"), policy).expect("policy");
    let key = s.new_approver("ana");
    let k: Value =
        serde_json::from_str(&std::fs::read_to_string(&key).expect("key")).expect("json");
    let keys = s.nats.keys_dir();
    let out = Command::new(bin("kura"))
        .args(["--json", "keys", "add-agent", "--name", "laptop", "--dir"])
        .arg(keys)
        .output()
        .expect("add-agent");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let issued: Value = serde_json::from_slice(&out.stdout).expect("json");
    let token = issued["token"].as_str().expect("token").to_owned();
    s.extra_env.extend([
        (
            "KURA_AEGIS__APPROVERS".into(),
            format!(
                "[{{ name = \"ana\", public_key = \"{}\" }}]",
                k["public_key"].as_str().expect("pk")
            ),
        ),
        ("KURA_NATS__MODE".into(), "external".into()),
        ("KURA_CONSOLE__LISTEN".into(), format!("127.0.0.1:{port}")),
        (
            "KURA_SERVE__KEYRING".into(),
            keys.join("identities.toml").display().to_string(),
        ),
        (
            "KURA_AGENTS__REGISTRY".into(),
            keys.join("agents.toml").display().to_string(),
        ),
        ("KURA_AGENTS__MAX_RECORD_BYTES".into(), "65536".into()),
        ("KURA_AGENTS__RECORDS_PER_MINUTE".into(), "40".into()),
        (
            "KURA_AGENTS__TOOL_EFFECTS".into(),
            "{ Write = \"write\", Read = \"read\" }".into(),
        ),
    ]);
    // A person who may log in to the console (the page test below looks at it).
    let viewer = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    s.extra_env.push((
        "KURA_CONSOLE__USERS".into(),
        format!(
            "[{{ name = \"ana\", public_key = \"{}\" }}]",
            hex::encode(viewer.verifying_key().as_bytes())
        ),
    ));
    s.extra_env
        .extend(extra.iter().map(|(k, v)| ((*k).to_owned(), v.clone())));
    for d in ["aegis", "minato", "mikado", "hashi"] {
        s.spawn(d, d);
    }
    s.spawn("kura", "serve");
    wait_http(port);
    (s, token)
}

pub(crate) fn aegis_approve(s: &Stack, request_id: &str) -> (i32, String) {
    let out = Command::new(bin("aegis"))
        .args(["approve", request_id, "--key"])
        .arg(s.path("ana.key"))
        .env("KURA_NATS_URL", s.nats.url())
        .env("KURA_NATS_CA", s.nats.ca())
        .env("KURA_AEGIS__REPLY_KEY", s.nats.signer(Role::Aegis))
        .output()
        .expect("aegis approve");
    (
        out.status.code().unwrap_or(-1),
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ),
    )
}

#[test]
fn an_outside_agent_records_a_turn_over_mcp_and_a_person_approves_its_write() {
    let python = mcp_python();
    let port = free_port();
    let (mut s, token) = agent_stack(port);
    let mut child = Command::new(&python)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/mcp_flow.py"))
        .arg(format!("http://127.0.0.1:{port}/mcp"))
        .arg(&token)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python");
    let mut steps = std::collections::BTreeMap::new();
    for line in BufReader::new(child.stdout.take().expect("stdout")).lines() {
        let v: Value = serde_json::from_str(&line.expect("line")).expect("json line");
        let step = v["step"].as_str().unwrap_or_default().to_owned();
        if step == "declared" {
            let id = v["result"]["request_id"]
                .as_str()
                .expect("request id")
                .to_owned();
            assert_eq!(v["result"]["decision"], "ask", "{v}");
            s.wait_until("the request asked of people", MINUTE, |st| {
                kura_work::approvals::approval(st, id.parse().expect("id"))
                    .ok()
                    .flatten()
                    .is_some_and(|a| a.state == proto::ApprovalState::Asked)
            });
            let (code, out) = aegis_approve(&s, &id);
            assert_eq!(code, 0, "{out}");
        }
        steps.insert(step, v);
    }
    let out = child.wait_with_output().expect("python exit");
    assert!(
        out.status.success(),
        "{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        s.logs()
    );
    let r = |k: &str| {
        steps
            .get(k)
            .map(|v| v["result"].clone())
            .unwrap_or_default()
    };

    assert_eq!(
        steps["no_token"]["refused"], true,
        "a stranger got the tools"
    );
    assert_eq!(
        steps["tools"]["protocol"], "2026-07-28",
        "the current revision"
    );
    let tools = steps["tools"]["tools"].to_string();
    for t in [
        "start_session",
        "record_step",
        "declare_call",
        "wait_decision",
        "end_turn",
        "remember",
        "search_memory",
    ] {
        assert!(tools.contains(t), "{t} missing from {tools}");
    }
    // rmcp answers arguments that do not deserialize with a tool error naming the field.
    assert!(
        r("forged_author")["tool_error"]
            .to_string()
            .contains("unknown field `author`"),
        "an author argument is refused: {}",
        r("forged_author")
    );
    assert_eq!(
        r("result_as_text")["code"],
        -32602,
        "{}",
        r("result_as_text")
    );
    assert!(r("result")["record_id"].is_string(), "{}", r("result"));
    assert_eq!(
        r("oversized")["code"],
        -32003,
        "an oversized record is refused"
    );
    assert_eq!(
        r("declared")["effect"],
        "write",
        "the effect is Kura's, from its config"
    );
    assert_eq!(r("decision")["state"], "approved");
    assert!(r("decision")["decision_record_id"].is_string());
    assert!(
        r("after_end")["error"]
            .as_str()
            .is_some_and(|e| e.contains("ended")),
        "{}",
        r("after_end")
    );
    let hits = r("search")["hits"].to_string();
    assert!(hits.contains("the outside plan lives in plan.md"), "{hits}");
    // Memory remembered outside a turn is sealed at once in the agent's memory session, so
    // search finds it (issue 35 item 12: it was in no ledger).
    assert!(
        r("remember_alone")["record_id"].is_string(),
        "{}",
        r("remember_alone")
    );
    let hits = r("search_alone")["hits"].to_string();
    assert!(hits.contains("decisions without a turn"), "{hits}");

    // The read-only tools, delegation, and an inclusion proof checked offline.
    let types = r("log")["types"].to_string();
    assert!(
        types.contains("task.deliverable") && types.contains("tool.call"),
        "{types}"
    );
    assert_eq!(r("verify")["ok"], true, "{}", r("verify"));
    assert!(
        r("remember_after_end")["code"].is_i64(),
        "an ended turn takes nothing more"
    );
    assert!(
        r("diff")["only_b"]
            .as_array()
            .is_some_and(|a| !a.is_empty()),
        "{}",
        r("diff")
    );
    let delegated = r("delegate");
    assert!(delegated["request_seq"].is_i64(), "{delegated}");
    let proof = s.path("thought.proof.json");
    std::fs::write(&proof, r("prove_thought")["proof"].to_string()).expect("proof");
    let checked = Command::new(bin("kura"))
        .args(["verify-proof"])
        .arg(&proof)
        .arg("--root")
        .arg(
            r("end")["ledger_hash"]
                .as_str()
                .expect("the sealed output's hash"),
        )
        .output()
        .expect("verify-proof");
    assert!(
        checked.status.success(),
        "{}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    // Kura's own agent finished the delegated task; mikado learned the turn's FACT.
    let seq = delegated["request_seq"].as_i64().expect("seq");
    let done = s.wait_complete(seq, MINUTE);
    assert_eq!(
        done.deliverable.expect("deliverable").content["text"],
        "the workspace is tidy"
    );
    s.wait_until("mikado's memory of the agent's turn", MINUTE, |st| {
        kura_memory::search(
            st,
            &kura_memory::Search {
                query: "notes plan".into(),
                limit: 5,
                ..Default::default()
            },
        )
        .is_ok_and(|h| {
            h.iter().any(|h| {
                h.record.author_id == "agent:mikado"
                    && h.record
                        .content
                        .to_string()
                        .contains("keeps its notes in plan.md")
            })
        })
    });

    // The ledger: the agent's records authored from its token, the person's decision as theirs.
    let session = r("start")["session_id"]
        .as_str()
        .expect("session")
        .parse()
        .expect("id");
    let recs = session_records(&s.store(), session);
    let author = |t: &str| {
        recs.iter()
            .filter(|x| x.record_type.as_str() == t)
            .map(|x| x.author_id.clone())
            .collect::<Vec<_>>()
    };
    let ctx = r("start")["context_ledger_id"]
        .as_str()
        .expect("ctx")
        .parse()
        .expect("id");
    let context = s.store().hydrate(ctx).expect("context");
    assert_eq!(
        (
            context[0].record_type.as_str(),
            context[0].author_id.as_str()
        ),
        ("task.instruction", "agent:laptop")
    );
    // The search the agent made inside its turn is noted there, with what it returned.
    let noted = recs
        .iter()
        .find(|x| x.record_type.as_str() == "sys.context")
        .expect("the noted search");
    assert_eq!(noted.content["memory_search"], "outside plan");
    assert_eq!(
        noted.content["returned"][0],
        r("noted_search")["hits"][0]["record_id"],
        "{}",
        noted.content
    );
    for t in [
        "agent.thought",
        "tool.call",
        "tool.result",
        "memory.fact",
        "task.deliverable",
    ] {
        assert_eq!(author(t), vec!["agent:laptop".to_owned()], "{t}");
    }
    assert!(
        author("approval.decision").contains(&"user:ana".to_owned()),
        "{:?}",
        author("approval.decision")
    );
    let thought = recs
        .iter()
        .find(|x| x.record_type.as_str() == "agent.thought")
        .expect("thought");
    assert_eq!(thought.metadata.get("via").map(String::as_str), Some("mcp"));
    assert_eq!(
        thought.metadata.get("client").map(String::as_str),
        Some("kura-e2e-agent")
    );
    // minato completes the session, as for any turn; hashi never touched it.
    s.wait_until("the session complete", MINUTE, |st| {
        st.read_session(session)
            .is_ok_and(|x| x.status == proto::SessionStatus::Complete)
    });

    // The same surface over stdio: `kura mcp` launched by the client, relaying to kura serve.
    // Its stderr goes to a file: `kura mcp` inherits it, and a pipe would keep the test
    // waiting for as long as any child lives.
    // Both the client's previous revision (with `initialize`) and the current one pinned
    // (issue 35 item 2: every modern request over stdio came back HTTP 400).
    let errors = s.path("mcp_stdio.err");
    let stdio_run = |mode: &str| {
        let out = Command::new("timeout")
            .arg("120")
            .arg(&python)
            .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/mcp_stdio.py"))
            .arg(bin("kura"))
            .arg(format!("http://127.0.0.1:{port}"))
            .arg(&token)
            .arg(mode)
            .stderr(std::fs::File::create(&errors).expect("stderr file"))
            .output()
            .expect("python stdio");
        assert!(
            out.status.success(),
            "{mode}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            std::fs::read_to_string(&errors).unwrap_or_default()
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).expect("json line");
                (v["step"].as_str().unwrap_or_default().to_owned(), v)
            })
            .collect::<std::collections::BTreeMap<String, Value>>()
    };
    let pinned = stdio_run("2026-07-28");
    assert_eq!(pinned["tools"]["protocol"], "2026-07-28", "{pinned:?}");
    assert!(
        pinned["end"]["result"]["ledger_hash"].is_string(),
        "a whole turn at the current revision over stdio: {pinned:?}"
    );
    let stdio = stdio_run("legacy");
    assert!(stdio["tools"]["tools"].to_string().contains("declare_call"));
    assert_eq!(stdio["tools"]["protocol"], "2025-11-25", "{stdio:?}");
    assert!(
        stdio["thought"]["result"]["record_id"].is_string(),
        "{stdio:?}"
    );
    // Arguments that do not deserialize (here a turn id that is no UUID) are refused by
    // rmcp as a tool error saying why.
    assert!(
        stdio["bad_id"]["result"]["tool_error"]
            .to_string()
            .contains("UUID parsing failed")
            || stdio["bad_id"]["result"]["code"].is_i64(),
        "a bad id is refused: {stdio:?}"
    );
    assert!(
        stdio["end"]["result"]["ledger_hash"].is_string(),
        "{stdio:?}"
    );
    let over_stdio = stdio["start"]["result"]["session_id"]
        .as_str()
        .expect("session")
        .parse()
        .expect("id");
    let recs = session_records(&s.store(), over_stdio);
    let thought = recs
        .iter()
        .find(|x| x.record_type.as_str() == "agent.thought")
        .expect("thought");
    assert_eq!(
        thought.metadata.get("client").map(String::as_str),
        Some("kura-e2e-stdio")
    );
    s.verify_all();
    s.shutdown_cleanly();
}

/// The JSON routes, one exchange each.
pub(crate) fn post(port: u16, op: &str, token: Option<&str>, body: &str) -> (u16, Value) {
    let auth = token.map(|t| format!("Bearer {t}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", a.as_str())).collect();
    let (status, _, body) = http(port, "POST", &format!("/agent/v1/{op}"), &headers, body);
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

/// Attacks on the agents' surface: no token, a removed token, another agent's turn, a
/// record flood, a deny rule — each refused, nothing written for it.
#[test]
fn attacks_on_the_agent_surface_are_refused_and_write_nothing() {
    let port = free_port();
    let (mut s, token) = agent_stack(port);
    let keys = s.nats.keys_dir();
    let start = r#"{"instruction": "do something"}"#;
    // No token, a made-up token.
    assert_eq!(post(port, "start_session", None, start).0, 401);
    assert_eq!(
        post(port, "start_session", Some("kura_agent_guess"), start).0,
        401
    );
    let (status, started) = post(port, "start_session", Some(&token), start);
    assert_eq!(status, 200, "{started}");
    let turn = started["turn_id"].as_str().expect("turn").to_owned();
    // Another agent's turn: not found, nothing written.
    let other = Command::new(bin("kura"))
        .args(["--json", "keys", "add-agent", "--name", "other", "--dir"])
        .arg(keys)
        .output()
        .expect("add-agent");
    let other: Value = serde_json::from_slice(&other.stdout).expect("json");
    let other = other["token"].as_str().expect("token").to_owned();
    let step = format!(
        r#"{{"turn_id": "{turn}", "record_type": "agent.thought", "content": "mine now"}}"#
    );
    let (status, refused) = post(port, "record_step", Some(&other), &step);
    assert_eq!(
        (status, refused["kind"].as_str()),
        (404, Some("not_found")),
        "{refused}"
    );
    // Another agent's history is "not found" whichever way it is asked for: continued,
    // forked, read, shown, verified, proved or diffed. Its own it may fork.
    let session = started["session_id"].as_str().expect("session").to_owned();
    let ctx = started["context_ledger_id"]
        .as_str()
        .expect("ctx")
        .to_owned();
    let (_, log) = post(
        port,
        "read_log",
        Some(&token),
        &format!(r#"{{"session_id": "{session}"}}"#),
    );
    let first = log["records"][0]["record_id"]
        .as_str()
        .expect("a record")
        .to_owned();
    for (op, body) in [
        (
            "start_session",
            format!(r#"{{"instruction": "mine now", "session_id": "{session}"}}"#),
        ),
        (
            "start_session",
            format!(r#"{{"instruction": "mine now", "from_ledger": "{ctx}"}}"#),
        ),
        ("read_log", format!(r#"{{"session_id": "{session}"}}"#)),
        ("show_record", format!(r#"{{"record_id": "{first}"}}"#)),
        ("verify", format!(r#"{{"session_id": "{session}"}}"#)),
        (
            "prove",
            format!(r#"{{"record_id": "{first}", "ledger_id": "{ctx}"}}"#),
        ),
        ("diff", format!(r#"{{"a": "{ctx}", "b": "{ctx}"}}"#)),
    ] {
        let (status, refused) = post(port, op, Some(&other), &body);
        assert_eq!(
            (status, refused["kind"].as_str()),
            (404, Some("not_found")),
            "{op}: {refused}"
        );
    }
    let fork = format!(r#"{{"instruction": "try another way", "from_ledger": "{ctx}"}}"#);
    let (status, forked) = post(port, "start_session", Some(&token), &fork);
    assert_eq!(status, 200, "{forked}");
    assert_ne!(
        forked["session_id"].as_str(),
        Some(session.as_str()),
        "a fork is a new session"
    );
    // Kura's own names are not agents' to take: an agent named hashi would author agent:hashi.
    let taken = Command::new(bin("kura"))
        .args(["keys", "add-agent", "--name", "hashi", "--dir"])
        .arg(keys)
        .output()
        .expect("add-agent");
    assert_eq!(
        taken.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&taken.stderr)
    );
    // A per-agent rule (the `author` glob): "other" may not write, laptop is asked.
    let (_, own) = post(port, "start_session", Some(&other), start);
    let own_turn = own["turn_id"].as_str().expect("other's turn").to_owned();
    let write = |t: &str| {
        format!(r#"{{"turn_id": "{t}", "tool": "Write", "arguments": {{"file_path": "x"}}}}"#)
    };
    let (_, d) = post(port, "declare_call", Some(&other), &write(&own_turn));
    assert_eq!(
        (d["decision"].as_str(), d["rule"].as_str()),
        (Some("deny"), Some("other-may-not-write")),
        "{d}"
    );
    let (_, d) = post(port, "declare_call", Some(&token), &write(&turn));
    assert_eq!(d["decision"].as_str(), Some("ask"), "{d}");
    // Delegating does not get around a rule for its submitter: Kura's worker runs "other"'s
    // task, and the rule written for "other" still denies the listing.
    let (_, d) = post(
        port,
        "delegate",
        Some(&other),
        r#"{"instruction": "list the workspace", "wait_ms": 8000}"#,
    );
    let done = s.wait_complete(d["request_seq"].as_i64().expect("seq"), MINUTE);
    let recs = session_records(&s.store(), done.session_id.expect("session"));
    let result = recs
        .iter()
        .find(|r| r.record_type.as_str() == "tool.result")
        .expect("the listing's result");
    assert_eq!(result.content["status"], "error", "{}", result.content);
    assert!(
        result.content["error"]
            .as_str()
            .is_some_and(|e| e.contains("other-may-not-list")),
        "{}",
        result.content
    );
    // A forged author over HTTP too.
    let forged = format!(
        r#"{{"turn_id": "{turn}", "record_type": "agent.thought", "content": "x", "author": "user:ana"}}"#
    );
    assert_eq!(post(port, "record_step", Some(&token), &forged).0, 400);
    // A deny rule: refused at once, never approved.
    let rm = format!(
        r#"{{"turn_id": "{turn}", "tool": "Bash", "arguments": {{"command": "rm -rf /"}}}}"#
    );
    let (status, denied) = post(port, "declare_call", Some(&token), &rm);
    assert_eq!(
        (status, denied["decision"].as_str()),
        (200, Some("deny")),
        "{denied}"
    );
    // A flood: past the records per minute, refused and counted; the store keeps the bound.
    let mut refused = 0;
    for n in 0..60 {
        let step = format!(
            r#"{{"turn_id": "{turn}", "record_type": "agent.thought", "content": "step {n}"}}"#
        );
        if post(port, "record_step", Some(&token), &step).0 == 429 {
            refused += 1;
        }
    }
    assert!(refused >= 20, "only {refused} of 60 refused at 40 a minute");
    let thoughts = session_records(
        &s.store(),
        started["session_id"]
            .as_str()
            .expect("s")
            .parse()
            .expect("id"),
    )
    .iter()
    .filter(|r| r.record_type.as_str() == "agent.thought")
    .count();
    assert!(thoughts <= 40, "{thoughts} thoughts stored past the bound");
    // A removed agent is refused on its very next call.
    let removed = Command::new(bin("kura"))
        .args(["keys", "remove-agent", "--name", "laptop", "--dir"])
        .arg(keys)
        .status()
        .expect("remove-agent");
    assert!(removed.success());
    assert_eq!(
        post(port, "search", Some(&token), r#"{"query": "x"}"#).0,
        401
    );
    s.verify_all();
    s.shutdown_cleanly();
}

/// `kura hook claude-code <event>` with a recorded payload on stdin: (exit code, stdout,
/// stderr).
pub(crate) fn hook(
    s: &Stack,
    port: u16,
    token: &str,
    event: &str,
    fixture: &str,
) -> (i32, String, String) {
    let payload = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("agents/claude-code")
        .join(format!("{fixture}.json"));
    let out = Command::new(bin("kura"))
        .args(["hook", "claude-code", event, "--wait", "60", "--state-dir"])
        .arg(s.path("hooks"))
        .env("KURA_AGENT_URL", format!("http://127.0.0.1:{port}"))
        .env("KURA_AGENT_TOKEN", token)
        .stdin(std::fs::File::open(&payload).expect("fixture"))
        .output()
        .expect("kura hook");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Claude Code bound through its hooks: the prompt is a turn, a call a deny rule covers exits
/// 2 (Claude Code does not run it) and nothing approves it, a write waits for a person, its
/// result and the final message are recorded; the whole session verifies.
#[test]
fn claude_code_hooks_record_a_session_and_a_denied_call_exits_2() {
    let port = free_port();
    let (mut s, token) = agent_stack(port);
    // Hooks installed mid-session: a call before any prompt opens a turn, and even when it is
    // refused that turn is remembered — the next prompt ends it instead of leaving it open.
    let (code, _, err) = hook(&s, port, &token, "PreToolUse", "PreToolUse-deny");
    assert_eq!(code, 2, "{err}");
    let (code, _, err) = hook(&s, port, &token, "UserPromptSubmit", "UserPromptSubmit");
    assert_eq!(code, 0, "{err}");
    let open: i64 = s
        .store()
        .conn()
        .query_row(
            "SELECT count(*) FROM turns WHERE agent = 'agent:laptop' AND state != 'done'",
            [],
            |r| r.get(0),
        )
        .expect("open turns");
    assert_eq!(open, 1, "the refused call's turn was ended, not left open");
    let (code, _, err) = hook(&s, port, &token, "PreToolUse", "PreToolUse-deny");
    assert_eq!(code, 2, "a denied call blocks the tool: {err}");
    assert!(
        err.contains("denies Bash") && err.contains("no-rm"),
        "{err}"
    );
    // The write is asked of a person: the hook waits, the person approves, the hook lets it run.
    let waiting = {
        let (s_port, tok) = (port, token.clone());
        let dir = s.path("hooks");
        std::thread::spawn(move || {
            let payload = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("agents/claude-code/PreToolUse-ask.json");
            Command::new(bin("kura"))
                .args([
                    "hook",
                    "claude-code",
                    "PreToolUse",
                    "--wait",
                    "60",
                    "--state-dir",
                ])
                .arg(dir)
                .env("KURA_AGENT_URL", format!("http://127.0.0.1:{s_port}"))
                .env("KURA_AGENT_TOKEN", tok)
                .stdin(std::fs::File::open(payload).expect("fixture"))
                .output()
                .expect("kura hook")
        })
    };
    let mut asked = None;
    s.wait_until("the write asked of people", MINUTE, |st| {
        asked = kura_work::approvals::asked(st)
            .ok()
            .and_then(|a| a.into_iter().find(|a| a.tool_name == "Write"));
        asked.is_some()
    });
    let request = asked.expect("asked").request_id.to_string();
    let (code, out) = aegis_approve(&s, &request);
    assert_eq!(code, 0, "{out}");
    let ran = waiting.join().expect("hook thread");
    assert_eq!(
        ran.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let (code, _, err) = hook(&s, port, &token, "PostToolUse", "PostToolUse");
    assert_eq!(code, 0, "{err}");
    let (code, _, err) = hook(&s, port, &token, "Stop", "Stop");
    assert_eq!(code, 0, "{err}");

    let store = s.store();
    let approved: i64 = store
        .conn()
        .query_row(
            "SELECT count(*) FROM approvals WHERE tool_name = 'Bash' AND state = 'approved'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(approved, 0, "the denied call is never approved");
    let session: String = store
        .conn()
        .query_row(
            "SELECT session_id FROM requests WHERE agent = 'agent:laptop'",
            [],
            |r| r.get(0),
        )
        .expect("the hook's session");
    let recs = session_records(&store, session.parse().expect("id"));
    let call = recs
        .iter()
        .find(|r| r.record_type.as_str() == "tool.call" && r.content["tool_name"] == "Write")
        .expect("the write's call");
    let result = recs
        .iter()
        .find(|r| r.record_type.as_str() == "tool.result")
        .expect("result");
    assert_eq!(
        result.content["call_id"], call.content["call_id"],
        "the result names its call"
    );
    let delivered: Vec<&Value> = recs
        .iter()
        .filter(|r| r.record_type.as_str() == "task.deliverable")
        .map(|r| &r.content["text"])
        .collect();
    assert!(
        delivered.contains(&&Value::from("I wrote the release notes to notes.md.")),
        "{delivered:?}"
    );
    // The console lists the session with the agent's name.
    let cookie =
        kura_testkit::console::login(port, &ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]));
    let (status, _, page) = http(port, "GET", "/", &[("Cookie", cookie.as_str())], "");
    assert_eq!(status, 200);
    assert!(
        page.contains(
            r#"<span class="agent" title="an outside agent's session">agent:laptop</span>"#
        ),
        "{page}"
    );
    assert!(recs.iter().all(|r| r.author_id == "agent:laptop"
        || r.author_id.starts_with("user:")
        || r.author_id.starts_with("sys:")));
    s.verify_all();
    s.shutdown_cleanly();
}

/// A loopback HTTP receiver: each request's head and body, as they arrive.
pub(crate) fn receiver() -> (u16, std::sync::mpsc::Receiver<(String, String)>) {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut c) = conn else { continue };
            let mut raw = Vec::new();
            let mut buf = [0u8; 4096];
            // Read the head, then as many body bytes as Content-Length says.
            loop {
                let n = c.read(&mut buf).unwrap_or(0);
                if n == 0 {
                    break;
                }
                raw.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&raw).into_owned();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let len = head
                        .lines()
                        .find_map(|l| {
                            l.to_ascii_lowercase()
                                .strip_prefix("content-length:")
                                .map(|v| v.trim().parse::<usize>().unwrap_or(0))
                        })
                        .unwrap_or(0);
                    if body.len() >= len {
                        let _ = c.write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n");
                        let _ = tx.send((head.to_ascii_lowercase(), body.to_owned()));
                        break;
                    }
                }
            }
        }
    });
    (port, rx)
}

/// People hear that someone waits: a request put to people is posted to each notification
/// target (JSON and ntfy here) with the tool, the session's label and the console link, but
/// not the arguments; a dead target is retried and counted, and delays nobody.
#[test]
fn a_request_put_to_people_is_sent_to_their_notification_targets() {
    let (json_port, json) = receiver();
    let (ntfy_port, ntfy) = receiver();
    let dead = free_port();
    let hooks = format!(
        "[{{ url = \"http://127.0.0.1:{dead}/gone\" }}, \
          {{ url = \"http://127.0.0.1:{json_port}/hook\", token = \"s3cret\" }}, \
          {{ url = \"http://127.0.0.1:{ntfy_port}/kura\", format = \"ntfy\" }}]"
    );
    let port = free_port();
    let (mut s, token) = agent_stack_with(
        port,
        &[
            ("KURA_AEGIS__NOTIFY__WEBHOOKS", hooks),
            (
                "KURA_AEGIS__NOTIFY__CONSOLE_URL",
                format!("http://127.0.0.1:{port}"),
            ),
        ],
    );
    let (_, started) = post(
        port,
        "start_session",
        Some(&token),
        r#"{"instruction": "write the secret plan", "label": "secret plan"}"#,
    );
    let turn = started["turn_id"].as_str().expect("turn").to_owned();
    let write = format!(
        r#"{{"turn_id": "{turn}", "tool": "Write", "arguments": {{"file_path": "plan.md", "content": "PRIVATE-ARGUMENT"}}}}"#
    );
    let (_, d) = post(port, "declare_call", Some(&token), &write);
    assert_eq!(d["decision"], "ask", "{d}");
    let (head, body) = json
        .recv_timeout(MINUTE)
        .unwrap_or_else(|e| panic!("the JSON notice: {e}\n{}", s.log("aegis")));
    assert!(head.contains("authorization: bearer s3cret"), "{head}");
    let notice: Value = serde_json::from_str(&body).expect("json");
    assert_eq!(notice["event"], "approval.waiting");
    assert_eq!(notice["tool"], "Write");
    assert_eq!(notice["session_label"], "secret plan");
    assert_eq!(notice["requested_by"], "agent:laptop");
    assert_eq!(notice["request_id"], d["request_id"]);
    assert_eq!(notice["link"], format!("http://127.0.0.1:{port}/approvals"));
    assert!(
        !body.contains("PRIVATE-ARGUMENT"),
        "arguments travel only when configured"
    );
    let (head, body) = ntfy.recv_timeout(MINUTE).expect("the ntfy notice");
    assert!(head.contains("title: kura: approval waiting"), "{head}");
    assert!(
        head.contains(&format!("click: http://127.0.0.1:{port}/approvals")),
        "{head}"
    );
    assert!(
        body.contains("Write waits for your approval") && body.contains("secret plan"),
        "{body}"
    );
    assert!(!body.contains("PRIVATE-ARGUMENT"));
    // The dead target held up neither the others nor the request: a person decides at once.
    let (code, out) = aegis_approve(&s, d["request_id"].as_str().expect("id"));
    assert_eq!(code, 0, "{out}");
    s.wait_log(
        "aegis",
        "a notification target failed after every retry",
        MINUTE,
    );
    s.shutdown_cleanly();
}

/// Attack: an outside agent holding a writ for reads declares a write and a read outside its
/// paths. The published policy would allow a read at once — the writ is checked first, in
/// the same commit, and refuses both; the allowed read names its writ.
#[test]
fn an_outside_agents_call_outside_its_writ_is_refused_before_policy() {
    let port = free_port();
    // The issuer: a person with a fixed key, trusted by serve (the agents' gateway) and aegis.
    let bo = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]);
    let public = hex::encode(bo.verifying_key().as_bytes());
    let issuers = format!("[{{name = \"bo\", public_key = \"{public}\"}}]");
    let (s, token) = agent_stack_with(port, &[("KURA_WRITS__ISSUERS", issuers.clone())]);
    let key_file = s.path("bo.key");
    let key = serde_json::json!({"name": "bo", "secret_key": hex::encode(bo.to_bytes()), "public_key": public});
    std::fs::write(&key_file, key.to_string()).expect("key file");
    std::fs::set_permissions(
        &key_file,
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .expect("0600");
    let out = Command::new(bin("kura"))
        .args([
            "writ",
            "grant",
            "--holder",
            "agent:laptop",
            "--tool",
            "Read",
            "--path",
            "notes/*",
            "--ceiling",
            "read",
            "--tool-calls",
            "5",
        ])
        .arg("--key")
        .arg(&key_file)
        .arg("--sealer-key")
        .arg(s.nats.seed(kura_runtime::identity::Role::Operator))
        .arg("--db")
        .arg(&s.db)
        .env("KURA_WRITS__ISSUERS", &issuers)
        .output()
        .expect("kura writ grant");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let writ = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    let (_, started) = post(
        port,
        "start_session",
        Some(&token),
        r#"{"instruction": "tidy"}"#,
    );
    let turn = started["turn_id"].as_str().expect("turn").to_owned();
    let call = |tool: &str, path: &str| {
        let body = format!(
            r#"{{"turn_id": "{turn}", "tool": "{tool}", "arguments": {{"file_path": "{path}"}}}}"#
        );
        post(port, "declare_call", Some(&token), &body).1
    };
    let d = call("Write", "notes/a");
    assert_eq!(d["decision"].as_str(), Some("deny"), "{d}");
    assert!(
        d["rule"]
            .as_str()
            .is_some_and(|r| r.contains("writ: outside writ")),
        "{d}"
    );
    let d = call("Read", "secrets/key");
    assert_eq!(d["decision"].as_str(), Some("deny"), "{d}");
    assert!(
        d["rule"]
            .as_str()
            .is_some_and(|r| r.contains("path \"secrets/key\"")),
        "{d}"
    );
    let d = call("Read", "notes/a");
    assert_eq!(d["decision"].as_str(), Some("allow"), "{d}");
    let store = s.store();
    let w = kura_work::writs::writ(&store, writ.parse().expect("writ id"))
        .expect("read")
        .expect("writ");
    assert_eq!((w.calls_used, w.refused), (1, 2));
    let named: i64 = store
        .conn()
        .query_row(
            "SELECT count(*) FROM records WHERE record_type = 'tool.call' AND json_extract(content, '$.writ') = ?1",
            [&writ],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(named, 3, "every call the agent declared names its writ");
}

/// Issue 35 (2): a client pinned to the current MCP revision (2026-07-28: no `initialize`,
/// the version in each request's `_meta`) talks to Kura over stdio through `kura mcp`, whose
/// posts must carry that version in the `MCP-Protocol-Version` header the revision requires.
#[test]
fn kura_mcp_relays_a_current_revision_request_with_its_protocol_version_header() {
    let port = free_port();
    let (_s, token) = agent_stack(port);
    let mut relay = Command::new(bin("kura"))
        .args(["mcp", "--url", &format!("http://127.0.0.1:{port}")])
        .env("KURA_AGENT_TOKEN", &token)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kura mcp");
    let request = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{"io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    {
        use std::io::Write as _;
        let mut stdin = relay.stdin.take().expect("stdin");
        writeln!(stdin, "{request}").expect("write");
    }
    let out = relay.wait_with_output().expect("kura mcp output");
    let answer = String::from_utf8_lossy(&out.stdout).into_owned();
    let v: Value = serde_json::from_str(answer.trim()).expect("one JSON-RPC answer");
    assert_eq!(v["id"], 1, "{answer}");
    assert!(v.get("error").is_none(), "refused: {answer}");
    assert!(
        v["result"]["tools"].to_string().contains("declare_call"),
        "{answer}"
    );
}

/// One raw HTTP/1.1 request with the `Host` given (the helper always names loopback).
fn raw(port: u16, host: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    use std::io::{Read as _, Write as _};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    let mut req = format!(
        "POST {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("send");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

const INIT: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#;

/// Issue 35 (3), DNS rebinding from a browser: a page on another site that resolved its own
/// name to this Kura sends the agent's requests with its `Origin`; the MCP endpoint and the
/// JSON routes refuse it, while a client that sends no `Origin` (every agent) is served.
#[test]
fn a_browser_page_from_another_origin_is_refused_by_the_agent_surface() {
    let port = free_port();
    let (_s, token) = agent_stack(port);
    let bearer = format!("Bearer {token}");
    let host = format!("127.0.0.1:{port}");
    let evil = [
        ("Authorization", bearer.as_str()),
        ("Origin", "http://evil.example"),
    ];
    let (status, said) = raw(port, &host, "/mcp", &evil, INIT);
    assert_eq!(status, 403, "{said}");
    let start = r#"{"instruction": "from a web page"}"#;
    let (status, said) = raw(port, &host, "/agent/v1/start_session", &evil, start);
    assert_eq!(status, 403, "{said}");
    let agent = [("Authorization", bearer.as_str())];
    let (status, said) = raw(port, &host, "/mcp", &agent, INIT);
    assert_eq!(status, 200, "{said}");
}

/// Issue 35 (3): the JSON routes answer only the `Host` names this Kura is reached by, as
/// `/mcp` does (DNS rebinding again, without a browser's `Origin`).
#[test]
fn the_agent_routes_refuse_a_host_this_kura_is_not_reached_by() {
    let port = free_port();
    let (s, token) = agent_stack(port);
    let bearer = format!("Bearer {token}");
    let agent = [("Authorization", bearer.as_str())];
    let start = r#"{"instruction": "rebound"}"#;
    let (status, said) = raw(
        port,
        "evil.example",
        "/agent/v1/start_session",
        &agent,
        start,
    );
    assert_eq!(status, 421, "{said}");
    let (status, said) = raw(port, "evil.example:80", "/mcp", &agent, INIT);
    assert!(status == 421 || status == 403, "{said}");
    let sessions = s.store().sessions().expect("sessions");
    assert!(sessions.is_empty(), "nothing was started: {sessions:?}");
}

/// Issue 35 (3): a body that is not JSON gets JSON-RPC's parse error (-32700), as the MCP
/// spec says, not an HTTP 415 with a serde message.
#[test]
fn a_body_that_is_not_json_gets_a_json_rpc_parse_error() {
    let port = free_port();
    let (_s, token) = agent_stack(port);
    let bearer = format!("Bearer {token}");
    let host = format!("127.0.0.1:{port}");
    let (status, said) = raw(
        port,
        &host,
        "/mcp",
        &[("Authorization", bearer.as_str())],
        "{not json",
    );
    assert_eq!(status, 400, "{said}");
    let body = said.split("\r\n\r\n").nth(1).unwrap_or_default();
    let v: Value = serde_json::from_str(body.trim()).expect("a JSON-RPC answer");
    assert_eq!(v["error"]["code"], -32700, "{said}");
    assert_eq!(v["jsonrpc"], "2.0", "{said}");
}

/// Opens an MCP session (`initialize`) with `token`; the HTTP status and the answer.
fn open_mcp_session(port: u16, token: &str) -> (u16, String) {
    let bearer = format!("Bearer {token}");
    raw(
        port,
        &format!("127.0.0.1:{port}"),
        "/mcp",
        &[("Authorization", bearer.as_str())],
        INIT,
    )
}

/// Issue 35 (1): one token opening MCP sessions in a loop took kura serve past its memory
/// limit. Sessions are capped per agent and in all: past a cap the new one is refused with
/// -32003 (and closed at once), and another agent is not locked out by the first one's cap.
#[test]
fn one_token_cannot_fill_kura_serve_with_mcp_sessions() {
    let port = free_port();
    let (s, token) = agent_stack_with(
        port,
        &[
            ("KURA_AGENTS__MCP_SESSIONS_PER_AGENT", "3".into()),
            ("KURA_AGENTS__MCP_SESSIONS", "5".into()),
        ],
    );
    let other = Command::new(bin("kura"))
        .args(["--json", "keys", "add-agent", "--name", "other", "--dir"])
        .arg(s.nats.keys_dir())
        .output()
        .expect("add-agent");
    let other: Value = serde_json::from_slice(&other.stdout).expect("json");
    let other = other["token"].as_str().expect("token").to_owned();
    for n in 0..3 {
        let (status, said) = open_mcp_session(port, &token);
        assert_eq!(status, 200, "session {n}: {said}");
    }
    let (status, said) = open_mcp_session(port, &token);
    assert_eq!(status, 429, "{said}");
    assert!(
        said.contains("-32003") && said.contains("mcp_sessions_per_agent"),
        "{said}"
    );
    // Another agent still gets in, up to the daemon's cap (5 in all).
    for n in 0..2 {
        let (status, said) = open_mcp_session(port, &other);
        assert_eq!(status, 200, "the other agent's session {n}: {said}");
    }
    let (status, said) = open_mcp_session(port, &other);
    assert_eq!(status, 429, "{said}");
    assert!(said.contains("[agents] mcp_sessions)"), "{said}");
}

/// Issue 35 (5): README's hook section says an edited approval reaches Claude Code from "the
/// console or `aegis approve`". `aegis approve --edit ARGS_JSON` signs the edit as the
/// console does, and the waiting agent is handed the edited arguments to run.
#[test]
fn aegis_approve_with_an_edit_hands_the_agent_the_edited_arguments() {
    let port = free_port();
    let (s, token) = agent_stack(port);
    let (_, started) = post(
        port,
        "start_session",
        Some(&token),
        r#"{"instruction": "write the notes"}"#,
    );
    let turn = started["turn_id"].as_str().expect("turn").to_owned();
    let call = format!(
        r#"{{"turn_id": "{turn}", "tool": "Write", "arguments": {{"file_path": "/home/ana/notes/a.md", "content": "draft"}}}}"#
    );
    let (_, declared) = post(port, "declare_call", Some(&token), &call);
    assert_eq!(declared["decision"], "ask", "{declared}");
    let request = declared["request_id"].as_str().expect("request").to_owned();
    // aegis lists it for people once it has ruled "ask".
    let edit = r#"{"file_path": "/home/ana/notes/b.md", "content": "final"}"#;
    let deadline = std::time::Instant::now() + MINUTE;
    let said = loop {
        let out = Command::new(bin("aegis"))
            .args(["approve", &request, "--edit", edit, "--key"])
            .arg(s.path("ana.key"))
            .env("KURA_NATS_URL", s.nats.url())
            .env("KURA_NATS_CA", s.nats.ca())
            .env("KURA_AEGIS__REPLY_KEY", s.nats.signer(Role::Aegis))
            .output()
            .expect("aegis approve");
        let said = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if out.status.success() {
            break said;
        }
        assert!(std::time::Instant::now() < deadline, "{said}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let wait = format!(r#"{{"request_id": "{request}", "timeout_ms": 8000}}"#);
    let (_, decided) = post(port, "wait_decision", Some(&token), &wait);
    assert_eq!(decided["state"], "approved", "{decided} ({said})");
    assert_eq!(
        decided["edited_arguments"],
        serde_json::from_str::<Value>(edit).expect("json"),
        "{decided}"
    );
}

/// Issue 35 (4): a call the hook refused because nobody decided in time stayed on the
/// pending list, where a person could still approve something that will never run. The hook
/// withdraws it: the request is denied ("withdrawn") and no longer waits for anyone.
#[test]
fn a_call_the_hook_gave_up_on_is_withdrawn_from_the_pending_list() {
    let port = free_port();
    let (s, token) = agent_stack(port);
    let payload =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/claude-code/PreToolUse-ask.json");
    let out = Command::new(bin("kura"))
        .args([
            "hook",
            "claude-code",
            "PreToolUse",
            "--wait",
            "2",
            "--state-dir",
        ])
        .arg(s.path("hooks"))
        .env("KURA_AGENT_URL", format!("http://127.0.0.1:{port}"))
        .env("KURA_AGENT_TOKEN", &token)
        .stdin(std::fs::File::open(payload).expect("fixture"))
        .output()
        .expect("kura hook");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("withdrawn"), "{err}");
    let store = s.store();
    let asked = kura_work::approvals::asked(&store).expect("asked");
    assert!(asked.is_empty(), "nothing waits for a person: {asked:?}");
    let (state, decision): (String, String) = store
        .conn()
        .query_row(
            "SELECT a.state, r.content FROM approvals a JOIN records r ON r.record_id = a.decision_record_id
              WHERE a.tool_name = 'Write'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("the request and its decision");
    assert_eq!(state, "denied");
    let decision: Value = serde_json::from_str(&decision).expect("json");
    assert_eq!(decision["by"], "agent:laptop", "{decision}");
    assert!(
        decision["reason"]
            .as_str()
            .is_some_and(|r| r.contains("withdrawn")),
        "{decision}"
    );
}
