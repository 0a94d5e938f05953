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

    /// `text` with every secret replaced by its marker: whole, percent-encoded as in a URL,
    /// base64-encoded at any alignment (binary output is recorded as base64) and as hex, those
    /// two also when wrapped into lines, and a secret's start left at the end of a text that
    /// was cut (output is kept up to a size, a quote to a length).
    pub fn scrub<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        // Binary output cut at its limit, then recorded as base64: the bytes may end with a
        // secret's first bytes, which no whole-secret form matches. First, while the text is
        // still the base64 it was recorded as.
        if let Some(clean) = self.scrub_cut_base64(&out) {
            out = Cow::Owned(clean);
        }
        for (name, value) in &self.0 {
            let marker = format!("[secret:{name}]");
            // As written, and as a URL carries it.
            for form in [
                value.clone(),
                url_encoded(value, false),
                url_encoded(value, true),
            ] {
                if out.contains(form.as_str()) {
                    out = Cow::Owned(out.replace(form.as_str(), &marker));
                }
            }
            // Encodings tools wrap into lines (`base64` at 76 columns, `xxd -p` at 60):
            // matched with line breaks anywhere inside.
            let hex: String = value.bytes().map(|b| format!("{b:02x}")).collect();
            let mut wrapped = base64_cores(value.as_bytes());
            wrapped.extend([hex.to_uppercase(), hex]);
            for form in wrapped {
                if let Some(clean) = replace_across_lines(&out, &form, &marker) {
                    out = Cow::Owned(clean);
                }
            }
        }
        // A text cut inside a secret's base64 or hex, maybe wrapped (`base64 .env`, `xxd -p`).
        if let Some(clean) = self.scrub_cut_encoded_tail(&out) {
            out = Cow::Owned(clean);
        }
        // Then a cut that left a secret's first bytes at the very end.
        for (name, value) in &self.0 {
            let marker = format!("[secret:{name}]");
            let tail = (MIN_SECRET_BYTES.min(value.len())..value.len())
                .rev()
                .find(|&n| value.is_char_boundary(n) && out.ends_with(&value[..n]));
            if let Some(n) = tail {
                let keep = out.len() - n;
                out = Cow::Owned(format!("{}{marker}", &out[..keep]));
            }
        }
        out
    }

    /// `text` re-encoded without the secret's start its decoded bytes end with, when `text`
    /// is base64 (as a binary output's kept head is) and they do.
    fn scrub_cut_base64(&self, text: &str) -> Option<String> {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        if text.len() < 12 || !text.len().is_multiple_of(4) {
            return None;
        }
        let bytes = b64.decode(text).ok()?;
        for (name, value) in &self.0 {
            let v = value.as_bytes();
            let cut = (MIN_SECRET_BYTES.min(v.len())..=v.len())
                .rev()
                .find(|&n| bytes.ends_with(&v[..n]));
            if let Some(n) = cut {
                let mut kept = bytes[..bytes.len() - n].to_vec();
                kept.extend_from_slice(format!("[secret:{name}]").as_bytes());
                return Some(b64.encode(kept));
            }
        }
        None
    }

    /// `text` without the tail of its trailing run of base64 (or hex), line breaks allowed,
    /// when that tail decodes — at any alignment, a last partial group too — to bytes ending
    /// with a secret's start: it is replaced by the marker from the latest line start (or
    /// `=`) it begins after, so what came before stays.
    fn scrub_cut_encoded_tail(&self, text: &str) -> Option<String> {
        let forms: [(CharClass, usize); 2] = [
            (
                |c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '='),
                4,
            ),
            (|c| c.is_ascii_hexdigit(), 2),
        ];
        // Only the last `window` encoded characters can hold a secret's start.
        let widest = self.0.iter().map(|(_, v)| window(v.len())).max()?;
        for (is_char, group) in forms {
            let run = text
                .char_indices()
                .rev()
                .take_while(|(_, c)| is_char(*c) || matches!(c, '\n' | '\r'))
                .last()
                .map(|(i, _)| i)?;
            // The run's encoded characters (no `=` or line breaks), and where each may begin
            // a replacement: the run's start, each line start, each `=`'s end — the latest
            // first, and no further back than the widest window reaches.
            let tail = &text[run..];
            let mut flat: Vec<u8> = Vec::new();
            let mut starts: Vec<(usize, usize)> = vec![(run, 0)];
            for (i, b) in tail.bytes().enumerate() {
                if b == b'\n' || b == b'=' {
                    starts.push((run + i + 1, flat.len()));
                } else if is_char(char::from(b)) {
                    flat.push(b);
                }
            }
            for &(start, from) in starts.iter().rev() {
                let seen = &flat[from..];
                for (name, value) in &self.0 {
                    if ends_in_secret(seen, group, value.as_bytes()) {
                        return Some(format!("{}[secret:{name}]", &text[..start]));
                    }
                }
                if seen.len() >= widest {
                    break;
                }
            }
        }
        None
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

