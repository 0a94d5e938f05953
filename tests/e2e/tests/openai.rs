//! The `openai` and `command` providers, run by the real `hashi` binary against a local fake
//! chat-completions server that speaks the real wire format (tool calls included).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kura_store::{Store, StoreOptions};
use kura_work::{request_status, submit};
use minato::requests::accept_next_request;
use proto::record::RecordType;
use serde_json::{Value, json};

pub(crate) struct Captured {
    bodies: Vec<Value>,
    /// Each request body as the bytes received.
    raw: Vec<Vec<u8>>,
    auth: Vec<String>,
}

/// A minimal HTTP/1.1 server: first request gets a tool call, later ones a final answer.
pub(crate) fn fake_openai() -> (u16, Arc<Mutex<Captured>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let captured = Arc::new(Mutex::new(Captured {
        bodies: vec![],
        raw: vec![],
        auth: vec![],
    }));
    let cap = captured.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut len = 0usize;
            let mut auth = String::new();
            let mut request_line = String::new();
            reader.read_line(&mut request_line).expect("request line");
            loop {
                let mut line = String::new();
                reader.read_line(&mut line).expect("header");
                let l = line.trim_end();
                if l.is_empty() {
                    break;
                }
                let lower = l.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    len = v.trim().parse().expect("length");
                }
                if lower.starts_with("authorization:") {
                    auth = l["authorization:".len()..].trim().to_owned();
                }
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).expect("body");
            let raw = body.clone();
            let body: Value = serde_json::from_slice(&body).expect("request JSON");
            assert!(
                request_line.starts_with("POST /v1/chat/completions "),
                "{request_line}"
            );
            let has_tool_result = body["messages"]
                .as_array()
                .expect("messages")
                .iter()
                .any(|m| m["role"] == "tool");
            let message = if has_tool_result {
                json!({"role": "assistant", "content": "Done: wrote out.txt"})
            } else {
                json!({"role": "assistant", "content": "I'll write the file.", "tool_calls": [{
                    "id": "call_abc123", "type": "function",
                    "function": {"name": "fs_write", "arguments": "{\"path\":\"out.txt\",\"content\":\"written by the model\"}"}
                }]})
            };
            let finish = if has_tool_result {
                "stop"
            } else {
                "tool_calls"
            };
            let response = json!({
                "id": "chatcmpl-1", "object": "chat.completion", "created": 1_700_000_000, "model": body["model"],
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
            })
            .to_string();
            {
                let mut c = cap.lock().expect("lock");
                c.bodies.push(body);
                c.raw.push(raw);
                c.auth.push(auth);
            }
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{}",
                response.len(),
                response
            );
        }
    });
    (port, captured)
}

use kura_testkit::bin;

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Queues one turn and runs hashi (no NATS: polling alone) with `env` until it is done.
pub(crate) fn run_one_turn(dir: &Path, env: &[(&str, String)]) -> (Store, proto::SessionId) {
    run_turn_with(dir, env, "Write out.txt, then say so.", &[])
}

/// [`run_one_turn`] of `instruction`, with `files` planted in the session's workspace first.
fn run_turn_with(
    dir: &Path,
    env: &[(&str, String)],
    instruction: &str,
    files: &[(&str, String)],
) -> (Store, proto::SessionId) {
    run_turn_seeded(dir, env, instruction, files, &|_| {}, 0)
}

/// [`run_turn_with`], after `seed` wrote to the fresh store, with `memory_hits` of memory
/// packed into the turn's context (as minato does).
fn run_turn_seeded(
    dir: &Path,
    env: &[(&str, String)],
    instruction: &str,
    files: &[(&str, String)],
    seed: &dyn Fn(&mut Store),
    memory_hits: usize,
) -> (Store, proto::SessionId) {
    let (store, sessions) = run_turns_seeded(dir, env, &[instruction], files, seed, memory_hits);
    (store, sessions[0])
}

