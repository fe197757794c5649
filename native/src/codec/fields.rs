//! Each field kind of `crate::event_types` on the wire: how the encoder writes its value and
//! how much room it guesses for it. The codec's per-type code is derived from the table of event
//! types through these (`super::encode`).

use super::text::{write_i64, write_str, write_u64};
use crate::event_types::kind;
use crate::events::{FieldKind, Hashes, Medium, RemovalReason, Tokens};

/// A field kind's wire form.
pub(super) trait WireField: FieldKind {
    /// Write the value (after its key).
    fn write(out: &mut Vec<u8>, value: &Self::Value);

    /// A generous guess of the value's written size.
    fn size_guess(value: &Self::Value) -> usize;
}

/// Write `hashes` as the items of a JSON list (without the brackets), after `first` says
/// whether one came before.
pub(super) fn write_hashes(out: &mut Vec<u8>, hashes: &[i64], first: &mut bool) {
    for &hash in hashes {
        if !std::mem::take(first) {
            out.push(b',');
        }
        write_i64(out, hash);
    }
}

/// `write_hashes` for token ids.
pub(super) fn write_tokens(out: &mut Vec<u8>, tokens: &[u32], first: &mut bool) {
    for &token in tokens {
        if !std::mem::take(first) {
            out.push(b',');
        }
        write_u64(out, u64::from(token));
    }
}

pub(super) fn write_optional_i64(out: &mut Vec<u8>, value: Option<i64>) {
    match value {
        Some(value) => write_i64(out, value),
        None => out.extend_from_slice(b"null"),
    }
}

pub(super) fn write_optional_str(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(text) => write_str(out, text),
        None => out.extend_from_slice(b"null"),
    }
}

impl WireField for kind::HashList {
    fn write(out: &mut Vec<u8>, value: &Hashes) {
        out.push(b'[');
        write_hashes(out, value, &mut true);
        out.push(b']');
    }

    fn size_guess(value: &Hashes) -> usize {
        2 + 21 * value.len()
    }
}

impl WireField for kind::TokenList {
    fn write(out: &mut Vec<u8>, value: &Tokens) {
        out.push(b'[');
        write_tokens(out, value, &mut true);
        out.push(b']');
    }

    fn size_guess(value: &Tokens) -> usize {
        2 + 7 * value.len()
    }
}

impl WireField for kind::BlockSize {
    fn write(out: &mut Vec<u8>, value: &u32) {
        write_u64(out, u64::from(*value));
    }

    fn size_guess(_: &u32) -> usize {
        10
    }
}

impl WireField for kind::OptionalInt {
    fn write(out: &mut Vec<u8>, value: &Option<i64>) {
        write_optional_i64(out, *value);
    }

    fn size_guess(_: &Option<i64>) -> usize {
        20
    }
}

impl WireField for kind::OptionalMedium {
    fn write(out: &mut Vec<u8>, value: &Option<Medium>) {
        write_optional_str(out, value.as_deref());
    }

    fn size_guess(value: &Option<Medium>) -> usize {
        value.as_ref().map_or(4, |medium| 2 + medium.len())
    }
}

impl WireField for kind::OptionalReason {
    fn write(out: &mut Vec<u8>, value: &Option<RemovalReason>) {
        write_optional_str(out, value.map(RemovalReason::name));
    }

    fn size_guess(_: &Option<RemovalReason>) -> usize {
        9
    }
}
