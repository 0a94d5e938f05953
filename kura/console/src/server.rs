//! The HTTP side: routes, the login wall, security headers, live updates by server-sent
//! events, and TLS for anything but loopback.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use futures::StreamExt;
use maud::Markup;
use serde::{Deserialize, Serialize};

use crate::auth::{self, Login};
use crate::relay::{RelayError, relay};
use crate::{Shared, conn, data, pages, records, views};

const JS: &str = include_str!("../assets/console.js");
const CSS: &str = include_str!("../assets/console.css");
const LEDGERS_PER_PAGE: usize = 10;
const SESSIONS_PER_PAGE: i64 = 50;

/// The console bound to its address, ready to serve: binding (and loading the TLS
/// certificate) happens first, so a daemon that cannot serve its console fails at start.
pub struct Listening {
    console: Shared,
    listener: tokio::net::TcpListener,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    extra: Option<Router>,
}

/// Binds the configured address; `None` when no console is configured. `extra` routes (the
/// outside agents' MCP and HTTP surface) are served beside the console's, under the same
/// TLS rule, connection bounds and timeouts.
pub async fn bind(console: Shared, extra: Option<Router>) -> anyhow::Result<Option<Listening>> {
    let Some(addr) = console.config.listen else {
        return Ok(None);
    };
    let acceptor = if console.tls {
        Some(tls_acceptor(&console.config)?)
    } else {
        None
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("console: cannot listen on {addr}: {e}"))?;
    tracing::info!(%addr, tls = console.tls, "console listening");
    Ok(Some(Listening {
        console,
        listener,
        acceptor,
        extra,
    }))
}

impl Listening {
    /// Serves until `shutdown` resolves. Also watches the database (and the bus's
    /// doorbells) so live pages hear of every change within a fraction of a second.
    pub async fn serve(self, shutdown: impl Future<Output = ()> + Send + 'static) {
        let Listening {
            console,
            listener,
            acceptor,
            extra,
        } = self;
        let watcher = tokio::spawn(watch_changes(console.clone()));
        let app = match extra {
            Some(extra) => extra.merge(router(console.clone())),
            None => router(console.clone()),
        };
        let slots = Arc::new(conn::Slots::default());
        tokio::pin!(shutdown);
        loop {
            let (tcp, _) = tokio::select! {
                _ = &mut shutdown => break,
                accepted = listener.accept() => match accepted {
                    Ok(a) => a,
                    Err(e) => {
                        // Out of descriptors and the like: wait a little rather than spin.
                        tracing::warn!(error = %e, "console: accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                },
            };
            // A streamed answer (the event stream, an MCP call's events) goes out in several
            // small writes: with Nagle each waited for the client's delayed ACK, 40 ms a
            // call (measured by the agents bench: 44 ms an MCP record, 1.4 ms without).
            let _ = tcp.set_nodelay(true);
            let Some(slot) = slots.admit() else {
                continue; // every connection is busy with a request: this one waits its turn
            };
            let (app, acceptor) = (app.clone(), acceptor.clone());
            tokio::spawn(async move {
                tokio::select! {
                    _ = serve_connection(tcp, acceptor, app, &slot) => {}
                    _ = slot.displaced() => {}
                }
            });
        }
        watcher.abort();
    }
}

/// One connection, TLS first when configured; the request headers must arrive within
/// [`conn::HEADER_TIMEOUT`], and the slot is marked as serving once a request came.
async fn serve_connection(
    tcp: tokio::net::TcpStream,
    acceptor: Option<tokio_rustls::TlsAcceptor>,
    app: Router,
    slot: &conn::Slot,
) {
    let served = slot.served.clone();
    let svc = hyper::service::service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
        served.store(true, std::sync::atomic::Ordering::Relaxed);
        let streams = req.uri().path() == "/events";
        let answer = tower::Service::call(&mut app.clone(), req);
        async move {
            if streams {
                return answer.await;
            }
            match tokio::time::timeout(conn::REQUEST_TIMEOUT, answer).await {
                Ok(answered) => answered,
                Err(_) => Ok((
                    StatusCode::REQUEST_TIMEOUT,
                    [(header::CONNECTION, "close")],
                    "the request took too long\n",
                )
                    .into_response()),
            }
        }
    });
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(conn::HEADER_TIMEOUT);
    let served = match acceptor {
        Some(acc) => match tokio::time::timeout(conn::HEADER_TIMEOUT, acc.accept(tcp)).await {
            Ok(Ok(tls)) => {
                http.serve_connection(hyper_util::rt::TokioIo::new(tls), svc)
                    .await
            }
            _ => return,
        },
        None => {
            http.serve_connection(hyper_util::rt::TokioIo::new(tcp), svc)
                .await
        }
    };
    if let Err(e) = served {
        tracing::debug!(error = %e, "console connection ended");
    }
}

fn tls_acceptor(config: &crate::ConsoleConfig) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let (Some(cert), Some(key)) = (&config.tls_cert, &config.tls_key) else {
        anyhow::bail!(
            "console: listening beyond loopback needs TLS: set [console] tls_cert and tls_key \
             (console.pem and console-key.pem from `kura keys init`)"
        );
    };
    let certs = CertificateDer::pem_file_iter(cert)
        .and_then(|i| i.collect::<Result<Vec<_>, _>>())
        .map_err(|e| anyhow::anyhow!("console: cannot read {}: {e}", cert.display()))?;
    // One trust domain, one place: whoever holds the bus server's key can play the bus
    // server (and pick the nonces clients sign). `kura keys init` names that certificate's
    // subject "Kura nats-server"; the console has its own.
    if certs
        .first()
        .is_some_and(|c| c.windows(16).any(|w| w == b"Kura nats-server"))
    {
        anyhow::bail!(
            "console: {} is the bus server's certificate; give the console its own \
             (tls_cert = console.pem, tls_key = console-key.pem from `kura keys init`, or \
             `kura keys upgrade` for a keys directory made before)",
            cert.display()
        );
    }
    let key = PrivateKeyDer::from_pem_file(key)
        .map_err(|e| anyhow::anyhow!("console: cannot read {}: {e}", key.display()))?;
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let server = tokio_rustls::rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key)?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(server)))
}

