//! The console for a person on a phone or in a hurry: at 390×844 and 1280×800 no page scrolls
//! sideways, the navigation leaves room for content, sessions show their labels, an approval
//! card says which task it belongs to, times are short, ledgers name who sealed them, diffs
//! name their ledgers, and the verification page says what it checked.

use kura_testkit::free_port;
use kura_testkit::stack::Stack;
use serde_json::Value;

use super::browser::{enrolled, eval, until};
use super::{POLICY, SCRIPT};

async fn fits(c: &fantoccini::Client, what: &str) {
    let wide = eval(
        c,
        "document.documentElement.scrollWidth - window.innerWidth",
    )
    .await;
    assert!(
        wide.as_i64().is_some_and(|w| w <= 0),
        "{what} scrolls sideways by {wide}"
    );
    let top = eval(
        c,
        "document.querySelector('main h1').getBoundingClientRect().top",
    )
    .await;
    assert!(
        top.as_f64().is_some_and(|t| t < 90.0),
        "{what}: content starts at {top} px"
    );
    // Every way out of the page is on the screen: no link (or log out) cut off at the edge
    // or scrolled out of sight inside the header.
    let hidden = eval(
        c,
        "[...document.querySelectorAll('header a, header button')].filter(e => { \
           const r = e.getBoundingClientRect(); \
           return r.width === 0 || r.left < 0 || r.right > window.innerWidth; \
         }).map(e => e.textContent.trim())",
    )
    .await;
    assert_eq!(hidden, Value::Array(vec![]), "{what}: navigation cut off");
}

#[test]
fn the_console_fits_a_phone_and_says_what_a_request_is_for() {
    let mut s = Stack::new(SCRIPT);
    std::fs::write(s.path("policy.toml"), POLICY).expect("policy");
    let port = free_port();
    let b = enrolled(&mut s, port);
    s.submit("make the shopping list");
    let c = &b.c;
    let url = b.url.clone();
    b.run(async {
        for (w, h) in [(390, 844), (1280, 800)] {
            c.set_window_size(w, h).await.expect("resize");
            c.goto(&format!("{url}/approvals")).await.expect("approvals");
            let card = "document.querySelector('article.approval form.decide:not([hidden])')";
            until(c, "a verified request", card).await;
            fits(c, "approvals").await;
            let task = eval(c, "document.querySelector('article.approval p.task').innerText").await;
            assert!(task.as_str().is_some_and(|t| t.contains("make the shopping list")), "{task}");
            let heading = eval(c, "document.querySelector('article.approval h2 a').textContent").await;
            assert_eq!(heading, Value::from("make the shopping list"), "the card names its session");
            let edit = "document.querySelector('button.edit-approve').offsetParent === null";
            assert_eq!(eval(c, edit).await, Value::Bool(true), "nothing edited, no 'Approve edited'");
            let time = eval(c, "[document.querySelector('article.approval time').textContent, document.querySelector('article.approval time').title]").await;
            let (short, full) = (time[0].as_str().unwrap_or_default(), time[1].as_str().unwrap_or_default());
            assert!(short.len() < 20 && !short.contains('T') && full.contains('T'), "{time}");
            c.goto(&format!("{url}/")).await.expect("sessions");
            until(c, "the sessions", "document.querySelector('td.label a')").await;
            fits(c, "sessions").await;
            let label = "document.querySelector('td.label').offsetParent !== null && document.querySelector('td.label').innerText.trim().length > 0";
            assert_eq!(eval(c, label).await, Value::Bool(true), "the label shows at {w} px");
            c.goto(&format!("{url}/enrol")).await.expect("enrol");
            until(c, "the key", "document.getElementById('enrol-key').textContent.length === 64").await;
            fits(c, "enrol").await;
            for page in ["status", "memory"] {
                c.goto(&format!("{url}/{page}")).await.expect(page);
                until(c, page, "document.querySelector('main h1')").await;
                fits(c, page).await;
            }
        }
    });
    let session = b.run(async {
        c.goto(&format!("{url}/")).await.expect("sessions");
        until(c, "the sessions", "document.querySelector('td.label a')").await;
        eval(
            c,
            "document.querySelector('td.label a').getAttribute('href')",
        )
        .await
    });
    let session = session.as_str().expect("a session link").to_owned();
    b.run(async {
        c.set_window_size(390, 844).await.expect("resize");
        c.goto(&format!("{url}{session}")).await.expect("history");
        until(c, "the history", "document.querySelector('.record')").await;
        fits(c, "history").await;
        let sealer = eval(
            c,
            "[...document.querySelectorAll('strong.sealer')].map(e => e.textContent)",
        )
        .await;
        let names = sealer.as_array().cloned().unwrap_or_default();
        assert!(!names.is_empty(), "some ledger is sealed");
        for n in names {
            let n = n.as_str().unwrap_or_default();
            assert!(
                ["minato", "hashi", "aegis", "serve", "mikado"].contains(&n),
                "sealed by {n}"
            );
        }
        // A diff names its ledgers by label, as the history does.
        let pair = eval(
            c,
            "[...document.querySelectorAll('form.diff select[name=a] option')].map(o => [o.value, o.textContent])",
        )
        .await;
        let pair = pair.as_array().cloned().unwrap_or_default();
        assert!(pair.len() >= 2, "two ledgers to compare: {pair:?}");
        let (a, b) = (&pair[0], &pair[pair.len() - 1]);
        let id = |v: &Value| v[0].as_str().unwrap_or_default().to_owned();
        c.goto(&format!("{url}/diff?a={}&b={}", id(a), id(b)))
            .await
            .expect("diff");
        until(c, "the diff", "document.querySelector('main p.sub')").await;
        fits(c, "diff").await;
        let sub = eval(c, "document.querySelector('main p.sub').textContent").await;
        for l in [a, b] {
            let label = l[1].as_str().unwrap_or_default();
            assert!(
                !label.is_empty() && sub.as_str().is_some_and(|t| t.contains(label)),
                "the diff heading names {label}: {sub}"
            );
        }
        c.goto(&format!("{url}/verify")).await.expect("verify");
        until(c, "the checkpoint", "document.querySelector('p.checked')").await;
        fits(c, "verify").await;
        let checked = eval(c, "document.querySelector('p.checked').textContent").await;
        assert!(
            checked.as_str().is_some_and(|t| t.contains("pinned")),
            "{checked}"
        );
    });
    drop(b);
    s.shutdown_cleanly();
}