/// How many encoded characters at the end of a run can hold the start of a secret of
/// `len` bytes, at any alignment (hex takes two per byte, base64 fewer).
fn window(len: usize) -> usize {
    (len + 3) * 2 + 8
}

/// Which characters an encoding is written in.
type CharClass = fn(char) -> bool;

/// Whether `flat` (base64 when `group` is 4, else hex), decoded from any of its alignments
/// with a last partial group kept, ends with at least [`MIN_SECRET_BYTES`] of `secret`'s
/// start. Only the tail that could hold them is decoded.
fn ends_in_secret(flat: &[u8], group: usize, secret: &[u8]) -> bool {
    use base64::Engine as _;
    let min = MIN_SECRET_BYTES.min(secret.len());
    let tail = &flat[flat.len().saturating_sub(window(secret.len()))..];
    let lenient = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    (0..group).any(|skip| {
        let Some(t) = tail.get(skip..) else {
            return false;
        };
        // A last group too short for a whole byte is dropped; any other part is decoded.
        let whole = match (group, t.len() % group) {
            (4, 1) | (2, 1) => &t[..t.len() - 1],
            _ => t,
        };
        let decoded = if group == 4 {
            lenient.decode(whole).ok()
        } else {
            hex::decode(whole).ok()
        };
        decoded.is_some_and(|d| (min..=secret.len()).any(|n| d.ends_with(&secret[..n])))
    })
}

/// `secret` percent-encoded as a URL carries it (`upper`: `%2F`, else `%2f`); unreserved
/// characters stay as they are.
fn url_encoded(secret: &str, upper: bool) -> String {
    secret
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ if upper => format!("%{b:02X}"),
            _ => format!("%{b:02x}"),
        })
        .collect()
}

