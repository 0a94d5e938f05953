//! How untrusted text and stored values are shown on every page: escaped, flagged when
//! they hold hidden characters, times and ids made short.

use maud::{Markup, html};
use proto::text::{escape_controls, is_hidden};

/// Text from a model, a tool or the bus as a person should read it: maud escapes the HTML,
/// this the characters that would hide or reorder it (bidi overrides, zero-width), as the
/// CLI prints them.
pub fn t(text: &str) -> String {
    escape_controls(text).into_owned()
}

/// A visible mark on anything that held such characters.
pub fn flag(text: &str) -> Markup {
    html! {
        @if text.chars().any(is_hidden) {
            span.hidden-chars title="hidden or direction-changing characters, shown escaped as \\u{..}" { "⚠ hidden characters" }
        }
    }
}

/// A stored RFC 3339 time: the script shows it short in the viewer's local time; the exact
/// value stays in the title.
pub fn when(at: &str) -> Markup {
    html! { time datetime=(at) title=(at) { (at.get(..16).unwrap_or(at).replace('T', " ")) } }
}

/// The first 13 characters of an id: enough to tell ids apart on a page.
pub fn short(id: &str) -> &str {
    id.get(..13).unwrap_or(id)
}