/// Queues one turn per instruction (each its own session, `files` planted in each
/// workspace) after `seed`, and runs hashi until all are done.
pub(crate) fn run_turns_seeded(
    dir: &Path,
    env: &[(&str, String)],
    instructions: &[&str],
    files: &[(&str, String)],
    seed: &dyn Fn(&mut Store),
    memory_hits: usize,
) -> (Store, Vec<proto::SessionId>) {
    let db = dir.join("kura.db");
    let mut store = Store::create(&db, &StoreOptions::default()).expect("db");
    seed(&mut store);
    let mut sessions = Vec::new();
    let mut requests = Vec::new();
    for instruction in instructions {
        let req = submit(&mut store, instruction, "user:test", None).expect("submit");
        let accepted =
            accept_next_request(&mut store, &kura_plan::RosterConfig::default(), memory_hits)
                .expect("accept")
                .expect("turn");
        let ws = dir.join("ws").join(accepted.session_id.to_string());
        for (name, text) in files {
            std::fs::create_dir_all(&ws).expect("ws");
            std::fs::write(ws.join(name), text).expect("plant");
        }
        sessions.push(accepted.session_id);
        requests.push(req.request_seq);
    }
    let mut cmd = Command::new(bin("hashi"));
    cmd.arg("run")
        .env("KURA_DB", &db)
        .env(
            "KURA_NATS_URL",
            format!("nats://127.0.0.1:{}", kura_testkit::free_port()),
        )
        .env("KURA_POLL_INTERVAL_MS", "100")
        .env("KURA_WORKER__APPROVALS", "off")
        .env("KURA_TOOLS__WORKSPACE_ROOT", dir.join("ws"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("hashi.log")).expect("log"));
    for (k, v) in env {
        cmd.env(k, v);
    }
    let _hashi = Killed(cmd.spawn().expect("spawn hashi"));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // A turn is done when its output ledger is sealed; the session decision is minato's.
        let done: i64 = store
            .conn()
            .query_row("SELECT count(*) FROM turns WHERE state = 'done'", [], |r| {
                r.get(0)
            })
            .expect("count");
        if done == instructions.len() as i64 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "turns not done:\n{}",
            std::fs::read_to_string(dir.join("hashi.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for r in requests {
        let _ = request_status(store.conn(), r).expect("status");
    }
    (store, sessions)
}

/// The `model.prompt` records of a turn's output, in order, with their content.
fn prompts(recs: &[proto::Record]) -> Vec<(proto::Record, proto::prompt::PromptContent)> {
    recs.iter()
        .filter(|r| r.record_type == RecordType::ModelPrompt)
        .map(|r| {
            let c = proto::prompt::PromptContent::read(&r.content).expect("a prompt");
            (r.clone(), c)
        })
        .collect()
}

/// `kura show --prompt <id>` on `db`.
fn show_prompt(db: &Path, id: proto::RecordId) -> std::process::Output {
    Command::new(bin("kura"))
        .args(["show", "--prompt", &id.to_string()])
        .env("KURA_DB", db)
        .output()
        .expect("kura show --prompt")
}

fn output_records(store: &Store) -> Vec<proto::Record> {
    let out: String = store
        .conn()
        .query_row("SELECT output_ledger_id FROM turns", [], |r| r.get(0))
        .expect("output");
    store
        .hydrate(kura_store::store::parse_id(&out).expect("id"))
        .expect("hydrate")
}

#[test]
fn openai_provider_calls_tools_over_the_real_wire_format() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, captured) = fake_openai();
    let (store, session) = run_one_turn(
        dir.path(),
        &[
            ("KURA_PROVIDER__KIND", "openai".into()),
            (
                "KURA_PROVIDER__BASE_URL",
                format!("http://127.0.0.1:{port}/v1"),
            ),
            ("KURA_PROVIDER__MODEL", "tiny-test-model".into()),
            ("KURA_PROVIDER__API_KEY_ENV", "FAKE_OPENAI_KEY".into()),
            ("FAKE_OPENAI_KEY", "sekrit".into()),
        ],
    );
    let recs = output_records(&store);
    let types: Vec<&str> = recs.iter().map(|r| r.record_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "model.prompt",
            "agent.thought",
            "tool.call",
            "tool.result",
            "model.prompt",
            "task.deliverable"
        ],
        "each answer stands after what the model was sent"
    );
    let recs: Vec<&proto::Record> = recs
        .iter()
        .filter(|r| r.record_type != RecordType::ModelPrompt)
        .collect();
    assert_eq!(recs[0].content["text"], "I'll write the file.");
    assert_eq!(
        recs[1].content["tool_name"], "fs.write",
        "fs_write maps back to fs.write"
    );
    assert_eq!(
        recs[1].content["arguments"],
        json!({"path": "out.txt", "content": "written by the model"})
    );
    assert_eq!(recs[2].content["status"], "success");
    assert_eq!(recs[3].content["text"], "Done: wrote out.txt");
    assert_eq!(recs[3].record_type, RecordType::TaskDeliverable);
    let file = dir.path().join(format!("ws/{session}/out.txt"));
    assert_eq!(
        std::fs::read_to_string(file).expect("written"),
        "written by the model"
    );

    let c = captured.lock().expect("lock");
    assert_eq!(c.bodies.len(), 2);
    assert_eq!(c.auth, ["Bearer sekrit", "Bearer sekrit"]);
    let first = &c.bodies[0];
    assert_eq!(first["model"], "tiny-test-model");
    let tool_names: Vec<&str> = first["tools"]
        .as_array()
        .expect("tools")
        .iter()
        .filter_map(|t| t["function"]["name"].as_str())
        .collect();
    assert_eq!(tool_names, ["fs_read", "fs_list", "fs_write", "shell_run"]);
    assert_eq!(first["messages"][1]["role"], "user");
    assert_eq!(
        first["messages"][1]["content"],
        "Write out.txt, then say so."
    );
    // The second request replays the call and its result, paired by id, as the protocol requires.
    let msgs = c.bodies[1]["messages"].as_array().expect("messages");
    let assistant = &msgs[2];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"], "I'll write the file.");
    let call = &assistant["tool_calls"][0];
    assert_eq!(call["function"]["name"], "fs_write");
    let args: Value = serde_json::from_str(call["function"]["arguments"].as_str().expect("string"))
        .expect("json");
    assert_eq!(args["path"], "out.txt");
    assert_eq!(msgs[3]["role"], "tool");
    assert_eq!(msgs[3]["tool_call_id"], call["id"]);
    assert!(
        msgs[3]["content"]
            .as_str()
            .expect("content")
            .contains("\"bytes\":20"),
        "{}",
        msgs[3]
    );
}

