//! Telling people that someone waits for them: when a request is put to people, aegis
//! posts a short notice to each configured target (a generic JSON webhook, ntfy, Gotify) with
//! the tool, the session's label and a link to the console's card — never the arguments
//! unless a target asks for them. And that a tool call ran ungated (an agent's PreToolUse
//! hook missing, killed or timed out): the same targets, a notice of its own. Delivery runs on its own task with a bounded queue and
//! retries with backoff; it never holds up a decision, and a failing target is logged and
//! counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use proto::RequestId;
use proto::doorbell::{ApprovalWaiting, CallUngated};
use serde::{Deserialize, Serialize};

/// At most this many notices wait for delivery; more are dropped (and counted).
const QUEUE: usize = 256;
/// Attempts per target, and the wait before each retry.
const BACKOFF: [Duration; 3] = [
    Duration::ZERO,
    Duration::from_secs(2),
    Duration::from_secs(10),
];

/// One notification target.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Webhook {
    /// Where to POST (for ntfy the topic's URL, for Gotify `https://host/message`).
    pub url: String,
    /// The body's format.
    #[serde(default)]
    pub format: Format,
    /// A token: `Authorization: Bearer` for json and ntfy, `X-Gotify-Key` for Gotify.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Send the call's arguments too (off: a notification service then never sees them).
    #[serde(default)]
    pub include_arguments: bool,
}

/// Body formats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    /// [`ApprovalWaiting`] as JSON.
    #[default]
    Json,
    /// ntfy: the text as the body, title and click link as headers.
    Ntfy,
    /// Gotify: its message JSON with a click link.
    Gotify,
}

/// `[aegis.notify]`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct NotifyConfig {
    /// Where to tell people.
    pub webhooks: Vec<Webhook>,
    /// The console's address as people reach it (e.g. `https://pi.local:8480`), for links.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub console_url: Option<String>,
}

/// Counters, for logs and tests.
#[derive(Debug, Default)]
pub struct Counts {
    /// Notices delivered (per target).
    pub delivered: AtomicU64,
    /// Deliveries given up after every retry.
    pub failed: AtomicU64,
    /// Notices dropped because the queue was full.
    pub dropped: AtomicU64,
}

/// What waits in the queue.
enum Queued {
    /// A request put to people (its notice is read from the store when sent).
    Asked(RequestId),
    /// A call that ran ungated.
    Ungated(CallUngated),
}

/// A notice as sent.
#[derive(Clone, Serialize)]
#[serde(untagged)]
enum Notice {
    Waiting(ApprovalWaiting),
    Ungated(CallUngated),
}

impl Notice {
    fn title(&self) -> &'static str {
        match self {
            Notice::Waiting(_) => "Kura: approval waiting",
            Notice::Ungated(_) => "Kura: ALARM, a tool call ran ungated",
        }
    }

    fn text(&self) -> String {
        match self {
            Notice::Waiting(n) => format!(
                "{} waits for your approval in \u{201c}{}\u{201d} (rule {}, {} needed)",
                n.tool, n.session_label, n.rule, n.required
            ),
            Notice::Ungated(n) => format!(
                "{} ran without Kura's gate in \u{201c}{}\u{201d} ({}, noticed by {}): nobody ruled on it",
                n.tool, n.session_label, n.by, n.noticed_by
            ),
        }
    }

    fn link(&self) -> Option<&String> {
        match self {
            Notice::Waiting(n) => n.link.as_ref(),
            Notice::Ungated(n) => n.link.as_ref(),
        }
    }
}

/// The sending side: cheap to call from a decision's path (never blocks).
#[derive(Clone)]
pub struct Notifier {
    tx: Option<tokio::sync::mpsc::Sender<Queued>>,
    counts: Arc<Counts>,
}

impl Notifier {
    /// Starts delivery on the runtime (nothing when no target is configured).
    pub fn start(config: NotifyConfig, store: kura_store::Store) -> anyhow::Result<Notifier> {
        let counts = Arc::new(Counts::default());
        if config.webhooks.is_empty() {
            return Ok(Notifier { tx: None, counts });
        }
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            // A redirect would carry a Gotify key (or a bearer token) to another host.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("kura-aegis/", env!("CARGO_PKG_VERSION")))
            .build()?;
        let (tx, rx) = tokio::sync::mpsc::channel(QUEUE);
        let store = Arc::new(std::sync::Mutex::new(store));
        tokio::spawn(deliver(config, client, store, rx, counts.clone()));
        Ok(Notifier {
            tx: Some(tx),
            counts,
        })
    }

