//! A fleet of Pis: two full Kura stacks ("Pi A", "Pi B": each its own database, keys, bus
//! and daemons) whose buses join a real JetStream hub (1 or 3 nodes of the bundled
//! nats-server) as leaf nodes. Each Pi's sealed history reaches the other as a replica that
//! verifies with the same ledger hashes and checkpoint root — through hub node kills, a dead
//! hub, a killed publisher — and a rewritten history republished is refused.

use std::process::Command;
use std::time::{Duration, Instant};

use async_nats::jetstream;
use futures::StreamExt;
use kura_runtime::identity::Role;
use kura_store::replica::logged_hash;
use kura_store::{Store, StoreOptions};
use kura_testkit::bin;
use kura_testkit::hub::{FleetPi as Pi, Hub};
use proto::fleet::{self, ReplMessage};

const MINUTE: Duration = Duration::from_secs(60);

const ONE_TURN: &str = r#"{"turns": [[
  {"thought": "A short task: one note."},
  {"tool": "fs.write", "args": {"path": "note.md", "content": "written on a Pi"}},
  {"deliver": "wrote note.md"}
]]}"#;

/// The replica of `origin` kept by `at` holds the same ledgers, in the same seal-log order,
/// with the same hashes; its seal log has the root of `origin`'s signed checkpoint; and
/// `kura verify --all` passes on it.
fn assert_same_history(origin: &Pi, at: &Pi) {
    let a = origin.s.store();
    let r = Store::open(at.replica_path(origin.name), &StoreOptions::default()).expect("replica");
    let n = origin.size();
    for i in 0..n {
        assert_eq!(
            logged_hash(&r, i).expect("replica leaf"),
            logged_hash(&a, i).expect("origin leaf"),
            "leaf {i} differs"
        );
    }
    let note =
        std::fs::read_to_string(origin.s.path("kura.db.checkpoint")).expect("origin's checkpoint");
    let cp = kura_tlog::checkpoint::open(&note, &origin.log_vkey).expect("signed by the origin");
    let size = cp.size.min(n);
    assert_eq!(
        kura_tlog::seallog::root(&r.seal_log(), cp.size)
            .expect("root")
            .0,
        cp.root.0,
        "the replica's log has another root at the origin's checkpoint size {size}"
    );
    // Verified on the Pi that keeps it, under that Pi's own settings (its keyring, its log
    // key): a replica is held to its origin's keyring and the checkpoint it was verified
    // against, kept beside it (issue 35 item 13: every ledger failed `sealer_unknown`).
    let db = at.replica_path(origin.name);
    let out = at.kura(&["verify", "--all", "--db", db.to_str().expect("utf-8")]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "verify on the replica: {said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        said.contains(&format!("a replica of {}", origin.name))
            && said.contains("checked against checkpoint"),
        "{said}"
    );
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

#[test]
fn a_pis_history_replicates_verified_through_a_three_node_hub_and_survives_its_faults() {
    let mut hub = Hub::start(3, &["pi-a", "pi-b"]);
    let mut a = Pi::new("pi-a", &hub, ONE_TURN);
    let mut b = Pi::new("pi-b", &hub, ONE_TURN);
    a.configure(&[&b]);
    b.configure(&[&a]);
    for p in [&mut a, &mut b] {
        for d in ["serve", "aegis", "minato", "hashi"] {
            p.s.spawn(if d == "serve" { "kura" } else { d }, d);
        }
    }

    // A session on A: its replica on B verifies with the same hashes and checkpoint root.
    let r = a.s.submit("write a note on A");
    let a_session =
        a.s.wait_complete(r, MINUTE)
            .session_id
            .expect("session")
            .to_string();
    b.wait_replica(&a, "first session");
    assert_same_history(&a, &b);
    // The note's files came with the ledger: whole in B's replica's object store.
    // (They follow the ledger: the receiver fetches them once the ledger is written.)
    let replica = b.replica_path("pi-a");
    let deadline = Instant::now() + MINUTE;
    let said = loop {
        let db = replica.to_str().expect("utf8");
        let out = b.kura(&["verify", "--workspace", &a_session, "--json", "--db", db]);
        let said: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
        if out.status.success() || Instant::now() > deadline {
            break said;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(said["objects_ok"].as_u64() >= Some(3), "{said}");
    assert_eq!(said["missing"], serde_json::json!([]), "{said}");
    let a_tree = attested(&a.s.store(), &a_session);
    // B cosigned A's checkpoint as a witness, beside it in the hub's bucket.
    let cosigned = rt().block_on(async {
        let js = jetstream::with_domain(hub.admin(0).await, fleet::DOMAIN);
        let kv = js
            .get_key_value(fleet::CHECKPOINTS_BUCKET)
            .await
            .expect("bucket");
        let deadline = Instant::now() + MINUTE;
        loop {
            if let Some(v) = kv
                .get(fleet::cosignature_key("pi-a", "pi-b"))
                .await
                .expect("get")
            {
                return String::from_utf8(v.to_vec()).expect("text");
            }
            assert!(
                Instant::now() < deadline,
                "no cosignature by pi-b\n{}",
                b.s.log("serve")
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    let by = kura_tlog::cosign::cosigned_by(&cosigned, std::slice::from_ref(&b.witness_vkey))
        .expect("cosignature");
    assert!(
        !by.is_empty(),
        "pi-b's cosignature does not verify: {cosigned}"
    );
    // And the other way round.
    let r = b.s.submit("write a note on B");
    b.s.wait_complete(r, MINUTE);
    a.wait_replica(&b, "B's session");
    assert_same_history(&b, &a);

    // SIGKILL one hub node while A publishes: nothing is lost.
    let r = a.s.submit("second task");
    hub.kill_node(1);
    a.s.wait_complete(r, MINUTE);
    b.wait_replica(&a, "with a hub node killed");
    assert_same_history(&a, &b);
    hub.start_node(1);

    // The whole hub down: A keeps running sessions; its replica catches up when it returns.
    for n in 0..3 {
        hub.kill_node(n);
    }
    let r = a.s.submit("a task while the hub is away");
    a.s.wait_complete(r, MINUTE);
    std::thread::sleep(Duration::from_secs(1));
    assert!(
        b.replica_size("pi-a") < a.size(),
        "the replica grew with no hub"
    );
    for n in 0..3 {
        hub.start_node(n);
    }
    b.wait_replica(&a, "after the hub returned");
    assert_same_history(&a, &b);

    // SIGKILL A's publisher (kura serve) mid-batch: no gap and no duplicate on the hub.
    let before = a.size();
    let reqs: Vec<i64> = (0..3).map(|i| a.s.submit(&format!("batch {i}"))).collect();
    let deadline = Instant::now() + MINUTE;
    while a.size() == before {
        assert!(Instant::now() < deadline, "nothing sealed");
        std::thread::sleep(Duration::from_millis(5));
    }
    a.s.signal("serve", "KILL");
    for r in reqs {
        a.s.wait_complete(r, MINUTE);
    }
    a.s.spawn("kura", "serve");
    b.wait_replica(&a, "after the publisher was killed");
    assert_same_history(&a, &b);
    let indexes = hub.ledger_indexes("pi-a");
    assert_eq!(
        indexes,
        (0..a.size()).collect::<Vec<_>>(),
        "gaps or duplicates on the hub"
    );

    // Restore A from the hub into an empty directory: it verifies and continues its log.
    let fresh = tempfile::tempdir().expect("tempdir");
    let restored = fresh.path().join("kura.db");
    let out = a.kura(&[
        "fleet",
        "restore",
        "pi-a",
        "--log-verifier",
        &a.log_vkey,
        "--to",
        restored.to_str().expect("utf8"),
        "--url",
        &hub.url(),
        "--seed",
        hub.admin_seed().to_str().expect("utf8"),
        "--ca",
        hub.ca().to_str().expect("utf8"),
    ]);
    assert!(
        out.status.success(),
        "restore: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rs = Store::open(&restored, &StoreOptions::default()).expect("restored");
    let astore = a.s.store();
    let n = kura_tlog::seallog::size(&rs.seal_log()).expect("size");
    assert!(n > 0 && n <= a.size());
    for i in 0..n {
        assert_eq!(
            logged_hash(&rs, i).expect("leaf"),
            logged_hash(&astore, i).expect("leaf")
        );
    }
    let verified = Command::new(bin("kura"))
        .args(["verify", "--all", "--db"])
        .arg(&restored)
        .output()
        .expect("verify");
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
    // The session's files come back with it, byte for byte, to the tree A recorded.
    let ws = fresh.path().join("ws").join(&a_session);
    let out = Command::new(bin("kura"))
        .args(["workspace", "restore", &a_session, "--root"])
        .arg(&ws)
        .arg("--db")
        .arg(&restored)
        .output()
        .expect("workspace restore");
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains(&format!("tree {a_tree}")),
        "{said}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        std::fs::read_to_string(ws.join("note.md")).expect("note"),
        "written on a Pi"
    );
    // The same log key signs on from the restored checkpoint (no fork of its own history).
    let signed = Command::new(bin("kura"))
        .args(["checkpoint", "--key"])
        .arg(&a.log_key)
        .arg("--db")
        .arg(&restored)
        .env_remove("KURA_SERVE_CONFIG")
        .output()
        .expect("checkpoint");
    assert!(
        signed.status.success(),
        "{}",
        String::from_utf8_lossy(&signed.stderr)
    );

    // B continues A's last session from its replica.
    let last = rs
        .conn()
        .query_row(
            "SELECT ledger_id FROM seal_log_leaves WHERE leaf_index = ?1",
            [n as i64 - 1],
            |r| r.get::<_, String>(0),
        )
        .expect("last ledger");
    let r =
        b.s.submit_with("continue A's work", &["--from", &last, "--replica", "pi-a"]);
    b.s.wait_complete(r, MINUTE);
    let fork: String = b
        .s
        .store()
        .conn()
        .query_row(
            "SELECT content FROM records WHERE record_type = 'session.fork' AND content LIKE '%pi-a%'",
            [],
            |r| r.get(0),
        )
        .expect("B's session.fork names pi-a");
    let fork: serde_json::Value = serde_json::from_str(&fork).expect("json");
    assert_eq!(fork["origin_ledger"], last);
    assert_eq!(fork["origin_pi"], "pi-a");
    // It started with A's files: its first side effect began from A's tree.
    let forked =
        b.s.store()
            .sessions()
            .expect("sessions")
            .into_iter()
            .map(|x| x.session_id.to_string());
    let began: Vec<String> = forked
        .filter_map(|sid| first_before(&b.s.store(), &sid))
        .collect();
    assert!(
        began.contains(&fork["workspace"].as_str().unwrap_or("none").to_owned()),
        "{fork} {began:?}"
    );
    let note = fork["origin_checkpoint"].as_str().expect("checkpoint");
    kura_tlog::checkpoint::open(note, &a.log_vkey).expect("the fork names A's signed checkpoint");
    b.s.verify_all();

    // `kura fleet status` on B: itself and its replica, no alarm.
    let out = b.kura(&["fleet", "status", "--db", b.s.db.to_str().expect("utf8")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains("pi-b (this Pi)") && text.contains("pi-a: replica verified"),
        "{text}"
    );
    a.s.verify_all();
}

/// The tree the last side effect of `session` left (its records, as recorded).
fn attested(store: &Store, session: &str) -> String {
    let id = kura_store::store::parse_id(session).expect("id");
    kura_testkit::stack::session_records(store, id)
        .iter()
        .rev()
        .find_map(|r| proto::workspace::change_of(r.record_type, &r.content))
        .map(|c| c.after.to_string())
        .expect("a recorded tree")
}

/// The tree `session`'s first side effect began from.
fn first_before(store: &Store, session: &str) -> Option<String> {
    let id = kura_store::store::parse_id(session).ok()?;
    kura_testkit::stack::session_records(store, id)
        .iter()
        .find_map(|r| proto::workspace::change_of(r.record_type, &r.content))
        .map(|c| c.before.to_string())
}

/// What the attacker of this test has: Pi A's bus identity for `kura serve` (so it may
/// publish under `pi-a`) and A's log key (so its checkpoint verifies).
async fn publish_as_a(a: &Pi, evil: &Store, note: &str) {
    let client =
        a.s.nats
            .client(Role::Serve)
            .await
            .expect("A's serve identity");
    let js = jetstream::with_domain(client, fleet::DOMAIN);
    let (l, records) = kura_store::replica::outgoing(evil, 0)
        .expect("outgoing")
        .expect("leaf 0");
    for columns in records {
        let body = serde_json::to_vec(&ReplMessage::Record(fleet::ReplRecord {
            columns,
            redacted: None,
        }))
        .expect("json");
        js.publish(fleet::record_subject("pi-a"), body.into())
            .await
            .expect("publish")
            .await
            .expect("ack");
    }
    let body = serde_json::to_vec(&ReplMessage::Ledger(l)).expect("json");
    js.publish(fleet::ledger_subject("pi-a"), body.into())
        .await
        .expect("publish")
        .await
        .expect("ack");
    let kv = js
        .get_key_value(fleet::CHECKPOINTS_BUCKET)
        .await
        .expect("bucket");
    kv.put("pi-a", note.as_bytes().to_vec().into())
        .await
        .expect("put");
}

/// A quota the hub's disk cannot reserve is refused by JetStream's error code (not by the
/// words of its message), and the operator is told which flag to lower.
#[test]
fn a_hub_without_room_for_the_quota_says_so_and_what_to_lower() {
    let hub = Hub::start(1, &["pi-a"]);
    // A Pi let in after the hub was set up: its stream is made at the next set-up.
    let added = Command::new(bin("kura"))
        .args(["fleet", "add-pi", "pi-b", "--dir"])
        .arg(hub.dir.path())
        .output()
        .expect("kura");
    assert!(added.status.success(), "{added:?}");
    // A petabyte for each Pi: no test machine's disk reserves it.
    let out = hub.setup_hub(1 << 30);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("hub full"), "{err}");
    assert!(err.contains("lower --mib-per-pi"), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
}

#[test]
fn a_rewritten_history_republished_is_refused_and_the_replica_is_unchanged() {
    let hub = Hub::start(1, &["pi-a", "pi-b"]);
    let mut a = Pi::new("pi-a", &hub, ONE_TURN);
    let mut b = Pi::new("pi-b", &hub, ONE_TURN);
    a.configure(&[&b]);
    b.configure(&[&a]);
    // A's history, written as a person would (`kura` writes through the store).
    {
        let mut store = a.s.store();
        let s = store.create_session("honest").expect("session").session_id;
        for i in 0..3 {
            let l = store.open_ledger(s, &format!("l{i}"), &[]).expect("open");
            store
                .append(
                    l.ledger_id,
                    &proto::NewRecord {
                        record_type: proto::RecordType::AgentThought,
                        content: serde_json::json!({"text": format!("honest {i}")}),
                        author_id: "user:a".into(),
                        metadata: Default::default(),
                    },
                )
                .expect("append");
            store.seal_ledger(l.ledger_id).expect("seal");
        }
        // A record too large for one message travels through the object store, and memory
        // is searchable on the replica.
        let l = store.open_ledger(s, "large", &[]).expect("open");
        store
            .append(
                l.ledger_id,
                &proto::NewRecord {
                    record_type: proto::RecordType::AgentThought,
                    content: serde_json::json!({"text": "x".repeat(200 * 1024)}),
                    author_id: "user:a".into(),
                    metadata: Default::default(),
                },
            )
            .expect("append");
        store
            .append(
                l.ledger_id,
                &proto::NewRecord {
                    record_type: proto::RecordType::MemoryFact,
                    content: serde_json::json!({"text": "the kitchen Pi keeps the greenhouse log"}),
                    author_id: "user:a".into(),
                    metadata: Default::default(),
                },
            )
            .expect("append");
        store.seal_ledger(l.ledger_id).expect("seal");
    }
    // History written before the signer ran: a person accepts it once.
    let accepted = Command::new(bin("kura"))
        .args(["checkpoint", "--trust-current", "--key"])
        .arg(&a.log_key)
        .arg("--db")
        .arg(&a.s.db)
        .output()
        .expect("checkpoint");
    assert!(
        accepted.status.success(),
        "{}",
        String::from_utf8_lossy(&accepted.stderr)
    );
    // B's console browses its replica of A read-only.
    let port = kura_testkit::free_port();
    let person = ed25519_dalek::SigningKey::from_bytes(&[7u8; 32]);
    b.s.extra_env.extend([
        ("KURA_CONSOLE__LISTEN".into(), format!("127.0.0.1:{port}")),
        (
            "KURA_CONSOLE__USERS".into(),
            format!(
                "[{{ name = \"ana\", public_key = \"{}\" }}]",
                hex::encode(person.verifying_key().as_bytes())
            ),
        ),
    ]);
    a.s.spawn("kura", "serve");
    b.s.spawn("kura", "serve");
    b.wait_replica(&a, "honest history");
    kura_testkit::console::wait_http(port);
    let cookie = kura_testkit::console::login(port, &person);
    let get =
        |path: &str| kura_testkit::console::http(port, "GET", path, &[("Cookie", &cookie)], "");
    let (status, _, page) = get("/fleet");
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("pi-b") && page.contains("href=\"/fleet/pi-a\""),
        "{page}"
    );
    let (status, _, page) = get("/fleet/pi-a");
    assert_eq!(status, 200, "{page}");
    let session = page
        .split("href=\"/fleet/pi-a/s/")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("a session link into the replica")
        .to_owned();
    let (status, _, page) = get(&format!("/fleet/pi-a/s/{session}"));
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("honest 0"), "{page}");
    for bad in ["/fleet/pi-c", "/fleet/..%2Fkura", "/fleet/pi-a/s/not-an-id"] {
        let (status, _, page) = get(bad);
        assert_ne!(status, 200, "{bad}: {page}");
        assert!(!page.contains("honest"), "{bad}: {page}");
    }
    let replica = b.replica_path("pi-a");
    // The replica reads like any Kura database: log, search, prove and verify-proof.
    let rp = replica.to_str().expect("utf8");
    let honest: String = Store::open(&replica, &StoreOptions::default())
        .expect("replica")
        .conn()
        .query_row(
            "SELECT session_id FROM sessions WHERE label = 'honest'",
            [],
            |r| r.get(0),
        )
        .expect("the session on the replica");
    let out = b.kura(&["log", &honest, "--db", rp, "--records"]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("honest 1"),
        "{out:?}"
    );
    let out = b.kura(&["search", "greenhouse", "--db", rp]);
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("greenhouse log"),
        "{out:?}"
    );
    let large = Store::open(&replica, &StoreOptions::default())
        .expect("replica")
        .conn()
        .query_row("SELECT max(length(content)) FROM records", [], |r| {
            r.get::<_, i64>(0)
        })
        .expect("large");
    assert!(
        large > 200 * 1024,
        "the large record did not arrive whole: {large}"
    );
    let objects = rt().block_on(async {
        let js = jetstream::with_domain(hub.admin(0).await, fleet::DOMAIN);
        let os = js
            .get_object_store(fleet::objects_bucket("pi-a"))
            .await
            .expect("objects");
        let mut list = os.list().await.expect("list");
        let mut n = 0;
        while let Some(Ok(_)) = list.next().await {
            n += 1;
        }
        n
    });
    assert_eq!(objects, 1, "the large record should be the one object");
    // A proof of one of A's records from B's replica chains on to A's signed checkpoint.
    let (record, ledger, note): (String, String, String) = Store::open(&replica, &StoreOptions::default())
        .expect("replica")
        .conn()
        .query_row(
            "SELECT lr.record_id, lr.ledger_id, (SELECT checkpoint FROM fleet_inbox) FROM ledger_records lr LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect("record");
    let cp_file = b.s.path("a.checkpoint");
    std::fs::write(&cp_file, note).expect("checkpoint file");
    let out = b.kura(&[
        "prove",
        &record,
        "--ledger",
        &ledger,
        "--db",
        rp,
        "--checkpoint",
        cp_file.to_str().expect("utf8"),
        "--log-key",
        &a.log_vkey,
    ]);
    assert!(
        out.status.success(),
        "prove on the replica: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let proof = b.s.path("proof.json");
    std::fs::write(&proof, &out.stdout).expect("proof");
    let out = b.kura(&[
        "verify-proof",
        proof.to_str().expect("utf8"),
        "--log-key",
        &a.log_vkey,
    ]);
    assert!(
        out.status.success(),
        "verify-proof: {}",
        String::from_utf8_lossy(&out.stdout)
    );

    // Broke (review of issue 27): in one shared stream, B could publish under A's next
    // message ids and JetStream dropped A's own ledger as a duplicate. Each Pi has its own
    // stream now: B's messages with A's ids change nothing for A.
    rt().block_on(async {
        let js = jetstream::with_domain(
            b.s.nats.client(Role::Serve).await.expect("B"),
            fleet::DOMAIN,
        );
        for id in [
            fleet::ledger_msg_id("pi-a", a.size(), &"0".repeat(64)),
            fleet::ledger_msg_id("pi-a", a.size() + 1, &"0".repeat(64)),
        ] {
            let msg = jetstream::message::PublishMessage::build()
                .payload("{}".into())
                .message_id(id);
            js.send_publish(fleet::record_subject("pi-b"), msg)
                .await
                .expect("publish")
                .await
                .expect("B may publish on its own subjects");
        }
    });
    {
        let mut store = a.s.store();
        let s = store.create_session("after").expect("session").session_id;
        let l = store.open_ledger(s, "after", &[]).expect("open");
        store
            .append(
                l.ledger_id,
                &proto::NewRecord {
                    record_type: proto::RecordType::AgentThought,
                    content: serde_json::json!({"text": "after B's ids"}),
                    author_id: "user:a".into(),
                    metadata: Default::default(),
                },
            )
            .expect("append");
        store.seal_ledger(l.ledger_id).expect("seal");
    }
    b.wait_replica(&a, "a ledger whose message id B published first");
    let before = kura_testkit::cli::fingerprint(&replica);

    // A Pi may not publish under another Pi's name, and no doorbell crosses the hub.
    rt().block_on(async {
        let client = a.s.nats.client(Role::Serve).await.expect("connect");
        let js = jetstream::with_domain(client, fleet::DOMAIN);
        let spoofed = tokio::time::timeout(Duration::from_secs(5), async {
            js.publish(fleet::ledger_subject("pi-b"), "{}".into())
                .await?
                .await
                .map_err(Into::into)
        })
        .await;
        let spoofed: Result<_, async_nats::Error> =
            spoofed.unwrap_or_else(|_| Err("timed out".into()));
        assert!(spoofed.is_err(), "A published under pi-b: {spoofed:?}");
        let kv = js
            .get_key_value(fleet::CHECKPOINTS_BUCKET)
            .await
            .expect("bucket");
        let put =
            tokio::time::timeout(Duration::from_secs(5), kv.put("pi-b", "forged".into())).await;
        assert!(!matches!(put, Ok(Ok(_))), "A wrote pi-b's checkpoint");

        let doorbell = a.s.nats.client(Role::Operator).await.expect("A operator");
        let mut at_a = doorbell.subscribe("oclaw.v1.>").await.expect("sub");
        let mut at_b =
            b.s.nats
                .client(Role::Operator)
                .await
                .expect("B")
                .subscribe("oclaw.v1.>")
                .await
                .expect("sub");
        let mut at_hub = hub
            .admin(0)
            .await
            .subscribe("oclaw.v1.>")
            .await
            .expect("sub");
        tokio::time::sleep(Duration::from_millis(500)).await;
        doorbell
            .publish(
                "oclaw.v1.hashi.cmd.worker.dispatch",
                "{\"turn_id\":\"x\"}".into(),
            )
            .await
            .expect("publish");
        doorbell.flush().await.expect("flush");
        let here = tokio::time::timeout(Duration::from_secs(2), at_a.next()).await;
        assert!(
            matches!(here, Ok(Some(_))),
            "A's own bus did not deliver its doorbell"
        );
        for (who, sub) in [("pi-b", &mut at_b), ("the hub", &mut at_hub)] {
            let got = tokio::time::timeout(Duration::from_secs(1), sub.next()).await;
            assert!(got.is_err(), "{who} received A's doorbell");
        }
    });

    // The attack: a consistent rewrite of A's history (other content at leaf 0, a checkpoint
    // signed with A's own log key), republished under A's name.
    let evil_dir = tempfile::tempdir().expect("tempdir");
    let mut evil =
        Store::create(evil_dir.path().join("evil.db"), &StoreOptions::default()).expect("evil");
    let s = evil.create_session("honest").expect("session").session_id;
    for i in 0..3 {
        let l = evil.open_ledger(s, &format!("l{i}"), &[]).expect("open");
        evil.append(
            l.ledger_id,
            &proto::NewRecord {
                record_type: proto::RecordType::AgentThought,
                content: serde_json::json!({"text": format!("rewritten {i}")}),
                author_id: "user:a".into(),
                metadata: Default::default(),
            },
        )
        .expect("append");
        evil.seal_ledger(l.ledger_id).expect("seal");
    }
    let key = kura_tlog::checkpoint::LogKey::load(&a.log_key).expect("A's log key");
    let root = kura_tlog::seallog::root(&evil.seal_log(), 3).expect("root");
    let note = key.sign(3, root).expect("sign");
    rt().block_on(publish_as_a(&a, &evil, &note));

    let alarm = b.s.path("replicas/pi-a.alarm");
    let deadline = Instant::now() + MINUTE;
    while !alarm.exists() {
        assert!(Instant::now() < deadline, "no ALARM\n{}", b.s.log("serve"));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        kura_testkit::cli::fingerprint(&replica),
        before,
        "the replica changed"
    );
    let why = std::fs::read_to_string(&alarm).expect("alarm");
    assert!(why.contains("pi-a") && why.contains("rewritten"), "{why}");
    assert!(b.s.log("serve").contains("ALARM"), "{}", b.s.log("serve"));
    let out = b.kura(&["fleet", "status", "--db", b.s.db.to_str().expect("utf8")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("pi-a: ALARM"), "{text}");
    let out = b.kura(&["status", "--db", b.s.db.to_str().expect("utf8")]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("fleet: pi-a: ALARM"),
        "kura status hides the alarm: {text}"
    );
    let (_, _, page) = get("/fleet");
    assert!(
        page.contains("ALARM"),
        "the console's fleet page hides the alarm: {page}"
    );
}

/// Seals one ledger of a thought in `pi`'s own database, as a person would.
fn seal_one(pi: &Pi, text: &str) {
    let mut store = pi.s.store();
    let s = store.create_session(text).expect("session").session_id;
    let l = store.open_ledger(s, "note", &[]).expect("open");
    store
        .append(
            l.ledger_id,
            &proto::NewRecord {
                record_type: proto::RecordType::AgentThought,
                content: serde_json::json!({ "text": text }),
                author_id: "user:a".into(),
                metadata: Default::default(),
            },
        )
        .expect("append");
    store.seal_ledger(l.ledger_id).expect("seal");
}

/// The hub's operator publishes `body` on `pi`'s ledger subject; its stream sequence.
fn forge(hub: &Hub, pi: &str, body: Vec<u8>) -> u64 {
    rt().block_on(async {
        let js = jetstream::with_domain(hub.admin(0).await, fleet::DOMAIN);
        js.publish(fleet::ledger_subject(pi), body.into())
            .await
            .expect("publish")
            .await
            .expect("ack")
            .sequence
    })
}

/// `kura fleet status` on `pi` until it reports an ALARM naming `needle`: its exit code
/// and what it printed (text, then JSON).
fn wait_alarm(pi: &Pi, needle: &str) -> (Option<i32>, String, Option<i32>, String) {
    let db = pi.s.db.to_str().expect("utf8").to_owned();
    let deadline = Instant::now() + MINUTE;
    loop {
        let out = pi.kura(&["fleet", "status", "--db", &db]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if text.contains("ALARM") && text.contains(needle) {
            let json = pi.kura(&["fleet", "status", "--db", &db, "--json"]);
            return (
                out.status.code(),
                text,
                json.status.code(),
                String::from_utf8_lossy(&json.stdout).into_owned(),
            );
        }
        assert!(
            Instant::now() < deadline,
            "no ALARM naming {needle:?} in `kura fleet status`: {text}\n--- serve\n{}",
            pi.s.log("serve")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Regression (issue 35 items 14 and 15): the hub's operator put an invented ledger at Pi
/// A's next position, and A's publisher stopped with an ALARM that `kura fleet status` on A
/// did not show (a plain lag, exit 0), with no documented way back; an unparseable message
/// there made it retry for ever; a receiver kept whichever ledger came first at a place, so
/// a forged one stalled the replica for good. Both messages are the hub's word, not A's:
/// an ALARM naming the stream sequence, shown with exit 1; the operator reseats A, the
/// person removes the ALARM file and restarts kura serve, and A publishes on; B's replica
/// follows through both forgeries and logs each dropped one with its stream sequence.
#[test]
fn a_forged_message_at_a_pis_place_on_the_hub_halts_its_publisher_with_an_alarm_it_can_resume_from()
{
    let hub = Hub::start(3, &["pi-a", "pi-b"]);
    let mut a = Pi::new("pi-a", &hub, ONE_TURN);
    let mut b = Pi::new("pi-b", &hub, ONE_TURN);
    a.configure(&[&b]);
    b.configure(&[&a]);
    seal_one(&a, "first");
    let accepted = Command::new(bin("kura"))
        .args(["checkpoint", "--trust-current", "--key"])
        .arg(&a.log_key)
        .arg("--db")
        .arg(&a.s.db)
        .output()
        .expect("checkpoint");
    assert!(accepted.status.success(), "{accepted:?}");
    a.s.spawn("kura", "serve");
    b.s.spawn("kura", "serve");
    b.wait_replica(&a, "A's first ledger");
    let reseat = |seq: u64| {
        let out = Command::new(bin("kura"))
            .args([
                "fleet",
                "reseat",
                "pi-a",
                "--seq",
                &seq.to_string(),
                "--dir",
            ])
            .arg(hub.dir.path())
            .output()
            .expect("reseat");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let alarm = a.s.path("replicas/pi-a.publish.alarm");
    let restart = |a: &mut Pi| {
        a.s.signal("serve", "TERM");
        a.s.wait_exit("serve", MINUTE);
        a.s.spawn("kura", "serve");
    };

    // Unparseable bytes at A's next place: an ALARM naming its sequence, not a retry loop.
    let junk = forge(&hub, "pi-a", b"not a replication body".to_vec());
    seal_one(&a, "second");
    let (code, text, json_code, json) = wait_alarm(&a, &format!("stream sequence {junk}"));
    assert_eq!(code, Some(1), "an ALARM exits 1: {text}");
    assert_eq!(json_code, Some(1), "with --json too: {json}");
    assert!(text.contains("pi-a (this Pi): ALARM"), "{text}");
    let pis: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert!(
        pis[0]["alarm"]
            .as_str()
            .is_some_and(|a| a.contains(&format!("stream sequence {junk}"))),
        "{json}"
    );
    assert!(alarm.exists(), "the ALARM is kept in {}", alarm.display());
    // `kura status --json` carries the fleet too (issue 35 item 16: it had no fleet section).
    let db = a.s.db.to_str().expect("utf8").to_owned();
    let status = a.kura(&["status", "--json", "--db", &db]);
    let status: serde_json::Value = serde_json::from_slice(&status.stdout).expect("status json");
    assert!(
        status["fleet"][0]["alarm"]
            .as_str()
            .is_some_and(|a| a.contains(&format!("stream sequence {junk}"))),
        "{status}"
    );

    // The documented way back: the operator reseats A; while the ALARM file is there a
    // restarted publisher stays halted and says why; without it, A publishes on.
    reseat(junk);
    restart(&mut a);
    a.s.wait_log("serve", "halted by an earlier ALARM", MINUTE);
    std::fs::remove_file(&alarm).expect("remove the ALARM file");
    restart(&mut a);
    b.wait_replica(&a, "A's ledgers after the junk");
    let out = a.kura(&["fleet", "status", "--db", &db]);
    assert!(out.status.success(), "{out:?}");

    // An invented, parseable ledger at A's next place: the ALARM names its sequence too.
    let mut fake = kura_store::replica::outgoing(&a.s.store(), 1)
        .expect("outgoing")
        .expect("leaf 1")
        .0;
    fake.index = 2;
    fake.ledger_hash = "0".repeat(64);
    let invented = forge(
        &hub,
        "pi-a",
        serde_json::to_vec(&ReplMessage::Ledger(fake)).expect("json"),
    );
    seal_one(&a, "third");
    let (code, text, _, _) = wait_alarm(&a, &format!("stream sequence {invented}"));
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("leaf 2"), "{text}");
    reseat(invented);
    std::fs::remove_file(&alarm).expect("remove the ALARM file");
    restart(&mut a);
    // B held the invented ledger first at leaf 2, and still takes A's own from the checkpoint.
    b.wait_replica(&a, "A's ledgers after the invented one");
    let (origin, replica) = (
        a.s.store(),
        Store::open(b.replica_path("pi-a"), &StoreOptions::default()).expect("replica"),
    );
    for i in 0..a.size() {
        assert_eq!(
            logged_hash(&replica, i).expect("replica leaf"),
            logged_hash(&origin, i).expect("origin leaf"),
            "leaf {i}: the replica holds another ledger than A's own"
        );
    }
    let log = b.s.log("serve");
    for (seq, what) in [
        (junk, "dropped a message that is not a replication body"),
        (invented, "dropped ledger"),
    ] {
        assert!(
            log.lines()
                .any(|l| l.contains(what) && l.contains(&format!("seq={seq}"))),
            "B logs the forgery at {seq}: {what}\n{log}"
        );
    }
}