/// Issue 36: memory found for the instruction was packed into the context ledger, but a real
/// model never saw it — the request held only the instruction. The fake server, speaking the
/// real wire format, is shown the fact (with its record id) in the first request.
#[test]
fn a_real_model_is_shown_the_memory_its_context_ledger_holds() {
    use kura_memory::MemoryTx as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, captured) = fake_openai();
    let fact = std::sync::Mutex::new(None);
    let seed = |store: &mut Store| {
        let session = store.create_session("earlier").expect("session").session_id;
        let out = store.open_ledger(session, "turn-1-out", &[]).expect("open");
        let said = proto::NewRecord::new(
            RecordType::TaskDeliverable,
            proto::record::Content::text("noted"),
            "agent:hashi",
        );
        let said = store.append(out.ledger_id, &said).expect("append").record;
        store.seal_ledger(out.ledger_id).expect("seal");
        let item = kura_memory::Item {
            kind: RecordType::MemoryFact,
            text: "out.txt must start with the word ready".into(),
            supersedes: None,
        };
        let id = store
            .write(|tx| {
                let m = tx.remember("agent:mikado", &said, session, &[item])?;
                let id = m[0].record.record_id;
                tx.seal_memory("agent:mikado", &[id], Some(out.ledger_id), None)?;
                Ok(id)
            })
            .expect("remember");
        *fact.lock().expect("lock") = Some(id);
    };
    run_turn_seeded(
        dir.path(),
        &[
            ("KURA_PROVIDER__KIND", "openai".into()),
            (
                "KURA_PROVIDER__BASE_URL",
                format!("http://127.0.0.1:{port}/v1"),
            ),
            ("KURA_PROVIDER__MODEL", "tiny-test-model".into()),
        ],
        "Write out.txt the way it must start",
        &[],
        &seed,
        5,
    );
    let first = captured.lock().expect("lock").bodies[0].clone();
    let user = first["messages"][1]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let id = fact.lock().expect("lock").expect("seeded");
    assert!(
        user.contains("out.txt must start with the word ready") && user.contains(&id.to_string()),
        "the model was not shown the memory:\n{user}"
    );
    assert!(
        user.contains(&format!(
            "(record {id}, by agent:mikado, learned in session \"earlier\")"
        )),
        "the model was not told where the fact was learned:\n{user}"
    );
}

/// Issue 36: nothing recorded which bytes a model was sent, so "what was it shown when it
/// did this?" had no answer. Each answer's first record carries the SHA-256 of the body the
/// server received; `kura show --prompt` rebuilds that body from the store byte for byte,
/// and one changed byte in the turn's context ledger makes it fail.
#[test]
fn each_model_step_records_the_hash_of_what_it_was_sent_and_kura_show_prompt_rebuilds_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, captured) = fake_openai();
    let (store, _) = run_one_turn(
        dir.path(),
        &[
            ("KURA_PROVIDER__KIND", "openai".into()),
            (
                "KURA_PROVIDER__BASE_URL",
                format!("http://127.0.0.1:{port}/v1"),
            ),
            ("KURA_PROVIDER__MODEL", "tiny-test-model".into()),
            ("KURA_WORKER__SESSION_TOKENS", "5000".into()),
        ],
    );
    let raw = captured.lock().expect("lock").raw.clone();
    assert_eq!(raw.len(), 2, "a tool call, then the final answer");
    let firsts = prompts(&output_records(&store));
    assert_eq!(
        firsts.len(),
        2,
        "each answer is preceded by what it was sent"
    );
    let db = dir.path().join("kura.db");
    for ((r, content), sent) in firsts.iter().zip(&raw) {
        assert_eq!(
            content.sha256,
            proto::prompt::sha256_hex(sent),
            "the hash is of the bytes the server received"
        );
        let shown = show_prompt(&db, r.record_id);
        assert!(
            shown.status.success(),
            "{}",
            String::from_utf8_lossy(&shown.stderr)
        );
        assert_eq!(
            &shown.stdout, sent,
            "the rebuilt body is the one sent, byte for byte"
        );
    }
    // One byte of the context ledger changed behind Kura's back (its guard dropped first).
    let turns = kura_work::turn_of_output(
        &store,
        store
            .ledgers_containing(firsts[0].0.record_id)
            .expect("ledgers")[0],
    )
    .expect("turn")
    .expect("a turn wrote it");
    let instruction = store.hydrate(turns.context_ledger_id).expect("context")[0].record_id;
    store
        .conn()
        .execute_batch(&format!(
            "DROP TRIGGER records_no_update; UPDATE records SET content = replace(content, 'out.txt', 'out.txu') WHERE record_id = '{instruction}'"
        ))
        .expect("tamper");
    let shown = Command::new(bin("kura"))
        .args(["show", "--prompt", &firsts[0].0.record_id.to_string()])
        .env("KURA_DB", &db)
        .output()
        .expect("kura show --prompt");
    assert_eq!(
        shown.status.code(),
        Some(1),
        "a changed context fails the rebuild"
    );
    assert!(
        String::from_utf8_lossy(&shown.stderr).contains("FAIL prompt"),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
}

#[test]
fn command_provider_takes_stdout_as_the_deliverable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = run_one_turn(
        dir.path(),
        &[
            ("KURA_PROVIDER__KIND", "command".into()),
            (
                "KURA_PROVIDER__COMMAND",
                r#"["python3", "-c", "import json,sys; c=json.load(sys.stdin); print('echo: ' + c['instruction'])"]"#.into(),
            ),
        ],
    );
    let recs = output_records(&store);
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].content["text"], "echo: Write out.txt, then say so.");
}

#[test]
fn a_failing_provider_ends_the_turn_with_a_recorded_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = run_one_turn(
        dir.path(),
        &[
            ("KURA_PROVIDER__KIND", "command".into()),
            (
                "KURA_PROVIDER__COMMAND",
                r#"["sh", "-c", "echo model exploded >&2; exit 3"]"#.into(),
            ),
        ],
    );
    let recs = output_records(&store);
    let types: Vec<&str> = recs.iter().map(|r| r.record_type.as_str()).collect();
    assert_eq!(types, ["sys.error", "task.deliverable"]);
    assert!(
        recs[0].content["text"]
            .as_str()
            .expect("text")
            .contains("model exploded")
    );
    assert_eq!(recs[1].content["error"], true);
}

