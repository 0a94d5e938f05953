//! Granting and revoking writs from the console: the page builds the writ's body and signs
//! it with the person's browser key (the server never holds a key that can grant); the
//! server stores it only when it is signed by the key this person logged in with, names
//! them as issuer, and is a grant `[writs] issuers` trusts.

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use kura_policy::writ as check;
use proto::writ::{Revocation, Writ};
use serde::Serialize;

use crate::{Shared, auth};

/// A signed grant or revocation is a few hundred bytes; 64 globs of 512 bytes fit in this.
const MAX_BODY: usize = 64 * 1024;

/// What the page is told: stored (and as which record), or why not.
#[derive(Serialize)]
struct Answer {
    ok: bool,
    message: String,
}

fn answer(status: StatusCode, ok: bool, message: impl Into<String>) -> Response {
    (
        status,
        axum::Json(Answer {
            ok,
            message: message.into(),
        }),
    )
        .into_response()
}

/// The logged-in person behind a change, or the refusal to send.
fn person(
    c: &Shared,
    headers: &HeaderMap,
    body: &Bytes,
) -> Result<auth::Login, (StatusCode, &'static str)> {
    let Some(l) = c.auth.get(headers) else {
        return Err((StatusCode::UNAUTHORIZED, "log in first"));
    };
    auth::check_change(&l, headers, c.tls).map_err(|why| (StatusCode::FORBIDDEN, why))?;
    if body.len() > MAX_BODY {
        return Err((StatusCode::PAYLOAD_TOO_LARGE, "too large for a writ"));
    }
    Ok(l)
}

/// `POST /api/writs/grant`: a writ the person signed in this browser.
pub async fn grant(State(c): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let l = match person(&c, &headers, &body) {
        Ok(l) => l,
        Err((status, why)) => return answer(status, false, why),
    };
    let w: Writ = match serde_json::from_slice(&body) {
        Ok(w) => w,
        Err(e) => return answer(StatusCode::BAD_REQUEST, false, format!("not a writ: {e}")),
    };
    if let Err(why) = own(&l, &w.key, &w.body.issuer) {
        return answer(StatusCode::FORBIDDEN, false, why.to_string());
    }
    if w.body.parent.is_some() {
        return answer(
            StatusCode::BAD_REQUEST,
            false,
            "a delegation is signed with the holder's key: use kura writ delegate",
        );
    }
    if let Err(e) = check::verify_grant(&w, &c.trust.issuers) {
        return answer(StatusCode::FORBIDDEN, false, e.to_string());
    }
    let author = w.body.issuer.clone();
    let id = w.body.id;
    let stored = c
        .write(move |s| {
            let sealer = s.sealer().cloned();
            Ok(s.write(|tx| kura_work::writs::grant(tx, &w, &author, sealer.as_ref()))?)
        })
        .await;
    match stored {
        Ok(Ok(record)) => {
            tracing::info!(writ = %id, by = %l.name, "writ granted from the console");
            answer(
                StatusCode::OK,
                true,
                format!("writ {id} granted (record {record})"),
            )
        }
        Ok(Err(e)) => answer(StatusCode::FORBIDDEN, false, e.to_string()),
        Err(e) => answer(StatusCode::SERVICE_UNAVAILABLE, false, format!("{e:#}")),
    }
}

/// `POST /api/writs/revoke`: a revocation the person signed in this browser.
pub async fn revoke(State(c): State<Shared>, headers: HeaderMap, body: Bytes) -> Response {
    let l = match person(&c, &headers, &body) {
        Ok(l) => l,
        Err((status, why)) => return answer(status, false, why),
    };
    let r: Revocation = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return answer(
                StatusCode::BAD_REQUEST,
                false,
                format!("not a revocation: {e}"),
            );
        }
    };
    if let Err(why) = own(&l, &r.key, &r.body.by) {
        return answer(StatusCode::FORBIDDEN, false, why.to_string());
    }
    let issuers = c.trust.issuers.clone();
    let id = r.body.writ_id;
    let stored = c
        .write(move |s| {
            let sealer = s.sealer().cloned();
            let by = r.body.by.clone();
            Ok(s.write(|tx| kura_work::writs::revoke(tx, &r, &issuers, &by, sealer.as_ref()))?)
        })
        .await;
    match stored {
        Ok(Ok(record)) => {
            tracing::info!(writ = %id, by = %l.name, "writ revoked from the console");
            answer(
                StatusCode::OK,
                true,
                format!("writ {id} revoked (record {record})"),
            )
        }
        Ok(Err(e)) => answer(StatusCode::FORBIDDEN, false, e.to_string()),
        Err(e) => answer(StatusCode::SERVICE_UNAVAILABLE, false, format!("{e:#}")),
    }
}

/// A statement the logged-in person may send: signed by the key they logged in with and
/// naming them. Another person's signed grant, relayed by someone logged in, is refused
/// even when it would verify: the console speaks only for whoever is at the keyboard.
fn own(l: &auth::Login, key: &str, who: &str) -> Result<(), NotYours> {
    if !key.eq_ignore_ascii_case(&l.public_key) {
        return Err(NotYours::Key(l.name.clone()));
    }
    if who != format!("user:{}", l.name) {
        return Err(NotYours::Name {
            named: proto::text::excerpt(who, 80),
            logged_in: l.name.clone(),
        });
    }
    Ok(())
}

/// Why a statement is not the logged-in person's to send.
#[derive(Debug, thiserror::Error)]
enum NotYours {
    #[error("signed with a key that is not the one {0} logged in with")]
    Key(String),
    #[error("it names {named}, but user:{logged_in} is logged in")]
    Name { named: String, logged_in: String },
}
