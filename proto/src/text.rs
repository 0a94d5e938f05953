//! Text an outsider wrote (a model, a server, a responder), made safe to quote: bounded
//! excerpts for errors and logs, and control characters escaped for terminals.

/// At most `max` bytes of `text`, cut at a character boundary, with a marker when cut.
pub fn excerpt(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_owned();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}… ({} bytes in all)", &text[..end], text.len())
}

/// Characters that hide or reorder text: terminal controls (C0 but tab and newline, DEL,
/// C1), bidirectional controls (U+202A–202E, U+2066–2069, U+200E/F, U+061C), zero-width and
/// invisible characters (U+200B–200D, U+2060–2064, U+FEFF, U+180E, U+00AD) and tag characters
/// (U+E0000–E007F, which smuggle invisible ASCII). The console's script escapes the same set.
pub fn is_hidden(c: char) -> bool {
    (c.is_control() && c != '\t' && c != '\n')
        || matches!(c,
            '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}' | '\u{061c}'
            | '\u{200b}'..='\u{200d}' | '\u{2060}'..='\u{2064}' | '\u{feff}' | '\u{180e}' | '\u{ad}'
            | '\u{e0000}'..='\u{e007f}')
}

/// `text` with every [`is_hidden`] character written as a `\u{..}` escape (carriage return
/// as `\r`), so what a person reads is what the bytes say. Newlines stay: multi-line output
/// (a table, a record's text split into lines) is printed as such.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(is_hidden) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\r' => out.push_str("\\r"),
            c if is_hidden(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
}

/// A JSON value as a record keeps it: whole when its text is at most `max` bytes, else its
/// text's first `max` bytes as a string, marked cut.
pub fn bounded_json(v: serde_json::Value, max: usize) -> serde_json::Value {
    let text = v.to_string();
    if text.len() <= max {
        return v;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    serde_json::Value::String(format!(
        "{}… [cut: {} bytes in all]",
        &text[..end],
        text.len()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_bounded_and_cut_at_characters() {
        assert_eq!(excerpt("short", 10), "short");
        let long = "é".repeat(100);
        let e = excerpt(&long, 5);
        assert!(e.starts_with("éé…"), "{e}");
        assert!(e.ends_with("(200 bytes in all)"), "{e}");
    }

    #[test]
    fn terminal_escapes_are_neutralised() {
        assert_eq!(escape_controls("plain\ttext"), "plain\ttext");
        assert_eq!(
            escape_controls("a\u{1b}]0;pwned\u{7}b\r\nc\u{9b}d\u{202e}e"),
            "a\\u{1b}]0;pwned\\u{7}b\\r\nc\\u{9b}d\\u{202e}e"
        );
        // Zero-width, Arabic letter mark and tag characters hide text too.
        assert_eq!(
            escape_controls("a\u{200b}b\u{61c}c\u{feff}d\u{e0041}"),
            "a\\u{200b}b\\u{61c}c\\u{feff}d\\u{e0041}"
        );
    }
}
