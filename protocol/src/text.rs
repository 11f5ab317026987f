//! Which characters user text may hold: chat messages, room titles and passwords are shown to
//! other users, so they carry no control characters (NUL, ESC and the like can break clients
//! and terminals) and no bidirectional overrides (U+202A..U+202E, U+2066..U+2069 can make text
//! read as something else).

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

#[cfg(test)]
mod tests {
    use super::*;

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
