//! Traces people already watch (issue 39, ★): `kura serve` exports each turn of a real
//! model's session as OpenTelemetry spans (GenAI semantic conventions) over OTLP/HTTP to Arize
//! Phoenix, a real receiver installed from PyPI; the spans are found through Phoenix's own
//! REST API with the model, the tokens, the tool and Kura's hashes and proof links. The
//! receiver is away while the turn runs (the turn is not held up) and the spans arrive once
//! it is up. (Phoenix also opens its OTLP gRPC port; it is given a free one and unused.)

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kura_testkit::free_port;
use serde_json::Value;

struct Killed(Child);
impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get(port: u16, path: &str) -> Option<Value> {
    std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let (status, _, body) = kura_testkit::console::http(port, "GET", path, &[], "");
    (status == 200)
        .then(|| serde_json::from_str(&body).ok())
        .flatten()
}

#[test]
fn a_real_models_turn_reaches_phoenix_as_genai_spans_with_kuras_hashes() {
    let phoenix = kura_testkit::python::phoenix();
    let dir = tempfile::tempdir().expect("tempdir");
    let receiver = free_port();
    // kura serve first, pointed at a receiver that is not up yet.
    let db = dir.path().join("kura.db");
    let (model, _) = crate::openai::fake_openai();
    let started = Instant::now();
    let (store, session) = crate::openai::run_one_turn(
        dir.path(),
        &[
            ("KURA_PROVIDER__KIND", "openai".into()),
            (
                "KURA_PROVIDER__BASE_URL",
                format!("http://127.0.0.1:{model}/v1"),
            ),
            ("KURA_PROVIDER__MODEL", "tiny-test-model".into()),
        ],
    );
    drop(store);
    let turn_took = started.elapsed();
    let mut serve = Command::new(kura_testkit::bin("kura"));
    serve
        .arg("serve")
        .env("KURA_DB", &db)
        .env("KURA_NATS_URL", format!("nats://127.0.0.1:{}", free_port()))
        .env(
            "KURA_TRACES__ENDPOINT",
            format!("http://127.0.0.1:{receiver}/v1/traces"),
        )
        .env("KURA_TRACES__CONSOLE_URL", "https://pi.example:8480")
        .env("KURA_TRACES__INTERVAL_MS", "200")
        .env("RUST_LOG", "info,kura_traces=debug")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("serve.log")).expect("log"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("KURA_") && k != "KURA_DB") {
        serve.env_remove(k);
    }
    let _serve = Killed(serve.spawn().expect("kura serve"));
    // The receiver away: serve retries, and nothing else waits on it.
    std::thread::sleep(Duration::from_secs(2));
    let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
    assert!(
        log.contains("did not take the spans"),
        "serve tried and kept the spans: {log}"
    );
    let work = tempfile::tempdir().expect("phoenix dir");
    let _phoenix = Killed(
        Command::new(&phoenix)
            .arg("serve")
            .env("PHOENIX_HOST", "127.0.0.1")
            .env("PHOENIX_PORT", receiver.to_string())
            .env("PHOENIX_GRPC_PORT", free_port().to_string())
            .env("PHOENIX_WORKING_DIR", work.path())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("phoenix.log")).expect("log"))
            .spawn()
            .expect("phoenix serve"),
    );
    // Found through Phoenix's own API (the backoff after its absence is at most a minute).
    let deadline = Instant::now() + Duration::from_secs(150);
    let spans = loop {
        let found = get(receiver, "/v1/projects/default/spans?limit=100")
            .and_then(|v| v["data"].as_array().cloned())
            .unwrap_or_default();
        if found.len() >= 4 {
            break found;
        }
        assert!(
            Instant::now() < deadline,
            "no spans in Phoenix: {found:?}\nserve: {}\nphoenix: {}",
            std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default(),
            std::fs::read_to_string(dir.path().join("phoenix.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let named = |prefix: &str| {
        spans
            .iter()
            .filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with(prefix)))
            .collect::<Vec<_>>()
    };
    let (agent, chats, tools) = (named("invoke_agent"), named("chat "), named("execute_tool"));
    assert_eq!(
        (agent.len(), chats.len(), tools.len()),
        (1, 2, 1),
        "{spans:#?}"
    );
    let attr = |s: &Value, k: &str| s["attributes"][k].clone();
    assert_eq!(attr(chats[0], "gen_ai.operation.name"), "chat");
    assert_eq!(
        attr(chats[0], "gen_ai.response.model"),
        "tiny-test-model",
        "{:#}",
        chats[0]
    );
    assert_eq!(attr(chats[0], "gen_ai.usage.input_tokens"), 10);
    assert_eq!(attr(chats[0], "gen_ai.usage.output_tokens"), 5);
    assert_eq!(attr(tools[0], "gen_ai.tool.name"), "fs.write");
    assert_eq!(
        attr(agent[0], "gen_ai.conversation.id"),
        session.to_string()
    );
    // Each span leads to a proof: its record's hash, its ledger's, a link.
    let out = kura_testkit::stack::session_records(
        &kura_store::Store::open(&db, &Default::default()).expect("db"),
        session,
    );
    let call = out
        .iter()
        .find(|r| r.record_type == proto::record::RecordType::ToolCall)
        .expect("the call");
    assert_eq!(attr(tools[0], "kura.record.hash"), call.hash.as_str());
    assert_eq!(
        attr(tools[0], "kura.proof.url"),
        format!("https://pi.example:8480/r/{}", call.record_id)
    );
    assert!(
        attr(agent[0], "kura.ledger.hash")
            .as_str()
            .is_some_and(|h| h.len() == 64)
    );
    println!(
        "the turn took {} ms with the receiver away",
        turn_took.as_millis()
    );
}
