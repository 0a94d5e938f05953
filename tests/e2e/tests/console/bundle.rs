//! Proofs anyone can check in a browser (issue 39, ★): `kura bundle` writes a session's
//! proof in one file; the static page docs/verify/index.html, opened from `file://` in
//! Chromium with no network, checks it with WebCrypto — and names what fails when one byte
//! of a record, a root, a seal or the checkpoint is flipped, as `kura verify --bundle` does.

use std::path::Path;

use fantoccini::Locator;
use kura_testkit::free_port;
use kura_testkit::stack::Stack;
use serde_json::Value;

use super::MINUTE;
use super::browser::{Browser, eval, until};

const WORK: &str = r#"{"turns": [[
  {"thought": "Writing the list: \u00e9t\u00e9, 1.5e3, \"quotes\" and \\ backslashes"},
  {"tool": "fs.write", "args": {"path": "list.md", "content": "- rice\n"}},
  {"deliver": "wrote list.md"}
]]}"#;

/// `b` with one character of `field` changed (the bundle's JSON pointer to a string).
fn flipped(b: &Value, pointer: &str) -> Value {
    let mut b = b.clone();
    let s = b
        .pointer_mut(pointer)
        .and_then(|v| v.as_str().map(str::to_owned))
        .expect(pointer);
    // Flip one character inside the text (not a quote or a brace): a hex digit or a letter.
    let i = s
        .char_indices()
        .find(|(_, c)| c.is_ascii_alphanumeric())
        .map(|(i, _)| i)
        .expect("a letter");
    let c = s.as_bytes()[i];
    let new = if c == b'a' { 'b' } else { 'a' };
    let changed = format!("{}{new}{}", &s[..i], &s[i + 1..]);
    *b.pointer_mut(pointer).expect(pointer) = Value::String(changed);
    b
}