/// Attack: a model server's error body over 4 MiB made the turn unstorable, so hashi
/// retried it forever and logged the whole body every time (162 MB of log).
#[test]
fn a_huge_error_body_from_the_model_server_ends_the_turn_with_a_short_error() {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let body = "E".repeat(5 * 1024 * 1024);
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            // Read the request head, then answer without waiting for the rest.
            let mut buf = [0u8; 4096];
            let _ = std::io::Read::read(&mut stream, &mut buf);
            let _ = write!(
                stream,
                "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, _) = run_one_turn(
        dir.path(),
        &[
            ("KURA_PROVIDER__KIND", "openai".into()),
            (
                "KURA_PROVIDER__BASE_URL",
                format!("http://127.0.0.1:{port}/v1"),
            ),
            ("KURA_PROVIDER__RETRIES", "0".into()),
        ],
    );
    let recs = output_records(&store);
    let types: Vec<&str> = recs.iter().map(|r| r.record_type.as_str()).collect();
    assert_eq!(types, ["sys.error", "task.deliverable"]);
    let text = recs[0].content["text"].as_str().expect("text");
    assert!(text.contains("HTTP 400"), "{text}");
    assert!(
        text.len() < 4096,
        "the error is an excerpt: {} bytes",
        text.len()
    );
    let claims: i64 = store
        .conn()
        .query_row("SELECT claims FROM turns", [], |r| r.get(0))
        .expect("claims");
    assert_eq!(claims, 1, "one attempt, not a retry loop");
    let log = std::fs::metadata(dir.path().join("hashi.log"))
        .expect("log")
        .len();
    assert!(log < 64 * 1024, "hashi's log grew to {log} bytes");
}

/// Attack: a canary secret — the model API key, and a credential named in `[worker]
/// secret_env` — echoed by the model, read by a tool, and quoted back in a model server's
/// error. None of it reaches a record, the database file or hashi's log: each is a marker.
#[test]
fn a_canary_secret_echoed_by_a_tool_or_a_model_never_reaches_a_record_or_a_log() {
    const KEY: &str = "sk-canary-0f1e2d3c4b5a";
    const TOKEN: &str = "tok-canary-9a8b7c6d5e";
    let dir = tempfile::tempdir().expect("tempdir");
    let url = kura_testkit::openai::start_raw(|body, auth| {
        if kura_testkit::openai::has_tool_result(body) {
            // A server that quotes the key it was sent back in its error.
            return (400, format!("{{\"error\": \"invalid api key: {auth}\"}}"));
        }
        let mut m = kura_testkit::openai::call("fs_read", json!({"path": "creds.txt"}));
        m["content"] = json!(format!("I was told the key is {KEY}; reading {TOKEN}"));
        let r = json!({"id": "c", "object": "chat.completion", "created": 1, "model": body["model"],
            "choices": [{"index": 0, "message": m, "finish_reason": "tool_calls"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2}});
        (200, r.to_string())
    });
    let (store, session) = run_turn_with(
        dir.path(),
        &[
            ("KURA_PROVIDER__KIND", "openai".into()),
            ("KURA_PROVIDER__BASE_URL", url),
            ("KURA_PROVIDER__API_KEY_ENV", "FAKE_OPENAI_KEY".into()),
            ("FAKE_OPENAI_KEY", KEY.into()),
            ("KURA_PROVIDER__RETRIES", "0".into()),
            ("KURA_WORKER__SECRET_ENV", "[\"TOOL_TOKEN\"]".into()),
            ("TOOL_TOKEN", TOKEN.into()),
        ],
        "Read creds.txt",
        &[("creds.txt", format!("token={TOKEN}\nkey={KEY}\n"))],
    );
    let records = kura_testkit::stack::session_records(&store, session);
    let all: String = records.iter().map(|r| r.content.to_string()).collect();
    assert!(
        all.contains("[secret:FAKE_OPENAI_KEY]") && all.contains("[secret:TOOL_TOKEN]"),
        "{all}"
    );
    assert!(
        records
            .iter()
            .any(|r| r.record_type == proto::record::RecordType::SysError),
        "the server's error is recorded, scrubbed"
    );
    drop(store);
    for entry in std::fs::read_dir(dir.path()).expect("dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            continue;
        }
        let bytes = std::fs::read(&path).expect("read");
        for canary in [KEY, TOKEN] {
            assert!(
                !bytes.windows(canary.len()).any(|w| w == canary.as_bytes()),
                "{canary} is in {}",
                path.display()
            );
        }
    }
}

