//! The typed `meta` of an epoch's first batch, validated while the record is decoded: the one
//! check of a meta. Python's `BatchMeta` is made from it (`crate::py::meta`), for decoded records
//! and for metas made in Python alike; its pure-Python twin is `tests/oracles/meta.py`.
//!
//! `page_size` and `sliding_window_size` are required positive ints; `digest_alg`, `device` and
//! `producer` are strings or null; `swa_events` a bool (default true); `digest_every_batches` a
//! positive int or null; `token_ids` a bool (default true; false: the source withholds every
//! store's token ids, docs/security.md). Other keys are kept as they are in the record's text
//! (`Header::meta_json`) and not judged here.

use super::error::{Error as DecodeError, Reason};
use super::scan::{Got, Scanner, SyntaxError, Value};

/// What a consumer needs to interpret a source's batches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Meta {
    /// Tokens per page (a `Stored`'s `block_size`).
    pub page_size: u64,
    /// Tokens of the attention window (the SWA-usable-prefix rule).
    pub sliding_window_size: u64,
    /// The state digest's algorithm (`crate::digest::ALGORITHM`); None: not named.
    pub digest_alg: Option<String>,
    /// Whether the producer reports SWA evictions and restores (false: engine streams).
    pub swa_events: bool,
    pub device: Option<String>,
    pub producer: Option<String>,
    pub digest_every_batches: Option<u64>,
    /// Whether the source's stores carry token ids (false: withheld by the writer, a token-free
    /// source).
    pub token_ids: bool,
    /// Whether the object has keys besides the typed ones (kept, unjudged, in its text).
    pub has_extra_keys: bool,
}

/// The typed keys, in the order they are checked.
const FIELDS: [&str; 8] = [
    "page_size",
    "sliding_window_size",
    "digest_alg",
    "swa_events",
    "device",
    "producer",
    "digest_every_batches",
    "token_ids",
];

/// Scan the meta object at the cursor (on `{`): the typed meta, or the first field that is
/// wrong. The last of duplicate keys wins, as in orjson.
pub(super) fn scan_meta<'a>(
    scanner: &mut Scanner<'a>,
) -> Result<Result<Meta, DecodeError>, SyntaxError> {
    scanner.open_object()?;
    let mut slots: Slots<'a> = Default::default();
    let mut first = true;
    let mut has_extra_keys = false;
    while let Some(key) = scanner.next_key(&mut first)? {
        match FIELDS.iter().position(|name| *name == key) {
            Some(index) => slots[index] = Some(scanner.value()?),
            None => {
                scanner.skip_value()?;
                has_extra_keys = true;
            }
        }
    }
    Ok(judge(slots).map(|meta| Meta {
        has_extra_keys,
        ..meta
    }))
}

/// The typed keys' values as found, by `FIELDS` index.
type Slots<'a> = [Option<Value<'a>>; FIELDS.len()];

fn error(index: usize, reason: Reason) -> DecodeError {
    DecodeError::new(format!("meta.{}", FIELDS[index]), reason)
}

fn positive(value: &Value<'_>) -> Option<u64> {
    match value {
        Value::Int(number) if *number > 0 => u64::try_from(*number).ok(),
        _ => None,
    }
}

fn required_positive(slots: &Slots<'_>, index: usize) -> Result<u64, DecodeError> {
    match &slots[index] {
        None => Err(error(index, Reason::Missing)),
        Some(value) => positive(value).ok_or_else(|| {
            error(
                index,
                Reason::Expected {
                    expected: "a positive int",
                    got: value.got(),
                },
            )
        }),
    }
}

fn optional_positive(slots: &Slots<'_>, index: usize) -> Result<Option<u64>, DecodeError> {
    match &slots[index] {
        None | Some(Value::Null) => Ok(None),
        Some(value) => positive(value).map(Some).ok_or_else(|| {
            error(
                index,
                Reason::Expected {
                    expected: "a positive int or null",
                    got: value.got(),
                },
            )
        }),
    }
}

fn optional_string(slots: &mut Slots<'_>, index: usize) -> Result<Option<String>, DecodeError> {
    match slots[index].take() {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Str(text)) => Ok(Some(text.into_owned())),
        Some(other) => Err(error(
            index,
            Reason::Expected {
                expected: "str or null",
                got: Got::Kind(other.kind()),
            },
        )),
    }
}

