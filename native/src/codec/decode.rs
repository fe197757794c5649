//! Strict decoding of one record into a `Batch`: the general path (`super::record` tries the
//! encoder's layout first).
//!
//! Each object (the batch, an event, the meta) is scanned into slots, one per known key (the
//! last of duplicate keys wins, as in orjson); its checks run at the closing brace in the
//! reference's order, so the error reported is the one the reference reports. A syntax error
//! anywhere wins over every other error, so after a field error the rest of the record is
//! still scanned. Int lists are parsed straight into reused scratch vectors; an event costs the
//! allocations of its own `Vec`s only.

use std::borrow::Cow;

use super::canonical::{canonical_event, canonical_events};
use super::decode_parts::{events_capacity, EventType, Scratch};
use super::error::{Error as DecodeError, Reason};
use super::meta::{scan_meta, Meta};
use super::scan::{Got, Kind, Number, Scanner, SyntaxError, Value};
use super::text::quoted_excerpt;
use super::{REASON_VERSION, SUPPORTED_VERSIONS};
use crate::events::{Batch, Event, Hashes, Header, Medium, RemovalReason, Stored, Tokens};

/// `decode_with_meta` through the slots alone (the general path), without the size check.
pub(super) fn decode_slots(data: &[u8]) -> Result<(Batch, Option<Meta>), DecodeError> {
    let mut scanner = Scanner::new(data);
    let mut events = Vec::with_capacity(events_capacity(data));
    let top = scan_top(&mut scanner, &mut events).map_err(not_json)?;
    match top {
        Top::NotObject(kind) => Err(DecodeError::expected("", "an object", Got::Kind(kind))),
        Top::Object(slots) => slots.judge(&scanner, events),
    }
}

/// Decode one event object (the text of one element of `events`) as it is on the wire (a
/// multi-page `Stored` stays whole); errors are named under `path`.
pub fn decode_event(data: &[u8], path: &str) -> Result<Event, DecodeError> {
    let mut scanner = Scanner::new(data);
    let mut scratch = Scratch::default();
    let outcome = (|| {
        let outcome = match scanner.peek_kind()? {
            Kind::Object => scan_event(&mut scanner, &mut scratch)?,
            _ => Err(DecodeError::expected(
                "",
                "an object",
                Got::Kind(scanner.skip_value()?),
            )),
        };
        scanner.finish()?;
        Ok(outcome)
    })()
    .map_err(not_json)?;
    outcome.map_err(|error| under(path, error))
}

fn not_json(error: SyntaxError) -> DecodeError {
    DecodeError::new("", Reason::NotJson(error))
}

/// An event-relative error named under `path` (e.g. `events[3]`).
fn under(path: &str, error: DecodeError) -> DecodeError {
    let field = if error.field.is_empty() {
        path.to_string()
    } else {
        format!("{path}.{}", error.field)
    };
    DecodeError::new(field, error.reason)
}

// --- the batch -----------------------------------------------------------------------------

/// The batch's keys, sorted (the reference names the first missing or unknown one in order).
const TOP_FIELDS: [&str; 8] = [
    "digest", "epoch", "events", "meta", "seq", "source", "ts", "v",
];
const DIGEST: usize = 0;
const EPOCH: usize = 1;
const EVENTS: usize = 2;
const META: usize = 3;
const SEQ: usize = 4;
const SOURCE: usize = 5;
const TS: usize = 6;
const VERSION: usize = 7;

/// The index in `TOP_FIELDS` of `key` (a `match`: compiled to length and byte checks).
#[inline]
fn top_field(key: &str) -> Option<usize> {
    Some(match key {
        "digest" => DIGEST,
        "epoch" => EPOCH,
        "events" => EVENTS,
        "meta" => META,
        "seq" => SEQ,
        "source" => SOURCE,
        "ts" => TS,
        "v" => VERSION,
        _ => return None,
    })
}

enum Top<'a> {
    NotObject(Kind),
    Object(Box<TopSlots<'a>>),
}