/// One canned answer of [`fake_script`]: HTTP status, extra headers, JSON body.
type Canned = (u16, Vec<(&'static str, String)>, Value);

/// A request [`fake_script`] received.
#[derive(Clone)]
struct Seen {
    at: Instant,
    /// The request line.
    line: String,
    /// Headers, names lowercased.
    headers: Vec<(String, String)>,
    raw: Vec<u8>,
    body: Value,
}

impl Seen {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A model server answering each request with the next of `answers` (the last again once
/// they run out); it keeps each request as it came.
fn fake_script(answers: Vec<Canned>) -> (u16, Arc<Mutex<Vec<Seen>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let kept = seen.clone();
    std::thread::spawn(move || {
        for (n, stream) in listener.incoming().enumerate() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let mut len = 0usize;
            let mut line = String::new();
            reader.read_line(&mut line).expect("request line");
            let mut headers = Vec::new();
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).expect("header");
                let Some((k, v)) = h.trim_end().split_once(':') else {
                    break;
                };
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim().to_owned());
                if k == "content-length" {
                    len = v.parse().expect("length");
                }
                headers.push((k, v));
            }
            let mut raw = vec![0; len];
            reader.read_exact(&mut raw).expect("body");
            let body: Value = serde_json::from_slice(&raw).expect("request JSON");
            kept.lock().expect("lock").push(Seen {
                at: Instant::now(),
                line: line.trim_end().to_owned(),
                headers,
                raw,
                body,
            });
            let (status, headers, answer) = answers[n.min(answers.len() - 1)].clone();
            let text = answer.to_string();
            let mut head = format!(
                "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
                text.len()
            );
            for (k, v) in headers {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            let _ = write!(stream, "{head}\r\n{text}");
        }
    });
    (port, seen)
}

/// A chat completion whose message is `message`.
fn completion(message: Value) -> Value {
    json!({
        "id": "chatcmpl-2", "object": "chat.completion", "created": 1_700_000_000, "model": "m",
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    })
}

fn says(text: &str) -> Canned {
    (
        200,
        vec![],
        completion(json!({"role": "assistant", "content": text})),
    )
}

fn calls(name: &str, arguments: &str) -> Canned {
    (
        200,
        vec![],
        completion(
            json!({"role": "assistant", "content": null, "tool_calls": [{
                "id": "call_1", "type": "function",
                "function": {"name": name, "arguments": arguments}
            }]}),
        ),
    )
}

fn openai_env(port: u16) -> Vec<(&'static str, String)> {
    vec![
        ("KURA_PROVIDER__KIND", "openai".into()),
        (
            "KURA_PROVIDER__BASE_URL",
            format!("http://127.0.0.1:{port}/v1"),
        ),
        ("KURA_PROVIDER__MODEL", "m".into()),
        ("KURA_PROVIDER__RETRIES", "3".into()),
    ]
}

/// Issue 36: a 429 or 5xx was retried at once (200 ms later), whatever the server asked,
/// and nothing on the record said the step was retried.
#[test]
fn a_busy_model_server_is_retried_after_its_retry_after_and_each_retry_is_counted_on_the_step() {
    let dir = tempfile::tempdir().expect("tempdir");
    let busy = json!({"error": {"message": "slow down", "type": "rate_limit"}});
    let (port, seen) = fake_script(vec![
        (429, vec![("Retry-After", "2".into())], busy.clone()),
        (503, vec![], busy),
        says("done after the wait"),
    ]);
    let (store, _) = run_one_turn(dir.path(), &openai_env(port));
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 3, "two retries, then the answer");
    assert!(
        seen[1].at - seen[0].at >= Duration::from_secs(2),
        "the second request came {:?} after the first, before Retry-After's 2 s",
        seen[1].at - seen[0].at
    );
    let recs = output_records(&store);
    let d = recs
        .iter()
        .find(|r| r.record_type == RecordType::TaskDeliverable)
        .expect("deliverable");
    assert_eq!(d.content["text"], "done after the wait");
    assert_eq!(
        d.metadata.get("model_retries").map(String::as_str),
        Some("2")
    );
}

/// Issue 36: a server asking to be left alone for an hour would hold the turn; the step
/// ends at once, saying why.
#[test]
fn a_server_asking_to_wait_longer_than_a_turn_holds_ends_the_step_saying_so() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, seen) = fake_script(vec![(
        429,
        vec![("Retry-After", "3600".into())],
        json!({"error": {"message": "come back later"}}),
    )]);
    let (store, _) = run_one_turn(dir.path(), &openai_env(port));
    assert_eq!(seen.lock().expect("lock").len(), 1, "not asked again");
    let recs = output_records(&store);
    let error = recs
        .iter()
        .find(|r| r.record_type == RecordType::SysError)
        .map(|r| r.content["text"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default();
    assert!(error.contains("3600 s (Retry-After)"), "{error}");
}

/// Issue 36: arguments that are not JSON were run as `{}`. Now the model is told, once.
#[test]
fn a_malformed_tool_call_is_told_to_the_model_which_then_corrects_itself() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, seen) = fake_script(vec![
        calls("fs_write", "{\"path\": \"out.txt\", \"content\": "),
        says("sorry, done without the file"),
    ]);
    let (store, _) = run_one_turn(dir.path(), &openai_env(port));
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 2);
    let told: Vec<&Value> = seen[1].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(told.len(), 1, "{:?}", seen[1].body);
    let text = told[0]["content"].as_str().unwrap_or_default();
    assert!(
        text.contains("not run") && text.contains("not a JSON object"),
        "{text}"
    );
    let recs = output_records(&store);
    assert!(
        !recs.iter().any(|r| r.record_type == RecordType::SysError),
        "corrected in time, the turn is not an error"
    );
    assert!(
        !dir.path()
            .join("ws")
            .read_dir()
            .is_ok_and(|mut d| d.any(|e| e
                .map(|e| e.path().join("out.txt").exists())
                .unwrap_or(false))),
        "nothing was written with arguments the model never gave"
    );
}

