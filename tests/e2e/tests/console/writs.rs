//! Writs from the console: a person grants one in the browser from the statement the page
//! shows her, signed with her browser key; it binds the next session of its holder, and her
//! revocation from the browser refuses the next call. Someone else logged in cannot relay a
//! grant that is not theirs, and a granted writ cannot be sent again.

use std::time::Duration;

use ed25519_dalek::SigningKey;
use fantoccini::Locator;
use kura_policy::writ as check;
use kura_testkit::console::{csrf, http, login};
use kura_testkit::free_port;
use kura_testkit::stack::{Stack, session_records};
use proto::Effect;
use proto::record::RecordType;
use proto::writ::WritBody;
use serde_json::Value;

use super::SCRIPT;
use super::browser::{enrolled_with, eval, type_into, until};

fn kura(s: &Stack, args: &[&str]) -> Value {
    s.cli().json(args)
}

/// A grant of `fs.read` to user:carol, signed by `key` as `issuer`.
fn grant_by(issuer: &str, key: &SigningKey) -> proto::writ::Writ {
    let now = kura_work::now_ms();
    check::sign_writ(
        key,
        WritBody {
            issuer: format!("user:{issuer}"),
            tools: vec!["*".into()],
            ceiling: Effect::Irreversible,
            issued_at: check::format_time(now),
            expires_at: check::format_time(now + 3_600_000),
            ..WritBody::fixture(&proto::new_id().to_string(), "user:carol")
        },
    )
}

/// POSTs `body` as the logged-in `cookie`, with its CSRF token unless `token` is `None`.
fn post(port: u16, path: &str, cookie: &str, token: Option<&str>, body: &str) -> (u16, String) {
    let mut headers = vec![("Cookie", cookie), ("content-type", "application/json")];
    if let Some(t) = token {
        headers.push(("x-kura-csrf", t));
    }
    let (status, _, answer) = http(port, "POST", path, &headers, body);
    (status, answer)
}

/// Attack: mallory, logged in to the console but no writ issuer, relays a wide grant bob
/// signed (it would verify), grants one herself, and bob's own grant is sent without the
/// CSRF token, altered after signing, and replayed. Each is refused and stores nothing; bob's
/// one genuine grant is stored once.
#[test]
fn a_writ_relayed_through_the_console_by_someone_else_is_refused() {
    let mut s = Stack::new(SCRIPT);
    let port = free_port();
    let bob = SigningKey::from_bytes(&[7u8; 32]);
    let mallory = SigningKey::from_bytes(&[8u8; 32]);
    let public = |k: &SigningKey| hex::encode(k.verifying_key().as_bytes());
    let b = enrolled_with(
        &mut s,
        port,
        &[
            ("bob", public(&bob), true),
            ("mallory", public(&mallory), false),
        ],
    );

    let grant = "/api/writs/grant";
    let m_cookie = login(port, &mallory);
    let m_token = csrf(port, &m_cookie);
    let bobs = grant_by("bob", &bob);
    let (status, answer) = post(
        port,
        grant,
        &m_cookie,
        Some(&m_token),
        &serde_json::to_string(&bobs).expect("json"),
    );
    assert_eq!(status, 403, "{answer}");
    assert!(
        answer.contains("not the one mallory logged in with"),
        "{answer}"
    );
    let hers = grant_by("mallory", &mallory);
    let (status, answer) = post(
        port,
        grant,
        &m_cookie,
        Some(&m_token),
        &serde_json::to_string(&hers).expect("json"),
    );
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("not a writ issuer here"), "{answer}");

    let b_cookie = login(port, &bob);
    let b_token = csrf(port, &b_cookie);
    let text = serde_json::to_string(&bobs).expect("json");
    let (status, answer) = post(port, grant, &b_cookie, None, &text);
    assert_eq!(status, 403, "no CSRF token: {answer}");
    let mut altered = bobs.clone();
    altered.body.holder = "user:mallory".into();
    let (status, answer) = post(
        port,
        grant,
        &b_cookie,
        Some(&b_token),
        &serde_json::to_string(&altered).expect("json"),
    );
    assert_eq!(status, 403, "{answer}");
    assert!(answer.contains("signature does not verify"), "{answer}");
    let listed = |s: &Stack| kura(s, &["writ", "list"]).as_array().expect("list").len();
    assert_eq!(listed(&s), 0, "nothing refused was stored");
    let (status, answer) = post(port, grant, &b_cookie, Some(&b_token), &text);
    assert_eq!(status, 200, "{answer}");
    let (status, answer) = post(port, grant, &b_cookie, Some(&b_token), &text);
    assert_eq!(status, 403, "a replay: {answer}");
    assert_eq!(listed(&s), 1, "bob's grant, once");
    // Revoking as someone else: mallory signs a revocation naming bob.
    let revocation = check::sign_revocation(
        &mallory,
        proto::writ::RevocationBody {
            kind: proto::writ::REVOCATION_KIND.into(),
            writ_id: bobs.body.id,
            by: "user:bob".into(),
            reason: "mine now".into(),
            revoked_at: check::format_time(kura_work::now_ms()),
        },
    );
    let (status, answer) = post(
        port,
        "/api/writs/revoke",
        &m_cookie,
        Some(&m_token),
        &serde_json::to_string(&revocation).expect("json"),
    );
    assert_eq!(status, 403, "{answer}");
    let w = kura(&s, &["writ", "show", &bobs.body.id.to_string()]);
    assert!(w["revoked_by"].is_null(), "{w}");
    drop(b);
}