#[derive(Default)]
struct TopSlots<'a> {
    /// One bit per `TOP_FIELDS` entry present.
    present: u8,
    scalars: [Option<Value<'a>>; 8],
    events_kind: Option<Kind>,
    /// The first event that does not decode, named from the batch.
    events_error: Option<DecodeError>,
    meta_kind: Option<Kind>,
    meta_span: (usize, usize),
    meta: Option<Result<Meta, DecodeError>>,
    least_unknown: Option<String>,
}

fn note_unknown(least: &mut Option<String>, key: Cow<'_, str>) {
    if least.as_deref().map_or(true, |current| *key < *current) {
        *least = Some(key.into_owned());
    }
}

fn scan_top<'a>(
    scanner: &mut Scanner<'a>,
    events: &mut Vec<Event>,
) -> Result<Top<'a>, SyntaxError> {
    if scanner.peek_kind()? != Kind::Object {
        let kind = scanner.skip_value()?;
        scanner.finish()?;
        return Ok(Top::NotObject(kind));
    }
    scanner.open_object()?;
    let mut slots = Box::<TopSlots>::default();
    let mut scratch = Scratch::default();
    let mut first = true;
    while let Some(key) = scanner.next_key(&mut first)? {
        let Some(index) = top_field(&key) else {
            scanner.skip_value()?;
            note_unknown(&mut slots.least_unknown, key);
            continue;
        };
        slots.present |= 1 << index;
        match index {
            EVENTS => {
                events.clear();
                slots.events_error = None;
                if scanner.peek_value()? == b'[' {
                    slots.events_kind = Some(Kind::Array);
                    slots.events_error = scan_events(scanner, events, &mut scratch)?;
                } else {
                    slots.events_kind = Some(scanner.skip_value()?);
                }
            }
            META => {
                slots.meta = None;
                if scanner.peek_value()? == b'{' {
                    let start = scanner.offset();
                    slots.meta = Some(scan_meta(scanner)?);
                    slots.meta_span = (start, scanner.offset());
                    slots.meta_kind = Some(Kind::Object);
                } else {
                    slots.meta_kind = Some(scanner.skip_value()?);
                }
            }
            _ => slots.scalars[index] = Some(scanner.value()?),
        }
    }
    scanner.finish()?;
    Ok(Top::Object(slots))
}

fn expected_str(field: &str, value: Option<Value<'_>>) -> Result<String, DecodeError> {
    match value {
        Some(Value::Str(text)) => Ok(text.into_owned()),
        other => Err(DecodeError::expected(
            field,
            "str",
            Got::Kind(kind_of(&other)),
        )),
    }
}

fn kind_of(value: &Option<Value<'_>>) -> Kind {
    value.as_ref().map_or(Kind::Null, Value::kind)
}

