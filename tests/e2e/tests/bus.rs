//! The bus as an attacker meets it: nobody connects without a listed nkey over TLS, and
//! every identity may use exactly its own subjects — no rogue queue members, no eavesdropping
//! on requests' content, no answering for someone else.

use std::time::Duration;

use futures::StreamExt as _;
use kura_runtime::bus::Credentials;
use kura_runtime::identity::Role;
use kura_testkit::NatsServer;
use kura_testkit::stack::Stack;

const MINUTE: Duration = Duration::from_secs(60);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().expect("runtime")
}

/// Messages `sub` holds after a short wait (the server has had time to deliver).
async fn drain(sub: &mut async_nats::Subscriber, wait: Duration) -> Vec<async_nats::Message> {
    let mut got = Vec::new();
    while let Ok(Some(m)) = tokio::time::timeout(wait, sub.next()).await {
        got.push(m);
    }
    got
}

/// Attack: the bundled nats-server had no authentication; anyone who reached the port could
/// read and write every subject.
#[test]
fn an_unauthenticated_or_unlisted_client_is_refused() {
    let nats = NatsServer::start();
    let rt = rt();
    // No TLS, no key.
    let plain = rt.block_on(
        async_nats::ConnectOptions::new()
            .connection_timeout(Duration::from_secs(3))
            .connect(nats.url()),
    );
    assert!(plain.is_err(), "a plain client connected");
    // TLS with the pinned CA, but no key.
    let anonymous = rt.block_on(
        Credentials {
            key: None,
            ca: Some(nats.ca()),
        }
        .connect_once("anonymous", &nats.url()),
    );
    let err = anonymous.expect_err("an anonymous TLS client connected");
    assert!(format!("{err:#}").contains("authorization"), "{err:#}");
    // A well-formed key nobody listed.
    let stranger = rt.block_on(
        Credentials {
            key: Some(std::sync::Arc::new(nkeys::KeyPair::new_user())),
            ca: Some(nats.ca()),
        }
        .connect_once("stranger", &nats.url()),
    );
    let err = stranger.expect_err("an unlisted key connected");
    assert!(format!("{err:#}").contains("kura keys"), "{err:#}");
    // A listed key, but a client that trusts the system's CAs rather than the pinned one.
    let unpinned = rt.block_on(
        Credentials {
            key: nats.credentials(Role::Minato).expect("creds").key,
            ca: None,
        }
        .connect_once("unpinned", &nats.url()),
    );
    assert!(unpinned.is_err(), "TLS without the pinned CA succeeded");
    // The control: the real key and CA connect.
    assert!(rt.block_on(nats.client(Role::Minato)).is_ok());
}

/// Attack: any client could publish completions, read approval requests, or answer for
/// aegis. A client holding minato's key gets minato's subjects and nothing else.
#[test]
fn a_client_with_another_services_key_cannot_use_its_subjects() {
    let nats = NatsServer::start();
    let s = proto::subjects::Subjects::default();
    rt().block_on(async {
        let operator = nats.client(Role::Operator).await.expect("operator");
        let minato = nats.client(Role::Minato).await.expect("minato");
        let hashi = nats.client(Role::Hashi).await.expect("hashi");
        let mut watch = operator.subscribe(s.worker_complete()).await.expect("sub");
        // minato listens where only aegis may: it hears nothing.
        let mut eaves = minato.subscribe(s.approval_pending()).await.expect("sub");
        operator.flush().await.expect("flush");
        minato.flush().await.expect("flush");
        minato
            .publish(s.worker_complete(), "{}".into())
            .await
            .expect("publish");
        minato.flush().await.expect("flush");
        operator
            .publish(s.approval_pending(), "{}".into())
            .await
            .expect("publish");
        operator.flush().await.expect("flush");
        let wait = Duration::from_millis(500);
        assert!(
            drain(&mut watch, wait).await.is_empty(),
            "minato's key published a completion"
        );
        assert!(
            drain(&mut eaves, wait).await.is_empty(),
            "minato's key read aegis's requests"
        );
        // The control: hashi's key may publish completions.
        hashi
            .publish(s.worker_complete(), "{}".into())
            .await
            .expect("publish");
        hashi.flush().await.expect("flush");
        assert_eq!(drain(&mut watch, wait).await.len(), 1, "hashi's completion");
    });
}

