//! The console through a real browser (headless Chromium driven over WebDriver) and raw HTTP,
//! on the real daemons: enrol a browser key, log in, watch a session live, approve, deny and
//! edit parked `fs.write` calls from the page; nothing but the login page for strangers;
//! model output rendered as text; history pages that stay small at 100 000 records.

pub(crate) mod browser;
mod bundle;
mod hidden;
mod limits;
mod people;
mod questions;
mod writs;

use proto::SessionId;
use std::time::{Duration, Instant};

use browser::{base, enrolled, shot, text, until};
use ed25519_dalek::{Signer, SigningKey};
use fantoccini::{Client, Locator};
use kura_testkit::console::{http, login, wait_http};
use kura_testkit::free_port;
use kura_testkit::stack::{Stack, session_records};
use proto::record::{NewRecord, RecordType};
use serde_json::json;

const MINUTE: Duration = Duration::from_secs(60);

const POLICY: &str = r#"
[defaults]
read = "allow"
write = "ask"
external = "ask"

[[rules]]
name = "no-secrets"
tool = "fs.write"
args = { path = "secrets/*" }
decision = "deny"
"#;

// Every session's first turn: one write a person must decide, a thought carrying markup.
const SCRIPT: &str = r#"{"turns": [[
  {"thought": "<script>document.title='pwned'</script><img src=x onerror=alert(1)>"},
  {"tool": "fs.write", "args": {"path": "lists/shopping.md", "content": "- rice\n"}},
  {"deliver": "done"}
]]}"#;

/// A console on the stack's database at a free loopback port, trusting `users`.
pub(crate) fn console_env(s: &mut Stack, port: u16, users: &str) {
    s.extra_env
        .retain(|(k, _)| !k.starts_with("KURA_CONSOLE__"));
    let keyring = s.nats.keys_dir().join("identities.toml");
    s.extra_env.extend([
        ("KURA_CONSOLE__LISTEN".into(), format!("127.0.0.1:{port}")),
        ("KURA_CONSOLE__USERS".into(), users.into()),
        ("KURA_SERVE__KEYRING".into(), keyring.display().to_string()),
    ]);
}

