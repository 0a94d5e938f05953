//! MCP servers as hashi's tools (`[[tools.mcp]]`), with real servers: `mcp-server-time` from
//! PyPI, and a server on the official Python SDK that tries what a server must not get away
//! with in the tool sandbox and misbehaves. Each call is recorded like a built-in's; a server
//! that escapes nothing, and one that dies, hangs or floods is a recorded error while the turn
//! goes on.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use kura_testkit::python::mcp_python;
use kura_testkit::stack::{Stack, session_records};
use proto::record::RecordType;
use serde_json::{Value, json};

const MINUTE: Duration = Duration::from_secs(60);

/// What a Python MCP server needs to read in the sandbox: its venv, the Python it was made
/// from, and the test servers' scripts.
fn python_paths() -> Vec<String> {
    let python = mcp_python();
    let base = Command::new(&python)
        .args(["-c", "import sys; print(sys.base_prefix)"])
        .output()
        .expect("python");
    let venv = python
        .parent()
        .and_then(Path::parent)
        .map(Path::to_path_buf)
        .unwrap_or_default();
    let venv = venv.canonicalize().unwrap_or(venv);
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("agents");
    vec![
        venv.display().to_string(),
        String::from_utf8_lossy(&base.stdout).trim().to_owned(),
        scripts
            .canonicalize()
            .unwrap_or(scripts)
            .display()
            .to_string(),
    ]
}

/// A stack whose hashi offers the tools of `servers` (TOML, an array of `[[tools.mcp]]`
/// tables) beside its own, running `script`.
fn mcp_stack(script: &Value, servers: &str) -> Stack {
    mcp_stack_from(servers, |_| script.clone())
}

/// [`mcp_stack`], with a script made from the stack's own paths, written before hashi starts
/// (hashi reads it once, at its start: a script rewritten afterwards raced hashi's start, and
/// a loaded machine lost the race).
fn mcp_stack_from(servers: &str, script: impl FnOnce(&Stack) -> Value) -> Stack {
    let mut s = Stack::new(r#"{"turns": []}"#);
    let script = script(&s);
    std::fs::write(s.path("script.json"), script.to_string()).expect("script");
    s.extra_env.extend([
        ("KURA_TOOLS__MCP".into(), servers.to_owned()),
        (
            "KURA_TOOLS__ALLOW".into(),
            r#"["fs.*", "shell.run", "time.*", "bad.*"]"#.into(),
        ),
    ]);
    for d in ["aegis", "minato", "hashi"] {
        s.spawn(d, d);
    }
    s
}

/// The `[[tools.mcp]]` table of a Python server run as `python -m module` or `python file`.
fn python_server(name: &str, run: &[&str], effects: &str, timeout_ms: u64) -> String {
    let mut command = vec![mcp_python().display().to_string()];
    command.extend(run.iter().map(|a| (*a).to_owned()));
    format!(
        "{{ name = {name:?}, command = {command:?}, read_only = {:?}, effects = {effects}, call_timeout_ms = {timeout_ms} }}",
        python_paths()
    )
}

/// The `tool.result` contents of a request's session, in order.
fn results(s: &Stack, request: i64) -> Vec<Value> {
    let st = s.wait_complete(request, MINUTE);
    session_records(&s.store(), st.session_id.expect("session"))
        .into_iter()
        .filter(|r| r.record_type == RecordType::ToolResult)
        .map(|r| r.content)
        .collect()
}

fn misbehaving() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/misbehaving_server.py")
}