/// `text` with every occurrence of `needle` (ASCII) replaced by `marker`, where an
/// occurrence may have line breaks (`\n`, `\r`) between any two of its characters; `None`
/// when there is none.
fn replace_across_lines(text: &str, needle: &str, marker: &str) -> Option<String> {
    let (t, n) = (text.as_bytes(), needle.as_bytes());
    let first = *n.first()?;
    let mut spans = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if t[i] != first {
            i += 1;
            continue;
        }
        let (mut j, mut k) = (i, 0);
        while j < t.len() && k < n.len() {
            if t[j] == n[k] {
                k += 1;
                j += 1;
            } else if k > 0 && (t[j] == b'\n' || t[j] == b'\r') {
                j += 1;
            } else {
                break;
            }
        }
        if k == n.len() {
            spans.push((i, j));
            i = j;
        } else {
            i += 1;
        }
    }
    if spans.is_empty() {
        return None;
    }
    let mut out = String::with_capacity(text.len());
    let mut at = 0;
    for (a, b) in spans {
        out.push_str(&text[at..a]);
        out.push_str(marker);
        at = b;
    }
    out.push_str(&text[at..]);
    Some(out)
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

    /// Issue 35 (7): `base64 secret.txt` wraps at 76 columns and the secret's base64 straddled
    /// the newline; `xxd -p` and a URL carry it as hex and %-escapes. A canary per encoding:
    /// after scrubbing, none decodes back to the secret.
    #[test]
    fn a_canary_in_wrapped_base64_hex_or_a_url_is_replaced() {
        use base64::Engine as _;
        let secret = "sk-canary-1234567890/abcdef+XYZ";
        let s = Secrets::new(vec![("KEY".into(), secret.into())]);
        for lead in 0..80usize {
            for width in [64usize, 76] {
                let mut file = "x".repeat(lead).into_bytes();
                file.extend_from_slice(secret.as_bytes());
                file.extend_from_slice(b" rest of the file\n");
                let flat = base64::engine::general_purpose::STANDARD.encode(&file);
                let wrapped: Vec<&str> = flat
                    .as_bytes()
                    .chunks(width)
                    .map(|c| std::str::from_utf8(c).unwrap_or_default())
                    .collect();
                let wrapped = wrapped.join("\n");
                let clean = s.scrub(&wrapped);
                let rejoined: String = clean.chars().filter(|c| *c != '\n').collect();
                let decoded = base64::engine::general_purpose::STANDARD
                    .decode(rejoined.replace("[secret:KEY]", ""))
                    .unwrap_or_default();
                assert!(
                    !String::from_utf8_lossy(&decoded).contains(secret),
                    "lead {lead}, width {width}: {clean}"
                );
                assert!(clean.contains("[secret:KEY]"), "lead {lead}: {clean}");
            }
        }
        let hex_lower: String = secret.bytes().map(|b| format!("{b:02x}")).collect();
        let hex_upper = hex_lower.to_uppercase();
        for hex in [&hex_lower, &hex_upper] {
            let text = format!("00ff{hex}0a");
            assert_eq!(s.scrub(&text), "00ff[secret:KEY]0a");
        }
        let url: String = secret
            .bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        assert_ne!(url, secret, "the canary has characters a URL escapes");
        let text = format!("GET /?key={url}&x=1");
        assert_eq!(s.scrub(&text), "GET /?key=[secret:KEY]&x=1");
    }

    /// Issue 35 (6): a secret straddling the 4 KiB cut of binary output was recorded as
    /// base64 of all but its last byte (and the model can place the cut). The kept bytes no
    /// longer end with any of the secret's start.
    #[test]
    fn a_canary_cut_at_the_end_of_binary_output_is_replaced() {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let secret = "sk-canary-1234567890abcdef";
        let s = Secrets::new(vec![("KEY".into(), secret.into())]);
        for pad in 0..4usize {
            for keep in MIN_SECRET_BYTES..secret.len() {
                let mut head = vec![0xffu8; 40 + pad];
                head.extend_from_slice(&secret.as_bytes()[..keep]);
                let clean = s.scrub(&b64.encode(&head)).into_owned();
                let bytes = b64.decode(&clean).expect("still base64");
                let shown = String::from_utf8_lossy(&bytes);
                assert!(
                    !shown.contains(&secret[..MIN_SECRET_BYTES]) && shown.ends_with("[secret:KEY]"),
                    "pad {pad}, {keep} bytes kept: {shown}"
                );
            }
        }
    }

    /// Review of issue 35 (6, 7): `base64 .env` (wrapped at 76 columns) as text output, cut
    /// at the output limit in the middle of the secret's base64: the kept tail decoded to the
    /// secret's start, which no whole-secret form matches. After scrubbing, nothing kept
    /// decodes to its first bytes, at any cut and alignment; text before the run stays.
    #[test]
    fn a_canary_cut_in_wrapped_base64_or_hex_text_is_replaced() {
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let secret = "sk-canary-1234567890abcdefghij";
        let s = Secrets::new(vec![("KEY".into(), secret.into())]);
        let start = &secret.as_bytes()[..MIN_SECRET_BYTES];
        let leaks = |clean: &str| {
            let run: String = clean
                .split_once('\n')
                .map_or("", |(_, run)| run)
                .replace("[secret:KEY]", "")
                .chars()
                .filter(|c| !c.is_whitespace())
                .collect();
            let lenient = base64::engine::GeneralPurpose::new(
                &base64::alphabet::STANDARD,
                base64::engine::GeneralPurposeConfig::new()
                    .with_decode_allow_trailing_bits(true)
                    .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
            );
            // Every alignment, and a last partial group decoded too.
            (0..4).any(|skip| {
                let t = run.get(skip..).unwrap_or_default().replace('=', "");
                let t = if t.len() % 4 == 1 {
                    &t[..t.len() - 1]
                } else {
                    &t[..]
                };
                lenient
                    .decode(t)
                    .is_ok_and(|d| d.windows(start.len()).any(|w| w == start))
            }) || (0..2).any(|skip| {
                let t = run.get(skip..).unwrap_or_default();
                let t = &t[..t.len() - t.len() % 2];
                hex::decode(t).is_ok_and(|d| d.windows(start.len()).any(|w| w == start))
            })
        };
        for lead in 0..6usize {
            let mut file = format!("{}API_KEY=", "x".repeat(lead)).into_bytes();
            file.extend_from_slice(secret.as_bytes());
            file.extend_from_slice(b"\nOTHER=1\n");
            let flat = b64.encode(&file);
            let wrapped: Vec<&str> = flat
                .as_bytes()
                .chunks(76.min(20 + lead))
                .map(|c| std::str::from_utf8(c).unwrap_or_default())
                .collect();
            // `=` in the line before (as in `mode=fast`) once stopped every decode.
            let wrapped = format!("$ base64 .env\nmode=fast\n{}", wrapped.join("\n"));
            let hex: String = file.iter().map(|b| format!("{b:02x}")).collect();
            let hexed = format!(
                "$ xxd -p .env\n{}",
                hex.as_bytes()
                    .chunks(60)
                    .map(|c| std::str::from_utf8(c).unwrap_or_default())
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            for text in [&wrapped, &hexed] {
                // Every cut that keeps at least the secret's first 8 bytes' worth of text.
                for cut in text.len() / 3..text.len() {
                    let kept = &text[..cut];
                    let clean = s.scrub(kept);
                    assert!(!leaks(&clean), "lead {lead}, cut {cut}: {clean}");
                    assert!(
                        !kept.contains("mode=fast\n") || clean.contains("mode=fast"),
                        "the line before the run stays: {clean}"
                    );
                    assert!(
                        clean.starts_with("$ "),
                        "the text before the run stays: {clean}"
                    );
                }
            }
        }
    }

    /// Review: every line break or `=` in a trailing run began another decode of everything
    /// after it (quadratic: a few MiB of "=\n" took minutes; now only the tail that can hold
    /// a secret's start is decoded — its speed is no test's to judge). Such a run is left
    /// as it is, and a secret cut at its end is still found.
    #[test]
    fn a_long_run_of_breaks_and_equals_is_left_whole_and_a_cut_secret_at_its_end_found() {
        use base64::Engine as _;
        let s = Secrets::new(vec![("KEY".into(), "sk-canary-1234567890abcdef".into())]);
        let text = "=\n".repeat(1 << 16);
        assert_eq!(s.scrub(&text), text.as_str());
        let cut = base64::engine::general_purpose::STANDARD.encode(b"xx sk-canary-1234");
        let clean = s.scrub(&format!("{text}{cut}")).into_owned();
        assert!(
            clean.ends_with("[secret:KEY]"),
            "{}",
            &clean[clean.len() - 40..]
        );
    }

    /// Review finding: a secret with a multibyte character panicked every scrub (its start
    /// was sliced before the boundary was checked).
    #[test]
    fn a_secret_with_multibyte_characters_is_scrubbed_without_a_panic() {
        let s = Secrets::new(vec![("KEY".into(), "password-üñï-12345".into())]);
        assert_eq!(s.scrub("x password-üñï-12345 y"), "x [secret:KEY] y");
        assert_eq!(s.scrub("out: password-üñ"), "out: [secret:KEY]");
        assert_eq!(s.scrub("nothing"), "nothing");
    }
}
