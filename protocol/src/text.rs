//! Which characters user text may hold: chat messages, room titles and passwords are shown to
//! other users, so they carry no control characters (NUL, ESC and the like can break clients
//! and terminals) and no bidirectional overrides (U+202A..U+202E, U+2066..U+2069 can make text
//! read as something else). App-defined JSON follows the same rule in every string it holds.

/// Whether `c` is one of the Unicode bidirectional embedding, override or isolate controls.
fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// Whether `text` is fit to show: no control characters but, when `multiline`, newlines (and
/// the tab), and no bidirectional controls.
pub fn is_clean(text: &str, multiline: bool) -> bool {
    text.chars().all(|c| {
        let allowed_control = multiline && matches!(c, '\n' | '\t');
        (!c.is_control() || allowed_control) && !is_bidi_control(c)
    })
}

/// Whether every string in `v`, object keys included, is clean text that may span lines
/// ([`is_clean`]): app-defined JSON (custom messages, room attributes, typed direct messages)
/// is shown to other users too. Parsed JSON nests at most 128 deep, which bounds the descent.
pub fn is_clean_json(v: &serde_json::Value) -> bool {
    use serde_json::Value;
    match v {
        Value::String(s) => is_clean(s, true),
        Value::Array(a) => a.iter().all(is_clean_json),
        Value::Object(o) => o.iter().all(|(k, v)| is_clean(k, true) && is_clean_json(v)),
        Value::Null | Value::Bool(_) | Value::Number(_) => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_is_clean_when_every_string_and_key_is() {
        use serde_json::json;
        assert!(is_clean_json(
            &json!({"text": "two\nlines", "n": [1, true, null, "ok"]})
        ));
        assert!(!is_clean_json(&json!({"deep": [{"x": "esc\u{1b}[31m"}]})));
        assert!(!is_clean_json(&json!({"\u{202E}key": 1})));
        assert!(!is_clean_json(&json!("bell\u{7}")));
    }

    #[test]
    fn control_and_bidi_characters_are_unclean() {
        assert!(is_clean("hello, 世界 👋", false));
        assert!(is_clean("two\nlines\tand a tab", true));
        assert!(!is_clean("two\nlines", false));
        for bad in [
            "nul\0",
            "esc\u{1b}[31m",
            "bell\u{7}",
            "del\u{7f}",
            "c1\u{9b}",
        ] {
            assert!(!is_clean(bad, true), "{bad:?}");
        }
        for bidi in ["\u{202E}gnp.exe", "a\u{2066}b", "\u{202A}x"] {
            assert!(!is_clean(bidi, true), "{bidi:?}");
        }
    }
}
