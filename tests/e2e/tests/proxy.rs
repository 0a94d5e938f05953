//! `kura mcp-proxy` in front of real MCP servers, driven by the official Python `mcp`
//! client: the filesystem server from npm (`@modelcontextprotocol/server-filesystem`) and a
//! server on the official Python SDK that logs every call it receives. An allowed read passes
//! through and is recorded; a write waits for a person and runs only after the signed
//! approval; a denied call never reaches the server — its own log and the files show it;
//! every record names the agent.

use std::io::{BufRead as _, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use kura_testkit::stack::Stack;
use kura_testkit::{bin, free_port};
use proto::record::RecordType;
use serde_json::{Value, json};

use crate::agents::{aegis_approve, agent_stack_under, mcp_python};

const MINUTE: Duration = Duration::from_secs(60);

/// Reads allowed, writes asked of a person, and two calls denied by name.
const POLICY: &str = "[defaults]\nread = \"allow\"\nwrite = \"ask\"\nexternal = \"ask\"\n\n\
[[rules]]\nname = \"no-moves\"\ntool = \"mcp__fs__move_file\"\ndecision = \"deny\"\n\n\
[[rules]]\nname = \"no-erasing\"\ntool = \"mcp__notes__erase\"\ndecision = \"deny\"\n";

/// The effect class each proxied tool has in Kura's configuration.
const EFFECTS: &str = "{ mcp__fs__read_text_file = \"read\", mcp__fs__write_file = \"write\", \
mcp__fs__move_file = \"write\", mcp__notes__note = \"write\", mcp__notes__erase = \"write\", \
mcp__notes__token = \"read\" }";

/// Runs the Python client through the proxy in front of `server`, making `calls`; each
/// outcome by tool. A call that asks a person is approved with ana's key once the test has
/// seen that `before_approval` holds.
fn drive(
    s: &Stack,
    port: u16,
    token: &str,
    name: &str,
    calls: &Value,
    server: &[String],
    before_approval: &dyn Fn(),
) -> (Vec<String>, std::collections::BTreeMap<String, Value>) {
    let mut child = Command::new(mcp_python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/mcp_proxy.py"))
        .arg(bin("kura"))
        .arg(format!("http://127.0.0.1:{port}"))
        .arg(token)
        .arg(name)
        .arg(calls.to_string())
        .arg("--")
        .args(server)
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(s.path(&format!("proxy-{name}.err"))).expect("err file"))
        .spawn()
        .expect("python");
    let mut tools = Vec::new();
    let mut outcomes = std::collections::BTreeMap::new();
    for line in BufReader::new(child.stdout.take().expect("stdout")).lines() {
        let v: Value = serde_json::from_str(&line.expect("line")).expect("json line");
        match v["step"].as_str() {
            Some("tools") => {
                tools = serde_json::from_value(v["tools"].clone()).expect("tool names");
            }
            Some("calling") if v["tool"] == "write_file" || v["tool"] == "note" => {
                let tool = format!("mcp__{name}__{}", v["tool"].as_str().unwrap_or_default());
                let mut asked = None;
                s.wait_until("the call asked of a person", MINUTE, |st| {
                    asked = kura_work::approvals::asked(st)
                        .ok()
                        .and_then(|a| a.into_iter().find(|a| a.tool_name == tool));
                    asked.is_some()
                });
                before_approval();
                let id = asked.expect("asked").request_id.to_string();
                let (code, out) = aegis_approve(s, &id);
                assert_eq!(code, 0, "{out}");
            }
            Some("called") => {
                outcomes.insert(v["tool"].as_str().unwrap_or_default().to_owned(), v);
            }
            _ => {}
        }
    }
    let out = child.wait_with_output().expect("python exit");
    assert!(
        out.status.success(),
        "{}\n{}\n{}",
        std::fs::read_to_string(s.path(&format!("proxy-{name}.err"))).unwrap_or_default(),
        String::from_utf8_lossy(&out.stderr),
        s.logs()
    );
    (tools, outcomes)
}

/// The records of every ledger of the session the proxy for `name` opened, in order.
fn proxied_records(s: &Stack, name: &str) -> Vec<proto::Record> {
    let store = s.store();
    let label = format!("mcp-proxy: {name}");
    let session = store
        .sessions()
        .expect("sessions")
        .into_iter()
        .find(|x| x.label == label)
        .expect("the proxy's session");
    let mut out = Vec::new();
    for l in store.session_ledgers(session.session_id).expect("ledgers") {
        out.extend(store.hydrate(l.ledger_id).expect("records"));
    }
    out
}

#[test]
fn kura_mcp_proxy_gates_a_real_mcp_server_and_a_denied_call_never_reaches_it() {
    let (node, modules) = crate::conformance::node_packages();
    let port = free_port();
    let (s, token) = agent_stack_under(
        POLICY,
        port,
        &[("KURA_AGENTS__TOOL_EFFECTS", EFFECTS.into())],
    );

    // The filesystem server, confined by its own argument to a project directory.
    let project = s.path("project");
    std::fs::create_dir_all(&project).expect("project");
    std::fs::write(project.join("hello.txt"), "hello from the project").expect("hello");
    let (hello, out_file, moved) = (
        project.join("hello.txt"),
        project.join("out.txt"),
        project.join("moved.txt"),
    );
    let p = |x: &Path| x.display().to_string();
    let calls = json!([
        ["read_text_file", {"path": p(&hello)}],
        ["move_file", {"source": p(&hello), "destination": p(&moved)}],
        ["write_file", {"path": p(&out_file), "content": "written after a person said yes"}],
    ]);
    let fs_server = vec![
        node.display().to_string(),
        modules
            .join("@modelcontextprotocol/server-filesystem/dist/index.js")
            .display()
            .to_string(),
        p(&project),
    ];
    let not_yet = || assert!(!out_file.exists(), "the write ran before the approval");
    let (tools, got) = drive(&s, port, &token, "fs", &calls, &fs_server, &not_yet);
    for t in [
        "read_text_file",
        "write_file",
        "move_file",
        "list_directory",
    ] {
        assert!(tools.iter().any(|x| x == t), "{t} not listed: {tools:?}");
    }
    assert_eq!(got["read_text_file"]["is_error"], false, "{got:?}");
    assert!(
        got["read_text_file"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("hello from the project")),
        "{got:?}"
    );
    assert_eq!(got["move_file"]["is_error"], true, "{got:?}");
    assert!(
        got["move_file"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("no-moves")),
        "{got:?}"
    );
    assert!(hello.exists() && !moved.exists(), "the denied move ran");
    assert_eq!(got["write_file"]["is_error"], false, "{got:?}");
    assert_eq!(
        std::fs::read_to_string(&out_file).expect("written"),
        "written after a person said yes"
    );

    // The ledger: each call and its result, authored by the agent, the refusal recorded.
    let records = proxied_records(&s, "fs");
    let of = |t: RecordType| records.iter().filter(move |r| r.record_type == t);
    let called: Vec<&str> = of(RecordType::ToolCall)
        .filter_map(|r| r.content["tool_name"].as_str())
        .collect();
    assert_eq!(
        called,
        [
            "mcp__fs__read_text_file",
            "mcp__fs__move_file",
            "mcp__fs__write_file"
        ]
    );
    assert!(
        of(RecordType::ToolCall).all(|r| r.author_id == "agent:laptop"),
        "every call names the agent"
    );
    let results: Vec<(&str, &str)> = of(RecordType::ToolResult)
        .map(|r| {
            (
                r.content["status"].as_str().unwrap_or_default(),
                r.author_id.as_str(),
            )
        })
        .collect();
    assert_eq!(
        results,
        [
            ("success", "agent:laptop"),
            ("error", "agent:laptop"),
            ("success", "agent:laptop")
        ]
    );
    assert!(
        of(RecordType::ToolResult)
            .next()
            .is_some_and(|r| r.content.to_string().contains("hello from the project")),
        "the read's result is recorded"
    );
}

/// The logging server behind the proxy, reached as `server` (its command, or `--upstream`):
/// only the approved call reaches it; what it logged.
fn only_the_approved_call_reaches(
    s: &Stack,
    port: u16,
    token: &str,
    server: &[String],
) -> Vec<Value> {
    let log = s.path("received.log");
    let calls = json!([["note", {"text": "first"}], ["erase", {}], ["token", {}]]);
    let nothing_yet = || {
        let logged = std::fs::read_to_string(&log).unwrap_or_default();
        assert!(
            !logged.contains("note"),
            "the note reached the server before approval"
        );
    };
    let (tools, got) = drive(s, port, token, "notes", &calls, server, &nothing_yet);
    assert_eq!(tools, ["erase", "note", "peek", "token"]);
    // Attack (review): the server was started with the proxy's environment, the agent's
    // Kura token in it, and could act as the agent.
    if server.first().is_none_or(|a| a != "--upstream") {
        assert_eq!(
            got["token"]["text"], "token:",
            "the server was given the agent's token: {got:?}"
        );
    }
    assert_eq!(got["note"]["is_error"], false, "{got:?}");
    assert_eq!(got["erase"]["is_error"], true, "{got:?}");
    assert_eq!(
        std::fs::read_to_string(s.path("notes.txt")).expect("notes"),
        "first\n"
    );
    std::fs::read_to_string(&log)
        .expect("the server's log")
        .lines()
        .map(|l| serde_json::from_str(l).expect("log line"))
        .collect()
}

#[test]
fn a_call_kura_denies_through_the_proxy_is_absent_from_the_servers_own_log() {
    let port = free_port();
    let (s, token) = agent_stack_under(
        POLICY,
        port,
        &[("KURA_AGENTS__TOOL_EFFECTS", EFFECTS.into())],
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/logging_server.py");
    let log = s.path("received.log");
    // On stdio, started by the proxy.
    let server = [mcp_python(), script.clone(), log.clone()].map(|p| p.display().to_string());
    let received = only_the_approved_call_reaches(&s, port, &token, &server);
    assert_eq!(
        received,
        [
            json!({"tool": "note", "text": "first"}),
            json!({"tool": "token"})
        ],
        "only the approved call (and the allowed read) reached the server"
    );

    // Over Streamable HTTP, with the token the server wants.
    std::fs::remove_file(&log).expect("fresh log");
    std::fs::remove_file(s.path("notes.txt")).expect("fresh notes");
    let http_port = free_port();
    let mut http = Command::new(mcp_python())
        .arg(&script)
        .arg(&log)
        .arg(http_port.to_string())
        .stdout(std::fs::File::create(s.path("http-server.out")).expect("out file"))
        .stderr(std::fs::File::create(s.path("http-server.err")).expect("err file"))
        .spawn()
        .expect("the HTTP server");
    kura_testkit::console::wait_http(http_port);
    let url = format!("http://127.0.0.1:{http_port}/mcp");
    let server = ["--upstream".to_owned(), url, "upstream-secret".to_owned()];
    let received = only_the_approved_call_reaches(&s, port, &token, &server);
    let _ = http.kill();
    let _ = http.wait();
    let bearer = "Bearer upstream-secret";
    assert_eq!(
        received,
        [
            json!({"tool": "note", "text": "first", "authorization": bearer}),
            json!({"tool": "token", "authorization": bearer})
        ],
        "only the approved call (and the allowed read) reached the server, with its token"
    );
}
