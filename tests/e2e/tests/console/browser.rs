//! Headless Chromium for the console tests: a WebDriver session on a loopback chromedriver,
//! waits on page state, screenshots at phone and laptop size, and a person enrolled and
//! logged in on a stack with the approval daemons running.

use std::future::Future;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use kura_testkit::console::wait_http;
use kura_testkit::free_port;
use kura_testkit::stack::Stack;
use serde_json::{Value, json};

use super::{MINUTE, console_env};

/// A browser driven over WebDriver; chromedriver is stopped when this is dropped.
pub struct Browser {
    pub rt: tokio::runtime::Runtime,
    pub c: Client,
    pub url: String,
    driver: Child,
}

impl Browser {
    /// A fresh browser profile pointed at the console on `port`.
    pub fn start(port: u16) -> Browser {
        let driver_port = free_port();
        let driver = chromedriver(driver_port);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        let c = rt.block_on(client(driver_port));
        Browser {
            rt,
            c,
            url: format!("http://127.0.0.1:{port}"),
            driver,
        }
    }

    /// Runs `f` to completion on this browser's runtime.
    pub fn run<T>(&self, f: impl Future<Output = T>) -> T {
        self.rt.block_on(f)
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn chromedriver(port: u16) -> Child {
    let bin = ["chromedriver", "/usr/bin/chromedriver"]
        .into_iter()
        .find(|b| Command::new(b).arg("--version").output().is_ok_and(|o| o.status.success()))
        .expect("chromedriver is missing: run ./scripts/test (or apt-get install chromium chromium-driver)");
    Command::new(bin)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start chromedriver")
}

async fn client(port: u16) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,800"]}),
    );
    let deadline = Instant::now() + MINUTE;
    loop {
        // chromedriver on loopback speaks plain HTTP: no TLS stack in the test client.
        let http = hyper_util::client::legacy::connect::HttpConnector::new();
        match ClientBuilder::new(http)
            .capabilities(caps.clone())
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
        {
            Ok(c) => return c,
            Err(_) if Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("no browser session: {e}"),
        }
    }
}

/// The text of the first element matching `css`.
pub async fn text(c: &Client, css: &str) -> String {
    c.find(Locator::Css(css))
        .await
        .expect(css)
        .text()
        .await
        .expect("text")
}

/// The value of a JS expression.
pub async fn eval(c: &Client, script: &str) -> Value {
    c.execute(&format!("return ({script});"), vec![])
        .await
        .expect("execute")
}