#[test]
fn a_hashi_turn_calls_an_mcp_servers_tools_and_each_call_is_recorded() {
    let script = json!({"turns": [[
        {"tool": "time.get_current_time", "args": {"timezone": "UTC"}},
        {"tool": "time.convert_time", "args": {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}},
        {"deliver": "the time, twice"}
    ]]});
    let time = python_server(
        "time",
        &["-m", "mcp_server_time"],
        "{ get_current_time = \"read\", convert_time = \"read\" }",
        30_000,
    );
    let s = mcp_stack(&script, &format!("[{time}]"));
    let request = s.submit("what time is it");
    let got = results(&s, request);
    assert_eq!(got.len(), 2, "{got:?}\n{}", s.logs());
    for r in &got {
        assert_eq!(r["status"], "success", "{r}\n{}", s.logs());
    }
    assert!(got[0].to_string().contains("UTC"), "{}", got[0]);
    assert!(got[1].to_string().contains("21:00"), "{}", got[1]);
    let calls: Vec<String> = {
        let st = s.wait_complete(request, MINUTE);
        session_records(&s.store(), st.session_id.expect("session"))
            .into_iter()
            .filter(|r| r.record_type == RecordType::ToolCall)
            .map(|r| {
                r.content["tool_name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned()
            })
            .collect()
    };
    assert_eq!(calls, ["time.get_current_time", "time.convert_time"]);
    let verify = s.cli().run(&["verify", "--all"]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

/// Attack: a stdio MCP server is a program hashi starts; without the sandbox it could read
/// another session's files and the database, and reach the network.
#[test]
fn a_stdio_mcp_server_cannot_read_outside_the_workspace_or_reach_the_network() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("listener");
    listener.set_nonblocking(true).expect("nonblocking");
    let port = listener.local_addr().expect("addr").port();
    let mut script = json!({"turns": [[
        {"tool": "bad.peek", "args": {"path": "VICTIM"}},
        {"tool": "bad.peek", "args": {"path": "DB"}},
        {"tool": "bad.connect", "args": {"port": port}},
        {"deliver": "tried"}
    ]]});
    let bad = python_server(
        "bad",
        &[&misbehaving().display().to_string()],
        "{ peek = \"read\", connect = \"read\" }",
        30_000,
    );
    let s = mcp_stack_from(&format!("[{bad}]"), |s| {
        // Another session's secret, named by its absolute path.
        let victim = s.path("ws").join("victim-session");
        std::fs::create_dir_all(&victim).expect("victim ws");
        std::fs::write(victim.join("secret.txt"), "VICTIM-SECRET").expect("secret");
        let turn = &mut script["turns"][0];
        turn[0]["args"]["path"] = victim.join("secret.txt").display().to_string().into();
        turn[1]["args"]["path"] = s.db.display().to_string().into();
        script
    });
    let got = results(&s, s.submit("escape if you can"));
    assert_eq!(got.len(), 3, "{got:?}\n{}", s.logs());
    for r in &got {
        let text = r.to_string();
        assert!(
            text.contains("refused") && !text.contains("VICTIM-SECRET") && !text.contains("read: "),
            "the server got out: {text}\n{}",
            s.logs()
        );
    }
    assert!(listener.accept().is_err(), "the server reached the network");
}

#[test]
fn an_mcp_server_that_dies_hangs_or_floods_is_a_recorded_error_and_the_turn_goes_on() {
    let script = json!({"turns": [[
        {"tool": "bad.die", "args": {}},
        {"tool": "bad.hang", "args": {}},
        {"tool": "bad.flood", "args": {}},
        {"tool": "bad.echo", "args": {"text": "still here"}},
        {"deliver": "survived"}
    ]]});
    let bad = python_server(
        "bad",
        &[&misbehaving().display().to_string()],
        "{ die = \"read\", hang = \"read\", flood = \"read\", echo = \"read\" }",
        3_000,
    );
    let s = mcp_stack(&script, &format!("[{bad}]"));
    let got = results(&s, s.submit("misbehave"));
    assert_eq!(got.len(), 4, "{got:?}\n{}", s.logs());
    for (r, why) in got.iter().zip(["died", "hung", "flooded"]) {
        assert_eq!(r["status"], "error", "the server {why}: {r}");
        assert!(
            r.to_string().len() < 64 * 1024,
            "the flood is not recorded: {} bytes",
            r.to_string().len()
        );
    }
    assert_eq!(got[3]["status"], "success", "{}", got[3]);
    assert!(got[3].to_string().contains("still here"), "{}", got[3]);
}

/// A role bound to git and time tools commits in its session's repository: reads run at
/// once, the write-class commit waits for a person and runs only after her signed approval.
#[test]
fn a_role_uses_git_and_time_tools_and_its_git_commit_waits_for_a_person() {
    let script = json!({"turns": [[
        {"tool": "shell.run", "args": {"argv": ["git", "init", "-q", "-b", "main"]}},
        {"tool": "fs.write", "args": {"path": "notes.md", "content": "kept by the keeper\n"}},
        {"tool": "time.get_current_time", "args": {"timezone": "UTC"}},
        {"tool": "git.git_add", "args": {"repo_path": ".", "files": ["notes.md"]}},
        {"tool": "git.git_status", "args": {"repo_path": "."}},
        {"tool": "git.git_commit", "args": {"repo_path": ".", "message": "notes, approved"}},
        {"tool": "git.git_log", "args": {"repo_path": "."}},
        {"deliver": "committed"}
    ]]});
    let python = |m: &str, effects: &str| {
        python_server(m, &["-m", &format!("mcp_server_{m}")], effects, 30_000)
    };
    // Who commits: the sandbox hides /etc/passwd, so git is told.
    let git = python(
        "git",
        "{ git_status = \"read\", git_log = \"read\", git_add = \"write\", git_commit = \"write\" }",
    );
    let git = format!(
        "{}, env = {{ GIT_AUTHOR_NAME = \"keeper\", GIT_AUTHOR_EMAIL = \"keeper@kura\", GIT_COMMITTER_NAME = \"keeper\", GIT_COMMITTER_EMAIL = \"keeper@kura\" }} }}",
        git.strip_suffix(" }").expect("a table")
    );
    let time = python("time", "{ get_current_time = \"read\" }");
    let mut s = Stack::new(&script.to_string());
    // Reads and the workspace's own files run at once; a git write asks a person.
    std::fs::write(
        s.path("policy.toml"),
        "[defaults]\nread = \"allow\"\nwrite = \"allow\"\nexternal = \"allow\"\n\n\
         [[rules]]\nname = \"git-writes-ask\"\ntool = \"git.git_commit\"\ndecision = \"ask\"\n",
    )
    .expect("policy");
    s.trusted_approver("ana");
    s.extra_env.extend([
        ("KURA_TOOLS__MCP".into(), format!("[{git}, {time}]")),
        (
            "KURA_TOOLS__ALLOW".into(),
            r#"["fs.*", "shell.run", "time.*", "git.*"]"#.into(),
        ),
        ("KURA_TOOLS__SHELL_ALLOWLIST".into(), r#"["git"]"#.into()),
        (
            "KURA_ROSTER__ROLES".into(),
            r#"[{ name = "keeper", tools = ["git.*", "time.*", "fs.write", "shell.run"] }]"#.into(),
        ),
    ]);
    for d in ["aegis", "minato", "hashi"] {
        s.spawn(d, d);
    }
    let request = s.submit_with("keep the notes", &["--role", "keeper"]);
    let mut asked = None;
    s.wait_until("the commit asked of a person", MINUTE, |st| {
        asked = kura_work::approvals::asked(st)
            .ok()
            .and_then(|a| a.into_iter().find(|a| a.tool_name == "git.git_commit"));
        asked.is_some()
    });
    let session = s
        .store()
        .sessions()
        .expect("sessions")
        .into_iter()
        .find(|x| x.label.contains("keep the notes"))
        .expect("the session");
    let repo = s.path("ws").join(session.session_id.to_string());
    let log = |repo: &Path| {
        Command::new("git")
            .args(["-C", &repo.display().to_string(), "log", "--format=%s"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
            .unwrap_or_default()
    };
    assert_eq!(log(&repo), "", "the commit ran before the approval");
    let id = asked.expect("asked").request_id.to_string();
    let (code, out) = crate::agents::aegis_approve(&s, &id);
    assert_eq!(code, 0, "{out}");
    let got = results(&s, request);
    assert_eq!(got.len(), 7, "{got:?}\n{}", s.logs());
    for r in &got {
        assert_eq!(r["status"], "success", "{r}\n{}", s.logs());
    }
    assert!(
        got[4].to_string().contains("notes.md"),
        "git status: {}",
        got[4]
    );
    assert!(
        got[6].to_string().contains("notes, approved"),
        "git log: {}",
        got[6]
    );
    assert_eq!(log(&repo), "notes, approved\n");
    let verify = s.cli().run(&["verify", "--all"]);
    assert!(
        verify.status.success(),
        "{}",
        String::from_utf8_lossy(&verify.stdout)
    );
}

/// A real model over the OpenAI-compatible wire is shown the MCP server's tools with the
/// server's own schemas, calls one by its wire name, and is shown the server's answer.
#[test]
fn a_model_over_the_openai_wire_is_shown_an_mcp_servers_tools_and_calls_one() {
    let seen: std::sync::Arc<std::sync::Mutex<Vec<Value>>> = Default::default();
    let log = seen.clone();
    let url = kura_testkit::openai::start((10, 5), move |body| {
        log.lock().expect("lock").push(body.clone());
        if kura_testkit::openai::has_tool_result(body) {
            kura_testkit::openai::say("it is late in Tokyo")
        } else {
            kura_testkit::openai::call("time_get_current_time", json!({"timezone": "Asia/Tokyo"}))
        }
    });
    let time = python_server(
        "time",
        &["-m", "mcp_server_time"],
        "{ get_current_time = \"read\", convert_time = \"read\" }",
        30_000,
    );
    let mut s = Stack::new("{\"turns\": []}");
    s.extra_env.extend([
        ("KURA_TOOLS__MCP".into(), format!("[{time}]")),
        ("KURA_TOOLS__ALLOW".into(), r#"["time.*"]"#.into()),
        ("KURA_PROVIDER__KIND".into(), "openai".into()),
        ("KURA_PROVIDER__BASE_URL".into(), url),
        ("KURA_PROVIDER__MODEL".into(), "tiny-test-model".into()),
    ]);
    for d in ["aegis", "minato", "hashi"] {
        s.spawn(d, d);
    }
    let got = results(&s, s.submit("what time is it in Tokyo"));
    assert_eq!(got.len(), 1, "{got:?}\n{}", s.logs());
    assert_eq!(got[0]["status"], "success", "{}", got[0]);
    let seen = seen.lock().expect("lock");
    let first = seen.first().expect("the model was asked");
    let tool = first["tools"]
        .as_array()
        .and_then(|t| {
            t.iter()
                .find(|t| t["function"]["name"] == "time_get_current_time")
        })
        .unwrap_or_else(|| panic!("the MCP tool was not shown: {}", first["tools"]));
    assert!(
        tool["function"]["parameters"]["properties"]["timezone"].is_object(),
        "the server's own schema: {tool}"
    );
    let answer = seen.last().expect("the second request").to_string();
    assert!(
        answer.contains("Asia/Tokyo"),
        "the model was shown the server's answer: {answer}"
    );
}

/// `@modelcontextprotocol/server-everything` from npm, which exercises the protocol's
/// features, as hashi's tools in its sandbox: plain text, structured content, a long call
/// that sends progress notifications, and its environment, which holds nothing of hashi's.
#[test]
fn the_everything_server_from_npm_serves_hashi_in_the_sandbox() {
    let (node, modules) = crate::conformance::node_packages();
    let script = json!({"turns": [[
        {"tool": "everything.echo", "args": {"message": "hello through the sandbox"}},
        {"tool": "everything.get-sum", "args": {"a": 2, "b": 40}},
        {"tool": "everything.get-structured-content", "args": {"location": "Chicago"}},
        {"tool": "everything.trigger-long-running-operation", "args": {"duration": 1, "steps": 3}},
        {"tool": "everything.get-env", "args": {}},
        {"deliver": "everything works"}
    ]]});
    let real = |p: PathBuf| p.canonicalize().unwrap_or(p).display().to_string();
    // Node reads /etc/ssl/openssl.cnf as it starts, and the sandbox hides /etc.
    let command = vec![
        real(node.clone()),
        real(modules.join("@modelcontextprotocol/server-everything/dist/index.js")),
        "stdio".to_owned(),
    ];
    let everything = format!(
        "{{ name = \"everything\", command = {command:?}, read_only = {:?}, effects = {{ echo = \"read\", get-sum = \"read\", get-structured-content = \"read\", trigger-long-running-operation = \"read\", get-env = \"read\" }}, env = {{ OPENSSL_CONF = \"/dev/null\" }}, call_timeout_ms = 30000 }}",
        [real(modules.clone())]
    );
    let mut s = Stack::new(&script.to_string());
    s.extra_env.extend([
        ("KURA_TOOLS__MCP".into(), format!("[{everything}]")),
        ("KURA_TOOLS__ALLOW".into(), r#"["everything.*"]"#.into()),
        (
            "KURA_CANARY_SECRET".into(),
            "hashi-environment-canary".into(),
        ),
    ]);
    for d in ["aegis", "minato", "hashi"] {
        s.spawn(d, d);
    }
    let got = results(&s, s.submit("try everything"));
    assert_eq!(got.len(), 5, "{got:?}\n{}", s.logs());
    for r in &got {
        assert_eq!(r["status"], "success", "{r}\n{}", s.logs());
    }
    assert!(
        got[0].to_string().contains("hello through the sandbox"),
        "{}",
        got[0]
    );
    assert!(got[1].to_string().contains("42"), "{}", got[1]);
    assert!(
        got[2]["result"]["temperature"].is_number(),
        "structured content: {}",
        got[2]
    );
    assert!(got[3].to_string().contains("completed"), "{}", got[3]);
    let env = got[4].to_string();
    assert!(
        !env.contains("hashi-environment-canary") && !env.contains("KURA_DB"),
        "hashi's environment reached the server: {env}"
    );
}

/// A server reached over Streamable HTTP is a network destination: hashi reaches it only
/// when `tools.network` grants its tools, and sends it the token `secret_env` names.
#[test]
fn an_mcp_server_over_http_is_reached_only_under_a_network_rule() {
    let log = tempfile::tempdir().expect("tempdir");
    let received = log.path().join("received.log");
    let port = kura_testkit::free_port();
    let mut server = Command::new(mcp_python())
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("agents/logging_server.py"))
        .arg(&received)
        .arg(port.to_string())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the HTTP server");
    kura_testkit::console::wait_http(port);
    let script = json!({"turns": [[
        {"tool": "web.note", "args": {"text": "over http"}},
        {"deliver": "noted"}
    ]]});
    let table = format!(
        "[{{ name = \"web\", url = \"http://127.0.0.1:{port}/mcp\", secret_env = \"WEB_TOKEN\", effects = {{ note = \"read\" }} }}]"
    );
    let run = |network: &str| {
        let mut s = Stack::new(&script.to_string());
        s.extra_env.extend([
            ("KURA_TOOLS__MCP".into(), table.clone()),
            ("KURA_TOOLS__ALLOW".into(), r#"["web.*"]"#.into()),
            ("KURA_TOOLS__NETWORK".into(), network.to_owned()),
            ("WEB_TOKEN".into(), "web-secret".into()),
        ]);
        for d in ["aegis", "minato", "hashi"] {
            s.spawn(d, d);
        }
        let got = results(&s, s.submit("note it"));
        (got, s.log("hashi"))
    };
    let (got, log_text) = run("[]");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        got[0]["status"], "error",
        "reached without a rule: {}",
        got[0]
    );
    assert!(
        log_text.contains("tools.network"),
        "hashi says what to add: {log_text}"
    );
    assert!(
        !received.exists(),
        "the server was reached without a network rule"
    );
    let (got, _) = run(r#"["web.*"]"#);
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!(got[0]["status"], "success", "{}", got[0]);
    let logged = std::fs::read_to_string(&received).expect("the server's log");
    assert!(
        logged.contains("over http") && logged.contains("Bearer web-secret"),
        "{logged}"
    );
}
