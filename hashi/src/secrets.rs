//! Secrets a worker holds (the model API key, values named in `[worker] secret_env`) never
//! reach a record or a log line: every string hashi records or logs has each one replaced by
//! `[secret:NAME]` first — tool output, a model's words or error, a tool call's arguments
//! (so what runs is what is recorded).

use std::borrow::Cow;

use serde_json::Value;

/// Shortest value treated as a secret: a shorter one would be replaced inside ordinary words.
pub const MIN_SECRET_BYTES: usize = 8;

/// The secrets to scrub, longest first (so one that contains another is replaced whole).
#[derive(Debug, Default, Clone)]
pub struct Secrets(Vec<(String, String)>);

impl Secrets {
    /// The values of the environment variables `names` (unset or empty ones skipped; one
    /// shorter than [`MIN_SECRET_BYTES`] is refused with a warning, since replacing it would
    /// mangle ordinary text).
    pub fn from_env<'a>(names: impl IntoIterator<Item = &'a str>) -> Secrets {
        let mut found = Vec::new();
        for name in names {
            let Ok(value) = std::env::var(name) else {
                continue;
            };
            if value.is_empty() {
                continue;
            }
            if value.len() < MIN_SECRET_BYTES {
                tracing::warn!(%name, "a secret shorter than {MIN_SECRET_BYTES} bytes is not scrubbed from records; use a longer one");
                continue;
            }
            found.push((name.to_owned(), value));
        }
        Secrets::new(found)
    }

    /// These `(name, value)` secrets.
    pub fn new(mut pairs: Vec<(String, String)>) -> Secrets {
        pairs.sort_by_key(|p| std::cmp::Reverse(p.1.len()));
        pairs.dedup_by(|a, b| a.1 == b.1);
        Secrets(pairs)
    }

    /// How many there are.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `text` with every secret replaced by its marker: whole, base64-encoded at any
    /// alignment (binary output is recorded as base64), and a secret's start left at the end
    /// of a text that was cut (output is kept up to a size, a quote to a length).
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for (name, value) in &self.0 {
            let marker = format!("[secret:{name}]");
            let mut forms = vec![value.clone()];
            forms.extend(base64_cores(value.as_bytes()));
            for form in forms {
                if out.contains(form.as_str()) {
                    out = Cow::Owned(out.replace(form.as_str(), &marker));
                }
            }
        }
        // Then a cut that left a secret's first bytes at the very end.
        for (name, value) in &self.0 {
            let marker = format!("[secret:{name}]");
            let tail = (MIN_SECRET_BYTES.min(value.len())..value.len())
                .rev()
                .find(|&n| out.ends_with(&value[..n]) && value.is_char_boundary(n));
            if let Some(n) = tail {
                let keep = out.len() - n;
                out = Cow::Owned(format!("{}{marker}", &out[..keep]));
            }
        }
        out
    }

    /// Scrubs every string (and object key) in `v`.
    pub fn scrub_value(&self, v: &mut Value) {
        if self.0.is_empty() {
            return;
        }
        match v {
            Value::String(s) => {
                if let Cow::Owned(clean) = self.scrub(s) {
                    *s = clean;
                }
            }
            Value::Array(items) => items.iter_mut().for_each(|i| self.scrub_value(i)),
            Value::Object(map) => {
                let dirty: Vec<String> = map
                    .keys()
                    .filter(|k| matches!(self.scrub(k), Cow::Owned(_)))
                    .cloned()
                    .collect();
                for k in dirty {
                    if let Some(val) = map.remove(&k) {
                        map.insert(self.scrub(&k).into_owned(), val);
                    }
                }
                map.values_mut().for_each(|i| self.scrub_value(i));
            }
            _ => {}
        }
    }
}

/// The base64 text that `secret` always turns into, wherever it starts in the encoded
/// bytes: for each of the three alignments, the characters made only of the secret's bytes.
fn base64_cores(secret: &[u8]) -> Vec<String> {
    use base64::Engine as _;
    let mut cores = Vec::new();
    for pad in 0..3usize {
        let mut buf = vec![0u8; pad];
        buf.extend_from_slice(secret);
        let encoded = base64::engine::general_purpose::STANDARD.encode(&buf);
        // Characters touched by the padding bytes in front, and the last group (which may
        // share bits with what follows), depend on the neighbours: drop them.
        let start = (pad * 8).div_ceil(6);
        let end = ((pad + secret.len()) * 8) / 6;
        if end > start + MIN_SECRET_BYTES {
            cores.push(encoded[start..end].to_owned());
        }
    }
    cores
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_canary_is_replaced_everywhere_it_hides() {
        let s = Secrets::new(vec![
            ("KEY".into(), "sk-canary-123456".into()),
            ("LONG".into(), "sk-canary-123456-and-more".into()),
        ]);
        assert_eq!(s.scrub("key=sk-canary-123456."), "key=[secret:KEY].");
        assert_eq!(s.scrub("sk-canary-123456-and-more"), "[secret:LONG]");
        let mut v = serde_json::json!({"out": ["a sk-canary-123456 b"], "sk-canary-123456": 1});
        s.scrub_value(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"out": ["a [secret:KEY] b"], "[secret:KEY]": 1})
        );
        assert!(matches!(s.scrub("nothing here"), Cow::Borrowed(_)));
    }

    /// Attack: the secret in binary output (recorded as base64, at any offset) or cut in two
    /// by the output limit.
    #[test]
    fn a_canary_in_base64_or_cut_at_the_end_is_replaced() {
        use base64::Engine as _;
        let s = Secrets::new(vec![("KEY".into(), "sk-canary-123456".into())]);
        for pad in 0..3 {
            let mut bytes = vec![0xffu8; pad];
            bytes.extend_from_slice(b"sk-canary-123456");
            bytes.extend_from_slice(&[0xfe, 0x00]);
            let b64 = base64::engine::general_purpose::STANDARD.encode(&bytes);
            let core = &base64_cores(b"sk-canary-123456")[pad];
            assert!(b64.contains(core.as_str()), "alignment {pad}");
            assert!(
                s.scrub(&b64).contains("[secret:KEY]"),
                "alignment {pad}: {b64}"
            );
        }
        assert_eq!(s.scrub("out: sk-canary-12"), "out: [secret:KEY]");
        assert_eq!(
            s.scrub("out: sk-can"),
            "out: sk-can",
            "shorter than 8 bytes is left"
        );
    }
}
