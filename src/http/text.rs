//! Checks shared by every name and image reference a client sets.

/// Characters that make text display other than it reads ("Trojan Source"): the bidirectional
/// embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069), the bidirectional marks
/// (U+200E, U+200F, U+061C) and the zero-width characters (U+200B–U+200D, U+2060, U+FEFF).
pub fn is_deceptive(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200B}'..='\u{200F}' | '\u{061C}' | '\u{2060}' | '\u{FEFF}')
}

/// What a refusal says about [`is_deceptive`] characters.
pub const DECEPTIVE_MESSAGE: &str = "must not contain bidirectional-control or zero-width characters (U+200B–U+200F, U+202A–U+202E, U+2060, U+2066–U+2069, U+FEFF, U+061C)";

/// Most characters of a client-sent name an answer repeats.
pub const MAX_ECHO_CHARS: usize = 64;

/// A name from a request (a path segment) as an error message may repeat it: at most
/// [`MAX_ECHO_CHARS`] characters (then `…`), control and [`is_deceptive`] characters written as
/// `U+XXXX`, so an answer neither grows with what it was sent nor displays other than it reads.
pub fn echo(name: &str) -> String {
    let mut out = String::new();
    for (i, c) in name.chars().enumerate() {
        if i == MAX_ECHO_CHARS {
            out.push('…');
            break;
        }
        if c.is_control() || is_deceptive(c) {
            out.push_str(&format!("U+{:04X}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_echoed_name_is_bounded_and_shows_what_hides() {
        assert_eq!(echo("alice"), "alice");
        let long = "a".repeat(5000);
        assert_eq!(echo(&long), format!("{}…", "a".repeat(MAX_ECHO_CHARS)));
        assert_eq!(echo("\u{202E}nimda\0x"), "U+202EnimdaU+0000x");
        assert_eq!(echo("東京"), "東京");
    }

    #[test]
    fn the_disguising_characters_and_only_those() {
        for c in
            ['\u{202A}', '\u{202E}', '\u{2066}', '\u{2069}', '\u{200B}', '\u{200D}', '\u{200E}', '\u{2060}', '\u{FEFF}']
        {
            assert!(is_deceptive(c), "{c:?}");
        }
        for c in ['a', ' ', 'é', '東', '\u{2010}', '\u{2065}', '\u{206A}', '\u{2029}', '\u{2061}'] {
            assert!(!is_deceptive(c), "{c:?}");
        }
    }
}
