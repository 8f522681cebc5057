//! Text for the character-level GPT (issue 26): tokens are characters
//! (Unicode scalar values, not bytes and not UTF-16 units), the vocabulary
//! is the text's distinct characters sorted by code point, and a token is
//! its index. The text is cut into W = ⌊(N − 1)/T⌋ windows of T tokens;
//! window w has inputs ids[wT .. wT + T) and targets ids[wT + 1 .. wT + T + 1).
//! The windows are rows, for the split, the shuffling and the data position
//! that every other row source has.
//!
//! Everything from outside is hostile: a bad text gets one line that names
//! what is wrong, and reading it is linear in its size.

use super::Table;
use crate::error::{zeros, Error, Result};

pub use crate::experiment::MAX_VOCABULARY;
/// Largest text read, in bytes: its windows take about 8 bytes a
/// character as rows, its ids 4 more; the run's memory budget
/// (`Limits`) then checks the whole run.
pub const MAX_TEXT_BYTES: usize = 256 << 20;

/// Tiny Shakespeare's length in bytes (a test holds it to the file): what
/// the memory budget counts before the text is at hand.
pub const SHAKESPEARE_BYTES: usize = 1_115_394;

/// Tiny Shakespeare (core/data/README.md): built in, as the digits are.
static EMBEDDED: &[u8] = include_bytes!("../../data/tinyshakespeare.txt");

#[cfg(target_arch = "wasm32")]
static GIVEN: std::sync::OnceLock<&'static [u8]> = std::sync::OnceLock::new();

/// The built-in text, where this module has it. Natively always; in
/// WebAssembly only once `use_built_in_shakespeare` or `set_shakespeare`
/// gave it, so that a module that never trains on it (the page's, whose
/// training runs in its worker) does not carry its megabyte.
pub fn shakespeare() -> Option<&'static [u8]> {
    #[cfg(not(target_arch = "wasm32"))]
    return Some(EMBEDDED);
    #[cfg(target_arch = "wasm32")]
    return GIVEN.get().copied();
}

/// Links the text into this module and makes it the built-in one (the
/// training worker's entry point calls it; natively it always is).
pub fn use_built_in_shakespeare() {
    set_shakespeare(EMBEDDED);
}

/// The built-in text from elsewhere (the page fetches `tinyshakespeare.txt`
/// next to it where it trains on its own thread); checked to be the file.
/// False where it is not, or was already given.
pub fn set_shakespeare(bytes: &'static [u8]) -> bool {
    if bytes.len() != SHAKESPEARE_BYTES {
        return false;
    }
    #[cfg(target_arch = "wasm32")]
    return GIVEN.set(bytes).is_ok();
    #[cfg(not(target_arch = "wasm32"))]
    return bytes == EMBEDDED;
}

/// The characters of a text, sorted by code point: token i is `chars[i]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Vocabulary {
    chars: Vec<char>,
}

impl Vocabulary {
    pub fn len(&self) -> usize {
        self.chars.len()
    }

    pub fn is_empty(&self) -> bool {
        self.chars.is_empty()
    }

    pub fn chars(&self) -> &[char] {
        &self.chars
    }

    /// The vocabulary as one string (what a checkpoint stores).
    pub fn as_string(&self) -> String {
        self.chars.iter().collect()
    }

    /// A vocabulary from a checkpoint's string: distinct characters in
    /// code-point order, at most `MAX_VOCABULARY`, else an error naming why.
    pub fn from_string(text: &str) -> Result<Vocabulary> {
        let chars: Vec<char> = text.chars().collect();
        if chars.is_empty() || chars.len() > MAX_VOCABULARY {
            return Err(Error::Text(format!(
                "a vocabulary holds 1..={MAX_VOCABULARY} characters, this one {}",
                chars.len()
            )));
        }
        if let Some(pair) = chars.windows(2).find(|p| p[0] >= p[1]) {
            return Err(Error::Text(format!(
                "a vocabulary lists distinct characters in code-point order; {:?} comes before {:?}",
                pair[0], pair[1]
            )));
        }
        Ok(Vocabulary { chars })
    }

    /// The token of `ch`, if the vocabulary has it.
    pub fn token(&self, ch: char) -> Option<u32> {
        self.chars.binary_search(&ch).ok().map(|i| i as u32)
    }

    /// The text of `tokens`; a token outside the vocabulary is an error.
    pub fn decode(&self, tokens: &[u32]) -> Result<String> {
        tokens
            .iter()
            .map(|&t| {
                self.chars.get(t as usize).copied().ok_or_else(|| {
                    Error::Text(format!("token {t} is outside the vocabulary of {} characters", self.len()))
                })
            })
            .collect()
    }