/// Attack: a stranger on the network opens the console. Every page sends them to the login
/// page, the event stream and the decision endpoint refuse them, and a logged-in page may
/// not be framed or run scripts from elsewhere.
#[test]
fn an_unauthenticated_client_gets_nothing_but_the_login_page() {
    let mut s = Stack::new(SCRIPT);
    let port = free_port();
    let key = SigningKey::from_bytes(&[5u8; 32]);
    let users = format!(
        "[{{ name = \"alice\", public_key = \"{}\" }}]",
        hex::encode(key.verifying_key().as_bytes())
    );
    console_env(&mut s, port, &users);
    s.spawn("kura", "serve");
    wait_http(port);
    for path in [
        "/",
        "/approvals",
        "/verify",
        "/status",
        "/memory?q=x",
        "/s/01a20000-0000-7000-8000-000000000002",
    ] {
        let (status, head, body) = http(port, "GET", path, &[], "");
        assert_eq!(status, 303, "{path}: {head}");
        assert!(head.contains("location: /login"), "{path}: {head}");
        assert!(body.is_empty(), "{path} leaked a body: {body}");
    }
    assert_eq!(http(port, "GET", "/events", &[], "").0, 401);
    let (status, _, _) = http(
        port,
        "POST",
        "/api/decide",
        &[("Content-Type", "application/json")],
        "{}",
    );
    assert_eq!(status, 401);
    let (status, head, body) = http(port, "GET", "/login", &[], "");
    assert_eq!(status, 200);
    assert!(body.contains("Log in with this browser"), "{body}");
    assert!(
        head.contains("x-frame-options: deny") && head.contains("frame-ancestors 'none'"),
        "{head}"
    );
    assert!(head.contains("script-src 'self'"), "{head}");
    // A forged login (a key the console does not trust) and a bad signature are refused.
    let mallory = SigningKey::from_bytes(&[6u8; 32]);
    let (_, _, page) = http(port, "GET", "/login", &[], "");
    let challenge = page
        .split("data-challenge=\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("challenge");
    let forged = json!({"challenge": challenge, "public_key": hex::encode(mallory.verifying_key().as_bytes()),
        "signature": hex::encode(mallory.sign(b"anything").to_bytes())}).to_string();
    assert_eq!(
        http(
            port,
            "POST",
            "/api/login",
            &[("Content-Type", "application/json")],
            &forged
        )
        .0,
        403
    );
    // A real login, then a change without the CSRF header is refused.
    let cookie = login(port, &key);
    let (status, _, body) = http(port, "GET", "/", &[("Cookie", &cookie)], "");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Sessions"), "{body}");
    let (status, _, _) = http(
        port,
        "POST",
        "/api/decide",
        &[("Cookie", &cookie), ("Content-Type", "application/json")],
        "{}",
    );
    assert_eq!(status, 403, "a change without the CSRF token");
    s.shutdown_cleanly();
}

/// The history of a 100 000-record session is paged: its page holds one page of records
/// and takes about as long as a 1 000-record session's (measured in the same run).
#[test]
fn history_pages_stay_small_and_fast_at_100_000_records() {
    let mut s = Stack::new(SCRIPT);
    let mut store = s.store();
    let mut session_of = |n: usize| {
        let session = store.create_session("big").expect("session").session_id;
        let ledger = store
            .open_ledger(session, "bulk", &[])
            .expect("ledger")
            .ledger_id;
        let batch: Vec<NewRecord> = (0..n)
            .map(|i| NewRecord {
                record_type: RecordType::AgentThought,
                content: json!({"text": format!("step {i}")}),
                author_id: "agent:bench".into(),
                metadata: Default::default(),
            })
            .collect();
        for chunk in batch.chunks(10_000) {
            store.append_batch(ledger, chunk).expect("append");
        }
        session
    };
    let small = session_of(1_000);
    let big = session_of(100_000);
    drop(store);
    let port = free_port();
    let key = SigningKey::from_bytes(&[5u8; 32]);
    let users = format!(
        "[{{ name = \"alice\", public_key = \"{}\" }}]",
        hex::encode(key.verifying_key().as_bytes())
    );
    console_env(&mut s, port, &users);
    s.spawn("kura", "serve");
    wait_http(port);
    let cookie = login(port, &key);
    let time = |session: SessionId| {
        let path = format!("/s/{session}");
        let _ = http(port, "GET", &path, &[("Cookie", &cookie)], ""); // warm
        let t = Instant::now();
        let mut body = String::new();
        for _ in 0..5 {
            let (status, _, b) = http(port, "GET", &path, &[("Cookie", &cookie)], "");
            assert_eq!(status, 200);
            body = b;
        }
        (t.elapsed() / 5, body)
    };
    let (t_small, _) = time(small);
    let (t_big, body) = time(big);
    let shown = body.matches("class=\"record ").count();
    println!(
        "history page: 1 000 records {t_small:?}, 100 000 records {t_big:?}, {} KiB, {shown} records shown",
        body.len() / 1024
    );
    assert_eq!(shown, 200, "one page of records");
    assert!(body.contains("later records"), "a link to the next page");
    assert!(body.len() < 512 * 1024, "page is {} bytes", body.len());
    let ratio = t_big.as_secs_f64() / t_small.as_secs_f64().max(1e-4);
    assert!(
        ratio < 3.0,
        "100k-record page {t_big:?} vs 1k {t_small:?} (ratio {ratio:.2})"
    );
    s.shutdown_cleanly();
}

/// Clicks `decision` on the first waiting request the page has verified, after typing `note`
/// (and, for an edit, the new arguments); returns the outcome line.
pub(crate) async fn decide_first(
    c: &Client,
    decision: &str,
    note: &str,
    edited: Option<&str>,
    screenshot: Option<&str>,
) -> String {
    c.goto(&format!("{}/approvals", base(c).await))
        .await
        .expect("approvals");
    until(
        c,
        "a verified request",
        "document.querySelector('article.approval form.decide:not([hidden])')",
    )
    .await;
    let form = c
        .find(Locator::Css("article.approval form.decide"))
        .await
        .expect("form");
    form.find(Locator::Css("input[name=note]"))
        .await
        .expect("note")
        .send_keys(note)
        .await
        .expect("type");
    if let Some(args) = edited {
        form.find(Locator::Css("details.edit summary"))
            .await
            .expect("edit")
            .click()
            .await
            .expect("open");
        let area = form
            .find(Locator::Css("textarea[name=arguments]"))
            .await
            .expect("area");
        area.clear().await.expect("clear");
        area.send_keys(args).await.expect("type args");
    }
    if let Some(name) = screenshot {
        shot(c, name).await;
    }
    form.find(Locator::Css(&format!("button[data-decision={decision}]")))
        .await
        .expect("button")
        .click()
        .await
        .expect("click");
    until(
        c,
        "an outcome",
        "document.querySelector('article.approval[data-decided]')",
    )
    .await;
    text(c, "article.approval form.decide .outcome").await
}

/// The whole console in a real browser: enrol, log in, a session seen live, then three parked
/// `fs.write` calls decided from the page — approved, denied with a reason, approved with
/// edited arguments — each signed in the browser and checked by aegis; the turns resume and
/// the ledger shows what ran.
#[test]
fn a_person_enrols_logs_in_and_approves_denies_and_edits_from_the_browser() {
    let mut s = Stack::new(SCRIPT);
    std::fs::write(s.path("policy.toml"), POLICY).expect("policy");
    let port = free_port();
    let b = enrolled(&mut s, port);
    let (rt, c, url) = (&b.rt, &b.c, b.url.clone());
    // Live: a session submitted now shows up without a reload, waiting for a person.
    let first = s.submit("make the shopping list");
    rt.block_on(async {
        until(c, "the session, live", "document.querySelectorAll('table.sessions tbody tr').length === 1 && document.body.dataset.refreshed").await;
        until(c, "its waiting approval, live", "document.querySelector('table.sessions a.badge')").await;
        shot(c, "sessions").await;
        // Approve it from the page; aegis checks the browser's signature; the turn resumes.
        let out = decide_first(c, "approve", "groceries are fine", None, Some("approvals")).await;
        assert!(out.contains("approved by user:alice"), "{out}");
    });
    let st = s.wait_complete(first, MINUTE);
    let sid = st.session_id.expect("session");
    assert_eq!(
        std::fs::read_to_string(s.path(&format!("ws/{sid}/lists/shopping.md"))).expect("written"),
        "- rice\n"
    );

    // Deny another, with a reason: the file is never written.
    let second = s.submit("make another list");
    let out = rt.block_on(async { decide_first(c, "deny", "not today", None, None).await });
    assert!(out.contains("denied by user:alice"), "{out}");
    let st2 = s.wait_complete(second, MINUTE);
    let sid2 = st2.session_id.expect("session");
    assert!(
        !s.path(&format!("ws/{sid2}/lists/shopping.md")).exists(),
        "a denied write did not run"
    );

    // Attacks on the third request, from inside the page. A lying server shows other
    // arguments than the record holds: the browser's own hash check refuses to show them or
    // offer a decision; a signature over what it showed is refused by aegis; and without
    // the browser's signature the server cannot approve at all.
    let third = s.submit("and a third");
    let (shown, signed, unsigned) = rt.block_on(async {
        c.goto(&format!("{url}/approvals")).await.expect("approvals");
        until(c, "a verified request", "document.querySelector('article.approval form.decide:not([hidden])')").await;
        let shown = c
            .execute_async(
                "const done = arguments[0]; const a = document.querySelector('article.approval');
                 const lie = JSON.parse(a.dataset.content);
                 lie.arguments = {path: '.ssh/authorized_keys', content: 'ssh-ed25519 AAAA attacker'};
                 a.dataset.content = jcs(lie);
                 a.querySelector('form.decide').hidden = true;
                 a.querySelector('.verified').hidden = true;
                 initApproval(a).then(() => done(a.querySelector('.check').textContent + '|' +
                     a.querySelector('form.decide').hidden + '|' + a.querySelector('.verified').hidden));",
                vec![],
            )
            .await
            .expect("lie");
        let post = |with_signature: bool| {
            format!(
                "const done = arguments[0]; (async () => {{
                   const a = document.querySelector('article.approval');
                   const d = {{request_id: a.dataset.requestId, decision: 'approve', approver: 'alice',
                              note: '', signed_at: new Date().toISOString()}};
                   if ({with_signature}) {{
                     const h = await recordHash('approval.request', a.dataset.author, a.dataset.content);
                     d.signature = await sign(await loadKey(), enc.encode(jcs(Object.assign({{kind: 'kura.approval.v1', request_hash: h}}, d))));
                   }}
                   const r = await fetch('/api/decide', {{method: 'POST',
                     headers: {{'content-type': 'application/json', 'x-kura-csrf': csrf()}}, body: JSON.stringify(d)}});
                   done(await r.json());
                 }})();"
            )
        };
        let signed = c.execute_async(&post(true), vec![]).await.expect("signed lie");
        let unsigned = c.execute_async(&post(false), vec![]).await.expect("unsigned");
        (shown, signed, unsigned)
    });
    let shown = shown.as_str().unwrap_or_default().to_owned();
    assert!(
        shown.starts_with("Refused: the content does not match") && shown.ends_with("|true|true"),
        "{shown}"
    );
    assert_eq!(signed["ok"], json!(false), "{signed}");
    assert!(
        signed["message"]
            .as_str()
            .is_some_and(|m| m.contains("signature")),
        "{signed}"
    );
    assert_eq!(unsigned["ok"], json!(false), "{unsigned}");

    // Edit it: the tool runs with the person's arguments, and the ledger shows both.
    let edited = r#"{"path": "lists/edited.md", "content": "- miso\n"}"#;
    let out = rt.block_on(async {
        decide_first(c, "approve-edited", "miso instead", Some(edited), None).await
    });
    assert!(out.contains("with edited arguments"), "{out}");
    let st3 = s.wait_complete(third, MINUTE);
    let sid3 = st3.session_id.expect("session");
    assert!(
        !s.path(&format!("ws/{sid3}/lists/shopping.md")).exists(),
        "the requested call did not run"
    );
    assert_eq!(
        std::fs::read_to_string(s.path(&format!("ws/{sid3}/lists/edited.md"))).expect("edited"),
        "- miso\n"
    );
    let store = s.store();
    let recs = session_records(&store, sid3);
    let call = recs
        .iter()
        .find(|r| r.record_type.as_str() == "tool.call")
        .expect("call");
    assert_eq!(call.content["arguments"]["path"], "lists/shopping.md");
    let vote = recs
        .iter()
        .find(|r| r.author_id == "user:alice")
        .expect("vote");
    assert_eq!(vote.content["arguments"]["path"], "lists/edited.md");
    let result = recs
        .iter()
        .find(|r| r.record_type.as_str() == "tool.result")
        .expect("result");
    assert_eq!(
        result.content["arguments_edited"]["path"],
        "lists/edited.md"
    );

    // The history page: model markup is text, never markup; and the other pages render.
    rt.block_on(async {
        c.goto(&format!("{url}/s/{sid3}")).await.expect("history");
        until(
            c,
            "the history",
            "document.querySelector('.t-tool-result')",
        )
        .await;
        let scripts = c
            .execute("return document.querySelectorAll('script').length;", vec![])
            .await
            .expect("count");
        assert_eq!(scripts, json!(1), "only the console's own script");
        let imgs = c
            .execute(
                "return document.querySelectorAll('main img').length;",
                vec![],
            )
            .await
            .expect("imgs");
        assert_eq!(imgs, json!(0));
        let shown = c
            .execute(
                "return document.querySelector('.t-agent-thought pre').textContent;",
                vec![],
            )
            .await
            .expect("thought");
        assert!(
            shown
                .as_str()
                .is_some_and(|t| t.contains("<script>document.title")),
            "{shown}"
        );
        assert_ne!(c.title().await.expect("title"), "pwned");
        shot(c, "history").await;
        // The diff picker: the newest ledger against the oldest.
        c.find(Locator::Css("form.diff button")).await.expect("diff").click().await.expect("click");
        until(c, "the diff", "document.querySelector('main h1')?.textContent === 'Diff' && document.querySelector('.only-a .t-tool-result')").await;
        shot(c, "diff").await;
        for page in ["verify", "status", "memory?q=rice"] {
            c.goto(&format!("{url}/{page}")).await.expect("page");
            until(c, page, "document.querySelector('main h1')").await;
            shot(c, page.split('?').next().unwrap_or(page)).await;
        }
        c.clone().close().await.expect("close");
    });
    drop(b);
    s.verify_all();
    s.shutdown_cleanly();
}

