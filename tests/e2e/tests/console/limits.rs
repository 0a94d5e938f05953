//! Attacks that would take the console down or outgrow its unit (`MemoryMax=256M`): huge
//! records on one page, blind login-page loads, idle connections, and an event stream that
//! outlives its login. Each asserts the bound or the refusal.

use std::net::TcpStream;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use ed25519_dalek::SigningKey;
use kura_testkit::console::{csrf, ends_within, http, login, open, wait_http};
use kura_testkit::free_port;
use kura_testkit::stack::Stack;
use proto::record::{NewRecord, RecordType};
use serde_json::json;

use super::{SCRIPT, console_env};

const MIB: usize = 1 << 20;

/// `kura serve` with a console on a free port that `key` may log in to.
fn serve(s: &mut Stack, key: &SigningKey) -> u16 {
    serve_with(s, key, &[])
}

/// [`serve`] with more `[console]` settings, as environment variables.
fn serve_with(s: &mut Stack, key: &SigningKey, extra: &[(&str, &str)]) -> u16 {
    let port = free_port();
    let users = format!(
        "[{{ name = \"alice\", public_key = \"{}\" }}]",
        hex::encode(key.verifying_key().as_bytes())
    );
    console_env(s, port, &users);
    s.extra_env
        .extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    s.spawn("kura", "serve");
    wait_http(port);
    port
}

fn serve_pid(s: &Stack) -> u32 {
    s.children
        .iter()
        .find(|(n, _)| n == "serve")
        .map(|(_, c)| c.id())
        .expect("serve runs")
}

/// The most memory the process has held (kB, `VmHWM` of /proc/<pid>/status).
fn peak_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .expect("status")
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM")
}

/// Attack: a session whose records are 3 MiB each. A history page and a diff read only
/// what they show: the server's peak memory stays far below the unit's 256 MiB, each page
/// says how much it left out, and the whole record can still be read, a chunk at a time.
#[test]
fn forty_records_of_3_mib_on_one_page_stay_within_the_units_memory() {
    let mut s = Stack::new(SCRIPT);
    let mut store = s.store();
    let session = store.create_session("big").expect("session").session_id;
    let mut ledger = |label: &str| {
        let id = store
            .open_ledger(session, label, &[])
            .expect("ledger")
            .ledger_id;
        for i in 0..40 {
            let text = format!("{label}{i} {}", "x".repeat(3 * MIB));
            let r = NewRecord {
                record_type: RecordType::AgentThought,
                content: json!({ "text": text }),
                author_id: "agent:big".into(),
                metadata: Default::default(),
            };
            store.append(id, &r).expect("append");
        }
        id
    };
    let (a, b) = (ledger("a"), ledger("b"));
    drop(store);
    let key = SigningKey::from_bytes(&[5u8; 32]);
    let port = serve(&mut s, &key);
    let cookie = login(port, &key);
    let before = peak_kib(serve_pid(&s));
    let get = |path: &str| {
        let (status, _, body) = http(port, "GET", path, &[("Cookie", &cookie)], "");
        assert_eq!(status, 200, "{path}: {body}");
        assert!(body.len() < MIB, "{path} is {} bytes", body.len());
        body
    };
    let page = get(&format!("/s/{session}"));
    assert!(page.contains("bytes, shown first"), "says what it left out");
    let diff = get(&format!("/diff?a={a}&b={b}"));
    assert!(diff.contains("bytes, shown first"), "{}", &diff[..2000]);
    let link = page
        .split("href=\"/r/")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a link to the whole record")
        .replace("&amp;", "&");
    let chunk = get(&format!("/r/{link}"));
    assert!(
        chunk.contains("xxxxxxxx") && chunk.contains("next chunk"),
        "{chunk}"
    );
    let peak = peak_kib(serve_pid(&s));
    println!("serve's peak: {before} kB before the pages, {peak} kB after");
    assert!(peak < 96 * 1024, "kura serve peaked at {peak} kB");
    s.shutdown_cleanly();
}

