//! Decoding one record: the encoder's own layout straight through when the record has it
//! (`canonical_batch`), the strict general path (`super::decode`) otherwise.

use super::decode::{decode_slots, reason_before_its_version, scan_events};
use super::decode_parts::{events_capacity, Scratch};
use super::error::{Error as DecodeError, Reason};
use super::meta::Meta;
use super::scan::{Number, Scanner};
use super::SUPPORTED_VERSIONS;
use crate::events::{Batch, Header};

/// Decode one record; `max_record_bytes` bounds its size.
pub fn decode(data: &[u8], max_record_bytes: usize) -> Result<Batch, DecodeError> {
    decode_with_meta(data, max_record_bytes).map(|(batch, _)| batch)
}

/// Decode one record and its typed meta (present on an epoch's first batch).
pub fn decode_with_meta(
    data: &[u8],
    max_record_bytes: usize,
) -> Result<(Batch, Option<Meta>), DecodeError> {
    if data.len() > max_record_bytes {
        return Err(DecodeError::new(
            "",
            Reason::TooLong {
                bytes: data.len(),
                limit: max_record_bytes,
            },
        ));
    }
    match canonical_batch(data) {
        Some(batch) => Ok((batch, None)),
        None => decode_slots(data),
    }
}

/// The whole record if it has the encoder's layout, no `meta` (every batch but an epoch's
/// first) and every event decodes; None otherwise, for the general path to decode it from the
/// start. Events in another layout still go through the slots, as in the general path.
pub(super) fn canonical_batch(data: &[u8]) -> Option<Batch> {
    if !data.starts_with(b"{\"v\":") {
        return None;
    }
    let mut scanner = Scanner::new(data);
    scanner.open_object().ok()?;
    scanner.eat(b"\"v\":");
    let version = u8::try_from(scanner.plain_int()?)
        .ok()
        .filter(|version| SUPPORTED_VERSIONS.contains(version))?;
    if !scanner.eat(b",\"source\":") {
        return None;
    }
    let source = scanner.plain_ascii_string()?.to_string();
    if !scanner.eat(b",\"epoch\":") {
        return None;
    }
    let epoch = scanner.plain_ascii_string()?.to_string();
    if !scanner.eat(b",\"seq\":") {
        return None;
    }
    let seq = u64::try_from(scanner.plain_int()?).ok()?;
    if !scanner.eat(b",\"ts\":") {
        return None;
    }
    let ts = match scanner.number().ok()? {
        Number::Int(number) => number as f64,
        Number::Float(number) => number,
    };
    if !scanner.eat(b",\"events\":[") {
        return None;
    }
    scanner.rewind(scanner.offset() - 1); // scan_events opens the array itself
    let mut events = Vec::with_capacity(events_capacity(data));
    if scan_events(&mut scanner, &mut events, &mut Scratch::default())
        .ok()?
        .is_some()
        || reason_before_its_version(version, &events).is_some()
    {
        return None;
    }
    if !scanner.eat(b",\"digest\":") {
        return None;
    }
    let digest = match scanner.eat(b"null") {
        true => None,
        false => Some(scanner.plain_ascii_string()?.to_string()),
    };
    if !scanner.eat(b",\"meta\":null}") || scanner.finish().is_err() {
        return None;
    }
    let header = Header {
        version,
        source,
        epoch,
        seq,
        ts,
        digest,
        meta_json: None,
    };
    Some(Batch { header, events })
}