/// Attack: a rogue member of hashi's queue group swallowed dispatch doorbells, so turns
/// waited for the next poll. Only hashi's key may join, and only in the `hashi` queue.
#[test]
fn a_rogue_queue_member_cannot_swallow_dispatch_doorbells() {
    let script = r#"{"turns": [[{"deliver": "done"}]]}"#;
    let mut s = Stack::new(script);
    // minato polls as usual: a submit's own doorbell is best effort (a one-shot CLI may exit
    // before the server has read it; CI once lost request 6's that way, and with minato
    // polling every ten minutes the test failed on a doorbell it is not about). hashi polls
    // so rarely that every turn below reaches it only through a dispatch doorbell.
    s.spawn("minato", "minato");
    s.extra_env
        .push(("KURA_POLL_INTERVAL_MS".into(), "600000".into()));
    s.spawn("hashi", "hashi");
    s.wait_log("hashi", "NATS connected", MINUTE);
    s.wait_log("minato", "NATS connected", MINUTE);
    let subject = proto::subjects::Subjects::default().worker_dispatch();
    let rt = rt();
    let mut rogues = Vec::new();
    for role in [Role::Minato, Role::Submit, Role::Aegis] {
        let c = rt.block_on(s.nats.client(role)).expect("connect");
        let sub = rt
            .block_on(c.queue_subscribe(subject.clone(), "hashi".into()))
            .expect("sub");
        rt.block_on(c.flush()).expect("flush");
        rogues.push((role, c, sub));
    }
    // hashi's own key, outside the queue: it could read every doorbell.
    let hashi = rt.block_on(s.nats.client(Role::Hashi)).expect("connect");
    let mut outside = rt.block_on(hashi.subscribe(subject)).expect("sub");
    rt.block_on(hashi.flush()).expect("flush");
    let requests: Vec<i64> = (0..6).map(|n| s.submit(&format!("turn {n}"))).collect();
    for r in requests {
        s.wait_complete(r, MINUTE);
    }
    for (role, _c, sub) in &mut rogues {
        let got = rt.block_on(drain(sub, Duration::from_millis(200)));
        assert!(
            got.is_empty(),
            "{role:?} joined the hashi queue and got {}",
            got.len()
        );
    }
    assert!(
        rt.block_on(drain(&mut outside, Duration::from_millis(200)))
            .is_empty(),
        "hashi's key read dispatches outside its queue"
    );
    s.verify_all();
}

/// Attack: the pending list carried every request's arguments to any subscriber of `>`.
/// Now they travel only to the asking approver's own inbox; other keys cannot read inboxes.
#[test]
fn request_content_does_not_cross_the_bus_to_other_keys() {
    let script = r#"{"turns": [[{"tool": "fs.write", "args": {"path": "plan.md", "content": "SECRET-CONTENT-7"}}, {"deliver": "done"}]]}"#;
    let mut s = Stack::new(script);
    std::fs::write(
        s.path("policy.toml"),
        "[defaults]\nread = \"allow\"\nwrite = \"ask\"\nexternal = \"ask\"\n",
    )
    .expect("policy");
    let key = s.new_approver("ana");
    s.spawn("aegis", "aegis");
    s.spawn("minato", "minato");
    s.spawn("hashi", "hashi");
    s.submit("write the plan");
    // Asked of people (not merely filed): only then does `aegis pending` list it.
    s.wait_until("an ask", MINUTE, |store| {
        store
            .conn()
            .query_row(
                "SELECT count(*) FROM approvals WHERE state = 'asked'",
                [],
                |r| r.get::<_, i64>(0),
            )
            .unwrap_or(0)
            > 0
    });
    let rt = rt();
    let (mut listeners, mut clients) = (Vec::new(), Vec::new());
    for role in [Role::Minato, Role::Hashi, Role::Submit, Role::Mikado] {
        let c = rt.block_on(s.nats.client(role)).expect("connect");
        for subject in [">", "_INBOX.>"] {
            let sub = rt.block_on(c.subscribe(subject)).expect("sub");
            listeners.push((role, subject, sub));
        }
        rt.block_on(c.flush()).expect("flush");
        clients.push(c);
    }
    let operator = rt
        .block_on(s.nats.client(Role::Operator))
        .expect("operator");
    let mut control = rt.block_on(operator.subscribe("_INBOX.>")).expect("sub");
    rt.block_on(operator.flush()).expect("flush");
    let out = std::process::Command::new(kura_testkit::bin("aegis"))
        .args(["pending", "--json", "--key"])
        .arg(&key)
        .env("KURA_NATS_URL", s.nats.url())
        .env("KURA_NATS_CA", s.nats.ca())
        .env("KURA_AEGIS__REPLY_KEY", s.nats.signer(Role::Aegis))
        .output()
        .expect("aegis pending");
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(
        shown.contains("SECRET-CONTENT-7"),
        "the approver sees it: {shown}"
    );
    let seen = |msgs: &[async_nats::Message]| {
        msgs.iter()
            .any(|m| String::from_utf8_lossy(&m.payload).contains("SECRET-CONTENT-7"))
    };
    assert!(
        seen(&rt.block_on(drain(&mut control, Duration::from_millis(300)))),
        "the control: the content did cross the wire to ana's inbox"
    );
    for (role, subject, sub) in &mut listeners {
        let got = rt.block_on(drain(sub, Duration::from_millis(100)));
        assert!(
            got.is_empty() && !seen(&got),
            "{role:?} read {subject}: {} messages",
            got.len()
        );
    }
}