    /// The tokens of `text`, naming the first character the vocabulary
    /// lacks (a prompt for sampling, say).
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        text.chars()
            .map(|ch| {
                self.token(ch)
                    .ok_or_else(|| Error::Text(format!("the character {ch:?} is not in the model's vocabulary")))
            })
            .collect()
    }
}

/// A text read as tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenText {
    pub vocabulary: Vocabulary,
    pub ids: Vec<u32>,
}

impl TokenText {
    /// Reads `bytes` as UTF-8 text for windows of `context` tokens, with at
    /// most `max_vocabulary` distinct characters.
    pub fn read(bytes: &[u8], context: usize, max_vocabulary: usize) -> Result<TokenText> {
        let text = CheckedText::read(bytes, context, max_vocabulary)?;
        let ids = text.tokens().collect();
        Ok(TokenText { vocabulary: text.vocabulary, ids })
    }

    /// W = ⌊(N − 1)/T⌋ windows of `context` tokens.
    pub fn windows(&self, context: usize) -> usize {
        (self.ids.len().saturating_sub(1)) / context.max(1)
    }

    /// Window `w`: (inputs, targets), each `context` tokens, the targets one
    /// token on.
    pub fn window(&self, w: usize, context: usize) -> (&[u32], &[u32]) {
        let start = w * context;
        (&self.ids[start..start + context], &self.ids[start + 1..start + 1 + context])
    }
}

/// A text checked as `TokenText::read` checks it, before anything as
/// large as the text is allocated: its characters, counted, and its
/// vocabulary. Its windows go straight into rows (`table`) without the ids
/// of `TokenText` beside them: a run holds the text's bytes or its rows,
/// and the rows only once the bytes are dropped.
pub struct CheckedText<'a> {
    text: &'a str,
    pub vocabulary: Vocabulary,
    /// Characters (tokens) in the text.
    pub chars: usize,
}

impl<'a> CheckedText<'a> {
    pub fn read(bytes: &'a [u8], context: usize, max_vocabulary: usize) -> Result<CheckedText<'a>> {
        if bytes.len() > MAX_TEXT_BYTES {
            return Err(Error::Text(format!("the text is {} bytes; at most {MAX_TEXT_BYTES} are read", bytes.len())));
        }
        let text = std::str::from_utf8(bytes).map_err(|e| {
            Error::Text(format!("the text is not UTF-8: the bytes from offset {} are not a character", e.valid_up_to()))
        })?;
        if text.is_empty() {
            return Err(Error::Text("the text is empty".into()));
        }
        let n = text.chars().count();
        if context == 0 || n < context + 1 {
            return Err(Error::Text(format!(
                "the text has {n} characters; a context of {context} needs at least {} (one window and its next character)",
                context + 1
            )));
        }
        // The distinct characters in one pass (a set), then sorted: linear
        // in the text, V·log V in the vocabulary.
        let mut chars: Vec<char> = text.chars().collect::<std::collections::HashSet<char>>().into_iter().collect();
        chars.sort_unstable();
        if chars.len() > max_vocabulary {
            return Err(Error::Text(format!(
                "the text has {} distinct characters; at most {max_vocabulary} are allowed",
                chars.len()
            )));
        }
        Ok(CheckedText { text, vocabulary: Vocabulary { chars }, chars: n })
    }

    /// The token of each character, in order.
    pub fn tokens(&self) -> impl Iterator<Item = u32> + '_ {
        let v = &self.vocabulary;
        self.text.chars().map(|ch| v.token(ch).expect("every character is in the vocabulary"))
    }

    /// W = ⌊(N − 1)/T⌋ windows of `context` tokens.
    pub fn windows(&self, context: usize) -> usize {
        self.chars.saturating_sub(1) / context.max(1)
    }

    /// `TokenText::table`'s rows, from the text: the windows are
    /// contiguous, so the inputs are tokens 0..W·T and the targets tokens
    /// 1..W·T + 1, each written once as the text is read.
    pub fn table(&self, context: usize) -> Result<Table> {
        let n = self.windows(context) * context;
        let mut table = Table {
            inputs: zeros(n, "the text's windows")?,
            targets: zeros(n, "the text's windows")?,
            input_width: context,
            target_width: context,
        };
        for (i, token) in self.tokens().take(n + 1).enumerate() {
            let token = token as f32;
            if i < n {
                table.inputs[i] = token;
            }
            if i > 0 {
                table.targets[i - 1] = token;
            }
        }
        Ok(table)
    }
}

