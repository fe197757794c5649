//! Strict decoding of one record into a `Batch`: the general path (`super::record` tries the
//! encoder's layout first).
//!
//! Each object (the batch, an event, the meta) is scanned into slots, one per known key (the
//! last of duplicate keys wins, as in orjson); its checks run at the closing brace in the
//! reference's order, so the error reported is the one the reference reports. A syntax error
//! anywhere wins over every other error, so after a field error the rest of the record is
//! still scanned. Int lists are parsed straight into reused scratch vectors; an event costs the
//! allocations of its own `Vec`s only.
//!
//! An event's keys, each type's required and optional ones (`super::event_keys`) and the event
//! built from its judged fields come from the table of event types; its fields are judged kind
//! by kind, in `Kind::ALL`'s order, the token count right after the hashes.

use std::borrow::Cow;

use super::canonical::{canonical_event, canonical_events};
use super::decode_parts::{events_capacity, Scratch};
use super::error::{Error as DecodeError, Reason};
use super::event_keys::{
    event_key, key_index, Mask, EVENT_KEYS, EVENT_KEY_COUNT, KEY_KINDS, OPTIONAL, REQUIRED,
    TYPE_KEY,
};
use super::meta::{scan_meta, Meta};
use super::scan::{Got, Kind, Number, Scanner, SyntaxError, Value};
use super::text::quoted_excerpt;
use super::SUPPORTED_VERSIONS;
use crate::event_types::{kind, with_event_types, EventType, Field, Kind as FieldKind};
use crate::events::{
    event_of, tokens_fit, Batch, Event, Hashes, Header, Medium, RemovalReason, Tokens,
};

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

/// The first field said in a batch whose version does not have it yet (a removal's reason
/// needs version 3), named from the batch.
pub(super) fn reason_before_its_version(version: u8, events: &[Event]) -> Option<DecodeError> {
    events.iter().enumerate().find_map(|(index, event)| {
        event.said_after(version).map(|field| {
            DecodeError::new(
                format!("events[{index}].{}", field.name),
                Reason::NeedsVersion { field, version },
            )
        })
    })
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

const INT64_RANGE: &str = "[-9223372036854775808, 9223372036854775807]";
const UINT32_RANGE: &str = "[0, 4294967295]";

/// An event's `type` as scanned.
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

/// A field's value as scanned: an int list (of a list kind) or any other value.
enum Slot<'a> {
    List(ListSlot),
    Value(Value<'a>),
}

/// One event object's keys as scanned, by `EVENT_KEYS` index.
struct EventSlots<'a> {
    present: Mask,
    kind: Option<TypeSlot<'a>>,
    slots: [Option<Slot<'a>>; EVENT_KEY_COUNT],
    least_unknown: Option<String>,
}

impl Default for EventSlots<'_> {
    fn default() -> Self {
        EventSlots {
            present: 0,
            kind: None,
            slots: std::array::from_fn(|_| None),
            least_unknown: None,
        }
    }
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
        let Some(index) = event_key(&key) else {
            scanner.skip_value()?;
            note_unknown(&mut slots.least_unknown, key);
            continue;
        };
        slots.present |= 1 << index;
        let slot = match KEY_KINDS[index] {
            None => {
                slots.kind = Some(match scanner.value()? {
                    Value::Str(name) => match EventType::from_name(&name) {
                        Some(kind) => TypeSlot::Known(kind),
                        None => TypeSlot::Unknown(name),
                    },
                    other => TypeSlot::NotStr(other.kind()),
                });
                continue;
            }
            Some(FieldKind::HashList) => {
                Slot::List(scan_int_list(scanner, &mut scratch.hashes, |n| {
                    i64::try_from(n).ok()
                })?)
            }
            Some(FieldKind::TokenList) => {
                Slot::List(scan_int_list(scanner, &mut scratch.tokens, |n| {
                    u32::try_from(n).ok()
                })?)
            }
            Some(_) => Slot::Value(scanner.value()?),
        };
        slots.slots[index] = Some(slot);
    }
    Ok(slots.judge(scratch))
}

