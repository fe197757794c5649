//! A strict JSON scanner over one record's bytes: RFC 8259 with the same acceptance as orjson,
//! the parser of the pure-Python reference codec.
//!
//! The decoder drives it token by token and never builds a document tree. What it accepts:
//! whitespace is space, tab, LF and CR; strings are valid UTF-8 without raw control characters,
//! with the JSON escapes and properly paired `\u` surrogates; numbers follow the JSON grammar,
//! and one whose value overflows a double is refused (as orjson refuses it); containers nest at
//! most 1,024 deep. An integer literal is an integer when it fits in i64 or u64, a double
//! otherwise (orjson's rule). Every violation is a `SyntaxError` with its byte offset.

use std::borrow::Cow;
use std::fmt;

/// The deepest nesting of arrays and objects accepted (orjson's limit).
pub const MAX_DEPTH: usize = 1024;

/// The bytes are not JSON: `what` is wrong at byte `offset`, where the scanner stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SyntaxError {
    pub what: Syntax,
    pub offset: usize,
}

/// What a `SyntaxError` found, worded (in `Display`) as orjson words it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Syntax {
    EndOfData,
    ExpectedValue,
    ContentAfterDocument,
    DepthLimit,
    TrailingComma,
    ExpectedCommaOrBrace,
    ExpectedKey,
    ExpectedColon,
    ExpectedCommaOrBracket,
    ControlCharacter,
    InvalidEscape,
    NoLowSurrogate,
    InvalidLowSurrogate,
    InvalidHighSurrogate,
    LeadingZero,
    NoDigitAfterSign,
    NoDigitAfterPoint,
    NoDigitInExponent,
    InvalidLiteral,
    InvalidUtf8,
    InfiniteDouble,
}

impl fmt::Display for Syntax {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Syntax::EndOfData => "unexpected end of data",
            Syntax::ExpectedValue => "unexpected character, expected a JSON value",
            Syntax::ContentAfterDocument => "unexpected content after document",
            Syntax::DepthLimit => "depth limit exceeded",
            Syntax::TrailingComma => "trailing comma is not allowed",
            Syntax::ExpectedCommaOrBrace => "unexpected character, expected ',' or '}'",
            Syntax::ExpectedKey => "unexpected character, expected a string key",
            Syntax::ExpectedColon => "unexpected character, expected ':' after key",
            Syntax::ExpectedCommaOrBracket => "unexpected character, expected ',' or ']'",
            Syntax::ControlCharacter => "unexpected control character in string",
            Syntax::InvalidEscape => "invalid escaped sequence in string",
            Syntax::NoLowSurrogate => "no low surrogate in string",
            Syntax::InvalidLowSurrogate => "invalid low surrogate in string",
            Syntax::InvalidHighSurrogate => "invalid high surrogate in string",
            Syntax::LeadingZero => "number with leading zero is not allowed",
            Syntax::NoDigitAfterSign => "no digit after sign",
            Syntax::NoDigitAfterPoint => "no digit after decimal point",
            Syntax::NoDigitInExponent => "no digit in exponent",
            Syntax::InvalidLiteral => "invalid literal",
            Syntax::InvalidUtf8 => "str is not valid UTF-8",
            Syntax::InfiniteDouble => "number is infinity when parsed as double",
        })
    }
}

impl fmt::Display for SyntaxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at byte {}", self.what, self.offset)
    }
}

impl std::error::Error for SyntaxError {}

/// The JSON type of a value, named as the Python reference names it (`type(value).__name__`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Object,
    Array,
    Str,
    Int,
    Float,
    Bool,
    Null,
}

impl Kind {
    /// The Python type name of a value of this kind (`null` for None, as the codec says it).
    pub fn name(self) -> &'static str {
        match self {
            Kind::Object => "dict",
            Kind::Array => "list",
            Kind::Str => "str",
            Kind::Int => "int",
            Kind::Float => "float",
            Kind::Bool => "bool",
            Kind::Null => "null",
        }
    }
}

/// A refused value as an error shows it: an integer's digits, any other value's type name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Got {
    Int(i128),
    Kind(Kind),
}

impl fmt::Display for Got {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Got::Int(value) => write!(f, "{value}"),
            Got::Kind(kind) => f.write_str(kind.name()),
        }
    }
}

/// A number as the reference sees it after `orjson.loads`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    /// An integer literal in [i64::MIN, u64::MAX].
    Int(i128),
    /// A literal with a fraction or an exponent, or an integer outside that range.
    Float(f64),
}

/// One scalar value, or the kind of a skipped container.
#[derive(Clone, Debug, PartialEq)]
pub enum Value<'a> {
    Int(i128),
    Float(f64),
    Str(Cow<'a, str>),
    Bool(bool),
    Null,
    /// An array or object, already skipped (and checked).
    Container(Kind),
}

impl Value<'_> {
    /// The kind of this value.
    pub fn kind(&self) -> Kind {
        match self {
            Value::Int(_) => Kind::Int,
            Value::Float(_) => Kind::Float,
            Value::Str(_) => Kind::Str,
            Value::Bool(_) => Kind::Bool,
            Value::Null => Kind::Null,
            Value::Container(kind) => *kind,
        }
    }

    /// How an error shows this value: an integer's digits, any other value's type name.
    pub fn got(&self) -> Got {
        match self {
            Value::Int(value) => Got::Int(*value),
            other => Got::Kind(other.kind()),
        }
    }
}