/// Bumps the change counter when another process commits (SQLite's `data_version`, the
/// fallback that always works) or a doorbell rings (the fast path).
async fn watch_changes(console: Shared) {
    let mut doorbells = match &console.bus {
        Some(bus) => {
            let s = &bus.subjects;
            let mut subs = Vec::new();
            for subject in [
                s.record_written(),
                s.worker_complete(),
                s.session_complete(),
                s.session_create(),
            ] {
                match bus.client.subscribe(subject).await {
                    Ok(sub) => subs.push(sub),
                    Err(e) => tracing::warn!(error = %e, "console: no doorbells; polling only"),
                }
            }
            futures::stream::select_all(subs).boxed()
        }
        None => futures::stream::pending().boxed(),
    };
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut last = None;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            Some(_) = doorbells.next() => {}
        }
        let version = console.read(|s| Ok(s.data_version()?)).await.ok();
        if version != last {
            last = version;
            console.changes.send_modify(|n| *n += 1);
        }
    }
}

fn router(console: Shared) -> Router {
    Router::new()
        .route("/", get(sessions))
        .route("/s/{id}", get(history))
        .route("/diff", get(diff))
        .route("/r/{id}", get(whole_record))
        .route("/prompt/{id}", get(prompt))
        .route("/approvals", get(approvals))
        .route("/verify", get(verification))
        .route("/status", get(status))
        .route("/memory", get(memory))
        .route("/fleet", get(fleet))
        .route("/writs", get(writs))
        .route("/fleet/{pi}", get(replica_sessions))
        .route("/fleet/{pi}/s/{id}", get(replica_history))
        .route("/fleet/{pi}/r/{id}", get(replica_record))
        .route("/events", get(events))
        .route("/login", get(login_page))
        .route("/enrol", get(enrol_page))
        .route("/verify/bundle", get(bundle_verifier))
        .route(
            "/assets/console.js",
            get(|| async { asset("text/javascript; charset=utf-8", JS) }),
        )
        .route(
            "/assets/console.css",
            get(|| async { asset("text/css; charset=utf-8", CSS) }),
        )
        .route("/api/login", post(login))
        .route("/api/logout", post(logout))
        .route("/api/decide", post(decide))
        .route("/api/writs/grant", post(crate::writs::grant))
        .route("/api/writs/revoke", post(crate::writs::revoke))
        .fallback(|| async { (StatusCode::NOT_FOUND, "not found") })
        .layer(axum::middleware::map_response(secure_headers))
        .with_state(console)
}