impl TopSlots<'_> {
    /// The reference's checks, in its order.
    fn judge(
        mut self: Box<Self>,
        scanner: &Scanner<'_>,
        events: Vec<Event>,
    ) -> Result<(Batch, Option<Meta>), DecodeError> {
        let version = match self.scalars[VERSION].take() {
            None => return Err(DecodeError::new("v", Reason::Missing)),
            Some(Value::Int(number)) => match u8::try_from(number) {
                Ok(version) if SUPPORTED_VERSIONS.contains(&version) => version,
                _ => return Err(DecodeError::new("v", Reason::UnsupportedVersion(number))),
            },
            Some(other) => return Err(DecodeError::expected("v", "int", Got::Kind(other.kind()))),
        };
        let missing = !self.present;
        if missing != 0 {
            let index = missing.trailing_zeros() as usize;
            return Err(DecodeError::new(TOP_FIELDS[index], Reason::Missing));
        }
        if let Some(key) = self.least_unknown.take() {
            return Err(DecodeError::new(key, Reason::UnknownField));
        }
        let ts = match self.scalars[TS].take() {
            Some(Value::Int(number)) => number as f64,
            Some(Value::Float(number)) => number,
            other => {
                return Err(DecodeError::expected(
                    "ts",
                    "a number",
                    Got::Kind(kind_of(&other)),
                ))
            }
        };
        if let Some(kind) = self.events_kind.filter(|kind| *kind != Kind::Array) {
            return Err(DecodeError::expected("events", "a list", Got::Kind(kind)));
        }
        if let Some(kind) = self
            .meta_kind
            .filter(|kind| !matches!(kind, Kind::Object | Kind::Null))
        {
            return Err(DecodeError::expected(
                "meta",
                "an object or null",
                Got::Kind(kind),
            ));
        }
        let source = expected_str("source", self.scalars[SOURCE].take())?;
        let epoch = expected_str("epoch", self.scalars[EPOCH].take())?;
        let seq = match self.scalars[SEQ].take() {
            Some(Value::Int(number)) if number >= 0 => number as u64,
            other => {
                let got = other.map_or(Got::Kind(Kind::Null), |value| value.got());
                return Err(DecodeError::expected("seq", "a non-negative int", got));
            }
        };
        // Every event decoded comes before the one that failed, if any.
        if let Some(error) = reason_before_its_version(version, &events) {
            return Err(error);
        }
        if let Some(error) = self.events_error.take() {
            return Err(error);
        }
        let digest = match self.scalars[DIGEST].take() {
            Some(Value::Null) => None,
            other => Some(expected_str("digest", other)?),
        };
        let (meta, meta_json) = match self.meta.take() {
            None => (None, None),
            Some(meta) => {
                let (start, end) = self.meta_span;
                let text = std::str::from_utf8(scanner.slice(start, end))
                    .map_err(|_| DecodeError::new("meta", Reason::NotUtf8))?;
                (Some(meta?), Some(text.to_string()))
            }
        };
        let header = Header {
            version,
            source,
            epoch,
            seq,
            ts,
            digest,
            meta_json,
        };
        Ok((Batch { header, events }, meta))
    }
}

// --- events --------------------------------------------------------------------------------

/// The first removal that says why in a batch whose version cannot (a reason needs version
/// `REASON_VERSION`), named from the batch.
pub(super) fn reason_before_its_version(version: u8, events: &[Event]) -> Option<DecodeError> {
    if version >= REASON_VERSION {
        return None;
    }
    let index = events.iter().position(|event| {
        matches!(
            event,
            Event::Removed {
                reason: Some(_),
                ..
            }
        )
    })?;
    Some(DecodeError::new(
        format!("events[{index}].reason"),
        Reason::ReasonNeedsVersion { version },
    ))
}

/// Decode the events array at the cursor (on `[`) into `events`; the first event that does
/// not decode, named from the batch (the rest is still scanned).
pub(super) fn scan_events(
    scanner: &mut Scanner<'_>,
    events: &mut Vec<Event>,
    scratch: &mut Scratch,
) -> Result<Option<DecodeError>, SyntaxError> {
    scanner.open_array()?;
    let mut index = canonical_events(scanner, events, scratch);
    let mut first = index == 0;
    let mut failure = None;
    while scanner.next_element(&mut first)? {
        if failure.is_some() {
            scanner.skip_value()?;
        } else if scanner.peek_value()? == b'{' {
            match scan_event(scanner, scratch)? {
                Ok(event) => events.push(event),
                Err(error) => failure = Some(under(&format!("events[{index}]"), error)),
            }
        } else {
            let kind = scanner.skip_value()?;
            failure = Some(DecodeError::expected(
                format!("events[{index}]"),
                "an object",
                Got::Kind(kind),
            ));
        }
        index += 1;
    }
    Ok(failure)
}

impl EventType {
    /// The keys this type has, as `EVENT_FIELDS` bits.
    fn fields(self) -> u8 {
        match self {
            EventType::Stored => !REASON,
            EventType::Removed => TYPE | HASHES | MEDIUM,
            EventType::SwaEvicted | EventType::SwaRestored => TYPE | HASHES,
            EventType::Cleared => TYPE,
        }
    }