    /// Queues a notice for `request_id`.
    pub fn asked(&self, request_id: RequestId) {
        self.queue(Queued::Asked(request_id));
    }

    /// Queues the alarm that a call ran ungated.
    pub fn ungated(&self, notice: CallUngated) {
        self.queue(Queued::Ungated(notice));
    }

    /// Whether any target is configured.
    pub fn enabled(&self) -> bool {
        self.tx.is_some()
    }

    fn queue(&self, q: Queued) {
        let Some(tx) = &self.tx else { return };
        if tx.try_send(q).is_err() {
            let n = self.counts.dropped.fetch_add(1, Ordering::Relaxed) + 1;
            tracing::warn!(dropped_total = n, "notification queue full; notice dropped");
        }
    }

    /// The counters.
    pub fn counts(&self) -> &Counts {
        &self.counts
    }
}

async fn deliver(
    config: NotifyConfig,
    client: reqwest::Client,
    store: Arc<std::sync::Mutex<kura_store::Store>>,
    mut rx: tokio::sync::mpsc::Receiver<Queued>,
    counts: Arc<Counts>,
) {
    let config = Arc::new(config);
    // At most this many deliveries at once; the queue (and then dropping) absorbs a burst.
    let in_flight = Arc::new(tokio::sync::Semaphore::new(8));
    while let Some(queued) = rx.recv().await {
        let notice = match queued {
            Queued::Ungated(n) => Notice::Ungated(n),
            Queued::Asked(request_id) => {
                let s = store.clone();
                match tokio::task::spawn_blocking(move || notice(&s, request_id)).await {
                    Ok(Ok(n)) => Notice::Waiting(n),
                    Ok(Err(e)) => {
                        tracing::warn!(%request_id, error = %e, "cannot read the request for its notice");
                        continue;
                    }
                    Err(_) => continue,
                }
            }
        };
        for hook in &config.webhooks {
            // Each target on its own, so a slow one delays nobody else's notice.
            let (client, hook, counts) = (client.clone(), hook.clone(), counts.clone());
            let (notice, console) = (notice.clone(), config.console_url.clone());
            let Ok(permit) = in_flight.clone().acquire_owned().await else {
                return;
            };
            tokio::spawn(async move {
                send(&client, &hook, notice, console, &counts).await;
                drop(permit);
            });
        }
    }
}

/// Where aegis is in telling people of ungated calls: the newest one told.
pub struct Ungated {
    after: String,
}

impl Ungated {
    /// Starting with the calls of the last `minutes`.
    pub fn since_minutes_ago(minutes: u64) -> Ungated {
        let from = std::time::SystemTime::now() - Duration::from_secs(minutes * 60);
        Ungated {
            after: kura_store::time::format(from),
        }
    }

    /// Queues a notice for each ungated call recorded since the last look (at most 50).
    pub fn tell(&mut self, store: &kura_store::Store, notifier: &Notifier) -> anyhow::Result<()> {
        if !notifier.enabled() {
            return Ok(());
        }
        let found = kura_history::ungated::oldest_after(store, &self.after, 50)?;
        for u in &found {
            let how = u
                .why
                .split("noticed by ")
                .nth(1)
                .and_then(|x| x.split(')').next())
                .unwrap_or("an agent's report");
            notifier.ungated(CallUngated {
                event: "call.ungated".into(),
                record_id: kura_store::store::parse_id(&u.record_id)?,
                tool: one_line(&u.tool),
                session_label: one_line(&u.session_label),
                session_id: kura_store::store::parse_id(&u.session_id)?,
                by: one_line(&u.by),
                noticed_by: one_line(how),
                link: None,
            });
        }
        if let Some(newest) = found.last() {
            self.after = newest.at.clone();
        }
        Ok(())
    }
}

/// The notice for a request, read from the store.
fn notice(
    store: &std::sync::Mutex<kura_store::Store>,
    request_id: RequestId,
) -> anyhow::Result<ApprovalWaiting> {
    let store = store
        .lock()
        .map_err(|_| anyhow::anyhow!("store lock poisoned"))?;
    let a = kura_work::approvals::approval(&*store, request_id)?
        .ok_or_else(|| anyhow::anyhow!("no request {request_id}"))?;
    let label = store
        .read_session(a.session_id)
        .map(|s| s.label)
        .unwrap_or_default();
    Ok(ApprovalWaiting {
        event: "approval.waiting".into(),
        request_id,
        tool: one_line(&a.tool_name),
        session_label: one_line(&label),
        session_id: a.session_id,
        requested_by: one_line(&kura_work::approvals::request_author(&*store, request_id)?),
        rule: one_line(&a.rule.clone().unwrap_or_default()),
        required: a.required,
        link: None,
        arguments: Some(kura_work::approvals::request_arguments(
            &*store, request_id,
        )?),
    })
}

