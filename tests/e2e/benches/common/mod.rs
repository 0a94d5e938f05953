//! What the stack bench and the peers bench share: starting the six daemons, timing turns
//! from what they left in SQLite, the storage floor, and the human-approval round trip.

// Each bench binary includes this module and uses only part of it.
#![allow(dead_code)]

pub mod plan;

use std::time::{Duration, Instant};

use kura_runtime::identity::Role;
use kura_testkit::stack::{self, Stack};
use kura_testkit::{bin, console};
use kura_work::request_status;

pub const DAEMONS: [&str; 6] = ["minato", "hashi-1", "hashi-2", "aegis", "mikado", "serve"];

/// A stack of the six daemons running `script`; `poll_ms` is their polling interval.
pub fn stack(script: &str, poll_ms: u64) -> Stack {
    stack_with(script, poll_ms, "full")
}

/// [`stack`] with a chosen `synchronous` setting for every daemon.
pub fn stack_with(script: &str, poll_ms: u64, synchronous: &str) -> Stack {
    let mut s = Stack::new(script);
    s.extra_env = vec![
        ("KURA_SYNCHRONOUS".into(), synchronous.into()),
        ("KURA_NATS__MODE".into(), "external".into()),
        ("KURA_POLL_INTERVAL_MS".into(), poll_ms.to_string()),
        ("KURA_WORKER__LEASE_MS".into(), "30000".into()),
        ("RUST_LOG".into(), "warn".into()),
    ];
    for d in DAEMONS {
        s.spawn(stack::binary(d), d);
    }
    // The logs are at warn level: give the daemons a moment to connect instead.
    std::thread::sleep(Duration::from_secs(2));
    s
}

/// Unix microseconds of a stored RFC 3339 time (`2026-11-22T01:02:03.456789Z`).
pub fn micros(t: &str) -> Option<i64> {
    let secs = kura_store::time::unix_seconds(t)?;
    let frac: i64 = t.get(20..26)?.parse().ok()?;
    Some(i64::try_from(secs).ok()? * 1_000_000 + frac)
}

/// Per-turn latency: turn row created (dispatch) → its output ledger sealed.
pub fn turn_latencies_ms(s: &Stack) -> Vec<f64> {
    let store = s.store();
    let mut stmt = store
        .conn()
        .prepare(
            "SELECT t.created_at, l.sealed_at FROM turns t
             JOIN ledgers l ON l.ledger_id = t.output_ledger_id WHERE l.sealed_at IS NOT NULL",
        )
        .expect("prepare");
    let rows: Vec<(String, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    rows.iter()
        .filter_map(|(a, b)| Some((micros(b)? - micros(a)?) as f64 / 1000.0))
        .collect()
}

pub fn pct(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).copied().unwrap_or(f64::NAN)
}

/// Submits `n` requests in this process (one durable transaction each, as `minato submit`
/// does) and, if NATS is up, rings minato once: a doorbell only wakes it, and it takes every
/// pending request from SQLite.
pub fn submit_many(s: &Stack, n: usize, prefix: &str, ring: bool) -> Vec<i64> {
    let mut store = s.store();
    let mut last = None;
    let out = (0..n)
        .map(|i| {
            let r = kura_work::submit(&mut store, &format!("{prefix} {i}"), "user:bench", None)
                .expect("submit");
            last = Some(r.record_id);
            r.request_seq
        })
        .collect();
    if let (true, Some(record_id)) = (ring, last) {
        let nats = &s.nats;
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            let c = nats
                .client(kura_runtime::identity::Role::Submit)
                .await
                .expect("connect");
            let msg = proto::doorbell::SessionCreate {
                record_id,
                session_id: None,
            };
            c.publish(
                "oclaw.v1.minato.cmd.session.create",
                serde_json::to_vec(&msg).expect("json").into(),
            )
            .await
            .expect("publish");
            c.flush().await.expect("flush");
        });
    }
    out
}

