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

/// `text` with terminal control characters (C0 but tab and newline, DEL, C1) and
/// bidirectional overrides written as `\u{..}` escapes (carriage return as `\r`). Newlines
/// stay: multi-line output (a table, a record's text split into lines) is printed as such.
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    let bad = |c: char| {
        (c.is_control() && c != '\t' && c != '\n')
            || matches!(c, '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{200e}' | '\u{200f}')
    };
    if !text.chars().any(bad) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        match c {
            '\r' => out.push_str("\\r"),
            c if bad(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    std::borrow::Cow::Owned(out)
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
    }
}