/// Attack: a cross-site page makes browsers load `/login` over and over. Challenges cost the
/// server nothing to hand out, so a person can still log in right after 1,100 of them.
#[test]
fn eleven_hundred_blind_login_page_loads_lock_nobody_out() {
    let mut s = Stack::new(SCRIPT);
    let key = SigningKey::from_bytes(&[5u8; 32]);
    let port = serve(&mut s, &key);
    for _ in 0..1_100 {
        let (status, _, _) = http(port, "GET", "/login", &[], "");
        assert_eq!(status, 200);
    }
    let cookie = login(port, &key);
    assert!(cookie.starts_with("kura_session="), "{cookie}");
    s.shutdown_cleanly();
}

/// Attack: 1,100 connections that never send a request, against a process allowed 1,024
/// descriptors. The console stays within its descriptors, drops the oldest idle connection,
/// and a person's request is still answered at once.
#[test]
fn eleven_hundred_idle_connections_do_not_shut_the_console() {
    let mut s = Stack::new(SCRIPT);
    let key = SigningKey::from_bytes(&[5u8; 32]);
    let port = serve(&mut s, &key);
    let pid = serve_pid(&s);
    let limited = std::process::Command::new("prlimit")
        .args([format!("--pid={pid}"), "--nofile=1024:1024".into()])
        .status()
        .expect("prlimit");
    assert!(limited.success());
    let mut idle: Vec<TcpStream> = (0..1_100)
        .map(|_| TcpStream::connect(("127.0.0.1", port)).expect("connect"))
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let (tx, rx) = mpsc::channel();
    let t = Instant::now();
    std::thread::spawn(move || {
        let _ = tx.send(http(port, "GET", "/login", &[], "").0);
    });
    let status = rx.recv_timeout(Duration::from_secs(10));
    assert_eq!(
        status,
        Ok(200),
        "a person's request after 1,100 idle connections"
    );
    println!("answered in {:?}", t.elapsed());
    let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("fds")
        .count();
    assert!(fds < 1_000, "serve holds {fds} descriptors");
    assert!(
        ends_within(&mut idle[0], Duration::from_secs(15)),
        "the oldest idle connection was dropped"
    );
    drop(idle);
    s.shutdown_cleanly();
}

/// Attack: a stolen or forgotten tab keeps hearing of every change after its person logged
/// out, or after the login expired. The server ends the stream at either.
#[test]
fn the_event_stream_ends_at_logout_and_at_expiry() {
    let mut s = Stack::new(SCRIPT);
    let key = SigningKey::from_bytes(&[5u8; 32]);
    let port = serve_with(&mut s, &key, &[("KURA_CONSOLE__SESSION_MS", "4000")]);
    let cookie = login(port, &key);
    let (mut events, head) = open(port, "/events", &[("Cookie", &cookie)]);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    let token = csrf(port, &cookie);
    let (status, _, _) = http(
        port,
        "POST",
        "/api/logout",
        &[("Cookie", &cookie), ("x-kura-csrf", &token)],
        "",
    );
    assert_eq!(status, 204);
    assert!(
        ends_within(&mut events, Duration::from_secs(3)),
        "the stream ended at logout"
    );
    let cookie = login(port, &key);
    let (mut events, head) = open(port, "/events", &[("Cookie", &cookie)]);
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(
        ends_within(&mut events, Duration::from_secs(8)),
        "the stream ended when the login expired"
    );
    assert_eq!(
        http(port, "GET", "/events", &[("Cookie", &cookie)], "").0,
        401
    );
    s.shutdown_cleanly();
}