/// A bool that is true when absent (null is wrong).
fn flag(slots: &Slots<'_>, index: usize) -> Result<bool, DecodeError> {
    match &slots[index] {
        None => Ok(true),
        Some(Value::Bool(flag)) => Ok(*flag),
        Some(other) => Err(error(
            index,
            Reason::Expected {
                expected: "bool",
                got: Got::Kind(other.kind()),
            },
        )),
    }
}

fn judge(mut slots: Slots<'_>) -> Result<Meta, DecodeError> {
    let page_size = required_positive(&slots, 0)?;
    let sliding_window_size = required_positive(&slots, 1)?;
    let digest_alg = optional_string(&mut slots, 2)?;
    let swa_events = flag(&slots, 3)?;
    let device = optional_string(&mut slots, 4)?;
    let producer = optional_string(&mut slots, 5)?;
    let digest_every_batches = optional_positive(&slots, 6)?;
    let token_ids = flag(&slots, 7)?;
    Ok(Meta {
        page_size,
        sliding_window_size,
        digest_alg,
        swa_events,
        device,
        producer,
        digest_every_batches,
        token_ids,
        has_extra_keys: false,
    })
}

impl Meta {
    /// Validate a meta object given as JSON text (e.g. `Header::meta_json`).
    pub fn from_json(text: &str) -> Result<Meta, DecodeError> {
        let mut scanner = Scanner::new(text.as_bytes());
        let not_json = |error: SyntaxError| DecodeError::new("meta", Reason::NotJson(error));
        if scanner.peek_value().map_err(not_json)? != b'{' {
            let kind = scanner.skip_value().map_err(not_json)?;
            return Err(DecodeError::expected(
                "meta",
                "an object or null",
                Got::Kind(kind),
            ));
        }
        let meta = scan_meta(&mut scanner).map_err(not_json)?;
        scanner.finish().map_err(not_json)?;
        meta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn typed_fields_are_read_and_others_ignored() {
        let meta = Meta::from_json(
            r#"{"page_size":16,"sliding_window_size":4,"digest_alg":"mix64-v1","x":[1,{"y":2}],
                "swa_events":false,"device":"cpu","producer":null,"digest_every_batches":8,
                "token_ids":false}"#,
        )
        .unwrap();
        assert_eq!(meta.page_size, 16);
        assert_eq!(meta.sliding_window_size, 4);
        assert_eq!(meta.digest_alg.as_deref(), Some("mix64-v1"));
        assert!(!meta.swa_events);
        assert_eq!(meta.device.as_deref(), Some("cpu"));
        assert_eq!(meta.producer, None);
        assert_eq!(meta.digest_every_batches, Some(8));
        assert!(!meta.token_ids);
        assert!(meta.has_extra_keys);
        let typed_only = Meta::from_json(r#"{"page_size":1,"sliding_window_size":2}"#).unwrap();
        assert!(!typed_only.has_extra_keys);
        assert!(typed_only.swa_events && typed_only.token_ids);
    }

    #[test]
    fn wrong_fields_are_named_in_check_order() {
        let cases = [
            (r#"{"sliding_window_size":4}"#, "meta.page_size", "missing"),
            (
                r#"{"page_size":0,"sliding_window_size":true}"#,
                "meta.page_size",
                "expected a positive int, got 0",
            ),
            (
                r#"{"page_size":1,"sliding_window_size":true}"#,
                "meta.sliding_window_size",
                "expected a positive int, got bool",
            ),
            (
                r#"{"page_size":1,"sliding_window_size":2,"digest_alg":3}"#,
                "meta.digest_alg",
                "expected str or null, got int",
            ),
            (
                r#"{"page_size":1,"sliding_window_size":2,"swa_events":null}"#,
                "meta.swa_events",
                "expected bool, got null",
            ),
            (
                r#"{"page_size":1,"sliding_window_size":2,"digest_every_batches":-1}"#,
                "meta.digest_every_batches",
                "expected a positive int or null, got -1",
            ),
            (
                r#"{"page_size":1,"sliding_window_size":2,"token_ids":[]}"#,
                "meta.token_ids",
                "expected bool, got list",
            ),
            (
                r#"{"page_size":1,"page_size":2.0,"sliding_window_size":2}"#,
                "meta.page_size",
                "expected a positive int, got float",
            ),
        ];
        for (text, field, reason) in cases {
            let error = Meta::from_json(text).unwrap_err();
            assert_eq!(
                (error.field.as_str(), error.reason.to_string()),
                (field, reason.to_string()),
                "{text}"
            );
        }
    }
}
