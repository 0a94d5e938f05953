//! Memory end to end: mikado extracts facts and decisions from delivered work (structured
//! lists, marked lines, a model), deduplicates them, rings `evt.record.written`, and the next
//! session's context carries them; `kura search` finds them.

use std::time::Duration;

use futures::StreamExt;
use kura_testkit::stack::Stack;
use serde_json::Value;

const MINUTE: Duration = Duration::from_secs(60);

const SCRIPT: &str = r#"{"turns": [[
  {"deliver": "Answer to: {instruction}\nFACT: the wifi network is called kura-net\nnot a fact",
   "facts": ["the spare key is in the blue flower pot"],
   "decisions": [{"text": "water the garden at dawn"}]}
]]}"#;

fn kura(s: &Stack, args: &[&str]) -> String {
    s.cli().ok(args)
}

fn count(s: &Stack, sql: &str) -> i64 {
    s.store()
        .conn()
        .query_row(sql, [], |r| r.get(0))
        .expect("count")
}

#[test]
fn facts_learned_in_one_session_reach_the_next_sessions_context() {
    let mut s = Stack::new(SCRIPT);
    s.extra_env
        .push(("KURA_NATS__MODE".into(), "external".into()));
    // Count record.written doorbells from the start.
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let nats = &s.nats;
    let written = rt.block_on(async move {
        let c = nats
            .client(kura_runtime::identity::Role::Operator)
            .await
            .expect("connect");
        let sub = c
            .subscribe("oclaw.v1.mikado.evt.record.written")
            .await
            .expect("sub");
        c.flush().await.expect("flush");
        (c, sub)
    });
    s.spawn("mikado", "mikado");
    s.spawn("aegis", "aegis");
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi");
    let r1 = s.submit("Find the spare key and note what you learn");
    let st1 = s.wait_complete(r1, MINUTE);
    s.wait_until("memory from session 1", MINUTE, |store| {
        store
            .conn()
            .query_row("SELECT count(*) FROM kb", [], |r| r.get::<_, i64>(0))
            .unwrap_or(0)
            == 3
    });
    // Each is in a sealed ledger of mikado's memory session, its source output the parent
    // (issue 35 item 12: memory was in no ledger, so nothing sealed or replicated it).
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM records r WHERE r.record_type LIKE 'memory.%' AND NOT EXISTS
               (SELECT 1 FROM ledger_records lr JOIN ledgers l ON l.ledger_id = lr.ledger_id
                  JOIN memory_homes h ON h.session_id = l.session_id AND h.author = 'agent:mikado'
                 WHERE lr.record_id = r.record_id AND l.state = 'sealed')"
        ),
        0,
        "memory outside mikado's sealed memory ledgers"
    );
    // Both deliverable forms were read: two structured items and one marked line.
    let mem = kura(&s, &["query", "--type", "memory.fact", "--json"]);
    let facts: Vec<Value> = serde_json::from_str(&mem).expect("json");
    let mut texts: Vec<&str> = facts
        .iter()
        .filter_map(|f| f["content"]["text"].as_str())
        .collect();
    texts.sort();
    assert_eq!(
        texts,
        [
            "the spare key is in the blue flower pot",
            "the wifi network is called kura-net"
        ]
    );
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM records WHERE record_type = 'memory.decision'"
        ),
        1
    );
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM memory_graph WHERE rel = 'extracted_from'"
        ),
        3
    );

    // The second session asks about it: its context ledger carries the fact.
    let r2 = s.submit("Where is the spare key?");
    let st2 = s.wait_complete(r2, MINUTE);
    let store = s.store();
    let ctx: String = store
        .conn()
        .query_row(
            "SELECT context_ledger_id FROM turns WHERE session_id = ?1 AND seq = 1",
            [st2.session_id.expect("s").to_string()],
            |r| r.get(0),
        )
        .expect("ctx");
    let members = store
        .hydrate(kura_store::store::parse_id(&ctx).expect("id"))
        .expect("hydrate");
    let kinds: Vec<(&str, &str)> = members
        .iter()
        .map(|r| {
            (
                r.record_type.as_str(),
                r.content["text"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(kinds[0], ("task.instruction", "Where is the spare key?"));
    assert!(
        kinds.contains(&("memory.fact", "the spare key is in the blue flower pot")),
        "{kinds:?}"
    );
    // kura log shows which memory went into which turn.
    let log = kura(
        &s,
        &["log", &st2.session_id.expect("s").to_string(), "--records"],
    );
    assert!(
        log.contains("memory.fact") && log.contains("the spare key is in the blue flower pot"),
        "{log}"
    );

    // The same deliverable again in session 2: no new memory, one more edge per item.
    s.wait_until("memory from session 2", MINUTE, |store| {
        store
            .conn()
            .query_row(
                "SELECT count(*) FROM memory_graph WHERE rel = 'extracted_from'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap_or(0)
            == 6
    });
    assert_eq!(
        count(
            &s,
            "SELECT count(*) FROM records WHERE record_type LIKE 'memory.%'"
        ),
        3,
        "deduplicated"
    );
    assert_eq!(
        count(&s, "SELECT count(*) FROM memory_sessions"),
        6,
        "each memory knows both sessions"
    );

    // One doorbell per new memory record, pointers only.
    let (_c, mut sub) = written;
    let ids: Vec<String> = rt.block_on(async {
        let mut ids = Vec::new();
        while let Ok(Some(m)) = tokio::time::timeout(Duration::from_millis(500), sub.next()).await {
            let v: Value = serde_json::from_slice(&m.payload).expect("doorbell json");
            assert_eq!(v.as_object().map(|o| o.len()), Some(1), "pointer only: {v}");
            ids.push(v["record_id"].as_str().expect("id").to_owned());
        }
        ids
    });
    assert_eq!(ids.len(), 3, "{ids:?}");

    // Search via the CLI: ranked, filtered by type and session.
    let hits: Vec<Value> =
        serde_json::from_str(&kura(&s, &["search", "spare key location", "--json"])).expect("json");
    assert_eq!(
        hits[0]["record"]["content"]["text"],
        "the spare key is in the blue flower pot"
    );
    let decisions: Vec<Value> = serde_json::from_str(&kura(
        &s,
        &[
            "search",
            "garden dawn",
            "--type",
            "memory.decision",
            "--json",
        ],
    ))
    .expect("json");
    assert_eq!(decisions.len(), 1);
    let session1 = st1.session_id.expect("s").to_string();
    let scoped: Vec<Value> = serde_json::from_str(&kura(
        &s,
        &["search", "wifi", "--session", &session1, "--json"],
    ))
    .expect("json");
    assert_eq!(scoped.len(), 1);
    assert!(kura(&s, &["search", "wifi"]).contains("kura-net"));
    s.verify_all();
}

#[test]
fn a_configured_model_is_asked_for_memory_too() {
    let script = r#"{"turns": [[{"deliver": "plain text with nothing marked"}]]}"#;
    let mut s = Stack::new(script);
    s.extra_env
        .push(("KURA_NATS__MODE".into(), "external".into()));
    s.extra_env
        .push(("KURA_MEMORY__MODEL".into(), "command".into()));
    s.extra_env.push((
        "KURA_MEMORY__PROVIDER__COMMAND".into(),
        r#"["sh", "-c", "cat > /dev/null; echo 'FACT: the model noticed the kettle is broken'; echo 'DECISION: buy a new kettle'"]"#.into(),
    ));
    s.spawn("mikado", "mikado");
    s.spawn("aegis", "aegis");
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi");
    let r = s.submit("look around the kitchen");
    s.wait_complete(r, MINUTE);
    s.wait_until("model-extracted memory", MINUTE, |store| {
        store
            .conn()
            .query_row("SELECT count(*) FROM kb", [], |r| r.get::<_, i64>(0))
            .unwrap_or(0)
            == 2
    });
    let hits: Vec<Value> =
        serde_json::from_str(&kura(&s, &["search", "kettle", "--json"])).expect("json");
    assert_eq!(hits.len(), 2);
    s.verify_all();
}

/// A fake OpenAI-compatible `/v1/embeddings` server: texts about kettles or teapots point one
/// way, everything else another.
fn fake_embeddings() -> u16 {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().expect("clone"));
            let (mut line, mut len) = (String::new(), 0usize);
            reader.read_line(&mut line).expect("request line");
            assert!(line.starts_with("POST /v1/embeddings "), "{line}");
            loop {
                let mut h = String::new();
                reader.read_line(&mut h).expect("header");
                if h.trim().is_empty() {
                    break;
                }
                if let Some(v) = h.to_ascii_lowercase().strip_prefix("content-length:") {
                    len = v.trim().parse().expect("len");
                }
            }
            let mut body = vec![0; len];
            reader.read_exact(&mut body).expect("body");
            let req: Value = serde_json::from_slice(&body).expect("json");
            let input = req["input"].as_str().expect("input").to_lowercase();
            let v = if input.contains("kettle") || input.contains("teapot") {
                [0.9, 0.1, 0.0]
            } else {
                [0.0, 0.2, 0.9]
            };
            let resp = serde_json::json!({"object": "list", "model": req["model"],
                "data": [{"object": "embedding", "index": 0, "embedding": v}]})
            .to_string();
            let _ = write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{resp}",
                resp.len()
            );
        }
    });
    port
}