/// Issue 36: a second mistake in a row — here a tool it is not offered after a malformed
/// call — ends the turn as the model's error, without asking it a third time.
#[test]
fn a_second_bad_tool_call_in_a_row_is_recorded_as_the_models_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, seen) = fake_script(vec![
        calls("fs_write", "[1, 2]"),
        calls("rm_everything", "{}"),
        says("never asked"),
    ]);
    let (store, _) = run_one_turn(dir.path(), &openai_env(port));
    assert_eq!(
        seen.lock().expect("lock").len(),
        2,
        "not asked a third time"
    );
    let recs = output_records(&store);
    let error = recs
        .iter()
        .find(|r| r.record_type == RecordType::SysError)
        .map(|r| r.content["text"].as_str().unwrap_or_default().to_owned())
        .unwrap_or_default();
    assert!(
        error.contains("the model's error") && error.contains("rm_everything"),
        "{error}"
    );
}

/// A Messages API response (Anthropic's wire format) with `content` blocks.
fn message(content: Value, stop_reason: &str) -> Canned {
    (
        200,
        vec![],
        json!({
            "id": "msg_01", "type": "message", "role": "assistant", "model": "claude-test",
            "content": content, "stop_reason": stop_reason, "stop_sequence": null,
            "usage": {"input_tokens": 100, "output_tokens": 20,
                      "cache_creation_input_tokens": 10, "cache_read_input_tokens": 50}
        }),
    )
}

/// Issue 36: a native Anthropic Messages provider on the one renderer. The fake server
/// speaks the Messages wire format and checks what it is shown: the version and key
/// headers, a bounded `max_tokens`, the context as the first user message, tools with
/// `input_schema`, and — on the second request — the tool use answered by a `tool_result`
/// with its id, roles alternating. Usage counts the cache's tokens; the prompt's hash is
/// the received body's, and `kura show --prompt` rebuilds it.
#[test]
fn the_anthropic_provider_speaks_the_messages_api_and_records_what_it_sent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, seen) = fake_script(vec![
        message(
            json!([
                {"type": "text", "text": "I'll write the file."},
                {"type": "tool_use", "id": "toolu_01", "name": "fs_write",
                 "input": {"path": "out.txt", "content": "written by claude"}}
            ]),
            "tool_use",
        ),
        message(
            json!([{"type": "text", "text": "Done: wrote out.txt"}]),
            "end_turn",
        ),
    ]);
    let (store, _) = run_one_turn(
        dir.path(),
        &[
            ("KURA_PROVIDER__KIND", "anthropic".into()),
            (
                "KURA_PROVIDER__BASE_URL",
                format!("http://127.0.0.1:{port}/v1"),
            ),
            ("KURA_PROVIDER__MODEL", "claude-test".into()),
            (
                "KURA_PROVIDER__API_KEY_ENV",
                "KURA_TEST_ANTHROPIC_KEY".into(),
            ),
            ("KURA_TEST_ANTHROPIC_KEY", "sk-ant-test-key".into()),
            ("KURA_PROVIDER__MAX_TOKENS", "1000".into()),
            ("KURA_WORKER__SESSION_TOKENS", "600".into()),
        ],
    );
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 2, "a tool use, then the answer");
    for s in &seen {
        assert!(s.line.starts_with("POST /v1/messages "), "{}", s.line);
        assert_eq!(s.header("anthropic-version"), Some("2023-06-01"));
        assert_eq!(s.header("x-api-key"), Some("sk-ant-test-key"));
        assert!(
            s.header("authorization").is_none(),
            "the key goes in x-api-key only"
        );
        let roles: Vec<&str> = s.body["messages"]
            .as_array()
            .expect("messages")
            .iter()
            .map(|m| m["role"].as_str().unwrap_or(""))
            .collect();
        assert!(
            roles.first() == Some(&"user") && roles.windows(2).all(|w| w[0] != w[1]),
            "roles must start with the user and alternate: {roles:?}"
        );
    }
    let first = &seen[0].body;
    assert_eq!(first["model"], "claude-test");
    // What is left of the session's 600 tokens after the request's own size (bytes / 4).
    let answer = first["max_tokens"].as_u64().unwrap_or(0);
    let prompt = seen[0].raw.len().div_ceil(4) as u64;
    assert!(
        (599..=601).contains(&(answer + prompt)),
        "max_tokens {answer} with a request of about {prompt} tokens overshoots or wastes the 600 left"
    );
    assert!(
        first["messages"][0]["content"][0]["text"]
            .as_str()
            .is_some_and(|t| t.contains("Write out.txt, then say so.")),
        "{first}"
    );
    assert!(
        first["tools"].as_array().is_some_and(|t| t
            .iter()
            .any(|t| t["name"] == "fs_write" && t["input_schema"].is_object())),
        "{first}"
    );
    let messages = seen[1].body["messages"].as_array().expect("messages");
    let used = &messages[1]["content"];
    let call_id = used
        .as_array()
        .and_then(|b| b.iter().find(|b| b["type"] == "tool_use"))
        .map(|b| b["id"].clone())
        .expect("the tool use is shown back");
    let result = &messages[2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], call_id);
    let recs = output_records(&store);
    let first_record = recs
        .iter()
        .find(|r| r.record_type != RecordType::ModelPrompt)
        .expect("records");
    assert_eq!(
        first_record.metadata.get("provider").map(String::as_str),
        Some("anthropic")
    );
    assert_eq!(
        first_record.metadata.get("tokens_in").map(String::as_str),
        Some("160"),
        "input tokens with the cache's written and read"
    );
    let db = dir.path().join("kura.db");
    let firsts = prompts(&recs);
    assert_eq!(firsts.len(), 2);
    for ((r, content), s) in firsts.iter().zip(&seen) {
        assert_eq!(content.sha256, proto::prompt::sha256_hex(&s.raw));
        assert_eq!(content.frame.rule, proto::prompt::ANTHROPIC_MESSAGES_V1);
        let shown = show_prompt(&db, r.record_id);
        assert!(
            shown.status.success(),
            "{}",
            String::from_utf8_lossy(&shown.stderr)
        );
        assert_eq!(shown.stdout, s.raw, "rebuilt byte for byte");
    }
    let ws = dir.path().join("ws");
    let written = std::fs::read_dir(&ws)
        .expect("workspaces")
        .filter_map(Result::ok)
        .any(|e| {
            std::fs::read_to_string(e.path().join("out.txt"))
                .is_ok_and(|t| t == "written by claude")
        });
    assert!(written, "the tool use ran");
}