    /// The keys this type may have besides `fields` (absent means null).
    fn optional_fields(self) -> u8 {
        match self {
            EventType::Removed => REASON,
            _ => 0,
        }
    }
}

/// Every key an event can have, sorted (the reference names the first missing or unknown one).
const EVENT_FIELDS: [&str; 8] = [
    "block_hashes",
    "block_size",
    "lora_id",
    "medium",
    "parent_block_hash",
    "reason",
    "token_ids",
    "type",
];
const HASHES: u8 = 1 << 0;
const BLOCK_SIZE: u8 = 1 << 1;
const LORA_ID: u8 = 1 << 2;
const MEDIUM: u8 = 1 << 3;
const PARENT: u8 = 1 << 4;
const REASON: u8 = 1 << 5;
const TOKENS: u8 = 1 << 6;
const TYPE: u8 = 1 << 7;

/// The `EVENT_FIELDS` bit of `key` (a `match`: compiled to length and byte checks).
#[inline]
fn event_field(key: &str) -> Option<u8> {
    Some(match key {
        "block_hashes" => HASHES,
        "block_size" => BLOCK_SIZE,
        "lora_id" => LORA_ID,
        "medium" => MEDIUM,
        "parent_block_hash" => PARENT,
        "reason" => REASON,
        "token_ids" => TOKENS,
        "type" => TYPE,
        _ => return None,
    })
}

const INT64_RANGE: &str = "[-9223372036854775808, 9223372036854775807]";
const UINT32_RANGE: &str = "[0, 4294967295]";

enum TypeSlot<'a> {
    Known(EventType),
    Unknown(Cow<'a, str>),
    NotStr(Kind),
}

/// An int list as scanned: not a list, or a list (values in the scratch vector) with its first
/// item out of range or of the wrong type.
enum ListSlot {
    NotList(Kind),
    List { bad: Option<(usize, Got)> },
}

#[derive(Default)]
struct EventSlots<'a> {
    present: u8,
    kind: Option<TypeSlot<'a>>,
    hashes: Option<ListSlot>,
    tokens: Option<ListSlot>,
    block_size: Option<Value<'a>>,
    parent: Option<Value<'a>>,
    lora_id: Option<Value<'a>>,
    medium: Option<Value<'a>>,
    reason: Option<Value<'a>>,
    least_unknown: Option<String>,
}

/// Parse the value at the cursor as a list of ints, keeping those `accept` takes in `out`.
#[inline]
fn scan_int_list<T>(
    scanner: &mut Scanner<'_>,
    out: &mut Vec<T>,
    accept: impl Fn(i128) -> Option<T>,
) -> Result<ListSlot, SyntaxError> {
    if scanner.peek_value()? != b'[' {
        return Ok(ListSlot::NotList(scanner.skip_value()?));
    }
    scanner.open_array()?;
    out.clear();
    let mut first = true;
    let mut bad = None;
    let mut index = 0usize;
    while scanner.next_element(&mut first)? {
        if bad.is_some() {
            scanner.skip_value()?;
        } else if let Some(number) = scanner.plain_int() {
            match accept(number) {
                Some(item) => out.push(item),
                None => bad = Some((index, Got::Int(number))),
            }
        } else if matches!(scanner.peek_value()?, b'-' | b'0'..=b'9') {
            match scanner.number()? {
                Number::Int(number) => match accept(number) {
                    Some(item) => out.push(item),
                    None => bad = Some((index, Got::Int(number))),
                },
                Number::Float(_) => bad = Some((index, Got::Kind(Kind::Float))),
            }
        } else {
            bad = Some((index, Got::Kind(scanner.skip_value()?)));
        }
        index += 1;
    }
    Ok(ListSlot::List { bad })
}

