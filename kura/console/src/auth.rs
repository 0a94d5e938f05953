//! Logins without passwords: the browser's enrolled Ed25519 key signs a one-time server
//! challenge bound to the console's origin; a login is a random cookie that expires. Every
//! state-changing request also carries the login's CSRF token in a header.
//!
//! Challenges are stateless — a time and a nonce signed by a key this process made for
//! nothing else — so handing them out costs no memory: a cross-site page that loads the
//! login page a thousand times locks nobody out. Only challenges that logged someone in are
//! remembered (until they expire), so none is accepted twice.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use axum::http::HeaderMap;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};

/// The cookie that names a login.
pub const COOKIE: &str = "kura_session";
/// The header a state-changing request repeats its login's CSRF token in.
pub const CSRF_HEADER: &str = "x-kura-csrf";
/// A challenge must be answered this soon.
const CHALLENGE_TTL: Duration = Duration::from_secs(120);
/// At most this many open logins (each needs a trusted key's signature).
const MAX_OPEN: usize = 1024;
/// What the console's own challenge key signs: a challenge's time and nonce.
const CHALLENGE_KIND: &[u8] = b"kura.console.challenge.v1\n";

/// The bytes a browser signs to log in.
pub fn login_bytes(challenge: &str, origin: &str) -> Vec<u8> {
    format!("kura.console.login.v1\n{challenge}\n{origin}").into_bytes()
}

/// Why a public key is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// Not 64 hex digits.
    #[error("a public key is 64 hex digits")]
    NotHex,
    /// Not an Ed25519 point.
    #[error("not an Ed25519 public key: {0}")]
    NotEd25519(String),
}

/// Why a login is refused, in the words the login page shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoginError {
    /// The challenge is not one of ours, expired, or used already.
    #[error("unknown or expired challenge; reload the page")]
    Stale,
    /// The browser's key is not a configured user's.
    #[error("this browser's key is not trusted; show its key to the operator")]
    Untrusted,
    /// The configured user's key is unusable.
    #[error("{0}")]
    Key(#[from] KeyError),
    /// The signature is not 128 hex digits.
    #[error("the signature is not 128 hex digits")]
    SignatureNotHex,
    /// The signature is not the key's over this challenge and origin.
    #[error("the signature does not verify")]
    Mismatch,
    /// Too many logins are open.
    #[error("too many open logins; try again later")]
    TooMany,
    /// No randomness for a token.
    #[error("no randomness for a login token")]
    NoRandomness,
}

/// An Ed25519 public key from 64 hex digits.
pub fn parse_key(hex_key: &str) -> Result<VerifyingKey, KeyError> {
    let bytes: [u8; 32] = hex::decode(hex_key.trim())
        .ok()
        .and_then(|b| b.try_into().ok())
        .ok_or(KeyError::NotHex)?;
    VerifyingKey::from_bytes(&bytes).map_err(|e| KeyError::NotEd25519(e.to_string()))
}

/// 32 random bytes as hex; `None` without randomness (then no login is safe to make).
fn random_hex() -> Option<String> {
    Some(hex::encode(random::<32>()?))
}

fn random<const N: usize>() -> Option<[u8; N]> {
    let mut b = [0u8; N];
    getrandom::fill(&mut b).ok()?;
    Some(b)
}

/// A logged-in person.
#[derive(Debug, Clone)]
pub struct Login {
    /// Their name.
    pub name: String,
    /// The token their page sends with every change.
    pub csrf: String,
    /// The browser key they logged in with (hex): what they sign in the console is theirs
    /// only when signed by this key.
    pub public_key: String,
    expires: Instant,
}

impl Login {
    /// When this login ends (unless its person logs out first).
    pub fn expires(&self) -> Instant {
        self.expires
    }
}

#[derive(Default)]
struct State {
    /// Challenges that logged someone in, until they would have expired anyway.
    used: HashMap<String, Instant>,
    logins: HashMap<String, Login>,
}

/// Logins, and the key that makes challenges.
pub struct Logins {
    ttl: Duration,
    state: Mutex<State>,
    challenge_key: Option<SigningKey>,
    started: Instant,
    /// Bumped at every logout, so open event streams look again whether their login lasts.
    ended: tokio::sync::watch::Sender<u64>,
}