fn asset(kind: &'static str, body: &'static str) -> Response {
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

/// The static bundle verifier (docs/verify/index.html), for anyone: it reads a file the
/// person picks and checks it in the browser; it makes no request, so it may run its own
/// inline script and nothing else.
async fn bundle_verifier() -> Response {
    const PAGE: &str = include_str!("../../../docs/verify/index.html");
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (
                header::CONTENT_SECURITY_POLICY,
                "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                 connect-src 'none'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'",
            ),
        ],
        PAGE,
    )
        .into_response()
}

/// Every response: no framing (clickjacking), scripts only from this console (an injected
/// `<script>` would not run even if escaping failed), no sniffing, no referrer, no caching.
async fn secure_headers(mut r: Response) -> Response {
    let h = r.headers_mut();
    let set = |h: &mut HeaderMap, k: &'static str, v: &'static str| {
        h.insert(k, HeaderValue::from_static(v));
    };
    // A page that set its own (the bundle verifier: one file, its script inline) keeps it.
    if !h.contains_key("content-security-policy") {
        set(
            h,
            "content-security-policy",
            "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
             connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        );
    }
    set(h, "x-frame-options", "DENY");
    set(h, "x-content-type-options", "nosniff");
    set(h, "referrer-policy", "no-referrer");
    set(h, "cache-control", "no-store");
    set(h, "cross-origin-opener-policy", "same-origin");
    r
}

/// A page for a logged-in person, or the way to the login page.
async fn page(
    console: &Shared,
    headers: &HeaderMap,
    title: &str,
    body: impl FnOnce(&Login) -> anyhow::Result<Markup>,
) -> Response {
    let Some(login) = console.auth.get(headers) else {
        return Redirect::to("/login").into_response();
    };
    let waiting = console
        .read(|s| Ok(kura_work::approvals::asked_count(s)?))
        .await
        .unwrap_or(0);
    match body(&login) {
        Ok(m) => pages::layout(title, Some(&login), waiting, m).into_response(),
        Err(e) => (
            StatusCode::BAD_REQUEST,
            pages::layout(
                "error",
                Some(&login),
                waiting,
                pages::error(&format!("{e:#}")),
            ),
        )
            .into_response(),
    }
}

#[derive(Deserialize)]
struct Paged {
    #[serde(default)]
    page: Option<String>,
    #[serde(default)]
    ledger: Option<String>,
    #[serde(default)]
    from: Option<String>,
}

/// A number from the query string; anything else is page 0, never an error page.
fn num<T: std::str::FromStr + Default>(v: &Option<String>) -> T {
    v.as_deref()
        .and_then(|s| s.parse().ok())
        .unwrap_or_default()
}

async fn sessions(State(c): State<Shared>, headers: HeaderMap, Query(q): Query<Paged>) -> Response {
    let page_no: i64 = num(&q.page);
    let rows = c
        .read(move |s| {
            Ok(data::sessions(
                s,
                page_no * SESSIONS_PER_PAGE,
                SESSIONS_PER_PAGE + 1,
            )?)
        })
        .await;
    page(&c, &headers, "sessions", |_| {
        let mut rows = rows?;
        let more = rows.len() as i64 > SESSIONS_PER_PAGE;
        rows.truncate(SESSIONS_PER_PAGE as usize);
        Ok(pages::sessions(&rows, page_no, more, ""))
    })
    .await
}

