//! Checks shared by every name and image reference a client sets.

/// Characters that make text display other than it reads ("Trojan Source"): the bidirectional
/// embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069), the bidirectional marks
/// (U+200E, U+200F, U+061C) and the zero-width characters (U+200B–U+200D, U+2060, U+FEFF).
pub fn is_deceptive(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200B}'..='\u{200F}' | '\u{061C}' | '\u{2060}' | '\u{FEFF}')
}

/// What a refusal says about [`is_deceptive`] characters.
pub const DECEPTIVE_MESSAGE: &str = "must not contain bidirectional-control or zero-width characters (U+200B–U+200F, U+202A–U+202E, U+2060, U+2066–U+2069, U+FEFF, U+061C)";

#[cfg(test)]
mod tests {
    use super::*;

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