/// Issue 36: nothing bounded what the context took of a model's window, and nothing said
/// what was left out. With `prompt_tokens` set low, memory is cut (the least relevant first),
/// the cut records are named on the step, the rest is shown, and `kura show --prompt`
/// still rebuilds the body (the budget is in the frame).
#[test]
fn a_context_over_the_prompt_budget_is_cut_and_the_cut_records_are_named_on_the_step() {
    use kura_memory::MemoryTx as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, seen) = fake_script(vec![says("ready.")]);
    let seed = |store: &mut Store| {
        let session = store.create_session("earlier").expect("session").session_id;
        let out = store.open_ledger(session, "turn-1-out", &[]).expect("open");
        let said = proto::NewRecord::new(
            RecordType::TaskDeliverable,
            proto::record::Content::text("noted"),
            "agent:hashi",
        );
        let said = store.append(out.ledger_id, &said).expect("append").record;
        store.seal_ledger(out.ledger_id).expect("seal");
        let items: Vec<kura_memory::Item> = [
            "out.txt must start with the word ready",
            "out.txt must end with a full stop after the word",
            "out.txt must be written in plain English words",
        ]
        .into_iter()
        .map(|t| kura_memory::Item {
            kind: RecordType::MemoryFact,
            text: t.into(),
            supersedes: None,
        })
        .collect();
        store
            .write(|tx| {
                let m = tx.remember("agent:mikado", &said, session, &items)?;
                let ids: Vec<_> = m.iter().map(|m| m.record.record_id).collect();
                tx.seal_memory("agent:mikado", &ids, Some(out.ledger_id), None)
            })
            .expect("remember");
    };
    let mut env = openai_env(port);
    env.push(("KURA_PROVIDER__PROMPT_TOKENS", "45".into()));
    let (store, _) = run_turn_seeded(
        dir.path(),
        &env,
        "Write out.txt the way it must start",
        &[],
        &seed,
        5,
    );
    let seen = seen.lock().expect("lock").clone();
    let user = seen[0].body["messages"][1]["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let recs = output_records(&store);
    let (first, content) = prompts(&recs).into_iter().next().expect("a prompt record");
    let cut: Vec<String> = content.cut.iter().map(ToString::to_string).collect();
    assert!(!cut.is_empty(), "the context was over 45 tokens: {user}");
    for id in &cut {
        assert!(
            !user.contains(id),
            "cut record {id} was shown anyway:\n{user}"
        );
    }
    assert!(
        user.starts_with("Write out.txt the way it must start"),
        "the instruction is never cut:\n{user}"
    );
    assert!(
        kura_model::render::tokens(&user) <= 45 || !user.contains("(record "),
        "over budget with memory still in it:\n{user}"
    );
    let shown = show_prompt(&dir.path().join("kura.db"), first.record_id);
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert_eq!(shown.stdout, seen[0].raw);
    // Attack (found in review): a record the model was not shown (cut) changed behind
    // Kura's back leaves the body as it was — the rebuild alone said "ok". The ledgers it is
    // rebuilt from must verify too.
    store
        .conn()
        .execute_batch(&format!(
            "DROP TRIGGER records_no_update; UPDATE records SET content = replace(content, 'out.txt', 'evil.sh') WHERE record_id = '{}'",
            cut[0]
        ))
        .expect("tamper");
    let shown = show_prompt(&dir.path().join("kura.db"), first.record_id);
    assert_eq!(
        shown.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert!(
        String::from_utf8_lossy(&shown.stderr).contains("do not verify"),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
}

/// Found by the fault suite on the wire: the proof of what a model was sent rode in the
/// metadata of its answer's first record, and records are content-addressed — so a second
/// session answered alike got the first session's record, and its own proof was gone (81 of
/// 120 answers kept one). Now each prompt is its own `model.prompt` record in the output
/// ledger, its hash and frame in the content: two sessions answered alike each keep theirs.
#[test]
fn two_sessions_answered_alike_each_keep_the_proof_of_what_they_were_sent() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, seen) = fake_script(vec![says("the same answer")]);
    let (store, sessions) = run_turns_seeded(
        dir.path(),
        &openai_env(port),
        &["Count the apples", "Count the pears"],
        &[],
        &|_| {},
        0,
    );
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 2);
    let db = dir.path().join("kura.db");
    let mut hashes = Vec::new();
    let mut answers = Vec::new();
    for session in &sessions {
        let out: String = store
            .conn()
            .query_row(
                "SELECT output_ledger_id FROM turns WHERE session_id = ?1",
                [session.to_string()],
                |r| r.get(0),
            )
            .expect("output");
        let recs = store
            .hydrate(kura_store::store::parse_id(&out).expect("id"))
            .expect("hydrate");
        let mine = prompts(&recs);
        assert_eq!(mine.len(), 1, "session {session} keeps what it was sent");
        let shown = show_prompt(&db, mine[0].0.record_id);
        assert!(
            shown.status.success(),
            "{}",
            String::from_utf8_lossy(&shown.stderr)
        );
        assert!(
            seen.iter().any(|s| s.raw == shown.stdout),
            "the rebuilt body is one the server received"
        );
        hashes.push(mine[0].1.sha256.clone());
        answers.extend(
            recs.into_iter()
                .filter(|r| r.record_type == RecordType::TaskDeliverable),
        );
    }
    assert_ne!(hashes[0], hashes[1], "two prompts, two proofs");
    assert_eq!(
        answers[0].record_id, answers[1].record_id,
        "the answers are one record by content address: the case that lost a proof"
    );
}