async fn history(
    State(c): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<Paged>,
) -> Response {
    if c.auth.get(&headers).is_none() {
        return Redirect::to("/login").into_response();
    }
    let page_no: usize = num(&q.page);
    let per_ledger = c.config.page_records.max(1);
    let focus = q
        .ledger
        .as_deref()
        .and_then(|l| url_id(l).ok())
        .map(|l| (l, num::<u64>(&q.from)));
    let me = c.clone();
    let h = c
        .read(move |s| {
            let keyring = me.trust.sealers.as_ref();
            let id = url_id(&id)?;
            Ok(data::history(
                s,
                id,
                page_no,
                LEDGERS_PER_PAGE,
                focus,
                per_ledger,
                keyring,
            )?)
        })
        .await;
    page(&c, &headers, "session", |_| {
        Ok(pages::history(
            &h?,
            page_no,
            LEDGERS_PER_PAGE,
            per_ledger,
            "",
        ))
    })
    .await
}

#[derive(Deserialize)]
struct DiffQuery {
    a: String,
    b: String,
    #[serde(default)]
    page: Option<String>,
}

async fn diff(State(c): State<Shared>, headers: HeaderMap, Query(q): Query<DiffQuery>) -> Response {
    if c.auth.get(&headers).is_none() {
        return Redirect::to("/login").into_response();
    }
    let page_no: usize = num(&q.page);
    let objects = c.trust.objects.clone();
    let d = c
        .read(move |s| {
            let (a, b) = (url_id(&q.a)?, url_id(&q.b)?);
            // The files beside the records, when this machine keeps an object store.
            let files = objects
                .filter(|dir| dir.is_dir())
                .map(|dir| kura_history::objects::Objects::open(&dir))
                .transpose()?
                .map(|o| kura_history::workspace::files_between(s, &o, a, b, 64 << 10))
                .transpose()?;
            Ok((records::diff(s, a, b, page_no)?, files))
        })
        .await;
    page(&c, &headers, "diff", |_| {
        let (d, files) = d?;
        Ok(views::diff(&d, files.as_ref()))
    })
    .await
}

/// One record, a chunk at a time: what a page cut is read here, never all at once.
async fn whole_record(
    State(c): State<Shared>,
    headers: HeaderMap,
    Path(id): Path<String>,
    Query(q): Query<Paged>,
) -> Response {
    if c.auth.get(&headers).is_none() {
        return Redirect::to("/login").into_response();
    }
    let from: u64 = num(&q.from);
    let r = c
        .read(move |s| Ok(records::record_chunk(s, url_id(&id)?, from)?))
        .await;
    page(&c, &headers, "record", |_| Ok(views::chunk(&r?, ""))).await
}

/// What a model was shown for an answer: rebuilt from the store and checked against the hash.
async fn prompt(State(c): State<Shared>, headers: HeaderMap, Path(id): Path<String>) -> Response {
    if c.auth.get(&headers).is_none() {
        return Redirect::to("/login").into_response();
    }
    let me = c.clone();
    let shown = c
        .read(move |s| {
            let rid = url_id(&id)?;
            let p = kura_history::prompt::prompt_of(s, rid, &me.trust.issuers)?;
            // Each place it stands is checked; the first is shown, with the first failure.
            let mut shown: Option<kura_model::prompt::Proven> = None;
            for at in &p.at {
                let proven =
                    kura_model::prompt::prove(&p.content, &at.context, &at.history, &at.problems)?;
                match &mut shown {
                    None => shown = Some(proven),
                    Some(first) if first.verdict == kura_model::prompt::Verdict::Ok => {
                        first.verdict = proven.verdict;
                    }
                    Some(_) => {}
                }
            }
            let shown = shown.ok_or_else(|| anyhow::anyhow!("no turn holds {rid}"))?;
            Ok((rid.to_string(), p.content.sha256, shown))
        })
        .await;
    page(&c, &headers, "prompt", |_| {
        let (rid, sha, proven) = shown?;
        Ok(views::prompt(&rid, &sha, &proven))
    })
    .await
}

