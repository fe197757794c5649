//! The batch codec: one log record (JSON, docs/design.md §4) to and from a `crate::events::Batch`.
//!
//! - `decode` reads version 1, 2 and 3 records strictly: it accepts exactly what the pure-Python
//!   reference (`tests/oracles/codec.py`, orjson + checks) accepts and reports the same
//!   error (`Error`: field path and `Reason`) for everything it refuses. JSON syntax errors take
//!   precedence over every other error, as in the reference, which parses before it checks.
//! - `encode` writes version 3 by default (version 2's layout, whose removals may say why):
//!   consecutive `Stored` events that form a chain become
//!   one `Stored` listing every page (vLLM's multi-block form), so a page-1 block costs its hash
//!   and token id plus two commas on the wire. A header with version 1 is written without
//!   compaction. The bytes equal `orjson.dumps` of the reference's JSON object.
//!
//! The scanner is hand-written rather than serde_json: acceptance must match orjson's exactly
//! (integers up to u64, larger ones as doubles; 1,024 levels of nesting; the last of duplicate
//! keys wins) and errors must follow the reference's checking order, which needs every field of
//! an object before any is judged. Slots filled while scanning, judged at the closing brace, do
//! both in one pass without building a document tree and without a dependency.

mod canonical;
mod decode;
mod decode_parts;
mod encode;
mod error;
mod event_keys;
mod fields;
mod meta;
mod record;
mod scan;
mod text;

pub use decode::decode_event;
pub use encode::{encode, encode_into};
pub use error::{Error, Reason, Result};
pub use meta::Meta;
pub use record::{decode, decode_with_meta};
pub use scan::Got;

/// The record size limit used when the caller names none: 16 MiB.
pub const DEFAULT_MAX_RECORD_BYTES: usize = 16 * 1024 * 1024;

/// The version `encode` writes for a header that asks for the current one.
pub const WIRE_VERSION: u8 = 3;

/// The versions `decode` reads.
pub const SUPPORTED_VERSIONS: [u8; 3] = [1, 2, 3];

#[cfg(test)]
mod tests;