/// The cursor over one record.
pub struct Scanner<'a> {
    bytes: &'a [u8],
    pos: usize,
    depth: usize,
}

#[inline]
fn is_ws(byte: u8) -> bool {
    matches!(byte, b' ' | b'\n' | b'\r' | b'\t')
}

fn hex_digit(byte: u8) -> Option<u32> {
    match byte {
        b'0'..=b'9' => Some(u32::from(byte - b'0')),
        b'a'..=b'f' => Some(u32::from(byte - b'a') + 10),
        b'A'..=b'F' => Some(u32::from(byte - b'A') + 10),
        _ => None,
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH_BITS: u64 = 0x8080_8080_8080_8080;

/// How many of `word`'s bytes, from the first, are ASCII digits (8 when all are).
#[inline(always)]
fn leading_digits(word: u64) -> usize {
    // Per byte, `byte - '0'` is below 10 for a digit only; adding 0x76 sets the high bit of
    // 10..=0x7f, and the high bit is already set at or above 0x80. A borrow or carry between
    // bytes only starts at a non-digit and only reaches later bytes: the first non-digit and
    // every byte before it are judged right, and only the first non-digit counts.
    let offset = word.wrapping_sub(ONES * u64::from(b'0'));
    let not_digit = (offset | offset.wrapping_add(ONES * 0x76)) & HIGH_BITS;
    not_digit.trailing_zeros() as usize / 8
}

/// The value of eight digit bytes (the first byte, the lowest, is the most significant digit);
/// a zero byte counts as a leading `0`.
#[inline(always)]
fn eight_digits(word: u64) -> u64 {
    // Combine the digits pairwise: 8 of 1 digit -> 4 of 2 -> 2 of 4 -> 1 of 8. Each multiply
    // adds 10^k times every lane to the lane above it (no sum overflows its lane, and what
    // leaves the word is the top lane's, unused), the shift moves each sum down into the lane
    // of its more significant half, and the mask keeps every other lane.
    let digits = word & 0x0f0f_0f0f_0f0f_0f0f;
    let pairs = (digits.wrapping_mul(10 << 8 | 1) >> 8) & 0x00ff_00ff_00ff_00ff;
    let quads = (pairs.wrapping_mul(100 << 16 | 1) >> 16) & 0x0000_ffff_0000_ffff;
    quads.wrapping_mul(10_000 << 32 | 1) >> 32
}

/// The value of the first `count` (0..=7) bytes of `word`, all digits.
#[inline(always)]
fn first_digits(word: u64, count: usize) -> u64 {
    // Shift the other bytes out (zero bytes come in as leading zeros); two shifts, as one of 64
    // bits (count 0) would overflow.
    eight_digits((word << (8 * (7 - count))) << 8)
}

/// 10 to the power of the index.
const POWERS_OF_TEN: [u64; 8] = [1, 10, 100, 1_000, 10_000, 100_000, 1_000_000, 10_000_000];

/// The digits at `start`, when there are 1 to 19 of them without a superfluous leading zero
/// and a `,` or `]` follows: their value (below 10^19, so no overflow) and how many there are.
#[inline(always)]
fn digit_run(bytes: &[u8], start: usize) -> Option<(u64, usize)> {
    // The 20 bytes that can hold the digits and the byte after them, read as words; zero
    // bytes (no digit) stand in for those past the end.
    let mut padded = [0u8; 24];
    let window: &[u8; 24] = match bytes.get(start..start + 24) {
        Some(window) => window.try_into().expect("24 bytes"),
        None => {
            let rest = bytes.get(start..).unwrap_or_default();
            padded[..rest.len()].copy_from_slice(rest);
            &padded
        }
    };
    let word = |index: usize| {
        u64::from_le_bytes(
            window[8 * index..8 * index + 8]
                .try_into()
                .expect("8 bytes"),
        )
    };
    let first = word(0);
    let count = leading_digits(first);
    if count == 0 || (count > 1 && first as u8 == b'0') {
        return None;
    }
    let (value, length) = if count < 8 {
        (first_digits(first, count), count)
    } else {
        // A block hash has 18 or 19 digits: two whole words and a tail of up to three.
        let second = word(1);
        let count = leading_digits(second);
        let high = eight_digits(first);
        if count < 8 {
            (
                high * POWERS_OF_TEN[count] + first_digits(second, count),
                8 + count,
            )
        } else {
            let third = word(2);
            let count = leading_digits(third);
            if count > 3 {
                return None;
            }
            let high = high * 100_000_000 + eight_digits(second);
            (
                high * POWERS_OF_TEN[count] + first_digits(third, count),
                16 + count,
            )
        }
    };
    matches!(window[length], b',' | b']').then_some((value, length))
}

/// How many bytes of `bytes` come before the first `"`, `\\`, control character or non-ASCII
/// byte; None when there is none.
#[inline]
fn plain_text_length(bytes: &[u8]) -> Option<usize> {
    let mut words = bytes.chunks_exact(8);
    let mut length = 0;
    for chunk in &mut words {
        let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        // Per byte, `x - 0x01 & !x` has its high bit set for a zero byte (`x - 0x20 & !x`: a
        // byte below 0x20); a borrow between bytes only starts at such a byte and only reaches
        // later ones, so the first byte flagged is the first one that stops the text.
        let zero = |x: u64| x.wrapping_sub(ONES) & !x;
        let stops = (zero(word ^ (ONES * u64::from(b'"')))
            | zero(word ^ (ONES * u64::from(b'\\')))
            | (word.wrapping_sub(ONES * 0x20) & !word)
            | word)
            & HIGH_BITS;
        if stops != 0 {
            return Some(length + stops.trailing_zeros() as usize / 8);
        }
        length += 8;
    }
    let tail = words.remainder();
    let position = tail
        .iter()
        .position(|&byte| matches!(byte, b'"' | b'\\' | 0..=0x1f | 0x80..=0xff))?;
    Some(length + position)
}

/// Whether `bytes` (N of them) are `literal`, compared a word at a time: a fixed number of
/// inline compares however long the literal (a plain `==` calls memcmp from about 32 bytes).
#[inline(always)]
fn equals<const N: usize>(bytes: &[u8], literal: &[u8; N]) -> bool {
    if N < 8 {
        return bytes == literal;
    }
    let word =
        |text: &[u8], at: usize| u64::from_le_bytes(text[at..at + 8].try_into().expect("8 bytes"));
    let mut difference = 0;
    let mut at = 0;
    while at + 8 < N {
        difference |= word(bytes, at) ^ word(literal, at);
        at += 8;
    }
    // The last word overlaps the one before when N is no multiple of 8.
    difference |= word(bytes, N - 8) ^ word(literal, N - 8);
    difference == 0
}

/// `bytes` as text; the caller has seen that every byte is below 0x80.
#[inline]
fn ascii(bytes: &[u8]) -> &str {
    debug_assert!(bytes.is_ascii());
    // SAFETY: every byte is below 0x80 (each caller has made sure: `string` ORed them all
    // together and checked the result, `plain_ascii_string` and `number` matched each one), and
    // a byte below 0x80 is a whole one-byte UTF-8 sequence, so `bytes` is valid UTF-8, which is
    // all `from_utf8_unchecked` requires.
    unsafe { std::str::from_utf8_unchecked(bytes) }
}

impl<'a> Scanner<'a> {
    /// A scanner at the start of `bytes`.
    pub fn new(bytes: &'a [u8]) -> Self {
        Scanner {
            bytes,
            pos: 0,
            depth: 0,
        }
    }

    /// The byte offset of the cursor.
    pub fn offset(&self) -> usize {
        self.pos
    }

    /// How many arrays and objects are open at the cursor.
    pub fn depth(&self) -> usize {
        self.depth
    }

    /// Move the cursor back to `offset` (taken from `offset()` at the same depth), for a fast
    /// path that gave up.
    pub fn rewind(&mut self, offset: usize) {
        debug_assert!(offset <= self.pos);
        self.pos = offset;
    }

    /// Consume `literal` when the bytes at the cursor are exactly it; false (cursor unmoved)
    /// otherwise. No whitespace is skipped.
    #[inline]
    pub fn eat<const N: usize>(&mut self, literal: &[u8; N]) -> bool {
        let matched = self
            .bytes
            .get(self.pos..self.pos + N)
            .is_some_and(|bytes| equals(bytes, literal));
        if matched {
            self.pos += N;
        }
        matched
    }

    /// The string at the cursor (on its opening quote) when it is printable ASCII without
    /// escapes, which is exactly its text; None (cursor unmoved) for any other string, which the
    /// caller reads with `string`.
    #[inline]
    pub fn plain_ascii_string(&mut self) -> Option<&'a str> {
        let bytes = self.bytes;
        if bytes.get(self.pos) != Some(&b'"') {
            return None;
        }
        let start = self.pos + 1;
        let rest = bytes.get(start..)?;
        let length = plain_text_length(rest)?;
        if rest[length] != b'"' {
            return None;
        }
        self.pos = start + length + 1;
        Some(ascii(&rest[..length]))
    }

    /// The bytes between two offsets (a value's source text).
    pub fn slice(&self, start: usize, end: usize) -> &'a [u8] {
        &self.bytes[start..end]
    }

    fn fail<T>(&self, what: Syntax) -> Result<T, SyntaxError> {
        Err(SyntaxError {
            what,
            offset: self.pos,
        })
    }

    #[inline]
    fn skip_ws(&mut self) {
        while let Some(&byte) = self.bytes.get(self.pos) {
            if !is_ws(byte) {
                break;
            }
            self.pos += 1;
        }
    }

    /// The first byte of the next value (after whitespace), not consumed.
    #[inline]
    pub fn peek_value(&mut self) -> Result<u8, SyntaxError> {
        self.skip_ws();
        match self.bytes.get(self.pos) {
            Some(&byte) => Ok(byte),
            None => self.fail(Syntax::EndOfData),
        }
    }

    /// The kind of the next value, judged by its first byte; an impossible first byte fails.
    pub fn peek_kind(&mut self) -> Result<Kind, SyntaxError> {
        match self.peek_value()? {
            b'{' => Ok(Kind::Object),
            b'[' => Ok(Kind::Array),
            b'"' => Ok(Kind::Str),
            b'-' | b'0'..=b'9' => Ok(Kind::Int),
            b't' | b'f' => Ok(Kind::Bool),
            b'n' => Ok(Kind::Null),
            _ => self.fail(Syntax::ExpectedValue),
        }
    }

    /// After the document: only whitespace may follow.
    pub fn finish(&mut self) -> Result<(), SyntaxError> {
        self.skip_ws();
        if self.pos == self.bytes.len() {
            Ok(())
        } else {
            self.fail(Syntax::ContentAfterDocument)
        }
    }

    /// Consume the `{` or `[` at the cursor (the caller peeked it).
    fn open(&mut self) -> Result<(), SyntaxError> {
        if self.depth == MAX_DEPTH {
            return self.fail(Syntax::DepthLimit);
        }
        self.depth += 1;
        self.pos += 1;
        Ok(())
    }

    /// Enter the object at the cursor (peeked `{`); iterate it with `next_key`.
    pub fn open_object(&mut self) -> Result<(), SyntaxError> {
        self.open()
    }

    /// Enter the array at the cursor (peeked `[`); iterate it with `next_element`.
    pub fn open_array(&mut self) -> Result<(), SyntaxError> {
        self.open()
    }

    /// The next key of the current object, with the cursor on its value; None at the closing
    /// brace (consumed). `first` is true until the first call has returned.
    pub fn next_key(&mut self, first: &mut bool) -> Result<Option<Cow<'a, str>>, SyntaxError> {
        self.skip_ws();
        let Some(&byte) = self.bytes.get(self.pos) else {
            return self.fail(Syntax::EndOfData);
        };
        if byte == b'}' && *first {
            self.pos += 1;
            self.depth -= 1;
            return Ok(None);
        }
        if !*first {
            match byte {
                b',' => {
                    self.pos += 1;
                    self.skip_ws();
                    if self.bytes.get(self.pos) == Some(&b'}') {
                        return self.fail(Syntax::TrailingComma);
                    }
                }
                b'}' => {
                    self.pos += 1;
                    self.depth -= 1;
                    return Ok(None);
                }
                _ => return self.fail(Syntax::ExpectedCommaOrBrace),
            }
        }
        *first = false;
        match self.bytes.get(self.pos) {
            Some(b'"') => {}
            Some(_) => return self.fail(Syntax::ExpectedKey),
            None => return self.fail(Syntax::EndOfData),
        }
        let key = self.string()?;
        self.skip_ws();
        match self.bytes.get(self.pos) {
            Some(b':') => self.pos += 1,
            Some(_) => return self.fail(Syntax::ExpectedColon),
            None => return self.fail(Syntax::EndOfData),
        }
        Ok(Some(key))
    }

    /// Whether another element of the current array follows (cursor on it); false at the
    /// closing bracket (consumed). `first` as for `next_key`.
    #[inline]
    pub fn next_element(&mut self, first: &mut bool) -> Result<bool, SyntaxError> {
        // The common case first: a comma directly followed by the next value.
        if !*first && self.bytes.get(self.pos) == Some(&b',') {
            if let Some(&next) = self.bytes.get(self.pos + 1) {
                if !is_ws(next) && next != b']' {
                    self.pos += 1;
                    return Ok(true);
                }
            }
        }
        self.skip_ws();
        let Some(&byte) = self.bytes.get(self.pos) else {
            return self.fail(Syntax::EndOfData);
        };
        if *first {
            *first = false;
            if byte == b']' {
                self.pos += 1;
                self.depth -= 1;
                return Ok(false);
            }
            return Ok(true);
        }
        match byte {
            b',' => {
                self.pos += 1;
                self.skip_ws();
                if self.bytes.get(self.pos) == Some(&b']') {
                    return self.fail(Syntax::TrailingComma);
                }
                Ok(true)
            }
            b']' => {
                self.pos += 1;
                self.depth -= 1;
                Ok(false)
            }
            _ => self.fail(Syntax::ExpectedCommaOrBracket),
        }
    }

    /// The string at the cursor (on its opening quote), unescaped; borrowed when it has no
    /// escapes.
    #[inline]
    pub fn string(&mut self) -> Result<Cow<'a, str>, SyntaxError> {
        self.pos += 1; // the opening quote
        let start = self.pos;
        let bytes = self.bytes;
        // The OR of every byte seen: below 0x80 means the text is ASCII (keys, event types,
        // mediums, hex digests: nearly every string of a record), which needs no UTF-8 check.
        let mut seen = 0u8;
        while let Some(&byte) = bytes.get(self.pos) {
            match byte {
                b'"' => {
                    let text = if seen < 0x80 {
                        ascii(&bytes[start..self.pos])
                    } else {
                        self.utf8(start, self.pos)?
                    };
                    self.pos += 1;
                    return Ok(Cow::Borrowed(text));
                }
                b'\\' => return self.escaped_string(start).map(Cow::Owned),
                0..=0x1f => return self.fail(Syntax::ControlCharacter),
                _ => {
                    seen |= byte;
                    self.pos += 1;
                }
            }
        }
        self.fail(Syntax::EndOfData)
    }

    fn utf8(&self, start: usize, end: usize) -> Result<&'a str, SyntaxError> {
        std::str::from_utf8(&self.bytes[start..end]).map_err(|error| SyntaxError {
            what: Syntax::InvalidUtf8,
            offset: start + error.valid_up_to(),
        })
    }

    /// The rest of a string that has an escape; `start` is just after its opening quote.
    fn escaped_string(&mut self, start: usize) -> Result<String, SyntaxError> {
        let mut out = String::with_capacity(self.pos - start + 16);
        let mut run = start;
        loop {
            let Some(&byte) = self.bytes.get(self.pos) else {
                return self.fail(Syntax::EndOfData);
            };
            match byte {
                b'"' => {
                    out.push_str(self.utf8(run, self.pos)?);
                    self.pos += 1;
                    return Ok(out);
                }
                b'\\' => {
                    out.push_str(self.utf8(run, self.pos)?);
                    self.pos += 1;
                    let Some(&escape) = self.bytes.get(self.pos) else {
                        return self.fail(Syntax::EndOfData);
                    };
                    self.pos += 1;
                    match escape {
                        b'"' => out.push('"'),
                        b'\\' => out.push('\\'),
                        b'/' => out.push('/'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'n' => out.push('\n'),
                        b'r' => out.push('\r'),
                        b't' => out.push('\t'),
                        b'u' => out.push(self.unicode_escape()?),
                        _ => return self.fail(Syntax::InvalidEscape),
                    }
                    run = self.pos;
                }
                0..=0x1f => return self.fail(Syntax::ControlCharacter),
                _ => self.pos += 1,
            }
        }
    }

    fn hex4(&mut self) -> Result<u32, SyntaxError> {
        let mut value = 0;
        for _ in 0..4 {
            match self.bytes.get(self.pos).copied().and_then(hex_digit) {
                Some(digit) => value = value * 16 + digit,
                None if self.pos >= self.bytes.len() => return self.fail(Syntax::EndOfData),
                None => return self.fail(Syntax::InvalidEscape),
            }
            self.pos += 1;
        }
        Ok(value)
    }

    /// The character of a `\u` escape (cursor after the `u`), pairing surrogates.
    fn unicode_escape(&mut self) -> Result<char, SyntaxError> {
        let first = self.hex4()?;
        let code = match first {
            0xD800..=0xDBFF => {
                if self.bytes.get(self.pos..self.pos + 2) != Some(b"\\u") {
                    return self.fail(Syntax::NoLowSurrogate);
                }
                self.pos += 2;
                let second = self.hex4()?;
                if !(0xDC00..=0xDFFF).contains(&second) {
                    return self.fail(Syntax::InvalidLowSurrogate);
                }
                0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00)
            }
            0xDC00..=0xDFFF => return self.fail(Syntax::InvalidHighSurrogate),
            other => other,
        };
        match char::from_u32(code) {
            Some(character) => Ok(character),
            None => self.fail(Syntax::InvalidEscape),
        }
    }

    /// The number at the cursor.
    #[inline]
    pub fn number(&mut self) -> Result<Number, SyntaxError> {
        let start = self.pos;
        let bytes = self.bytes;
        let negative = bytes.get(self.pos) == Some(&b'-');
        if negative {
            self.pos += 1;
        }
        let mut magnitude: u64 = 0;
        let mut overflow = false;
        match bytes.get(self.pos) {
            Some(b'0') => {
                self.pos += 1;
                if matches!(bytes.get(self.pos), Some(b'0'..=b'9')) {
                    return self.fail(Syntax::LeadingZero);
                }
            }
            Some(b'1'..=b'9') => {
                while let Some(&digit @ b'0'..=b'9') = bytes.get(self.pos) {
                    let value = u64::from(digit - b'0');
                    match magnitude.checked_mul(10).and_then(|m| m.checked_add(value)) {
                        Some(next) => magnitude = next,
                        None => overflow = true,
                    }
                    self.pos += 1;
                }
            }
            None => return self.fail(Syntax::EndOfData),
            Some(_) => return self.fail(Syntax::NoDigitAfterSign),
        }
        let mut integral = true;
        if bytes.get(self.pos) == Some(&b'.') {
            self.pos += 1;
            integral = false;
            self.digits(Syntax::NoDigitAfterPoint)?;
        }
        if matches!(bytes.get(self.pos), Some(b'e' | b'E')) {
            self.pos += 1;
            integral = false;
            if matches!(bytes.get(self.pos), Some(b'+' | b'-')) {
                self.pos += 1;
            }
            self.digits(Syntax::NoDigitInExponent)?;
        }
        if integral && !overflow {
            if !negative {
                return Ok(Number::Int(i128::from(magnitude)));
            }
            if magnitude <= 1 << 63 {
                return Ok(Number::Int(-i128::from(magnitude)));
            }
        }
        self.float(start)
    }

    /// The common case of an int list item, read without the general number path: at most 19
    /// digits (no overflow), no fraction or exponent, directly followed by `,` or `]`: its sign
    /// and magnitude, with the cursor left on that `,` or `]`. None (cursor unmoved) for
    /// anything else, which the caller reads with `number`.
    #[inline(always)]
    fn plain_magnitude(&mut self) -> Option<(bool, u64)> {
        let bytes = self.bytes;
        let negative = bytes.get(self.pos) == Some(&b'-');
        let start = self.pos + usize::from(negative);
        let (magnitude, length) = digit_run(bytes, start)?;
        self.pos = start + length;
        Some((negative, magnitude))
    }

    /// A `plain_magnitude` integer in [i64::MIN, u64::MAX) (a smaller one is a double, as
    /// `number` reads it).
    #[inline(always)]
    pub fn plain_int(&mut self) -> Option<i128> {
        let start = self.pos;
        let (negative, magnitude) = self.plain_magnitude()?;
        if negative && magnitude > 1 << 63 {
            self.pos = start;
            return None;
        }
        let magnitude = i128::from(magnitude);
        Some(if negative { -magnitude } else { magnitude })
    }

    /// A `plain_magnitude` integer in int64; None (cursor unmoved) for any other.
    #[inline(always)]
    pub fn plain_i64(&mut self) -> Option<i64> {
        let start = self.pos;
        let value = match self.plain_magnitude()? {
            // The magnitude of i64::MIN, 2^63, is `i64::MIN` as an i64, its own negation.
            (true, magnitude) if magnitude <= 1 << 63 => Some((magnitude as i64).wrapping_neg()),
            (false, magnitude) => i64::try_from(magnitude).ok(),
            _ => None,
        };
        if value.is_none() {
            self.pos = start;
        }
        value
    }

    /// A `plain_magnitude` integer in uint32; None (cursor unmoved) for any other.
    #[inline(always)]
    pub fn plain_u32(&mut self) -> Option<u32> {
        let start = self.pos;
        let value = match self.plain_magnitude()? {
            (true, 0) => Some(0),
            (true, _) => None,
            (false, magnitude) => u32::try_from(magnitude).ok(),
        };
        if value.is_none() {
            self.pos = start;
        }
        value
    }

    fn digits(&mut self, missing: Syntax) -> Result<(), SyntaxError> {
        match self.bytes.get(self.pos) {
            Some(b'0'..=b'9') => {}
            None => return self.fail(Syntax::EndOfData),
            Some(_) => return self.fail(missing),
        }
        while matches!(self.bytes.get(self.pos), Some(b'0'..=b'9')) {
            self.pos += 1;
        }
        Ok(())
    }

    /// The double of the number text from `start` to the cursor (correctly rounded).
    fn float(&self, start: usize) -> Result<Number, SyntaxError> {
        // `number` matched every byte: digits, signs, `.`, `e` or `E`.
        let text = ascii(&self.bytes[start..self.pos]);
        match text.parse::<f64>() {
            Ok(value) if value.is_finite() => Ok(Number::Float(value)),
            _ => Err(SyntaxError {
                what: Syntax::InfiniteDouble,
                offset: start,
            }),
        }
    }

    /// The literal `true`, `false` or `null` at the cursor.
    fn literal(&mut self) -> Result<Value<'a>, SyntaxError> {
        let rest = &self.bytes[self.pos..];
        let (value, length): (Value<'a>, usize) = match rest.first() {
            Some(b't') => (Value::Bool(true), 4),
            Some(b'f') => (Value::Bool(false), 5),
            _ => (Value::Null, 4),
        };
        let expected: &[u8] = match value {
            Value::Bool(true) => b"true",
            Value::Bool(false) => b"false",
            _ => b"null",
        };
        if rest.len() < length {
            if expected.starts_with(rest) {
                return self.fail(Syntax::EndOfData);
            }
            return self.fail(Syntax::InvalidLiteral);
        }
        if &rest[..length] != expected {
            return self.fail(Syntax::InvalidLiteral);
        }
        self.pos += length;
        Ok(value)
    }

    /// The value at the cursor: scalars read, containers skipped (and checked).
    pub fn value(&mut self) -> Result<Value<'a>, SyntaxError> {
        match self.peek_kind()? {
            Kind::Str => Ok(Value::Str(self.string()?)),
            Kind::Int => Ok(match self.number()? {
                Number::Int(value) => Value::Int(value),
                Number::Float(value) => Value::Float(value),
            }),
            Kind::Bool | Kind::Null => self.literal(),
            kind => {
                self.skip_container()?;
                Ok(Value::Container(kind))
            }
        }
    }

    /// Skip the value at the cursor, checking it; its kind.
    pub fn skip_value(&mut self) -> Result<Kind, SyntaxError> {
        Ok(self.value()?.kind())
    }

    /// Skip the array or object at the cursor without recursion.
    fn skip_container(&mut self) -> Result<(), SyntaxError> {
        // One bit per open container, relative to this one: set for an object.
        let mut is_object = [0u64; MAX_DEPTH / 64];
        let mut level = 0usize;
        let push = |bits: &mut [u64; MAX_DEPTH / 64], level: usize, object: bool| {
            let (word, bit) = (level / 64, level % 64);
            if object {
                bits[word] |= 1 << bit;
            } else {
                bits[word] &= !(1 << bit);
            }
        };
        let object = self.bytes[self.pos] == b'{';
        self.open()?;
        push(&mut is_object, 0, object);
        let mut first = true;
        loop {
            let in_object = is_object[level / 64] >> (level % 64) & 1 == 1;
            let more = if in_object {
                self.next_key(&mut first)?.is_some()
            } else {
                self.next_element(&mut first)?
            };
            if !more {
                if level == 0 {
                    return Ok(());
                }
                level -= 1;
                first = false;
                continue;
            }
            match self.peek_kind()? {
                kind @ (Kind::Object | Kind::Array) => {
                    self.open()?;
                    level += 1;
                    push(&mut is_object, level, kind == Kind::Object);
                    first = true;
                }
                Kind::Str => {
                    self.string()?;
                    first = false;
                }
                Kind::Int | Kind::Float => {
                    self.number()?;
                    first = false;
                }
                Kind::Bool | Kind::Null => {
                    self.literal()?;
                    first = false;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(text: &[u8]) -> Result<Value<'_>, SyntaxError> {
        let mut scanner = Scanner::new(text);
        let value = scanner.value()?;
        scanner.finish()?;
        Ok(value)
    }

    #[test]
    fn integers_follow_orjson_ranges() {
        assert_eq!(whole(b"-0").unwrap(), Value::Int(0));
        assert_eq!(
            whole(b"18446744073709551615").unwrap(),
            Value::Int(u64::MAX.into())
        );
        assert_eq!(
            whole(b"-9223372036854775808").unwrap(),
            Value::Int(i64::MIN.into())
        );
        assert_eq!(
            whole(b"18446744073709551616").unwrap(),
            Value::Float(18446744073709551616.0)
        );
        assert_eq!(
            whole(b"-9223372036854775809").unwrap(),
            Value::Float(-9223372036854775809.0)
        );
        assert!(whole(&[b'1'; 400]).is_err());
        assert_eq!(whole(b"1E2").unwrap(), Value::Float(100.0));
    }

    #[test]
    fn plain_ints_take_only_the_common_case() {
        let read = |text: &[u8]| Scanner::new(text).plain_int();
        assert_eq!(read(b"-0,"), Some(0));
        assert_eq!(read(b"1234567890123456789]"), Some(1234567890123456789));
        assert_eq!(read(b"-9223372036854775808,"), Some(i64::MIN.into()));
        for text in [
            &b"-9223372036854775809,"[..],
            b"12345678901234567890,",
            b"01,",
            b"1.5,",
            b"1 ,",
            b"1",
            b"-,",
        ] {
            assert_eq!(read(text), None, "{:?}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn eight_digits_are_read_at_once_or_refused() {
        let word = |text: &[u8; 8]| u64::from_le_bytes(*text);
        assert_eq!(eight_digits(word(b"01234567")), 1_234_567);
        assert_eq!(eight_digits(word(b"99999999")), 99_999_999);
        assert_eq!(first_digits(word(b"123,4567"), 3), 123);
        assert_eq!(first_digits(word(b"1234567]"), 7), 1_234_567);
        assert_eq!(first_digits(word(b",1234567"), 0), 0);
        for (text, count) in [
            (b"12345678", 8),
            (b"1234567/", 7),
            (b"1234567:", 7),
            (b"/1234567", 0),
            (b"1234 567", 4),
            (b"9\xff345678", 1),
            (b"12\x0045678", 2),
            (b"1\xd0\x00\x00\x00\x00\x00\x00", 1),
            (b"0\x2f\x30\x30\x30\x30\x30\x30", 1),
        ] {
            assert_eq!(leading_digits(word(text)), count, "{text:?}");
        }
        // Every byte value, alone or before digits, after digits, and after a borrowing byte.
        for byte in 0..=255u8 {
            let digit = usize::from(byte.is_ascii_digit());
            assert_eq!(
                leading_digits(word(&[byte, b'1', b'2', 0, 0, 0, 0, 0])),
                digit * 3
            );
            assert_eq!(
                leading_digits(word(&[b'7', byte, b'5', 0, 0, 0, 0, 0])),
                1 + digit * 2
            );
            assert_eq!(leading_digits(word(&[b'9', 0, byte, 0, 0, 0, 0, 0])), 1);
        }
        let read = |text: &[u8]| Scanner::new(text).plain_int();
        for digits in 1..=19 {
            let text: String = (0..digits)
                .map(|i| char::from(b'1' + (i % 9) as u8))
                .collect();
            let expected: i128 = text.parse().unwrap();
            assert_eq!(
                read(format!("{text},").as_bytes()),
                Some(expected),
                "{text}"
            );
            assert_eq!(
                read(format!("-{text}]").as_bytes()),
                Some(-expected),
                "{text}"
            );
        }
        assert_eq!(
            read(b"9999999999999999999,"),
            Some(9_999_999_999_999_999_999)
        );
        assert_eq!(read(b"12345678a,"), None);
        assert_eq!(read(b"1234567812345678a,"), None);
        assert_eq!(read(b"12345678123456781234,"), None);
        assert_eq!(read(b"123456781234567812,"), Some(123_456_781_234_567_812));
        assert_eq!(read(b"1234567890]"), Some(1_234_567_890));
        let mut scanner = Scanner::new(b"[-9223372036854775808,4294967295,-0]");
        scanner.eat(b"[");
        assert_eq!(scanner.plain_u32(), None, "the cursor stays");
        assert_eq!(scanner.plain_i64(), Some(i64::MIN));
        scanner.eat(b",");
        assert_eq!(scanner.plain_i64(), Some(4_294_967_295));
        scanner.rewind(scanner.offset() - 10);
        assert_eq!(scanner.plain_u32(), Some(u32::MAX));
        scanner.eat(b",");
        assert_eq!(scanner.plain_u32(), Some(0));
        assert!(scanner.eat(b"]"));
        for text in [&b"4294967296,"[..], b"-1,", b"-9223372036854775809]"] {
            assert_eq!(Scanner::new(text).plain_u32(), None);
        }
        assert_eq!(Scanner::new(b"9223372036854775808,").plain_i64(), None);
        assert_eq!(
            Scanner::new(b"9223372036854775807,").plain_i64(),
            Some(i64::MAX)
        );
    }

    #[test]
    fn plain_text_ends_at_the_first_stop_byte() {
        let reference = |bytes: &[u8]| {
            bytes
                .iter()
                .position(|&byte| matches!(byte, b'"' | b'\\' | 0..=0x1f | 0x80..=0xff))
        };
        for byte in 0..=255u8 {
            for at in 0..20 {
                let mut text = vec![b'a'; at];
                text.push(byte);
                text.extend_from_slice(b"bc\x00\"\\\xffd\x01");
                assert_eq!(plain_text_length(&text), reference(&text), "{text:?}");
            }
        }
        // Pseudo-random texts of bytes near the stops, the borrows between them included.
        let mut state = 1u64;
        for _ in 0..20_000 {
            let text: Vec<u8> = (0..state % 23)
                .map(|_| {
                    state = state
                        .wrapping_mul(6_364_136_223_846_793_005)
                        .wrapping_add(1);
                    [
                        0, 1, 0x1f, 0x20, b'!', b'"', b'#', b'[', b'\\', b']', 0x7f, 0x80, 0xa0,
                        0xff,
                    ][(state >> 33) as usize % 14]
                })
                .collect();
            assert_eq!(plain_text_length(&text), reference(&text), "{text:?}");
        }
    }

    #[test]
    fn bad_numbers_are_refused() {
        for text in [
            &b"01"[..],
            b"-",
            b"1.",
            b".5",
            b"+1",
            b"1e",
            b"1e+",
            b"-01",
            b"1e400",
            b"0x10",
            b"1.5.5",
        ] {
            assert!(whole(text).is_err(), "{:?}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn strings_unescape_and_check_surrogates() {
        assert_eq!(
            whole(br#""a\u00e9\ud83d\ude00\n""#).unwrap(),
            Value::Str(Cow::Owned("a\u{e9}\u{1F600}\n".into()))
        );
        for text in [
            &br#""\ud800""#[..],
            br#""\udc00""#,
            br#""\ud800\u0041""#,
            br#""\x""#,
            br#""\u12g4""#,
            b"\"\x01\"",
            b"\"\xff\"",
            b"\"\xed\xa0\x80\"",
            b"\"abc",
        ] {
            assert!(whole(text).is_err(), "{:?}", String::from_utf8_lossy(text));
        }
    }

    #[test]
    fn structure_errors_are_refused() {
        for text in [
            &b"{\"a\":1,}"[..],
            b"[1,]",
            b"[,1]",
            b"{,}",
            b"[]]",
            b"{\"a\" 1}",
            b"{1:1}",
            b"tru",
            b"true1",
            b"\xef\xbb\xbf{}",
            b"\x0c{}",
            b"",
            b"NaN",
        ] {
            assert!(whole(text).is_err(), "{:?}", String::from_utf8_lossy(text));
        }
        assert_eq!(
            whole(b" {\"a\": [1, {\"b\": null}], \"c\": \"d\"} ").unwrap(),
            Value::Container(Kind::Object)
        );
    }

    #[test]
    fn depth_limit_is_orjson_s() {
        let deep = |n: usize| {
            let mut text = vec![b'['; n];
            text.extend(vec![b']'; n]);
            text
        };
        assert!(whole(&deep(MAX_DEPTH)).is_ok());
        assert!(whole(&deep(MAX_DEPTH + 1)).is_err());
        let mut objects = b"{\"a\":".repeat(MAX_DEPTH - 1);
        objects.extend_from_slice(b"{}");
        objects.extend(vec![b'}'; MAX_DEPTH - 1]);
        assert!(whole(&objects).is_ok());
    }
}