async fn fleet(State(c): State<Shared>, headers: HeaderMap) -> Response {
    if c.auth.get(&headers).is_none() {
        return Redirect::to("/login").into_response();
    }
    let me = c.clone();
    let pis = tokio::task::spawn_blocking(move || match &me.trust.fleet {
        Some((config, db)) => Ok(kura_fleet::status::read(config, db)?),
        None => Ok(Vec::new()),
    })
    .await
    .map_err(anyhow::Error::from)
    .and_then(|r: anyhow::Result<_>| r);
    page(&c, &headers, "fleet", |_| Ok(pages::fleet(&pis?))).await
}

async fn writs(State(c): State<Shared>, headers: HeaderMap) -> Response {
    if c.auth.get(&headers).is_none() {
        return Redirect::to("/login").into_response();
    }
    let all = c.read(|s| Ok(kura_work::writs::list(s)?)).await;
    page(&c, &headers, "writs", |me| {
        let issuer = c
            .trust
            .issuers
            .iter()
            .any(|i| i.name == me.name && i.public_key.eq_ignore_ascii_case(&me.public_key));
        Ok(pages::writs(&all?, kura_work::now_ms(), me, issuer))
    })
    .await
}

async fn replica_sessions(
    State(c): State<Shared>,
    headers: HeaderMap,
    Path(pi): Path<String>,
    Query(q): Query<Paged>,
) -> Response {
    if c.auth.get(&headers).is_none() {
        return Redirect::to("/login").into_response();
    }
    let page_no: i64 = num(&q.page);
    let rows = c
        .read_replica(&pi, move |s| {
            Ok(data::sessions(
                s,
                page_no * SESSIONS_PER_PAGE,
                SESSIONS_PER_PAGE + 1,
            )?)
        })
        .await;
    let base = format!("/fleet/{pi}");
    page(&c, &headers, "replica", |_| {
        let mut rows = rows?;
        let more = rows.len() as i64 > SESSIONS_PER_PAGE;
        rows.truncate(SESSIONS_PER_PAGE as usize);
        Ok(pages::sessions(&rows, page_no, more, &base))
    })
    .await
}

async fn replica_history(
    State(c): State<Shared>,
    headers: HeaderMap,
    Path((pi, id)): Path<(String, String)>,
    Query(q): Query<Paged>,
) -> Response {
    if c.auth.get(&headers).is_none() {
        return Redirect::to("/login").into_response();
    }
    let page_no: usize = num(&q.page);
    let per_ledger = c.config.page_records.max(1);
    let focus = q
        .ledger
        .as_deref()
        .and_then(|l| url_id(l).ok())
        .map(|l| (l, num::<u64>(&q.from)));
    let h = c
        .read_replica(&pi, move |s| {
            let id = url_id(&id)?;
            Ok(data::history(
                s,
                id,
                page_no,
                LEDGERS_PER_PAGE,
                focus,
                per_ledger,
                None,
            )?)
        })
        .await;
    let base = format!("/fleet/{pi}");
    page(&c, &headers, "replica session", |_| {
        Ok(pages::history(
            &h?,
            page_no,
            LEDGERS_PER_PAGE,
            per_ledger,
            &base,
        ))
    })
    .await
}

async fn replica_record(
    State(c): State<Shared>,
    headers: HeaderMap,
    Path((pi, id)): Path<(String, String)>,
    Query(q): Query<Paged>,
) -> Response {
    if c.auth.get(&headers).is_none() {
        return Redirect::to("/login").into_response();
    }
    let from: u64 = num(&q.from);
    let r = c
        .read_replica(&pi, move |s| {
            Ok(records::record_chunk(s, url_id(&id)?, from)?)
        })
        .await;
    let base = format!("/fleet/{pi}");
    page(&c, &headers, "record", |_| Ok(views::chunk(&r?, &base))).await
}