pub fn wait_all(s: &Stack, requests: &[i64], timeout: Duration) -> Duration {
    let store = s.store();
    let start = Instant::now();
    let mut pending: Vec<i64> = requests.to_vec();
    while !pending.is_empty() {
        pending.retain(|r| {
            !request_status(store.conn(), *r)
                .map(|st| st.complete)
                .unwrap_or(false)
        });
        assert!(
            start.elapsed() < timeout,
            "{} requests did not complete\n{}",
            pending.len(),
            s.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    start.elapsed()
}

/// Peak and current RSS (KiB) of a process, from /proc.
pub fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmHWM:"), field("VmRSS:"))
}

pub fn pids(s: &Stack) -> Vec<(String, u32)> {
    s.children
        .iter()
        .map(|(n, c)| (n.clone(), c.id()))
        .collect()
}

/// The storage floor: one durable single-record commit on the same disk, in ms.
pub fn durable_commit_ms(dir: &std::path::Path) -> f64 {
    let path = dir.join("floor.db");
    let mut store =
        kura_store::Store::create(&path, &kura_store::StoreOptions::default()).expect("db");
    let session = store.create_session("floor").expect("session");
    let ledger = store
        .open_ledger(session.session_id, "floor", &[])
        .expect("ledger")
        .ledger_id;
    let n = 300;
    let t = Instant::now();
    for i in 0..n {
        let r = proto::record::NewRecord::new(
            proto::record::RecordType::AgentThought,
            proto::record::Content::text(format!("floor {i}")),
            "agent:bench",
        );
        store.append(ledger, &r).expect("append");
    }
    t.elapsed().as_secs_f64() * 1000.0 / f64::from(n)
}

/// Durable transactions one turn costs, counted from what it left in the store: the turn's
/// records (context and output) plus a handful of row updates (claim, approval, completion).
pub fn records_per_turn(s: &Stack, turns: usize) -> f64 {
    let n: i64 = s
        .store()
        .conn()
        .query_row("SELECT count(*) FROM ledger_records", [], |r| r.get(0))
        .expect("count");
    n as f64 / turns.max(1) as f64
}

/// A write policy sends to a person; the deliverable follows the write.
pub const ASK_SCRIPT: &str = r#"{"turns": [[
  {"tool": "fs.write", "args": {"path": "notes/plan.md", "content": "approved"}},
  {"deliver": "wrote the plan"}
]]}"#;

/// `aegis <args>` as the approver `oles` on a laptop would run it; returns its exit code.
pub fn aegis_as(s: &Stack, args: &[&str]) -> i32 {
    aegis_cmd(s, args)
        .output()
        .map(|o| o.status.code().unwrap_or(-1))
        .unwrap_or(-1)
}

fn aegis_cmd(s: &Stack, args: &[&str]) -> std::process::Command {
    let mut c = std::process::Command::new(bin("aegis"));
    c.args(args)
        .env("KURA_NATS_URL", s.nats.url())
        .env("KURA_NATS_CA", s.nats.ca())
        .env("KURA_AEGIS__REPLY_KEY", s.nats.signer(Role::Aegis))
        .env("KURA_AEGIS_KEY", s.path("oles.key"))
        .stdout(std::process::Stdio::null());
    c
}