fn list_error(field: &str, range: &'static str, slot: Option<&ListSlot>) -> Option<DecodeError> {
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

fn hashes_of(
    field: &str,
    slot: Option<&ListSlot>,
    scratch: &Scratch,
) -> Result<Hashes, DecodeError> {
    if let Some(error) = list_error(field, INT64_RANGE, slot) {
        return Err(error);
    }
    if slot.is_none() || scratch.hashes.is_empty() {
        return Err(DecodeError::new(field, Reason::NoBlockHashes));
    }
    Ok(Hashes::from_slice(&scratch.hashes))
}

fn tokens_of(
    field: &str,
    slot: Option<&ListSlot>,
    scratch: &Scratch,
) -> Result<Tokens, DecodeError> {
    if let Some(error) = list_error(field, UINT32_RANGE, slot) {
        return Err(error);
    }
    match slot {
        Some(_) => Ok(Tokens::from_slice(&scratch.tokens)),
        None => Ok(Tokens::new()),
    }
}

fn positive_int(field: &str, value: Option<Value<'_>>) -> Result<i128, DecodeError> {
    match &value {
        Some(Value::Int(number)) if *number > 0 => Ok(*number),
        other => {
            let got = other.as_ref().map_or(Got::Kind(Kind::Null), Value::got);
            Err(DecodeError::expected(field, "a positive int", got))
        }
    }
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

fn optional_reason(
    field: &str,
    value: Option<Value<'_>>,
) -> Result<Option<RemovalReason>, DecodeError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Str(text)) => RemovalReason::from_name(&text).map(Some).ok_or_else(|| {
            DecodeError::new(
                field,
                Reason::UnknownRemovalReason {
                    got: quoted_excerpt(&text),
                },
            )
        }),
        Some(other) => Err(DecodeError::expected(field, "str", Got::Kind(other.kind()))),
    }
}

/// A field's value once judged (a block size still as read: `judge` narrows it last).
enum Judged {
    BlockSize(i128),
    Tokens(Tokens),
    Hashes(Hashes),
    Int(Option<i64>),
    Medium(Option<Medium>),
    Reason(Option<RemovalReason>),
}

/// The value of field `field` judged by its kind (`slot`: its scanned value, None if absent).
fn judge_field(
    field: &Field,
    slot: Option<Slot<'_>>,
    scratch: &Scratch,
) -> Result<Judged, DecodeError> {
    let (list, value) = match slot {
        Some(Slot::List(list)) => (Some(list), None),
        Some(Slot::Value(value)) => (None, Some(value)),
        None => (None, None),
    };
    let name = field.name;
    Ok(match field.kind {
        FieldKind::BlockSize => Judged::BlockSize(positive_int(name, value)?),
        FieldKind::TokenList => Judged::Tokens(tokens_of(name, list.as_ref(), scratch)?),
        FieldKind::HashList => Judged::Hashes(hashes_of(name, list.as_ref(), scratch)?),
        FieldKind::OptionalInt => Judged::Int(optional_int64(name, value)?),
        FieldKind::OptionalMedium => Judged::Medium(optional_medium(name, value)?),
        FieldKind::OptionalReason => Judged::Reason(optional_reason(name, value)?),
    })
}

/// The judged value of a field of kind `Self` (present: `judge` judged every field its type
/// has; an absent optional one is null).
trait FromJudged: crate::events::FieldKind {
    fn from_judged(judged: Option<Judged>) -> Self::Value;
}

macro_rules! from_judged {
    ($($kind:ident: $variant:ident($value:ident) => $out:expr, absent $absent:expr;)*) => {$(
        impl FromJudged for kind::$kind {
            fn from_judged(judged: Option<Judged>) -> Self::Value {
                match judged {
                    Some(Judged::$variant($value)) => $out,
                    _ => $absent,
                }
            }
        }
    )*};
}

from_judged! {
    // `judge` refused a block size above u32::MAX.
    BlockSize: BlockSize(size) => u32::try_from(size).unwrap_or(u32::MAX), absent 0;
    TokenList: Tokens(tokens) => tokens, absent Tokens::new();
    HashList: Hashes(hashes) => hashes, absent Hashes::new();
    OptionalInt: Int(value) => value, absent None;
    OptionalMedium: Medium(value) => value, absent None;
    OptionalReason: Reason(value) => value, absent None;
}

