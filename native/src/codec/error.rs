//! The codec's one error type: `Error`, the part of a record that is wrong (`field`) and why
//! (`Reason`). The wording is the pure-Python reference codec's, written once, in `Display`.

use std::fmt;

use super::scan::{Got, SyntaxError};
use crate::event_types::{Field, Kind};

/// A record is not a valid batch (decoding), or a batch would not decode again (encoding).
/// `field` names the offending part as the Python codec does (`""` for the whole record, `v`,
/// `events[3].block_hashes[0]`, `meta.page_size`, ...).
#[derive(Clone, Debug, PartialEq)]
pub struct Error {
    pub field: String,
    pub reason: Reason,
}

/// The codec's results.
pub type Result<T> = std::result::Result<T, Error>;

/// Why a field is refused.
#[derive(Clone, Debug, PartialEq)]
pub enum Reason {
    /// The bytes are not JSON (this wins over every other reason).
    NotJson(SyntaxError),
    /// The text is not UTF-8.
    NotUtf8,
    /// The record is longer than the decoder's limit.
    TooLong { bytes: usize, limit: usize },
    /// A required field is absent.
    Missing,
    /// A field the version does not define.
    UnknownField,
    /// A value of the wrong type or out of range: `expected` as the reference words it
    /// ("a positive int", "str or null", ...).
    Expected { expected: &'static str, got: Got },
    /// A list item that is not an int in `range` (written as `[low, high]`).
    ExpectedIntIn { range: &'static str, got: Got },
    /// A removal reason other than the known ones: `got` is the quoted excerpt of the text.
    UnknownRemovalReason { got: String },
    /// An event type the codec does not know: `name` is the quoted excerpt of the text.
    UnknownEventType { name: String },
    /// A version the codec does not read or write.
    UnsupportedVersion(i128),
    /// A timestamp that is NaN or infinite.
    NotFinite(f64),
    /// An int beyond int64 where one is required.
    OutsideInt64(i128),
    /// A block size beyond u32.
    BlockSizeTooLarge(i128),
    /// An event that names no block.
    NoBlockHashes,
    /// A store whose token ids are not `pages` whole blocks of `block_size`.
    TokenCount {
        tokens: usize,
        pages: usize,
        block_size: i128,
    },
    /// A field that says something in a batch of a version before the one that brought it
    /// (`field`: its declaration, e.g. a removal's reason, from version 3).
    NeedsVersion { field: &'static Field, version: u8 },
}

impl Error {
    /// An error naming `field`.
    pub fn new(field: impl Into<String>, reason: Reason) -> Self {
        Error {
            field: field.into(),
            reason,
        }
    }

    /// A value of the wrong kind in `field`.
    pub(super) fn expected(field: impl Into<String>, expected: &'static str, got: Got) -> Self {
        Error::new(field, Reason::Expected { expected, got })
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::NotJson(error) => write!(f, "not JSON: {error}"),
            Reason::NotUtf8 => f.write_str("not UTF-8"),
            Reason::TooLong { bytes, limit } => {
                write!(f, "record of {bytes} bytes exceeds the {limit} limit")
            }
            Reason::Missing => f.write_str("missing"),
            Reason::UnknownField => f.write_str("unknown field"),
            Reason::Expected { expected, got } => write!(f, "expected {expected}, got {got}"),
            Reason::ExpectedIntIn { range, got } => write!(f, "expected int in {range}, got {got}"),
            Reason::UnknownRemovalReason { got } => {
                write!(f, "expected \"evicted\", \"demoted\" or null, got {got}")
            }
            Reason::UnknownEventType { name } => write!(f, "unknown event type {name}"),
            Reason::UnsupportedVersion(version) => write!(f, "unsupported batch version {version}"),
            Reason::NotFinite(value) => write!(f, "{value} is not a finite number"),
            Reason::OutsideInt64(value) => write!(f, "{value} is outside int64"),
            Reason::BlockSizeTooLarge(value) => write!(f, "{value} exceeds 4294967295"),
            Reason::NoBlockHashes => f.write_str("must hold at least one block hash"),
            Reason::TokenCount {
                tokens,
                pages,
                block_size,
            } => write!(
                f,
                "{tokens} tokens for {pages} block(s) of size {block_size}"
            ),
            Reason::NeedsVersion { field, version } => {
                match field.kind {
                    Kind::OptionalReason => f.write_str("a removal reason")?,
                    _ => write!(f, "`{}`", field.name)?,
                }
                write!(
                    f,
                    " needs wire version {}, the batch is version {version}",
                    field.since
                )
            }
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.field.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.field, self.reason)
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.reason {
            Reason::NotJson(error) => Some(error),
            _ => None,
        }
    }
}