/// Polls SQLite every millisecond until `f` answers.
pub fn poll<T>(s: &Stack, mut f: impl FnMut(&rusqlite::Connection) -> Option<T>) -> T {
    let store = s.store();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f(store.conn()) {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out\n{}", s.logs());
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Figure 9's results, in milliseconds.
pub struct Approvals {
    /// `aegis approve` started → the tool's result committed: p50, p99.
    pub cli: (f64, f64),
    /// `aegis pending` alone (process start, TLS, nkey login, one signed reply): p50.
    pub look: f64,
    /// A logged-in console page's signed decision posted → the tool's result committed: p50, p99.
    pub console: (f64, f64),
}

/// Figure 9, the human-approval round trip: a parked `fs.write`, then `aegis approve`
/// started → the tool has run (its result committed). Beside it, the same CLI doing only a
/// round trip (`aegis pending`: process start, TLS, nkey login, one signed reply), and the
/// same person deciding from the console they are logged in to (`kura serve`'s page signs
/// the decision in the browser and posts it; here the bench signs what the page would).
/// The two ways alternate, turn by turn, on one stack.
pub fn approval_round_trip(turns: usize) -> Approvals {
    let mut s = Stack::new(ASK_SCRIPT);
    std::fs::write(
        s.path("policy.toml"),
        "[[rules]]\nname = \"a-person-decides\"\ntool = \"fs.write\"\ndecision = \"ask\"\n",
    )
    .expect("policy");
    let key = s.path("oles.key");
    let made = std::process::Command::new(bin("aegis"))
        .args(["keygen", "--name", "oles", "--key"])
        .arg(&key)
        .output()
        .expect("keygen");
    assert!(made.status.success());
    s.add_approver("oles", &key);
    let k: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&key).expect("key")).expect("json");
    let public = k["public_key"].as_str().expect("public key").to_owned();
    let secret: [u8; 32] = hex::decode(k["secret_key"].as_str().expect("secret key"))
        .ok()
        .and_then(|b| b.try_into().ok())
        .expect("32-byte secret");
    let signing = ed25519_dalek::SigningKey::from_bytes(&secret);
    let port = kura_testkit::free_port();
    let users = format!("[{{ name = \"oles\", public_key = \"{public}\" }}]");
    s.extra_env = vec![
        ("KURA_AEGIS__APPROVERS".into(), users.clone()),
        ("KURA_WORKER__LEASE_MS".into(), "30000".into()),
        ("RUST_LOG".into(), "warn".into()),
        ("KURA_CONSOLE__LISTEN".into(), format!("127.0.0.1:{port}")),
        ("KURA_CONSOLE__USERS".into(), users),
        (
            "KURA_SERVE__KEYRING".into(),
            s.nats
                .keys_dir()
                .join("identities.toml")
                .display()
                .to_string(),
        ),
    ];
    for d in ["aegis", "minato", "hashi"] {
        s.spawn(stack::binary(d), d);
    }
    s.spawn("kura", "serve");
    console::wait_http(port);
    let cookie = console::login(port, &signing);
    let csrf = console::csrf(port, &cookie);
    std::thread::sleep(Duration::from_secs(2));
    let asked = |s: &Stack| {
        poll(s, |c| {
            c.query_row(
                "SELECT request_id, call_id, request_hash FROM approvals WHERE state = 'asked'",
                [],
                |r| {
                    Ok((
                        r.get::<_, String>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                    ))
                },
            )
            .ok()
        })
    };
    let (mut approve, mut look, mut page) = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..turns * 2 {
        let r = s.submit(&format!("plan {i}"));
        let (request, call, hash) = asked(&s);
        // The clock stops when the tool's result is committed, watched while the decision
        // is on its way (the CLI may still be closing its connection when the tool has run).
        let store = s.store();
        let mut seen = store
            .conn()
            .prepare(
                "SELECT 1 FROM records WHERE record_type = 'tool.result'
                   AND json_extract(content, '$.call_id') = ?1",
            )
            .expect("prepare");
        let mut wait_for_tool = |t: Instant| {
            while !seen.exists([&call]).expect("query") {
                assert!(
                    t.elapsed() < Duration::from_secs(60),
                    "the tool never ran\n{}",
                    s.logs()
                );
                std::thread::sleep(Duration::from_micros(200));
            }
            t.elapsed().as_secs_f64() * 1000.0
        };
        if i % 2 == 0 {
            let t = Instant::now();
            assert_eq!(aegis_as(&s, &["pending", "--json"]), 0);
            look.push(t.elapsed().as_secs_f64() * 1000.0);
            let t = Instant::now();
            let mut cli = aegis_cmd(&s, &["approve", &request])
                .spawn()
                .expect("aegis approve");
            approve.push(wait_for_tool(t));
            assert!(cli.wait().expect("wait").success(), "{}", s.logs());
        } else {
            // What the page's script does on "approve": sign the request it verified, post.
            let now = kura_store::time::now();
            let mut d = proto::doorbell::ApprovalDecision {
                request_id: request.parse().expect("request id"),
                decision: proto::Vote::Approve.into(),
                approver: "oles".into(),
                note: String::new(),
                signed_at: format!("{}Z", &now[..19]),
                signature: String::new(),
                arguments: None,
            };
            aegis::keys::sign(&signing, &mut d, &hash);
            let body = serde_json::to_string(&d).expect("json");
            let (cookie, csrf) = (cookie.clone(), csrf.clone());
            let t = Instant::now();
            let post = std::thread::spawn(move || {
                console::http(
                    port,
                    "POST",
                    "/api/decide",
                    &[
                        ("Content-Type", "application/json"),
                        ("Cookie", &cookie),
                        ("x-kura-csrf", &csrf),
                    ],
                    &body,
                )
            });
            page.push(wait_for_tool(t));
            let (status, _, verdict) = post.join().expect("post");
            assert_eq!(status, 200, "{verdict}\n{}", s.logs());
        }
        drop(seen);
        wait_all(&s, &[r], Duration::from_secs(60));
    }
    s.shutdown_cleanly();
    Approvals {
        cli: (pct(&mut approve, 0.5), pct(&mut approve, 0.99)),
        look: pct(&mut look, 0.5),
        console: (pct(&mut page, 0.5), pct(&mut page, 0.99)),
    }
}