#[test]
fn a_bundle_checks_in_the_browser_offline_and_a_flipped_byte_is_named() {
    let mut s = Stack::new(WORK);
    for d in ["minato", "hashi", "aegis"] {
        s.spawn(d, d);
    }
    let done = s.wait_complete(s.submit("write the list"), MINUTE);
    let session = done.session_id.expect("session").to_string();
    let key = s.path("log.key");
    let vkey = s.cli().ok(&[
        "log-key",
        "init",
        "--out",
        key.to_str().expect("utf8"),
        "--name",
        "kura.test/log",
    ]);
    let vkey = vkey.lines().last().expect("the verifier key").to_owned();
    let cp = s.cli().ok(&[
        "checkpoint",
        "--key",
        key.to_str().expect("utf8"),
        "--trust-current",
    ]);
    std::fs::write(s.path("cp.txt"), format!("{cp}\n")).expect("checkpoint");
    let file = s.path("bundle.json");
    let said = s.cli().ok(&[
        "bundle",
        &session,
        "--out",
        file.to_str().expect("utf8"),
        "--checkpoint",
        s.path("cp.txt").to_str().expect("utf8"),
        "--log-key",
        &vkey,
    ]);
    assert!(said.contains("ledgers"), "{said}");
    let b: Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("bundle")).expect("json");
    let ok = s.cli().ok(&[
        "verify",
        "--bundle",
        file.to_str().expect("utf8"),
        "--log-key",
        &vkey,
    ]);
    assert!(ok.starts_with("OK"), "{ok}");

    // One flipped character each: a record's content, a ledger's root, a seal, the
    // checkpoint — each named, by the CLI and by the page.
    let sealed = b["ledgers"]
        .as_array()
        .expect("ledgers")
        .iter()
        .position(|l| l["seal"].is_array())
        .expect("a sealed ledger");
    let cases = [
        (
            "record",
            "/ledgers/0/records/0/content".to_owned(),
            "record_hash",
        ),
        ("root", "/ledgers/0/root_hash".to_owned(), "merkle_root"),
        (
            "seal",
            format!("/ledgers/{sealed}/seal/1"),
            "seal_signature",
        ),
        (
            "checkpoint",
            "/checkpoint".to_owned(),
            "checkpoint_signature",
        ),
    ];
    let mut files = Vec::new();
    // `kura verify --bundle` on `bundle` (written as bundle-WHAT.json) fails `check`: exit 1.
    let refused = |bundle: &Value, what: &str, check: &str| {
        let path = s.path(&format!("bundle-{what}.json"));
        std::fs::write(&path, bundle.to_string()).expect("bundle");
        let verify = [
            "verify",
            "--bundle",
            path.to_str().expect("utf8"),
            "--log-key",
            &vkey,
        ];
        let (out, _) = s.cli().fails(1, &verify);
        assert!(out.contains(&format!("FAIL {check} ")), "{what}: {out}");
        path
    };
    // Forgeries that change no hash but lie about what the bundle covers or who sealed it.
    let mut unsealed = b.clone();
    unsealed["ledgers"][sealed]
        .as_object_mut()
        .expect("ledger")
        .remove("seal");
    let mut empty = b.clone();
    empty["ledgers"] = Value::Array(vec![]);
    let mut renamed = b.clone();
    renamed["session_id"] = Value::from("01a21f00-0000-7000-8000-000000000000");
    for (what, forged, check) in [
        ("unsealed", &unsealed, "sealer_missing"),
        ("empty", &empty, "session"),
        ("renamed", &renamed, "session"),
    ] {
        files.push((refused(forged, what, check), check));
    }
    for (what, pointer, check) in &cases {
        files.push((refused(&flipped(&b, pointer), what, check), *check));
    }

    let page = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/verify/index.html");
    let page = format!(
        "file://{}",
        page.canonicalize().expect("the verifier page").display()
    );
    let browser = Browser::start(free_port());
    let c = &browser.c;
    let check = |bundle: &Path, trusted: &str| {
        browser.run(async {
            c.goto(&page).await.expect("the page from file://");
            if !trusted.is_empty() {
                c.find(Locator::Css("#logkey"))
                    .await
                    .expect("log key")
                    .send_keys(trusted)
                    .await
                    .expect("type");
            }
            let input = c
                .find(Locator::Css("#bundle"))
                .await
                .expect("the file input");
            input
                .send_keys(bundle.to_str().expect("utf8"))
                .await
                .expect("choose the file");
            until(
                c,
                "a verdict",
                "['OK','FAILED','UNVERIFIED'].includes(document.getElementById('verdict').textContent)",
            )
            .await;
            let verdict = eval(c, "document.getElementById('verdict').textContent").await;
            let checks = eval(
                c,
                "[...document.querySelectorAll('li.problem')].map(e => e.dataset.check)",
            )
            .await;
            (verdict, checks)
        })
    };
    let (verdict, checks) = check(&file, &vkey);
    assert_eq!(verdict, "OK", "{checks}");
    let (verdict, _) = check(&file, "");
    assert_eq!(
        verdict, "UNVERIFIED",
        "under no key but the bundle's own it is consistent, not verified"
    );
    for (path, name) in &files {
        let (verdict, checks) = check(path, &vkey);
        assert_eq!(verdict, "FAILED", "{name}");
        assert!(
            checks
                .as_array()
                .is_some_and(|a| a.iter().any(|x| x == name)),
            "{name}: {checks}"
        );
    }
    // A bundle under another log key than the one trusted.
    let (verdict, checks) = check(
        &file,
        "other/log+00000000+AfoNxeGSBAma+OX0qsFjfBFGGMllzbLwFODXOs8DLdYx",
    );
    assert_eq!(verdict, "FAILED");
    assert!(
        checks
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "log_key")),
        "{checks}"
    );
    // The console serves the same page, to anyone, with no script but its own.
    let port = free_port();
    super::console_env(&mut s, port, "[]");
    s.spawn("kura", "serve");
    kura_testkit::console::wait_http(port);
    let (status, head, body) = kura_testkit::console::http(port, "GET", "/verify/bundle", &[], "");
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("Kura bundle verifier"), "{body}");
    assert!(
        head.to_ascii_lowercase().contains("connect-src 'none'"),
        "{head}"
    );
    s.shutdown_cleanly();
}
