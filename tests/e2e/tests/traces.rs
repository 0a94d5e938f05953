//! Traces people already watch (issue 39, ★): `kura serve` exports each turn of a real
//! model's session as OpenTelemetry spans (GenAI semantic conventions) over OTLP/HTTP to Arize
//! Phoenix, a real receiver installed from PyPI; the spans are found through Phoenix's own
//! REST API with the model, the tokens, the tool and Kura's hashes and proof links. The
//! receiver is away while the turn runs (the turn is not held up) and the spans arrive once
//! it is up. (Phoenix also opens its OTLP gRPC port; it is given a free one and unused.)

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
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

/// `kura serve` on `dir`'s database, exporting to a receiver on `receiver` every 200 ms
/// (its log in `serve.log`), with `extra` settings.
fn serve_exporting(dir: &Path, receiver: u16, extra: &[(&str, &str)]) -> Killed {
    let mut serve = Command::new(kura_testkit::bin("kura"));
    serve
        .arg("serve")
        .env("KURA_DB", dir.join("kura.db"))
        .env("KURA_NATS_URL", format!("nats://127.0.0.1:{}", free_port()))
        .env(
            "KURA_TRACES__ENDPOINT",
            format!("http://127.0.0.1:{receiver}/v1/traces"),
        )
        .env("KURA_TRACES__CONSOLE_URL", "https://pi.example:8480")
        .env("KURA_TRACES__INTERVAL_MS", "200")
        .env("RUST_LOG", "info,kura_traces=debug")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.join("serve.log")).expect("log"));
    for (k, _) in std::env::vars().filter(|(k, _)| k.starts_with("KURA_") && k != "KURA_DB") {
        serve.env_remove(k);
    }
    serve.envs(extra.iter().copied());
    Killed(serve.spawn().expect("kura serve"))
}

/// hashi's settings for the fake OpenAI-compatible model server on `port`.
fn model_env(port: u16) -> [(&'static str, String); 3] {
    [
        ("KURA_PROVIDER__KIND", "openai".into()),
        (
            "KURA_PROVIDER__BASE_URL",
            format!("http://127.0.0.1:{port}/v1"),
        ),
        ("KURA_PROVIDER__MODEL", "tiny-test-model".into()),
    ]
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
    let (store, session) = crate::openai::run_one_turn(dir.path(), &model_env(model));
    drop(store);
    let turn_took = started.elapsed();
    let _serve = serve_exporting(dir.path(), receiver, &[]);
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

/// What a receiver was sent: the status it answered and the body.
type Sent = Arc<Mutex<Vec<(u16, Vec<u8>)>>>;

/// An OTLP/HTTP receiver on loopback that answers each request with the next of `statuses`
/// (then 200), and keeps what it was sent.
fn scripted_receiver(statuses: Vec<u16>) -> (u16, Sent) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let sent: Sent = Arc::default();
    let keep = Arc::clone(&sent);
    let script = Arc::new(Mutex::new(statuses.into_iter()));
    std::thread::spawn(move || {
        for conn in listener.incoming().flatten() {
            let (keep, script) = (Arc::clone(&keep), Arc::clone(&script));
            std::thread::spawn(move || {
                let mut out = conn.try_clone().expect("clone");
                let mut r = BufReader::new(conn);
                // Requests on one kept-alive connection, one after another.
                loop {
                    let mut len = 0usize;
                    let mut line = String::new();
                    loop {
                        line.clear();
                        if r.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            len = v.trim().parse().unwrap_or(0);
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; len];
                    if r.read_exact(&mut body).is_err() {
                        return;
                    }
                    let status = script.lock().expect("script").next().unwrap_or(200);
                    keep.lock().expect("sent").push((status, body));
                    let answer = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n"
                    );
                    if out.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, sent)
}

fn holds(body: &[u8], text: &str) -> bool {
    body.windows(text.len()).any(|w| w == text.as_bytes())
}

/// OTLP/HTTP: a batch the receiver refuses for what it is (400) would be refused forever and
/// hold back every later turn; it is skipped and said. One it cannot take now (503) is sent
/// again, the same spans, until it can.
#[test]
fn a_batch_the_receiver_refuses_for_what_it_is_is_skipped_and_one_it_cannot_take_now_is_sent_again()
{
    let dir = tempfile::tempdir().expect("tempdir");
    let (model, _) = crate::openai::fake_openai();
    let (store, sessions) = crate::openai::run_turns_seeded(
        dir.path(),
        &model_env(model),
        &["Write out.txt, then say so.", "Write it again."],
        &[],
        &|_| {},
        0,
    );
    drop(store);
    let (receiver, sent) = scripted_receiver(vec![503, 400]);
    let _serve = serve_exporting(dir.path(), receiver, &[("KURA_TRACES__BATCH_TURNS", "1")]);
    let ids: Vec<String> = sessions.iter().map(|s| s.to_string()).collect();
    let deadline = Instant::now() + Duration::from_secs(60);
    let taken = loop {
        let now = sent.lock().expect("sent").clone();
        if let Some(i) = now.iter().position(|(st, _)| *st == 200) {
            break (now, i);
        }
        let log = std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();
        assert!(Instant::now() < deadline, "nothing taken: {now:?}\n{log}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let (now, first_taken) = taken;
    let of = |body: &[u8]| ids.iter().position(|id| holds(body, id));
    assert_eq!(now[0].0, 503);
    assert_eq!(now[1].0, 400);
    let refused = of(&now[0].1).expect("a turn's spans");
    assert_eq!(
        of(&now[1].1),
        Some(refused),
        "the same batch sent again after the 503"
    );
    assert_eq!(
        first_taken, 2,
        "the batch refused for what it is was not sent a third time"
    );
    assert_eq!(
        of(&now[2].1),
        Some(1 - refused),
        "the next turn's spans go through"
    );
    let log = std::fs::read_to_string(dir.path().join("serve.log")).expect("log");
    assert!(
        log.contains("refused this batch") && log.contains("400"),
        "{log}"
    );
}
