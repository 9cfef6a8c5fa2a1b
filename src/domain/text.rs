//! The one boundary for text from outside: names are refused when they hold
//! a control character (a NUL among them, which PostgreSQL's text refuses
//! and a log line would carry raw), free text has such characters replaced,
//! and text bound for a log is cut to a bounded excerpt.
//!
//! Pure functions, used wherever text enters (the watcher's validation, the
//! agent-signal hub, the API); nothing here knows where it came from.

use std::borrow::Cow;

/// What replaces a control character in free text.
pub const REPLACEMENT: char = '\u{FFFD}';

/// The longest excerpt of outside text a log line carries.
pub const LOG_EXCERPT: usize = 256;

/// A control character (C0 with NUL, DEL, C1) or a line/paragraph
/// separator: nothing a name may hold, nothing stored or logged raw.
pub fn is_unsafe(c: char) -> bool {
    c.is_control() || matches!(c, '\u{2028}' | '\u{2029}')
}

/// Why `name` cannot be a name, or `None`: the first unsafe character's
/// position and code point, for the rejection's message.
pub fn name_problem(name: &str) -> Option<String> {
    name.char_indices()
        .find(|(_, c)| is_unsafe(*c))
        .map(|(at, c)| {
            format!(
                "holds the control character U+{:04X} at byte {at}",
                c as u32
            )
        })
}

/// `s` with every unsafe character replaced by U+FFFD; borrowed when
/// there is none (the common case costs one scan).
pub fn clean(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_unsafe) {
        return Cow::Borrowed(s);
    }
    Cow::Owned(
        s.chars()
            .map(|c| if is_unsafe(c) { REPLACEMENT } else { c })
            .collect(),
    )
}

/// [`clean`] for an owned string: no copy when it is already clean.
pub fn clean_owned(s: String) -> String {
    match clean(&s) {
        Cow::Borrowed(_) => s,
        Cow::Owned(c) => c,
    }
}

/// At most `max_chars` characters of `s`, cleaned, with `…` when cut.
pub fn bounded(s: &str, max_chars: usize) -> String {
    let mut out: String = s
        .chars()
        .take(max_chars)
        .map(|c| if is_unsafe(c) { REPLACEMENT } else { c })
        .collect();
    if s.chars().nth(max_chars).is_some() {
        out.push('…');
    }
    out
}

/// What a log line may carry of outside text: [`bounded`] to
/// [`LOG_EXCERPT`] characters.
pub fn excerpt(s: &str) -> String {
    bounded(s, LOG_EXCERPT)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deterministic source of arbitrary bytes (splitmix64).
    fn bytes(seed: u64, n: usize) -> Vec<u8> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
                let mut z = x;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
                (z ^ (z >> 31)) as u8
            })
            .collect()
    }

    #[test]
    fn arbitrary_bytes_come_out_clean_and_only_control_characters_change() {
        for seed in 0..5_000u64 {
            let raw = bytes(seed, (seed % 97) as usize);
            let s = String::from_utf8_lossy(&raw);
            let c = clean(&s);
            assert!(!c.chars().any(is_unsafe), "{s:?}");
            assert!(!c.contains('\0'));
            assert_eq!(c.chars().count(), s.chars().count());
            for (a, b) in s.chars().zip(c.chars()) {
                assert!(a == b || (is_unsafe(a) && b == REPLACEMENT));
            }
            assert_eq!(name_problem(&s).is_some(), s.chars().any(is_unsafe));
            let e = bounded(&s, 10);
            assert!(e.chars().count() <= 11 && !e.chars().any(is_unsafe));
        }
    }

    #[test]
    fn names_with_control_characters_are_refused_with_where() {
        assert_eq!(name_problem("agent-1"), None);
        assert_eq!(name_problem("é-ü 名前"), None);
        assert_eq!(
            name_problem("a\0b").as_deref(),
            Some("holds the control character U+0000 at byte 1")
        );
        assert!(name_problem("a\u{1b}[31m").is_some());
        assert!(name_problem("line\nbreak").is_some());
        assert!(name_problem("\u{85}").is_some());
        assert!(name_problem("\u{2028}").is_some());
    }

    #[test]
    fn clean_text_is_not_copied_and_excerpts_are_bounded() {
        assert!(matches!(clean("fine text"), Cow::Borrowed(_)));
        assert_eq!(clean("v1\0.2"), "v1\u{FFFD}.2");
        let long = "x".repeat(5 * 1024 * 1024);
        assert_eq!(excerpt(&long).chars().count(), LOG_EXCERPT + 1);
        assert_eq!(bounded("abc", 3), "abc");
        assert_eq!(bounded("abcd", 3), "abc…");
    }
}
