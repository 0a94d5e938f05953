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

    /// `text` with every secret replaced by its marker.
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for (name, value) in &self.0 {
            if out.contains(value.as_str()) {
                out = Cow::Owned(out.replace(value.as_str(), &format!("[secret:{name}]")));
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
}