/// A person grants a writ from the browser; what is stored is exactly the statement the
/// page showed her, signed by her browser key. It binds carol's next session (a write is
/// outside it), and her revocation from the browser refuses carol's next call.
#[test]
fn a_person_grants_and_revokes_a_writ_from_the_browser() {
    let mut s = Stack::new(SCRIPT);
    let port = free_port();
    let b = enrolled_with(&mut s, port, &[]);
    let id = b.run(async {
        let c = &b.c;
        c.goto(&format!("{}/writs", b.url)).await.expect("writs");
        let open = c.find(Locator::Css("details.grant summary")).await.expect("summary");
        open.click().await.expect("open");
        for (name, value) in [("holder", "user:carol"), ("tools", "fs.read, memory.*"), ("tool_calls", "5")] {
            let field = c
                .find(Locator::Css(&format!("#grant input[name={name}]")))
                .await
                .expect(name);
            field.send_keys(value).await.expect("type");
        }
        until(c, "the statement", "document.getElementById('writ-preview').textContent.includes('memory.*')").await;
        let shown = super::browser::text(c, "#writ-preview").await;
        super::browser::shot(c, "writ-grant").await;
        let button = c.find(Locator::Css("#grant-button")).await.expect("grant");
        button.click().await.expect("click");
        until(c, "the granted writ listed", "document.body.dataset.granted && document.querySelector(`code[title=\"${document.body.dataset.granted}\"]`)").await;
        let id = eval(c, "document.body.dataset.granted").await;
        (id.as_str().expect("id").to_owned(), shown)
    });
    let (id, shown) = id;
    let stored = kura(&s, &["writ", "show", &id]);
    let shown: Value = serde_json::from_str(&shown).expect("the page shows JSON");
    assert_eq!(
        stored["writ"]["body"], shown,
        "what she saw is what was signed and stored"
    );
    assert_eq!(shown["holder"], "user:carol");
    assert_eq!(shown["issuer"], "user:alice");
    assert_eq!(shown["budget"]["tool_calls"], 5);

    // It binds carol's session: the script's write is outside it.
    let errors = |s: &Stack, request: i64| -> Vec<String> {
        let session = s
            .wait_complete(request, Duration::from_secs(60))
            .session_id
            .expect("session");
        session_records(&s.store(), session)
            .into_iter()
            .filter(|r| r.record_type == RecordType::SysError)
            .map(|r| r.content["text"].as_str().unwrap_or("").to_owned())
            .collect()
    };
    let first = errors(
        &s,
        s.submit_with("write the list", &["--author", "user:carol"]),
    );
    assert!(
        first
            .iter()
            .any(|e| e.contains(&format!("outside writ {id}'s scope"))),
        "{first:?}"
    );

    b.run(async {
        let c = &b.c;
        let css = format!("form.revoke[data-writ=\"{id}\"]");
        // The page refreshes live as the store changes: type once it shows the form, again
        // if a refresh replaced it, not after a guessed delay.
        type_into(c, &format!("{css} input[name=reason]"), "carol is done").await;
        let button = c
            .find(Locator::Css(&format!("{css} button")))
            .await
            .expect("revoke");
        button.click().await.expect("click");
        until(
            c,
            "the writ shown revoked",
            &format!(
                "document.body.dataset.revoked === '{id}' && !document.querySelector('{}')",
                css.replace('\'', "\\'")
            ),
        )
        .await;
    });
    let w = kura(&s, &["writ", "show", &id]);
    assert!(!w["revoked_by"].is_null(), "{w}");
    let second = errors(
        &s,
        s.submit_with("write the list", &["--author", "user:carol"]),
    );
    assert!(
        second
            .iter()
            .any(|e| e.contains(&format!("writ {id} was revoked"))),
        "{second:?}"
    );
    s.verify_all();
}