/// The event of type `kind` from its judged fields (by `EVENT_KEYS` index).
macro_rules! event_from_judged {
    ($(
        $(#[$doc:meta])*
        $variant:ident $(($wrap:ident))? = $name:literal {
            $($(#[$fdoc:meta])* $field:ident: $kind:ident = $wire:literal, $presence:ident since $since:literal;)*
        }
    )*) => {
        fn event_from_judged(
            kind: EventType,
            judged: &mut [Option<Judged>; EVENT_KEY_COUNT],
        ) -> Event {
            match kind {
                $(EventType::$variant => {
                    $(let $field = <kind::$kind as FromJudged>::from_judged(
                        judged[const { key_index($wire) }].take(),
                    );)*
                    event_of!($variant [$($wrap)?] { $($field),* })
                })*
            }
        }
    };
}
with_event_types!(event_from_judged);

/// The token count's error, if the judged fields have tokens and a block size and the tokens
/// are neither the block size times the pages nor none (`crate::events::tokens_fit`).
fn token_count_error(judged: &[Option<Judged>]) -> Option<DecodeError> {
    let (mut tokens, mut pages, mut block_size) = (None, 1, None);
    for value in judged.iter().flatten() {
        match value {
            Judged::Tokens(list) => tokens = Some(list.len()),
            Judged::Hashes(list) => pages = list.len(),
            Judged::BlockSize(size) => block_size = Some(*size),
            _ => {}
        }
    }
    let (tokens, block_size) = (tokens?, block_size?);
    // Judged positive before the tokens (`FieldKind::ALL` order), so the cast keeps it.
    (!tokens_fit(tokens, pages, block_size as u128)).then(|| {
        let field = EVENT_KEYS[judged
            .iter()
            .position(|value| matches!(value, Some(Judged::Tokens(_))))
            .unwrap_or_default()];
        DecodeError::new(
            field,
            Reason::TokenCount {
                tokens,
                pages,
                block_size,
            },
        )
    })
}

impl EventSlots<'_> {
    /// The reference's checks of one event, in its order; fields are named relative to it.
    fn judge(mut self, scratch: &Scratch) -> Result<Event, DecodeError> {
        let kind = match self.kind {
            None => return Err(DecodeError::new(TYPE_KEY, Reason::Missing)),
            Some(TypeSlot::NotStr(kind)) => {
                return Err(DecodeError::expected(TYPE_KEY, "str", Got::Kind(kind)))
            }
            Some(TypeSlot::Unknown(name)) => {
                return Err(DecodeError::new(
                    TYPE_KEY,
                    Reason::UnknownEventType {
                        name: quoted_excerpt(&name),
                    },
                ))
            }
            Some(TypeSlot::Known(kind)) => kind,
        };
        let expected = REQUIRED[kind.index()];
        let missing = expected & !self.present;
        if missing != 0 {
            let name = EVENT_KEYS[missing.trailing_zeros() as usize];
            return Err(DecodeError::new(name, Reason::Missing));
        }
        let extra = self.present & !(expected | OPTIONAL[kind.index()]);
        let known_extra = (extra != 0).then(|| EVENT_KEYS[extra.trailing_zeros() as usize]);
        let least = match (known_extra, self.least_unknown.as_deref()) {
            (Some(known), Some(unknown)) => Some(known.min(unknown)),
            (known, unknown) => known.or(unknown),
        };
        if let Some(name) = least {
            return Err(DecodeError::new(name, Reason::UnknownField));
        }
        // Field by field in the kinds' judging order; the token count right after the hashes.
        let mut judged: [Option<Judged>; EVENT_KEY_COUNT] = std::array::from_fn(|_| None);
        for field_kind in FieldKind::ALL {
            for field in kind
                .fields()
                .iter()
                .filter(|field| field.kind == field_kind)
            {
                let index = key_index(field.name);
                judged[index] = Some(judge_field(field, self.slots[index].take(), scratch)?);
            }
            if field_kind == FieldKind::HashList {
                if let Some(error) = token_count_error(&judged) {
                    return Err(error);
                }
            }
        }
        // Only a record of 2^32 tokens or more (40 GB of JSON) gets here with a wider size.
        for (index, value) in judged.iter().enumerate() {
            if let Some(Judged::BlockSize(size)) = value {
                if u32::try_from(*size).is_err() {
                    return Err(DecodeError::new(
                        EVENT_KEYS[index],
                        Reason::BlockSizeTooLarge(*size),
                    ));
                }
            }
        }
        Ok(event_from_judged(kind, &mut judged))
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
            assert_eq!(event_key(other), None, "{other}");
        }
    }
}