async fn approvals(State(c): State<Shared>, headers: HeaderMap) -> Response {
    if c.auth.get(&headers).is_none() {
        return Redirect::to("/login").into_response();
    }
    let w = c.read(|s| Ok(data::waiting(s)?)).await;
    page(&c, &headers, "approvals", |me| {
        Ok(pages::approvals(&w?, me))
    })
    .await
}

async fn verification(State(c): State<Shared>, headers: HeaderMap) -> Response {
    if c.auth.get(&headers).is_none() {
        return Redirect::to("/login").into_response();
    }
    let st = c.read(|s| Ok(kura_work::ops::status(s)?)).await;
    let checkpoint = c
        .trust
        .checkpoint_file
        .as_ref()
        .and_then(|p| std::fs::read_to_string(p).ok());
    let vkey = c.trust.log_verifier.clone();
    let note = checkpoint.clone();
    let checked = c
        .read(move |s| Ok(pages::check_checkpoint(s, note.as_deref(), vkey.as_deref())))
        .await
        .unwrap_or_else(|e| Err(pages::CheckpointError::Unread(e.to_string())));
    page(&c, &headers, "verification", |_| {
        let st = st?;
        let alarm = st
            .daemons
            .iter()
            .filter(|d| d.alarm)
            .find_map(|d| d.detail.as_deref());
        Ok(pages::verification(
            st.last_sweep.as_ref(),
            checkpoint.as_deref(),
            &checked,
            &c.trust,
            alarm,
        ))
    })
    .await
}

async fn status(State(c): State<Shared>, headers: HeaderMap) -> Response {
    if c.auth.get(&headers).is_none() {
        return Redirect::to("/login").into_response();
    }
    let st = c
        .read(|s| {
            let ungated = kura_history::ungated::alarm(s, kura_work::now_ms(), 20)?;
            Ok((kura_work::ops::status(s)?, ungated))
        })
        .await;
    page(&c, &headers, "status", |_| {
        let (st, ungated) = st?;
        Ok(pages::status(&st, &ungated))
    })
    .await
}

#[derive(Deserialize)]
struct MemoryQuery {
    #[serde(default)]
    q: String,
}

async fn memory(
    State(c): State<Shared>,
    headers: HeaderMap,
    Query(q): Query<MemoryQuery>,
) -> Response {
    if c.auth.get(&headers).is_none() {
        return Redirect::to("/login").into_response();
    }
    let text: String = q.q.chars().take(200).collect();
    let query = text.clone();
    let hits = c
        .read(move |s| {
            if query.trim().is_empty() {
                return Ok(Vec::new());
            }
            Ok(kura_memory::search(
                s.conn(),
                &kura_memory::Search {
                    query,
                    record_type: None,
                    session_id: None,
                    limit: 20,
                    query_vector: None,
                },
            )?)
        })
        .await;
    page(&c, &headers, "memory", |_| Ok(pages::memory(&text, &hits?))).await
}

/// Live updates: one event per change; the page re-reads itself. The stream ends when its
/// login does — at logout or expiry — so a forgotten tab stops hearing of changes.
async fn events(State(c): State<Shared>, headers: HeaderMap) -> Response {
    let (Some(token), Some(login)) = (auth::token(&headers), c.auth.get(&headers)) else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    let live = Live {
        changes: c.changes.subscribe(),
        logouts: c.auth.logouts(),
        expires: tokio::time::Instant::from_std(login.expires()),
        console: c,
        token,
    };
    let stream = futures::stream::unfold(live, |mut live| async move {
        let n = live.next().await?;
        let event = Event::default().event("change").data(n.to_string());
        Some((Ok::<_, std::convert::Infallible>(event), live))
    });
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// An event stream's state: what it tells of, and the login it lasts as long as.
struct Live {
    console: Shared,
    token: String,
    changes: tokio::sync::watch::Receiver<u64>,
    logouts: tokio::sync::watch::Receiver<u64>,
    expires: tokio::time::Instant,
}

impl Live {
    /// The next change to tell of; `None` once the login has ended.
    async fn next(&mut self) -> Option<u64> {
        loop {
            let changed = tokio::select! {
                r = self.changes.changed() => { r.ok()?; true }
                r = self.logouts.changed() => { r.ok()?; false }
                _ = tokio::time::sleep_until(self.expires) => return None,
            };
            self.console.auth.by_token(&self.token)?;
            if changed {
                return Some(*self.changes.borrow_and_update());
            }
        }
    }
}

async fn login_page(State(c): State<Shared>) -> Response {
    match c.auth.challenge() {
        Some(ch) => pages::layout("log in", None, 0, pages::login(&ch)).into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "no randomness for a login challenge",
        )
            .into_response(),
    }
}