/// Types `text` into the input `css` once the page shows it, again whenever a live refresh
/// replaced the element under the typing, until the input holds exactly `text`.
pub async fn type_into(c: &Client, css: &str, text: &str) {
    let quoted = serde_json::to_string(css).expect("css");
    let shown = format!(
        "(() => {{ const e = document.querySelector({quoted}); \
         return e && e.offsetParent !== null && !e.disabled; }})()"
    );
    let deadline = Instant::now() + MINUTE;
    loop {
        until(c, &format!("{css} shown"), &shown).await;
        if let Ok(input) = c.find(fantoccini::Locator::Css(css)).await
            && input.clear().await.is_ok()
            && input.send_keys(text).await.is_ok()
        {
            let held = eval(c, &format!("document.querySelector({quoted})?.value")).await;
            if held.as_str() == Some(text) {
                return;
            }
        }
        assert!(Instant::now() < deadline, "could not type into {css}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until `script` (a JS expression) is truthy.
pub async fn until(c: &Client, what: &str, script: &str) {
    let deadline = Instant::now() + MINUTE;
    loop {
        if eval(c, &format!("!!({script})")).await == Value::Bool(true) {
            return;
        }
        if Instant::now() >= deadline {
            let page = eval(
                c,
                "document.getElementById('main')?.outerHTML || document.body.outerHTML",
            )
            .await;
            let errors = eval(c, "JSON.stringify(window.__errors || [])").await;
            panic!(
                "timed out waiting for {what}; errors: {errors}; the page: {}",
                page.as_str().unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// With `KURA_CONSOLE_SCREENSHOTS=dir`, the page as a phone (390×844) and a laptop
/// (1280×800) show it, as `dir/<name>-phone.png` and `dir/<name>-laptop.png`.
pub async fn shot(c: &Client, name: &str) {
    let Some(dir) = std::env::var_os("KURA_CONSOLE_SCREENSHOTS") else {
        return;
    };
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    for (w, h, size) in [(390, 844, "phone"), (1280, 800, "laptop")] {
        c.set_window_size(w, h).await.expect("resize");
        tokio::time::sleep(Duration::from_millis(300)).await;
        let png = c.screenshot().await.expect("screenshot");
        std::fs::write(
            std::path::Path::new(&dir).join(format!("{name}-{size}.png")),
            png,
        )
        .expect("write png");
    }
}

/// The scheme, host and port of the page the browser shows.
pub async fn base(c: &Client) -> String {
    let u = c.current_url().await.expect("url");
    format!(
        "{}://{}",
        u.scheme(),
        u.host_str()
            .map(|h| format!("{h}:{}", u.port().unwrap_or(80)))
            .unwrap_or_default()
    )
}

/// `kura serve` with a console on `port`; a browser enrols "alice" (screenshots `enrol`),
/// the operator trusts her key for the console, aegis and `[writs] issuers`, the approval
/// daemons start, and she logs in (screenshot `login`). Returns the logged-in browser on the
/// sessions page.
pub fn enrolled(s: &mut Stack, port: u16) -> Browser {
    enrolled_with(s, port, &[])
}

/// [`enrolled`], with `others` (name, public key, issuer or not) also console users.
pub fn enrolled_with(s: &mut Stack, port: u16, others: &[(&str, String, bool)]) -> Browser {
    console_env(s, port, "[]");
    s.spawn("kura", "serve");
    wait_http(port);
    let b = Browser::start(port);
    let public_key = b.run(async {
        let c = &b.c;
        let key = enrol(c, &b.url, "alice").await;
        let extractable = c
            .execute_async(
                "const done = arguments[0]; const r = indexedDB.open('kura-console', 1);
                 r.onsuccess = () => { const g = r.result.transaction('keys').objectStore('keys').get('device');
                 g.onsuccess = () => done(g.result.pair.privateKey.extractable); };",
                vec![],
            )
            .await
            .expect("idb");
        assert_eq!(extractable, json!(false), "the private key can never leave the browser");
        shot(c, "enrol").await;
        key
    });
    let person = |name: &str, key: &str| format!("{{ name = \"{name}\", public_key = \"{key}\" }}");
    let alice = person("alice", &public_key);
    let users = std::iter::once(alice.clone())
        .chain(others.iter().map(|(n, k, _)| person(n, k)))
        .collect::<Vec<_>>()
        .join(", ");
    let issuers = std::iter::once(alice.clone())
        .chain(others.iter().filter(|o| o.2).map(|(n, k, _)| person(n, k)))
        .collect::<Vec<_>>()
        .join(", ");
    console_env(s, port, &format!("[{users}]"));
    s.extra_env
        .push(("KURA_AEGIS__APPROVERS".into(), format!("[{alice}]")));
    s.extra_env
        .push(("KURA_WRITS__ISSUERS".into(), format!("[{issuers}]")));
    s.signal("serve", "TERM");
    s.wait_exit("serve", MINUTE);
    s.spawn("kura", "serve");
    wait_http(port);
    for d in ["aegis", "minato", "hashi"] {
        s.spawn(d, d);
    }
    b.run(log_in(&b.c, &b.url));
    b
}

/// The console's /enrol page at `url` makes a key for `name` in this browser; its public key.
pub async fn enrol(c: &Client, url: &str, name: &str) -> String {
    c.goto(&format!("{url}/enrol")).await.expect("enrol");
    let field = c.find(Locator::Css("#enrol-name")).await.expect("name");
    field.send_keys(name).await.expect("type");
    let button = c.find(Locator::Css("#enrol-button")).await.expect("button");
    button.click().await.expect("click");
    let made = "document.getElementById('enrol-key').textContent.length === 64";
    until(c, "a public key", made).await;
    text(c, "#enrol-key").await
}

/// Logs in with this browser's key (screenshot `login`) and waits for the sessions page.
pub async fn log_in(c: &Client, url: &str) {
    c.goto(&format!("{url}/login")).await.expect("login page");
    shot(c, "login").await;
    let button = c.find(Locator::Css("#login-button")).await.expect("login");
    button.click().await.expect("click");
    let home = "location.pathname === '/' && document.querySelector('table.sessions')";
    until(c, "the sessions page", home).await;
}