impl Logins {
    /// Logins lasting `ttl`.
    pub fn new(ttl: Duration) -> Logins {
        Logins {
            ttl,
            state: Mutex::new(State::default()),
            challenge_key: random::<32>().map(|b| SigningKey::from_bytes(&b)),
            started: Instant::now(),
            ended: tokio::sync::watch::channel(0).0,
        }
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        s.used.retain(|_, t| *t > now);
        s.logins.retain(|_, l| l.expires > now);
        f(&mut s)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// A fresh challenge: hex of the time it was made (ms since this process started), a
    /// nonce, and this process's signature over both. `None` without randomness.
    pub fn challenge(&self) -> Option<String> {
        let key = self.challenge_key.as_ref()?;
        let mut body = self.now_ms().to_be_bytes().to_vec();
        body.extend_from_slice(&random::<16>()?);
        let sig = key.sign(&[CHALLENGE_KIND, &body].concat());
        body.extend_from_slice(&sig.to_bytes());
        Some(hex::encode(body))
    }

    /// Whether `challenge` is one of ours, made less than [`CHALLENGE_TTL`] ago.
    fn fresh(&self, challenge: &str) -> bool {
        let Some(key) = &self.challenge_key else {
            return false;
        };
        let Some(bytes) = hex::decode(challenge)
            .ok()
            .filter(|b| b.len() == 8 + 16 + 64)
        else {
            return false;
        };
        let (body, sig) = bytes.split_at(24);
        let Ok(sig) = <[u8; 64]>::try_from(sig) else {
            return false;
        };
        let signed = key
            .verifying_key()
            .verify(
                &[CHALLENGE_KIND, body].concat(),
                &Signature::from_bytes(&sig),
            )
            .is_ok();
        let made = body
            .first_chunk::<8>()
            .map(|t| u64::from_be_bytes(*t))
            .unwrap_or(u64::MAX);
        let age = self.now_ms().checked_sub(made);
        signed && age.is_some_and(|a| u128::from(a) < CHALLENGE_TTL.as_millis())
    }

    /// Checks a signed challenge from one of `users`; the challenge is used up either way.
    /// Returns the new login's cookie token and the login.
    pub fn login(
        &self,
        users: &[crate::User],
        challenge: &str,
        origin: &str,
        public_key: &str,
        signature: &str,
    ) -> Result<(String, Login), LoginError> {
        if !self.fresh(challenge) {
            return Err(LoginError::Stale);
        }
        self.with(|s| {
            if s.used.contains_key(challenge) {
                return Err(LoginError::Stale);
            }
            let user = users
                .iter()
                .find(|u| u.public_key.eq_ignore_ascii_case(public_key.trim()))
                .ok_or(LoginError::Untrusted)?;
            let key = parse_key(&user.public_key)?;
            let sig: [u8; 64] = hex::decode(signature)
                .ok()
                .and_then(|b| b.try_into().ok())
                .ok_or(LoginError::SignatureNotHex)?;
            key.verify(
                &login_bytes(challenge, origin),
                &Signature::from_bytes(&sig),
            )
            .map_err(|_| LoginError::Mismatch)?;
            if s.logins.len() >= MAX_OPEN {
                return Err(LoginError::TooMany);
            }
            // Only a verified signature reaches here: strangers cannot fill this set.
            s.used
                .insert(challenge.to_owned(), Instant::now() + CHALLENGE_TTL);
            let (Some(csrf), Some(token)) = (random_hex(), random_hex()) else {
                return Err(LoginError::NoRandomness);
            };
            let login = Login {
                name: user.name.clone(),
                csrf,
                public_key: user.public_key.to_ascii_lowercase(),
                expires: Instant::now() + self.ttl,
            };
            s.logins.insert(token.clone(), login.clone());
            Ok((token, login))
        })
    }

    /// The login a request's cookie names, if it is still valid.
    pub fn get(&self, headers: &HeaderMap) -> Option<Login> {
        self.by_token(&token(headers)?)
    }

    /// The login a cookie token names, if it is still valid.
    pub fn by_token(&self, token: &str) -> Option<Login> {
        self.with(|s| s.logins.get(token).cloned())
    }

    /// Ends the login a request's cookie names.
    pub fn logout(&self, headers: &HeaderMap) {
        if let Some(token) = token(headers) {
            self.with(|s| s.logins.remove(&token));
            self.ended.send_modify(|n| *n += 1);
        }
    }

    /// Hears of every logout.
    pub fn logouts(&self) -> tokio::sync::watch::Receiver<u64> {
        self.ended.subscribe()
    }
}

/// The login token a request's cookie carries.
pub fn token(headers: &HeaderMap) -> Option<String> {
    cookie(headers, COOKIE)
}

fn cookie(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(axum::http::header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
}

/// The origin a page of this console is served from, as the browser sees it.
pub fn origin(headers: &HeaderMap, tls: bool) -> String {
    let host = headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("");
    format!("{}://{host}", if tls { "https" } else { "http" })
}

/// A change is allowed only from this console's own pages: the login's CSRF token in its
/// header (which another site cannot set) and, when the browser says, the same origin.
pub fn check_change(login: &Login, headers: &HeaderMap, tls: bool) -> Result<(), &'static str> {
    let token = headers.get(CSRF_HEADER).and_then(|v| v.to_str().ok());
    if token != Some(login.csrf.as_str()) {
        return Err("missing or wrong CSRF token");
    }
    if let Some(o) = headers
        .get(axum::http::header::ORIGIN)
        .and_then(|v| v.to_str().ok())
        && o != origin(headers, tls)
    {
        return Err("request from another origin");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use ed25519_dalek::{Signer, SigningKey};

    fn user(key: &SigningKey) -> crate::User {
        crate::User {
            name: "alice".into(),
            public_key: hex::encode(key.verifying_key().as_bytes()),
        }
    }

    /// Attack: a challenge signed once is replayed, signed for another origin, or signed by
    /// an enrolled-but-untrusted key. Each is refused; only the fresh, bound one logs in.
    #[test]
    fn replayed_misbound_or_untrusted_login_signatures_are_refused() {
        let alice = SigningKey::from_bytes(&[3u8; 32]);
        let mallory = SigningKey::from_bytes(&[4u8; 32]);
        let users = [user(&alice)];
        let logins = Logins::new(Duration::from_secs(60));
        let origin = "http://127.0.0.1:8480";
        let c = logins.challenge().expect("challenge");
        let sig =
            |k: &SigningKey, c: &str, o: &str| hex::encode(k.sign(&login_bytes(c, o)).to_bytes());
        let pk = |k: &SigningKey| hex::encode(k.verifying_key().as_bytes());
        let e = logins
            .login(
                &users,
                &c,
                origin,
                &pk(&alice),
                &sig(&alice, &c, "http://evil.example"),
            )
            .expect_err("another origin");
        assert_eq!(e, LoginError::Mismatch);
        let c = logins.challenge().expect("challenge");
        let e = logins
            .login(
                &users,
                &c,
                origin,
                &pk(&mallory),
                &sig(&mallory, &c, origin),
            )
            .expect_err("untrusted");
        assert_eq!(e, LoginError::Untrusted);
        let c = logins.challenge().expect("challenge");
        let good = sig(&alice, &c, origin);
        let (token, login) = logins
            .login(&users, &c, origin, &pk(&alice), &good)
            .expect("login");
        assert_eq!(login.name, "alice");
        assert_eq!(token.len(), 64);
        let e = logins
            .login(&users, &c, origin, &pk(&alice), &good)
            .expect_err("replay");
        assert_eq!(e, LoginError::Stale);
    }

    /// Attack: blind loads of the login page, and challenges made up or altered by a client.
    /// Handing one out stores nothing; only this process's own, unaltered ones are accepted.
    #[test]
    fn challenges_cost_nothing_and_cannot_be_forged() {
        let logins = Logins::new(Duration::from_secs(60));
        for _ in 0..5_000 {
            assert!(logins.challenge().is_some());
        }
        assert!(logins.with(|s| s.used.is_empty() && s.logins.is_empty()));
        let c = logins.challenge().expect("challenge");
        assert!(logins.fresh(&c));
        let mut altered = c.clone().into_bytes();
        altered[3] = if altered[3] == b'0' { b'1' } else { b'0' };
        assert!(!logins.fresh(&String::from_utf8(altered).expect("hex")));
        assert!(!logins.fresh(&hex::encode([7u8; 88])));
        assert!(
            !Logins::new(Duration::from_secs(60)).fresh(&c),
            "another process's"
        );
    }
}