/// Attack (found in review of issue 24 item 8c): a slot is no longer "idle" once a request
/// starts, and nothing bounded the body, so 512 unauthenticated `POST /api/login` that
/// trickle their bodies held every slot for ever. A request now has ten seconds; then it is
/// answered 408 and its connection closed, and a person's request is served again.
#[test]
fn trickled_request_bodies_do_not_hold_the_console() {
    use std::io::Write as _;
    let mut s = Stack::new(SCRIPT);
    let key = SigningKey::from_bytes(&[6u8; 32]);
    let port = serve(&mut s, &key);
    let mut slow: Vec<TcpStream> = (0..600)
        .filter_map(|_| {
            let mut c = TcpStream::connect(("127.0.0.1", port)).ok()?;
            c.write_all(
                b"POST /api/login HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
            )
            .ok()?;
            Some(c)
        })
        .collect();
    assert!(slow.len() >= 512, "opened {}", slow.len());
    // Keep trickling for longer than the limit.
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(12) {
        for c in &mut slow {
            let _ = c.write_all(b" ");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(http(port, "GET", "/login", &[], "").0);
    });
    assert_eq!(
        rx.recv_timeout(Duration::from_secs(15)),
        Ok(200),
        "a person's request after 600 trickled bodies"
    );
    assert!(
        ends_within(&mut slow[0], Duration::from_secs(5)),
        "a trickled request was ended"
    );
    drop(slow);
    s.shutdown_cleanly();
}

/// Broke (issue 24 item 10, the console's side): the console relayed a person's decision and
/// took the first reply, so anyone allowed to answer on the bus (here the operator identity)
/// could make every approval from the console fail. Replies not signed by aegis are skipped
/// now: with aegis held still, the rogue answers first, and aegis's verdict still arrives.
#[test]
fn a_rogue_unsigned_reply_does_not_stop_a_console_decision() {
    let mut s = Stack::new(SCRIPT);
    let key = SigningKey::from_bytes(&[7u8; 32]);
    s.spawn("aegis", "aegis");
    let port = serve(&mut s, &key);
    let cookie = login(port, &key);
    let token = csrf(port, &cookie);
    let rt = tokio::runtime::Runtime::new().expect("rt");
    let subject = proto::subjects::Subjects::default().approval_decide();
    let forged = r#"{"ok":true,"state":"approved","message":"approved by nobody"}"#;
    let rogue = kura_testkit::rogue::Rogue::start(&rt, &s.nats, subject, forged);
    // A decision by alice for a request that does not exist: aegis refuses it, signed.
    let mut d = proto::doorbell::ApprovalDecision {
        request_id: proto::RequestId::new(),
        decision: proto::Vote::Approve.into(),
        approver: "alice".into(),
        note: String::new(),
        signed_at: kura_store::time::now(),
        signature: String::new(),
        arguments: None,
    };
    d.signature = hex::encode(
        ed25519_dalek::Signer::sign(&key, &d.signing_bytes("0".repeat(64).as_str())).to_bytes(),
    );
    let body = serde_json::to_string(&d).expect("json");
    s.signal("aegis", "STOP");
    let (tx, rx) = mpsc::channel();
    let send = {
        let (cookie, token, body) = (cookie.clone(), token.clone(), body.clone());
        std::thread::spawn(move || {
            let _ = tx.send(http(
                port,
                "POST",
                "/api/decide",
                &[("Cookie", &cookie), ("x-kura-csrf", &token)],
                &body,
            ));
        })
    };
    let rogue_first = rogue.wait_answered(Duration::from_secs(4));
    s.signal("aegis", "CONT");
    let (status, _, reply) = rx.recv_timeout(Duration::from_secs(10)).expect("an answer");
    let _ = send.join();
    assert!(rogue_first, "the rogue answered first");
    assert_eq!(status, 200, "{reply}");
    let v: proto::doorbell::Verdicted = serde_json::from_str(&reply).expect("a verdict");
    assert!(!v.ok && v.message.contains("no approval request"), "{v:?}");
    s.shutdown_cleanly();
}