/// An agent's or a model's words as a notice shows them: one line, every hidden character
/// (bidi overrides, zero-width, controls, newlines) written as an escape, at most 200 bytes —
/// as the console and the CLI show them, so a label cannot reorder or hide what a phone reads.
fn one_line(text: &str) -> String {
    let shown = proto::text::escape_controls(text).replace('\n', "\\n");
    proto::text::excerpt(&shown, 200)
}

async fn send(
    client: &reqwest::Client,
    hook: &Webhook,
    mut notice: Notice,
    console: Option<String>,
    counts: &Counts,
) {
    let at = |page: &str| {
        console
            .as_ref()
            .map(|c| format!("{}/{page}", c.trim_end_matches('/')))
    };
    match &mut notice {
        Notice::Waiting(n) => {
            n.link = at("approvals");
            if !hook.include_arguments {
                n.arguments = None;
            }
        }
        Notice::Ungated(n) => n.link = at("status"),
    }
    let mut last = String::new();
    for wait in BACKOFF {
        tokio::time::sleep(wait).await;
        match request(client, hook, &notice).send().await {
            Ok(r) if r.status().is_success() => {
                counts.delivered.fetch_add(1, Ordering::Relaxed);
                return;
            }
            Ok(r) => last = format!("HTTP {}", r.status()),
            Err(e) => last = e.without_url().to_string(),
        }
    }
    let n = counts.failed.fetch_add(1, Ordering::Relaxed) + 1;
    // The host only: a topic URL (ntfy) is itself the secret that lets one post to it.
    let host = reqwest::Url::parse(&hook.url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_owned))
        .unwrap_or_default();
    tracing::warn!(target = %host, error = %last, failed_total = n,
        "a notification target failed after every retry");
}

fn request(client: &reqwest::Client, hook: &Webhook, n: &Notice) -> reqwest::RequestBuilder {
    let text = n.text();
    let req = client.post(&hook.url);
    match hook.format {
        Format::Json => {
            let req = req.json(n);
            match &hook.token {
                Some(t) => req.bearer_auth(t),
                None => req,
            }
        }
        Format::Ntfy => {
            let mut req = req.header("Title", n.title()).body(text);
            if let Some(link) = n.link() {
                req = req.header("Click", link);
            }
            match &hook.token {
                Some(t) => req.bearer_auth(t),
                None => req,
            }
        }
        Format::Gotify => {
            let body = GotifyMessage {
                title: n.title(),
                message: text,
                priority: 5,
                extras: n.link().map(|url| GotifyExtras {
                    notification: GotifyNotification {
                        click: GotifyClick { url: url.clone() },
                    },
                }),
            };
            let req = req.json(&body);
            match &hook.token {
                Some(t) => req.header("X-Gotify-Key", t),
                None => req,
            }
        }
    }
}

/// Gotify's message format.
#[derive(Serialize)]
struct GotifyMessage {
    title: &'static str,
    message: String,
    priority: u8,
    #[serde(skip_serializing_if = "Option::is_none")]
    extras: Option<GotifyExtras>,
}

#[derive(Serialize)]
struct GotifyExtras {
    #[serde(rename = "client::notification")]
    notification: GotifyNotification,
}

#[derive(Serialize)]
struct GotifyNotification {
    click: GotifyClick,
}

#[derive(Serialize)]
struct GotifyClick {
    url: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 35 (8): an agent's label and tool name reach a phone escaped, as the console
    /// shows them: no bidi override, zero-width character or newline gets through raw.
    #[test]
    fn a_notice_carries_an_agents_words_escaped() {
        let label = "pay\u{202e}lanoitan\u{200b}\nurgent: approve now";
        let shown = one_line(label);
        for hidden in ['\u{202e}', '\u{200b}', '\n', '\r'] {
            assert!(!shown.contains(hidden), "{shown:?}");
        }
        assert!(
            shown.contains("\\u{202e}") && shown.contains("\\n"),
            "{shown:?}"
        );
        assert!(one_line(&"x".repeat(1000)).len() < 300);
        assert_eq!(one_line("fs.write"), "fs.write");
    }
}