/// Decode the event object at the cursor (on `{`): the encoder's layout through the fast path,
/// anything else through the slots.
fn scan_event(
    scanner: &mut Scanner<'_>,
    scratch: &mut Scratch,
) -> Result<Result<Event, DecodeError>, SyntaxError> {
    match canonical_event(scanner, scratch) {
        Some(event) => Ok(Ok(event)),
        None => scan_event_slots(scanner, scratch),
    }
}

/// Decode the event object at the cursor (on `{`) key by key into slots, then judge them.
fn scan_event_slots<'a>(
    scanner: &mut Scanner<'a>,
    scratch: &mut Scratch,
) -> Result<Result<Event, DecodeError>, SyntaxError> {
    scanner.open_object()?;
    let mut slots = EventSlots::default();
    let mut first = true;
    while let Some(key) = scanner.next_key(&mut first)? {
        let Some(bit) = event_field(&key) else {
            scanner.skip_value()?;
            note_unknown(&mut slots.least_unknown, key);
            continue;
        };
        slots.present |= bit;
        match bit {
            TYPE => {
                slots.kind = Some(match scanner.value()? {
                    Value::Str(name) => match EventType::from_name(&name) {
                        Some(kind) => TypeSlot::Known(kind),
                        None => TypeSlot::Unknown(name),
                    },
                    other => TypeSlot::NotStr(other.kind()),
                })
            }
            HASHES => {
                slots.hashes = Some(scan_int_list(scanner, &mut scratch.hashes, |n| {
                    i64::try_from(n).ok()
                })?)
            }
            TOKENS => {
                slots.tokens = Some(scan_int_list(scanner, &mut scratch.tokens, |n| {
                    u32::try_from(n).ok()
                })?)
            }
            BLOCK_SIZE => slots.block_size = Some(scanner.value()?),
            PARENT => slots.parent = Some(scanner.value()?),
            LORA_ID => slots.lora_id = Some(scanner.value()?),
            REASON => slots.reason = Some(scanner.value()?),
            _ => slots.medium = Some(scanner.value()?),
        }
    }
    Ok(slots.judge(scratch))
}

fn list_error(field: &str, range: &'static str, slot: &Option<ListSlot>) -> Option<DecodeError> {
    match slot {
        Some(ListSlot::NotList(kind)) => {
            Some(DecodeError::expected(field, "a list", Got::Kind(*kind)))
        }
        Some(ListSlot::List {
            bad: Some((index, got)),
        }) => Some(DecodeError::new(
            format!("{field}[{index}]"),
            Reason::ExpectedIntIn { range, got: *got },
        )),
        _ => None,
    }
}

fn hashes_of(slot: &Option<ListSlot>, scratch: &Scratch) -> Result<Hashes, DecodeError> {
    if let Some(error) = list_error("block_hashes", INT64_RANGE, slot) {
        return Err(error);
    }
    if scratch.hashes.is_empty() {
        return Err(DecodeError::new("block_hashes", Reason::NoBlockHashes));
    }
    Ok(Hashes::from_slice(&scratch.hashes))
}

fn optional_int64(field: &str, value: Option<Value<'_>>) -> Result<Option<i64>, DecodeError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Int(number)) => i64::try_from(number)
            .map(Some)
            .map_err(|_| DecodeError::new(field, Reason::OutsideInt64(number))),
        Some(other) => Err(DecodeError::expected(
            field,
            "int64",
            Got::Kind(other.kind()),
        )),
    }
}

fn optional_medium(field: &str, value: Option<Value<'_>>) -> Result<Option<Medium>, DecodeError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Str(text)) => Ok(Some(Medium::new(&text))),
        Some(other) => Err(DecodeError::expected(field, "str", Got::Kind(other.kind()))),
    }
}

fn optional_reason(value: Option<Value<'_>>) -> Result<Option<RemovalReason>, DecodeError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Str(text)) => RemovalReason::from_name(&text).map(Some).ok_or_else(|| {
            DecodeError::new(
                "reason",
                Reason::UnknownRemovalReason {
                    got: quoted_excerpt(&text),
                },
            )
        }),
        Some(other) => Err(DecodeError::expected(
            "reason",
            "str",
            Got::Kind(other.kind()),
        )),
    }
}