async fn enrol_page() -> Response {
    pages::layout("enrol", None, 0, pages::enrol()).into_response()
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LoginForm {
    challenge: String,
    public_key: String,
    signature: String,
}

/// The login endpoint's answer: who is logged in, or why not.
#[derive(Serialize)]
struct LoginAnswer<'a> {
    ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

async fn login(State(c): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let Ok(f) = serde_json::from_slice::<LoginForm>(&body) else {
        return (StatusCode::BAD_REQUEST, "not a login").into_response();
    };
    let origin = auth::origin(&headers, c.tls);
    match c.auth.login(
        &c.config.users,
        &f.challenge,
        &origin,
        &f.public_key,
        &f.signature,
    ) {
        Ok((token, l)) => {
            tracing::info!(user = %l.name, "console login");
            let secure = if c.tls { "; Secure" } else { "" };
            let cookie = format!(
                "{}={token}; HttpOnly; SameSite=Strict; Path=/; Max-Age={}{secure}",
                auth::COOKIE,
                c.config.session_ms / 1000
            );
            (
                [(header::SET_COOKIE, cookie)],
                axum::Json(LoginAnswer {
                    ok: true,
                    name: Some(&l.name),
                    message: None,
                }),
            )
                .into_response()
        }
        Err(e) => {
            tracing::warn!(reason = %e, "console login refused");
            (
                StatusCode::FORBIDDEN,
                axum::Json(LoginAnswer {
                    ok: false,
                    name: None,
                    message: Some(e.to_string()),
                }),
            )
                .into_response()
        }
    }
}

async fn logout(State(c): State<Shared>, headers: HeaderMap) -> Response {
    if let Some(l) = c.auth.get(&headers) {
        if auth::check_change(&l, &headers, c.tls).is_err() {
            return StatusCode::FORBIDDEN.into_response();
        }
        c.auth.logout(&headers);
    }
    let gone = format!(
        "{}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0",
        auth::COOKIE
    );
    ([(header::SET_COOKIE, gone)], StatusCode::NO_CONTENT).into_response()
}

async fn decide(State(c): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let Some(l) = c.auth.get(&headers) else {
        return StatusCode::UNAUTHORIZED.into_response();
    };
    if let Err(why) = auth::check_change(&l, &headers, c.tls) {
        return (
            StatusCode::FORBIDDEN,
            axum::Json(proto::doorbell::Verdicted::refused(why)),
        )
            .into_response();
    }
    match relay(&c, &l, &body).await {
        Ok(verdict) => axum::Json(verdict).into_response(),
        Err(RelayError::BadRequest(m)) => (
            StatusCode::BAD_REQUEST,
            axum::Json(proto::doorbell::Verdicted::refused(m)),
        )
            .into_response(),
        Err(RelayError::Unavailable(m)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(proto::doorbell::Verdicted::refused(m)),
        )
            .into_response(),
    }
}

/// Parses an id of the kind `T` from a URL, as a clear error.
fn url_id<T: From<uuid::Uuid>>(text: &str) -> anyhow::Result<T> {
    Ok(kura_store::store::parse_id(text)?)
}