impl TokenText {
    /// The windows as rows: inputs (W, T) and targets (W, T), token ids
    /// as f32 (exact: a vocabulary is far below 2²⁴).
    pub fn table(&self, context: usize) -> Table {
        let w = self.windows(context);
        let mut table = Table { input_width: context, target_width: context, ..Table::default() };
        table.inputs.reserve(w * context);
        table.targets.reserve(w * context);
        for i in 0..w {
            let (inputs, targets) = self.window(i, context);
            table.inputs.extend(inputs.iter().map(|&t| t as f32));
            table.targets.extend(targets.iter().map(|&t| t as f32));
        }
        table
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_characters_sorted_by_code_point() {
        let t = TokenText::read("héllo wörld\n".as_bytes(), 4, 64).unwrap();
        assert_eq!(t.vocabulary.chars(), &['\n', ' ', 'd', 'h', 'l', 'o', 'r', 'w', 'é', 'ö']);
        // Characters, not bytes: 12 of them, though é and ö take two bytes.
        assert_eq!(t.ids.len(), 12);
        assert_eq!(t.vocabulary.decode(&t.ids).unwrap(), "héllo wörld\n");
        assert_eq!(t.vocabulary.encode("low").unwrap(), [4, 5, 7]);
        assert!(t.vocabulary.encode("lox").unwrap_err().to_string().contains("'x'"));
        assert!(t.vocabulary.decode(&[10]).is_err());
    }

    #[test]
    fn rows_straight_from_the_text_are_the_windows_of_its_ids() {
        for (text, context) in [(&b"abcdefghij"[..], 3), ("héllo wörld, hé\n".as_bytes(), 4), (b"abcd", 3)] {
            let ids = TokenText::read(text, context, 64).unwrap();
            let checked = CheckedText::read(text, context, 64).unwrap();
            assert_eq!(checked.vocabulary, ids.vocabulary);
            assert_eq!(checked.windows(context), ids.windows(context));
            assert_eq!(checked.table(context).unwrap(), ids.table(context));
        }
    }

    #[test]
    fn windows_cut_the_text_with_targets_one_on() {
        let t = TokenText::read(b"abcdefghij", 3, 64).unwrap();
        // N = 10: ⌊9/3⌋ = 3 windows.
        assert_eq!(t.windows(3), 3);
        assert_eq!(t.window(0, 3), (&[0, 1, 2][..], &[1, 2, 3][..]));
        assert_eq!(t.window(2, 3), (&[6, 7, 8][..], &[7, 8, 9][..]));
        // Exactly T + 1 characters: one window.
        assert_eq!(TokenText::read(b"abcd", 3, 64).unwrap().windows(3), 1);
    }

    #[test]
    fn bad_text_gets_one_line_naming_the_problem() {
        let message =
            |bytes: &[u8], context: usize, max: usize| TokenText::read(bytes, context, max).unwrap_err().to_string();
        assert_eq!(
            message(b"ab\xffcd", 1, 64),
            "text: the text is not UTF-8: the bytes from offset 2 are not a character"
        );
        assert_eq!(message(b"", 1, 64), "text: the text is empty");
        assert!(message(b"abc", 3, 64).contains("has 3 characters; a context of 3 needs at least 4"));
        assert!(message(b"abcdef", 2, 4).contains("6 distinct characters; at most 4"));
        assert!(message(b"abc", 0, 4).contains("a context of 0"));
        assert!(Vocabulary::from_string("ba").unwrap_err().to_string().contains("'b' comes before 'a'"));
        assert!(Vocabulary::from_string("").is_err());
        assert_eq!(Vocabulary::from_string("\n ab").unwrap().len(), 4);
    }

    #[test]
    fn tiny_shakespeare_is_the_file_the_readme_names() {
        use sha2::{Digest, Sha256};
        let bytes = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/data/tinyshakespeare.txt")).unwrap();
        let digest: String = Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(digest, "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed");
        let t = TokenText::read(&bytes, 64, 256).unwrap();
        assert_eq!((t.ids.len(), t.vocabulary.len(), t.windows(64)), (1_115_394, 65, 17_428));
        let chars: String = t.vocabulary.chars().iter().collect();
        assert_eq!(chars, "\n !$&',-.3:;?ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz");
        assert_eq!(Some(bytes.as_slice()), shakespeare(), "the built-in text is the file");
        assert_eq!(bytes.len(), SHAKESPEARE_BYTES);
        let table = t.table(64);
        assert_eq!((table.rows(), table.input_width, table.target_width), (17_428, 64, 64));
        assert_eq!(table.targets[..63], table.inputs[1..64]);
        let (inputs, targets) = t.window(0, 64);
        assert!(t.vocabulary.decode(inputs).unwrap().starts_with("First Citizen:\nBefore we proceed"));
        assert_eq!(inputs[1..], targets[..63]);
    }
}