impl EventSlots<'_> {
    /// The reference's checks of one event, in its order; fields are named relative to it.
    fn judge(self, scratch: &Scratch) -> Result<Event, DecodeError> {
        let kind = match self.kind {
            None => return Err(DecodeError::new("type", Reason::Missing)),
            Some(TypeSlot::NotStr(kind)) => {
                return Err(DecodeError::expected("type", "str", Got::Kind(kind)))
            }
            Some(TypeSlot::Unknown(name)) => {
                return Err(DecodeError::new(
                    "type",
                    Reason::UnknownEventType {
                        name: quoted_excerpt(&name),
                    },
                ))
            }
            Some(TypeSlot::Known(kind)) => kind,
        };
        let expected = kind.fields();
        let missing = expected & !self.present;
        if missing != 0 {
            let name = EVENT_FIELDS[missing.trailing_zeros() as usize];
            return Err(DecodeError::new(name, Reason::Missing));
        }
        let extra = self.present & !(expected | kind.optional_fields());
        let known_extra = (extra != 0).then(|| EVENT_FIELDS[extra.trailing_zeros() as usize]);
        let least = match (known_extra, self.least_unknown.as_deref()) {
            (Some(known), Some(unknown)) => Some(known.min(unknown)),
            (known, unknown) => known.or(unknown),
        };
        if let Some(name) = least {
            return Err(DecodeError::new(name, Reason::UnknownField));
        }
        match kind {
            EventType::Stored => self.judge_stored(scratch),
            EventType::Removed => {
                let hashes = hashes_of(&self.hashes, scratch)?;
                let medium = optional_medium("medium", self.medium)?;
                let reason = optional_reason(self.reason)?;
                Ok(Event::Removed {
                    hashes,
                    medium,
                    reason,
                })
            }
            EventType::SwaEvicted => Ok(Event::SwaEvicted {
                hashes: hashes_of(&self.hashes, scratch)?,
            }),
            EventType::SwaRestored => Ok(Event::SwaRestored {
                hashes: hashes_of(&self.hashes, scratch)?,
            }),
            EventType::Cleared => Ok(Event::Cleared),
        }
    }

    fn judge_stored(self, scratch: &Scratch) -> Result<Event, DecodeError> {
        let block_size = match &self.block_size {
            Some(Value::Int(number)) if *number > 0 => *number,
            other => {
                let got = other.as_ref().map_or(Got::Kind(Kind::Null), Value::got);
                return Err(DecodeError::expected("block_size", "a positive int", got));
            }
        };
        if let Some(error) = list_error("token_ids", UINT32_RANGE, &self.tokens) {
            return Err(error);
        }
        let hashes = hashes_of(&self.hashes, scratch)?;
        let tokens = scratch.tokens.len();
        let pages = hashes.len();
        // Exact in i128: block_size <= u64::MAX and pages, tokens < 2^61.
        if tokens as i128 != block_size * pages as i128 {
            return Err(DecodeError::new(
                "token_ids",
                Reason::TokenCount {
                    tokens,
                    pages,
                    block_size,
                },
            ));
        }
        let parent = optional_int64("parent_block_hash", self.parent)?;
        let lora_id = optional_int64("lora_id", self.lora_id)?;
        let medium = optional_medium("medium", self.medium)?;
        // Only a record of 2^32 tokens or more (40 GB of JSON) gets here with a wider size.
        let block_size = u32::try_from(block_size)
            .map_err(|_| DecodeError::new("block_size", Reason::BlockSizeTooLarge(block_size)))?;
        Ok(Event::Stored(Stored {
            hashes,
            parent,
            tokens: Tokens::from_slice(&scratch.tokens),
            block_size,
            lora_id,
            medium,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both paths over one event's text: the fast path's event (None when it gave up) with the
    /// cursor after it, and the slot path's outcome with its cursor.
    fn both_paths(text: &str) -> (Option<(Event, usize)>, SlotOutcome) {
        let mut scratch = Scratch::default();
        let mut fast = Scanner::new(text.as_bytes());
        let event = canonical_event(&mut fast, &mut scratch).map(|event| (event, fast.offset()));
        if event.is_none() {
            assert_eq!(fast.offset(), 0, "the fast path rewinds: {text}");
        }
        let mut slow = Scanner::new(text.as_bytes());
        let outcome =
            scan_event_slots(&mut slow, &mut scratch).map(|outcome| (outcome, slow.offset()));
        (event, outcome)
    }

    type SlotOutcome = Result<(Result<Event, DecodeError>, usize), SyntaxError>;

    #[test]
    fn the_fast_path_agrees_with_the_slots_or_gives_up() {
        let stored = |rest: &str| {
            format!(
                r#"{{"type":"BlockStored","block_hashes":[-9223372036854775808,9223372036854775807],"parent_block_hash":{rest}}}"#
            )
        };
        let taken = [
            r#"{"type":"AllBlocksCleared"}"#.to_string(),
            r#"{"type":"BlockSWAEvicted","block_hashes":[1,-0,2]}"#.into(),
            r#"{"type":"BlockSWARestored","block_hashes":[0]}"#.into(),
            r#"{"type":"BlockRemoved","block_hashes":[5],"medium":null}"#.into(),
            r#"{"type":"BlockRemoved","block_hashes":[5],"medium":"GPU"}"#.into(),
            r#"{"type":"BlockRemoved","block_hashes":[5,6,7],"medium":"GPUs"}"#.into(),
            r#"{"type":"BlockStored","block_hashes":[1],"parent_block_hash":null,"token_ids":[7],"block_size":1,"lora_id":null,"medium":"GPU"}"#.into(),
            r#"{"type":"BlockStored","block_hashes":[1,2,3],"parent_block_hash":4,"token_ids":[7,8,9],"block_size":1,"lora_id":null,"medium":"GPU"}"#.into(),
            stored(
                r#"null,"token_ids":[0,4294967295],"block_size":1,"lora_id":null,"medium":"GPU""#,
            ),
            stored(
                r#"-7,"token_ids":[1,2,3,4],"block_size":2,"lora_id":-9223372036854775808,"medium":null"#,
            ),
            stored(r#"7,"token_ids":[1,2,3,4,5,6],"block_size":3,"lora_id":null,"medium":"CPU""#),
            stored(r#"null,"token_ids":[1,2],"block_size":1,"lora_id":3,"medium":"GPU""#),
        ];
        for text in &taken {
            let (fast, slow) = both_paths(text);
            let (event, end) = fast.unwrap_or_else(|| panic!("not taken: {text}"));
            let (outcome, slow_end) = slow.unwrap();
            assert_eq!(Ok(event), outcome, "{text}");
            assert_eq!(end, slow_end, "{text}");
        }
        let refused = [
            r#"{ "type":"AllBlocksCleared"}"#.to_string(),
            r#"{"type":"AllBlocksCleared","type":"AllBlocksCleared"}"#.into(),
            r#"{"type":"AllBlocksCleared","x":1}"#.into(),
            r#"{"type":"Block\u0053WAEvicted","block_hashes":[1]}"#.into(),
            r#"{"type":"BlockSWAEvicted","block_hashes":[]}"#.into(),
            r#"{"type":"BlockSWAEvicted","block_hashes":[1,]}"#.into(),
            r#"{"type":"BlockSWAEvicted","block_hashes":[1 ]}"#.into(),
            r#"{"type":"BlockSWAEvicted","block_hashes":[01]}"#.into(),
            r#"{"type":"BlockSWAEvicted","block_hashes":[1.0]}"#.into(),
            r#"{"type":"BlockSWAEvicted","block_hashes":[9223372036854775808]}"#.into(),
            r#"{"type":"BlockSWAEvicted","block_hashes":[-9223372036854775809]}"#.into(),
            r#"{"type":"BlockSWAEvicted","block_hashes":[18446744073709551616]}"#.into(),
            r#"{"type":"BlockSWAEvicted","block_hashes":[1],"block_hashes":[2]}"#.into(),
            r#"{"type":"BlockSWAEvicted","block_hashes":[1],"medium":"GPU"}"#.into(),
            r#"{"type":"BlockRemoved","block_hashes":[5]}"#.into(),
            r#"{"type":"BlockRemoved","block_hashes":[5],"medium":"GPU","medium":"GPU"}"#.into(),
            r#"{"type":"BlockRemoved","block_hashes":[5],"medium":"G\u0050U"}"#.into(),
            "{\"type\":\"BlockRemoved\",\"block_hashes\":[5],\"medium\":\"\u{e9}\"}".into(),
            "{\"type\":\"BlockRemoved\",\"block_hashes\":[5],\"medium\":\"\t\"}".into(),
            r#"{"type":"BlockRemoved","block_hashes":[5],"medium":1}"#.into(),
            r#"{"type":"BlockRemoved","block_hashes":[5],"medium":nul}"#.into(),
            r#"{"type":"Unknown","block_hashes":[5]}"#.into(),
            stored(r#"null,"token_ids":[4294967296,1],"block_size":1,"lora_id":null,"medium":"GPU""#),
            stored(r#"null,"token_ids":[-1,1],"block_size":1,"lora_id":null,"medium":"GPU""#),
            stored(r#"null,"token_ids":[1,2,3],"block_size":1,"lora_id":null,"medium":"GPU""#),
            stored(r#"null,"token_ids":[1,2],"block_size":0,"lora_id":null,"medium":"GPU""#),
            stored(r#"null,"token_ids":[1,2],"block_size":-1,"lora_id":null,"medium":"GPU""#),
            stored(r#"null,"token_ids":[1,2],"block_size":1.0,"lora_id":null,"medium":"GPU""#),
            stored(r#"null,"token_ids":[1,2],"block_size":4294967297,"lora_id":null,"medium":"GPU""#),
            stored(r#"9223372036854775808,"token_ids":[1,2],"block_size":1,"lora_id":null,"medium":"GPU""#),
            stored(r#"null,"token_ids":[1,2],"block_size":1,"lora_id":1e3,"medium":"GPU""#),
            stored(r#"null,"token_ids":[1,2],"block_size":1,"lora_id":null,"medium":"GPU","x":1"#),
            stored(r#"null,"block_size":1,"token_ids":[1,2],"lora_id":null,"medium":"GPU""#),
            stored(r#"null,"token_ids":[1,2],"block_size":1,"medium":"GPU""#),
            stored(r#"nullx,"token_ids":[1,2],"block_size":1,"lora_id":null,"medium":"GPU""#),
            r#"{"type":"BlockStored","block_hashes":[1],"parent_block_hash":null,"token_ids":[1],"block_size":1,"lora_id":null,"medium":"GPU""#.into(),
            r#"{"type":"BlockStored","block_hashes":[1"#.into(),
            r#"{"type":"#.into(),
        ];
        for text in &refused {
            let (fast, _) = both_paths(text);
            assert!(fast.is_none(), "taken: {text}");
        }
    }

    #[test]
    fn key_matches_agree_with_the_field_tables() {
        for (index, name) in TOP_FIELDS.iter().enumerate() {
            assert_eq!(top_field(name), Some(index), "{name}");
        }
        for (index, name) in EVENT_FIELDS.iter().enumerate() {
            assert_eq!(event_field(name), Some(1 << index), "{name}");
        }
        for other in [
            "",
            "V",
            "event",
            "eventss",
            "block_hash",
            "types",
            "medium ",
        ] {
            assert_eq!(top_field(other), None, "{other}");
            assert_eq!(event_field(other), None, "{other}");
        }
    }
}