/// Attack (found in review): a model writes a number as `1.0`. The request after it showed
/// the call as the worker held it (`1.0`); the store keeps RFC 8785 JSON (`1`), so the body
/// rebuilt from the store differed by those bytes and `kura show --prompt` called an honest
/// record altered. What the model is shown is what the store holds.
#[test]
fn a_number_the_store_writes_differently_still_rebuilds_the_prompt_it_was_shown_in() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, seen) = fake_script(vec![
        calls(
            "fs_write",
            r#"{"path": "n.txt", "content": "x", "weight": 1.0, "big": 1e21}"#,
        ),
        says("done"),
    ]);
    let (store, _) = run_one_turn(dir.path(), &openai_env(port));
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 2);
    let db = dir.path().join("kura.db");
    for ((r, content), s) in prompts(&output_records(&store)).iter().zip(&seen) {
        assert_eq!(content.sha256, proto::prompt::sha256_hex(&s.raw));
        let shown = show_prompt(&db, r.record_id);
        assert!(
            shown.status.success(),
            "an honest record was called altered: {}",
            String::from_utf8_lossy(&shown.stderr)
        );
    }
}

/// Found in review: `max_tokens` was what the budget left for the answer alone, so a step
/// could pass the budget by its whole request. What is left after the request's own size
/// (estimated) bounds the answer — with a small floor, since the size is only estimated.
#[test]
fn the_answer_is_bounded_by_what_the_budget_leaves_after_the_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, seen) = fake_script(vec![says("short")]);
    let mut env = openai_env(port);
    env.push(("KURA_WORKER__SESSION_TOKENS", "1000".into()));
    run_one_turn(dir.path(), &env);
    let seen = seen.lock().expect("lock").clone();
    let asked = seen[0].body["max_tokens"].as_u64().unwrap_or(0);
    let prompt = seen[0].raw.len().div_ceil(4) as u64;
    // The estimate is of the request without its `max_tokens` key (about 5 tokens more).
    assert!(
        (995..=1010).contains(&(asked + prompt)),
        "max_tokens {asked} beside a request of about {prompt} tokens, with 1000 left"
    );
    // Nearly spent: the answer keeps its floor rather than the request being refused on an
    // estimate.
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, seen) = fake_script(vec![says("short")]);
    let mut env = openai_env(port);
    env.push(("KURA_WORKER__SESSION_TOKENS", "40".into()));
    run_one_turn(dir.path(), &env);
    assert_eq!(seen.lock().expect("lock")[0].body["max_tokens"], 40);
}

/// Found in review: two malformed calls in one answer ended the turn before the model was
/// ever told. An answer's mistakes count once; the next answer is its chance.
#[test]
fn two_bad_calls_in_one_answer_are_one_mistake_the_model_may_correct() {
    let dir = tempfile::tempdir().expect("tempdir");
    let two_bad = (
        200,
        vec![],
        completion(json!({"role": "assistant", "content": null, "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "fs_write", "arguments": "[1]"}},
            {"id": "b", "type": "function", "function": {"name": "rm_everything", "arguments": "{}"}}
        ]})),
    );
    let (port, seen) = fake_script(vec![two_bad, says("corrected")]);
    let (store, _) = run_one_turn(dir.path(), &openai_env(port));
    assert_eq!(
        seen.lock().expect("lock").len(),
        2,
        "told once, then asked again"
    );
    let recs = output_records(&store);
    assert!(
        !recs.iter().any(|r| r.record_type == RecordType::SysError),
        "{recs:?}"
    );
    assert!(recs.iter().any(|r| r.content["text"] == "corrected"));
}

/// Attack (found in review): a role on another server (its own `provider`/`base_url`) sent
/// the worker's API key there — an OpenAI key to a LAN box, say. It sends its own key or
/// none.
#[test]
fn a_role_on_another_server_never_sends_the_workers_api_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (port, seen) = fake_script(vec![says("done elsewhere")]);
    let env = vec![
        ("KURA_PROVIDER__KIND", "openai".into()),
        ("KURA_PROVIDER__BASE_URL", "http://127.0.0.1:9/v1".into()),
        ("KURA_PROVIDER__API_KEY_ENV", "KURA_TEST_WORKER_KEY".into()),
        ("KURA_TEST_WORKER_KEY", "sk-the-workers-own".into()),
        ("KURA_ROSTER__DEFAULT_ROLE", "elsewhere".into()),
        (
            "KURA_ROSTER__ROLES",
            format!(
                "[{{name = \"elsewhere\", provider = \"openai\", base_url = \"http://127.0.0.1:{port}/v1\"}}]"
            ),
        ),
    ];
    let (store, _) = run_one_turn(dir.path(), &env);
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1, "{:?}", output_records(&store));
    assert_eq!(
        seen[0].header("authorization"),
        None,
        "the worker's key went to another server"
    );
}