/// Broke (issue 24 item 10): `aegis pending` failed on the first unsigned reply instead of
/// waiting for aegis's signed one, so anyone allowed to answer (here the operator identity)
/// could keep a person from ever seeing the list. Unsigned replies are skipped now.
#[test]
fn a_rogue_unsigned_reply_does_not_stop_aegis_pending() {
    let mut s = Stack::new(r#"{"turns": []}"#);
    let key = s.new_approver("ana");
    s.spawn("aegis", "aegis");
    let (url, ca, reply_key) = (s.nats.url(), s.nats.ca(), s.nats.signer(Role::Aegis));
    let pending = || {
        std::process::Command::new(kura_testkit::bin("aegis"))
            .args(["pending", "--json", "--key"])
            .arg(&key)
            .env("KURA_NATS_URL", &url)
            .env("KURA_NATS_CA", &ca)
            .env("KURA_AEGIS__REPLY_KEY", &reply_key)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("aegis pending")
    };
    // aegis answers before the rogue joins.
    let ready = std::time::Instant::now() + Duration::from_secs(60);
    while !pending().wait().expect("pending").success() {
        assert!(std::time::Instant::now() < ready, "{}", s.log("aegis"));
        std::thread::sleep(Duration::from_millis(100));
    }
    let rt = rt();
    let subject = proto::subjects::Subjects::default().approval_pending();
    // The rogue answers every question at once, unsigned, and counts its answers.
    let rogue =
        kura_testkit::rogue::Rogue::start(&rt, &s.nats, subject, r#"{"items":[],"next":null}"#);
    // aegis is held still while the question is asked, so the rogue's answer comes first.
    s.signal("aegis", "STOP");
    let asking = pending();
    let rogue_first = rogue.wait_answered(Duration::from_secs(4));
    s.signal("aegis", "CONT");
    let out = asking.wait_with_output().expect("aegis pending");
    assert!(
        out.status.success(),
        "aegis's signed answer is waited for: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The control: the rogue did answer first, unsigned.
    assert!(rogue_first, "the rogue never answered");
}

/// Broke (issue 24 item 15): a key the bus does not list said only "authorization violation",
/// and a wrong CA only that NATS was unreachable. Each now names the key or the CA, and what
/// to do next.
#[test]
fn a_refused_key_or_a_wrong_ca_is_named_with_what_to_do() {
    let nats = NatsServer::start();
    let dir = tempfile::tempdir().expect("tmp");
    let key = dir.path().join("ana.key");
    let out = std::process::Command::new(kura_testkit::bin("aegis"))
        .args(["keygen", "--name", "ana", "--key"])
        .arg(&key)
        .output()
        .expect("keygen");
    assert!(out.status.success());
    let bus_key = kura_runtime::identity::bus_key(&kura_testkit::stack::approver_key(&key))
        .expect("bus")
        .public_key();
    let other = dir.path().join("other-keys");
    kura_runtime::identity::init(&other, &[]).expect("other install");
    let pending = |ca: &std::path::Path| {
        let out = std::process::Command::new(kura_testkit::bin("aegis"))
            .args(["pending", "--key"])
            .arg(&key)
            .env("KURA_NATS_URL", nats.url())
            .env("KURA_NATS_CA", ca)
            .env("KURA_AEGIS__REPLY_KEY", nats.signer(Role::Aegis))
            .output()
            .expect("aegis pending");
        assert_eq!(out.status.code(), Some(2));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // Not listed: the refusal names ana's bus key and the command that lists it.
    let err = pending(&nats.ca());
    assert!(
        err.contains(&bus_key) && err.contains("kura keys add-approver"),
        "{err}"
    );
    // Another install's CA: the refusal names the pinned file and what to copy.
    let wrong = other.join(kura_runtime::identity::CA_FILE);
    let err = pending(&wrong);
    assert!(
        err.contains(&wrong.display().to_string()) && err.contains("nats-ca.pem"),
        "{err}"
    );
}

/// Issue 35 (17): `minato submit` pinning another installation's CA was told "nothing
/// answers … is kura-mikado running" — the server answered and TLS failed. The request is
/// still queued (SQLite is the truth), and the warning names the CA and what to copy.
#[test]
fn a_bus_ca_from_another_installation_is_named_not_taken_for_silence() {
    let mut s = Stack::new(r#"{"turns": [[{"deliver": "unused"}]]}"#);
    let other = NatsServer::start();
    let wrong = other.ca().display().to_string();
    s.extra_env.push(("KURA_NATS_CA".into(), wrong.clone()));
    let mut cmd = std::process::Command::new(kura_testkit::bin("minato"));
    cmd.args(["submit", "hello", "--json"]);
    s.env(&mut cmd, "submit");
    let out = cmd.output().expect("minato submit");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the request is queued without the bus: {err}"
    );
    assert!(!err.contains("nothing answers"), "{err}");
    assert!(err.contains(&wrong) && err.contains("nats-ca.pem"), "{err}");
}