/// Waits for `kura serve` to exit and says it failed.
fn serve_refuses_to_start(s: &mut Stack) {
    let deadline = Instant::now() + MINUTE;
    let status = loop {
        if let Some((_, st)) = s.exited().into_iter().find(|(n, _)| n == "serve") {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "serve still runs: {}",
            s.log("serve")
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert!(!status.success());
}

/// Beyond loopback the console needs TLS: without a certificate `kura serve` refuses to
/// start (saying why), and with the bus server's certificate too (issue 24 item 1: the
/// HTTP-facing process must never hold the key that can play the bus server); with its own
/// certificate a client pinning the local CA gets the login page over HTTPS.
#[test]
fn beyond_loopback_the_console_is_tls_only() {
    let mut s = Stack::new(SCRIPT);
    let port = free_port();
    s.extra_env
        .push(("KURA_CONSOLE__LISTEN".into(), format!("0.0.0.0:{port}")));
    s.spawn("kura", "serve");
    serve_refuses_to_start(&mut s);
    assert!(s.log("serve").contains("needs TLS"), "{}", s.log("serve"));

    let keys = s.nats.keys_dir().to_path_buf();
    let tls = |cert: &str, key: &str| {
        [
            (
                "KURA_CONSOLE__TLS_CERT".to_string(),
                keys.join(cert).display().to_string(),
            ),
            (
                "KURA_CONSOLE__TLS_KEY".to_string(),
                keys.join(key).display().to_string(),
            ),
        ]
    };
    let base = s.extra_env.clone();
    s.extra_env
        .extend(tls("nats-server.pem", "nats-server-key.pem"));
    s.spawn("kura", "serve");
    serve_refuses_to_start(&mut s);
    assert!(
        s.log("serve").contains("bus server's certificate"),
        "{}",
        s.log("serve")
    );
    s.extra_env = base;
    s.extra_env.extend(tls("console.pem", "console-key.pem"));
    s.spawn("kura", "serve");
    wait_http(port);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("rt");
    let page = rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        use tokio_rustls::rustls;
        use tokio_rustls::rustls::pki_types::pem::PemObject;
        let mut roots = rustls::RootCertStore::empty();
        for cert in
            rustls::pki_types::CertificateDer::pem_file_iter(keys.join("nats-ca.pem")).expect("ca")
        {
            roots.add(cert.expect("cert")).expect("add");
        }
        let provider = std::sync::Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_root_certificates(roots)
            .with_no_client_auth();
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
        let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("tcp");
        let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
        let mut tls = connector
            .connect(name, tcp)
            .await
            .expect("a TLS handshake against the pinned CA");
        tls.write_all(
            format!("GET /login HTTP/1.1\r\nHost: localhost:{port}\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .expect("send");
        let mut out = Vec::new();
        let _ = tls.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    });
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("Log in with this browser"), "{page}");
    // Plain HTTP to the TLS port gets no page.
    let (status, _, body) = http(port, "GET", "/login", &[], "");
    assert!(
        status != 200 && !body.contains("Log in"),
        "plain HTTP answered: {status} {body}"
    );
    s.shutdown_cleanly();
}

/// Issue 36: the console showed a model's answer but not what the model was shown. Beside
/// an answer of a real provider (the fake OpenAI-compatible server) the history links to the
/// request, rebuilt from the store and checked against the hash the record carries.
#[test]
fn the_console_shows_what_the_model_was_shown_beside_its_answer() {
    let mut s = Stack::new(SCRIPT);
    let url = kura_testkit::openai::start(
        (10, 5),
        |_| json!({"role": "assistant", "content": "three items: rice, miso, nori"}),
    );
    s.extra_env.extend([
        ("KURA_PROVIDER__KIND".into(), "openai".into()),
        ("KURA_PROVIDER__BASE_URL".into(), url),
        ("KURA_PROVIDER__MODEL".into(), "tiny".into()),
    ]);
    let port = free_port();
    let key = SigningKey::from_bytes(&[5u8; 32]);
    let users = format!(
        "[{{ name = \"alice\", public_key = \"{}\" }}]",
        hex::encode(key.verifying_key().as_bytes())
    );
    console_env(&mut s, port, &users);
    for (b, i) in [
        ("mikado", "mikado"),
        ("minato", "minato"),
        ("hashi", "hashi"),
        ("aegis", "aegis"),
    ] {
        s.spawn(b, i);
    }
    s.spawn("kura", "serve");
    wait_http(port);
    let st = s.wait_complete(s.submit("List what we need for dinner"), MINUTE);
    let session = st.session_id.expect("session");
    let answer = session_records(&s.store(), session)
        .into_iter()
        .find(|r| r.record_type == RecordType::ModelPrompt)
        .expect("the answer is preceded by what it was sent");
    let cookie = login(port, &key);
    let (status, _, history) = http(
        port,
        "GET",
        &format!("/s/{session}"),
        &[("Cookie", &cookie)],
        "",
    );
    assert_eq!(status, 200, "{history}");
    let link = format!("/prompt/{}", answer.record_id);
    assert!(
        history.contains(&link) && history.contains("what the model was shown"),
        "no link to the prompt beside the answer:\n{history}"
    );
    let (status, _, shown) = http(port, "GET", &link, &[("Cookie", &cookie)], "");
    assert_eq!(status, 200, "{shown}");
    assert!(shown.contains("verified:"), "{shown}");
    assert!(
        shown.contains(answer.content["sha256"].as_str().unwrap_or("none")),
        "{shown}"
    );
    assert!(
        shown.contains("List what we need for dinner"),
        "the instruction it was shown:\n{shown}"
    );
    s.shutdown_cleanly();
}