#[test]
fn embeddings_make_search_hybrid() {
    let script = r#"{"turns": [[{"deliver": "noted", "facts": ["the kettle is broken", "the cat is asleep"]}]]}"#;
    let mut s = Stack::new(script);
    let port = fake_embeddings();
    let url = format!("http://127.0.0.1:{port}/v1");
    s.extra_env
        .push(("KURA_NATS__MODE".into(), "external".into()));
    s.extra_env
        .push(("KURA_MEMORY__EMBEDDINGS_URL".into(), url.clone()));
    s.spawn("mikado", "mikado");
    s.spawn("aegis", "aegis");
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi");
    let r = s.submit("look around");
    s.wait_complete(r, MINUTE);
    s.wait_until("vectors", MINUTE, |store| {
        store
            .conn()
            .query_row("SELECT count(*) FROM kb_vectors", [], |r| {
                r.get::<_, i64>(0)
            })
            .unwrap_or(0)
            == 2
    });
    // "teapot" shares no word with either fact: text search alone finds nothing ...
    assert!(kura(&s, &["search", "teapot"]).contains("no memory matches"));
    // ... the embedding finds the kettle.
    let hits: Vec<Value> = serde_json::from_str(&kura(
        &s,
        &["search", "teapot", "--embeddings-url", &url, "--json"],
    ))
    .expect("json");
    assert_eq!(hits[0]["record"]["content"]["text"], "the kettle is broken");
}
