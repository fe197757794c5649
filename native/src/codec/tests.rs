//! Round trips, compaction and the error paths of the codec (the Python differential tests hold
//! it equal to the reference on random input; these pin the contract without Python).

use super::*;
use crate::events::{Batch, Event, Header, RemovalReason, Stored, Tokens};

fn stored(hash: i64, parent: Option<i64>, tokens: &[u32]) -> Event {
    Event::Stored(Stored {
        hashes: vec![hash].into(),
        parent,
        tokens: tokens.to_vec().into(),
        block_size: tokens.len() as u32,
        lora_id: None,
        medium: Some("GPU".into()),
    })
}

fn header(version: u8) -> Header {
    Header {
        version,
        source: "worker-0".into(),
        epoch: "e1".into(),
        seq: 3,
        ts: 12.5,
        digest: Some("00000000000000ff".into()),
        meta_json: Some(r#"{"page_size":1,"sliding_window_size":4}"#.into()),
    }
}

fn sample(version: u8) -> Batch {
    Batch {
        header: header(version),
        events: vec![
            Event::Cleared,
            stored(7470307888890966271, None, &[1]),
            stored(-1634645291211865391, Some(7470307888890966271), &[2]),
            Event::SwaEvicted {
                hashes: vec![7470307888890966271].into(),
            },
            Event::SwaRestored {
                hashes: vec![7470307888890966271].into(),
            },
            Event::Removed {
                hashes: vec![7470307888890966271, -1634645291211865391].into(),
                medium: Some("GPU".into()),
                reason: None,
            },
        ],
    }
}

/// The batch with every chain of `Stored` joined, as version 2 decodes it.
fn joined(batch: &Batch) -> Vec<Event> {
    let mut out: Vec<Event> = Vec::new();
    for event in &batch.events {
        if let (Some(Event::Stored(last)), Event::Stored(next)) = (out.last_mut(), event) {
            if next.parent == last.hashes.last().copied()
                && next.block_size == last.block_size
                && next.lora_id == last.lora_id
                && next.medium == last.medium
                && next.withholds_tokens() == last.withholds_tokens()
            {
                last.hashes.extend_from_slice(&next.hashes);
                last.tokens.extend_from_slice(&next.tokens);
                continue;
            }
        }
        out.push(event.clone());
    }
    out
}

#[test]
fn version_1_round_trips_event_by_event() {
    let batch = sample(1);
    let bytes = encode(&batch).unwrap();
    assert_eq!(decode(&bytes, DEFAULT_MAX_RECORD_BYTES).unwrap(), batch);
}

#[test]
fn version_2_joins_chains_into_one_stored() {
    let batch = sample(2);
    let bytes = encode(&batch).unwrap();
    let text = std::str::from_utf8(&bytes).unwrap();
    assert_eq!(text.matches("BlockStored").count(), 1, "{text}");
    assert!(text.contains(
        r#"{"type":"BlockStored","block_hashes":[7470307888890966271,-1634645291211865391],"parent_block_hash":null,"token_ids":[1,2],"block_size":1,"lora_id":null,"medium":"GPU"}"#
    ));
    let decoded = decode(&bytes, DEFAULT_MAX_RECORD_BYTES).unwrap();
    assert_eq!(decoded.header, batch.header);
    assert_eq!(decoded.events, joined(&batch));
    assert!(!decoded.starts_epoch(), "seq 3 does not start an epoch");
}

#[test]
fn chains_break_on_parent_size_lora_or_medium() {
    let mut other_medium = stored(3, Some(2), &[3]);
    if let Event::Stored(s) = &mut other_medium {
        s.medium = None;
    }
    let batch = Batch {
        header: header(2),
        events: vec![
            stored(1, None, &[1]),
            stored(2, Some(1), &[2]),
            other_medium,
            stored(4, Some(9), &[4]),
            stored(5, Some(4), &[5, 6]),
        ],
    };
    let bytes = encode(&batch).unwrap();
    let decoded = decode(&bytes, DEFAULT_MAX_RECORD_BYTES).unwrap();
    assert_eq!(decoded.events.len(), 4);
    assert_eq!(decoded.events, joined(&batch));
}

#[test]
fn a_page_1_chain_costs_under_32_bytes_a_block() {
    let mut events = Vec::new();
    let mut parent = None;
    for page in 0..1000i64 {
        let hash = crate::digest::mix64(page as u64) as i64;
        events.push(stored(hash, parent, &[(hash as u64 % 152_000) as u32]));
        parent = Some(hash);
    }
    let batch = Batch {
        header: header(2),
        events,
    };
    let bytes = encode(&batch).unwrap();
    assert!(bytes.len() / 1000 <= 32, "{} bytes", bytes.len());
}

#[test]
fn invalid_batches_are_refused_by_the_encoder() {
    let mut batch = sample(2);
    batch.header.ts = f64::NAN;
    assert_eq!(encode(&batch).unwrap_err().field, "ts");
    let mut batch = sample(2);
    batch.events.push(Event::SwaEvicted {
        hashes: vec![].into(),
    });
    assert_eq!(encode(&batch).unwrap_err().field, "events[6].block_hashes");
    let mut batch = sample(2);
    batch.events.push(Event::Stored(Stored {
        hashes: vec![1].into(),
        parent: None,
        tokens: vec![1, 2, 3].into(),
        block_size: 2,
        lora_id: None,
        medium: None,
    }));
    assert_eq!(encode(&batch).unwrap_err().field, "events[6].token_ids");
    let mut batch = sample(2);
    batch.header.meta_json = Some(r#"{"page_size":0,"sliding_window_size":4}"#.into());
    assert_eq!(encode(&batch).unwrap_err().field, "meta.page_size");
}

/// A one-page store of block size 2 whose writer withheld the token ids.
fn bare(hash: i64, parent: Option<i64>) -> Event {
    Event::Stored(Stored {
        hashes: vec![hash].into(),
        parent,
        tokens: Tokens::new(),
        block_size: 2,
        lora_id: None,
        medium: Some("GPU".into()),
    })
}

#[test]
fn a_store_without_token_ids_round_trips_and_joins_only_stores_without() {
    let batch = Batch {
        header: header(3),
        events: vec![
            bare(1, None),
            bare(2, Some(1)),
            stored(3, Some(2), &[5, 6]),
            bare(4, Some(3)),
        ],
    };
    let bytes = encode(&batch).unwrap();
    let text = std::str::from_utf8(&bytes).unwrap();
    assert!(
        text.contains(
            r#""block_hashes":[1,2],"parent_block_hash":null,"token_ids":[],"block_size":2"#
        ),
        "{text}"
    );
    let decoded = decode(&bytes, DEFAULT_MAX_RECORD_BYTES).unwrap();
    assert_eq!(decoded.events, joined(&batch));
    assert_eq!(decoded.events.len(), 3);
    let Event::Stored(first) = &decoded.events[0] else {
        panic!("{:?}", decoded.events[0]);
    };
    assert!(first.withholds_tokens() && first.tokens_fit());
    assert_eq!(
        first.page_tokens().collect::<Vec<_>>(),
        vec![&[] as &[u32], &[]]
    );
    // the general (slot) path reads it alike
    let spaced = text.replace(r#""token_ids":[]"#, r#""token_ids": [ ]"#);
    assert_eq!(
        decode(spaced.as_bytes(), DEFAULT_MAX_RECORD_BYTES).unwrap(),
        decoded
    );
}

#[test]
fn a_partial_token_list_is_refused_both_ways() {
    let mut batch = sample(3);
    batch.events.push(Event::Stored(Stored {
        hashes: vec![1, 2].into(),
        parent: None,
        tokens: vec![1, 2].into(),
        block_size: 2,
        lora_id: None,
        medium: None,
    }));
    let error = encode(&batch).unwrap_err();
    assert_eq!(
        (error.field.as_str(), error.reason.to_string()),
        (
            "events[6].token_ids",
            "2 tokens for 2 block(s) of size 2".to_string()
        )
    );
    let text = GOOD.replace(
        r#""token_ids":[2],"block_size":1"#,
        r#""token_ids":[2],"block_size":2"#,
    );
    let error = error_of(&text);
    assert_eq!(error.field, "events[2].token_ids");
    let text = GOOD.replace(
        r#""token_ids":[2],"block_size":1"#,
        r#""token_ids":[],"block_size":2"#,
    );
    assert!(decode(text.as_bytes(), DEFAULT_MAX_RECORD_BYTES).is_ok());
}

const GOOD: &str = r#"{"v":1,"source":"worker-0","epoch":"e1","seq":3,"ts":12.5,"events":[{"type":"AllBlocksCleared"},{"type":"BlockStored","block_hashes":[7470307888890966271],"parent_block_hash":null,"token_ids":[1],"block_size":1,"lora_id":null,"medium":"GPU"},{"type":"BlockStored","block_hashes":[-1634645291211865391],"parent_block_hash":7470307888890966271,"token_ids":[2],"block_size":1,"lora_id":null,"medium":"GPU"},{"type":"BlockSWAEvicted","block_hashes":[7470307888890966271]},{"type":"BlockSWARestored","block_hashes":[7470307888890966271]},{"type":"BlockRemoved","block_hashes":[7470307888890966271,-1634645291211865391],"medium":"GPU"}],"digest":"00000000000000ff","meta":{"page_size":1,"sliding_window_size":4}}"#;

fn error_of(text: &str) -> Error {
    decode(text.as_bytes(), DEFAULT_MAX_RECORD_BYTES).unwrap_err()
}

#[test]
fn the_reference_record_decodes() {
    assert_eq!(decode(GOOD.as_bytes(), 1 << 20).unwrap(), sample(1));
    let (_, meta) = decode_with_meta(GOOD.as_bytes(), 1 << 20).unwrap();
    assert_eq!(meta.unwrap().page_size, 1);
}

#[test]
fn every_wrong_field_is_named() {
    let cases: &[(&str, &str, &str)] = &[
        (r#""v":1"#, r#""v":4"#, "v"),
        (r#""v":1"#, r#""v":"1""#, "v"),
        (r#""source":"worker-0""#, r#""source":5"#, "source"),
        (r#""epoch":"e1""#, r#""epoch":null"#, "epoch"),
        (r#""seq":3"#, r#""seq":-1"#, "seq"),
        (r#""seq":3"#, r#""seq":1.5"#, "seq"),
        (r#""seq":3"#, r#""seq":true"#, "seq"),
        (r#""ts":12.5"#, r#""ts":"now""#, "ts"),
        (r#""digest":"00000000000000ff""#, r#""digest":5"#, "digest"),
        (
            r#""meta":{"page_size":1,"sliding_window_size":4}"#,
            r#""meta":[]"#,
            "meta",
        ),
        (
            r#"{"type":"AllBlocksCleared"}"#,
            r#""AllBlocksCleared""#,
            "events[0]",
        ),
        (
            r#""type":"BlockStored","block_hashes":[7470"#,
            r#""type":"BlockMoved","block_hashes":[7470"#,
            "events[1].type",
        ),
        (
            r#""block_hashes":[7470307888890966271],"parent_block_hash":null"#,
            r#""block_hashes":5,"parent_block_hash":null"#,
            "events[1].block_hashes",
        ),
        (
            r#""block_hashes":[7470307888890966271],"parent_block_hash":null"#,
            r#""block_hashes":[],"parent_block_hash":null"#,
            "events[1].block_hashes",
        ),
        (
            r#""block_hashes":[7470307888890966271],"parent_block_hash":null"#,
            r#""block_hashes":["x"],"parent_block_hash":null"#,
            "events[1].block_hashes[0]",
        ),
        (
            r#""parent_block_hash":null,"token_ids":[1]"#,
            r#""parent_block_hash":"x","token_ids":[1]"#,
            "events[1].parent_block_hash",
        ),
        (
            r#""token_ids":[1]"#,
            r#""token_ids":[-1]"#,
            "events[1].token_ids[0]",
        ),
        (
            r#""token_ids":[1]"#,
            r#""token_ids":[4294967296]"#,
            "events[1].token_ids[0]",
        ),
        (
            r#""token_ids":[1]"#,
            r#""token_ids":[1,2]"#,
            "events[1].token_ids",
        ),
        (
            r#""token_ids":[1],"block_size":1"#,
            r#""token_ids":[1],"block_size":0"#,
            "events[1].block_size",
        ),
        (
            r#""token_ids":[1],"block_size":1"#,
            r#""token_ids":[1],"block_size":"1""#,
            "events[1].block_size",
        ),
        (
            r#""token_ids":[1],"block_size":1,"lora_id":null"#,
            r#""token_ids":[1],"block_size":1,"lora_id":"a""#,
            "events[1].lora_id",
        ),
        (
            r#""lora_id":null,"medium":"GPU"},{"type":"BlockStored","block_hashes":[-16"#,
            r#""lora_id":null,"medium":3},{"type":"BlockStored","block_hashes":[-16"#,
            "events[1].medium",
        ),
        (
            r#""BlockSWAEvicted","block_hashes":[7470307888890966271]"#,
            r#""BlockSWAEvicted","block_hashes":[1.0]"#,
            "events[3].block_hashes[0]",
        ),
        (
            r#""BlockSWARestored","block_hashes":[7470307888890966271]"#,
            r#""BlockSWARestored","block_hashes":null"#,
            "events[4].block_hashes",
        ),
        (
            r#"-1634645291211865391],"medium":"GPU"}"#,
            r#"-1634645291211865391],"medium":[]}"#,
            "events[5].medium",
        ),
        (
            r#""meta":{"page_size":1,"#,
            r#""meta":{"page_size":true,"#,
            "meta.page_size",
        ),
    ];
    for (good, bad, field) in cases {
        assert!(GOOD.contains(good), "{good}");
        let record = GOOD.replacen(good, bad, 1);
        assert_eq!(error_of(&record).field, *field, "{bad}");
    }
}

#[test]
fn reasons_match_the_reference() {
    let error = error_of(&GOOD.replacen("7470307888890966271", "17470307888890966271", 1));
    assert_eq!(error.field, "events[1].block_hashes[0]");
    assert_eq!(
        error.reason.to_string(),
        "expected int in [-9223372036854775808, 9223372036854775807], got 17470307888890966271"
    );
    let error = error_of(&GOOD.replacen(r#""BlockStored""#, r#""BlockMoved""#, 1));
    assert_eq!(
        error.reason.to_string(),
        r#"unknown event type "BlockMoved""#
    );
    let error = error_of(&GOOD.replacen(r#""token_ids":[1]"#, r#""token_ids":[1,2]"#, 1));
    assert_eq!(
        error.reason.to_string(),
        "2 tokens for 1 block(s) of size 1"
    );
}

#[test]
fn missing_and_unknown_fields_are_named_in_sorted_order() {
    let extra = GOOD.replacen(r#""v":1,"#, r#""v":1,"zz":1,"surprise":2,"#, 1);
    assert_eq!(
        error_of(&extra),
        Error::new("surprise", Reason::UnknownField)
    );
    let missing = GOOD.replacen(r#","digest":"00000000000000ff""#, "", 1);
    assert_eq!(error_of(&missing), Error::new("digest", Reason::Missing));
    let missing_first = extra.replacen(r#","digest":"00000000000000ff""#, "", 1);
    assert_eq!(
        error_of(&missing_first).field,
        "digest",
        "missing before unknown"
    );
    let event_extra = GOOD.replacen(
        r#"{"type":"AllBlocksCleared"}"#,
        r#"{"type":"AllBlocksCleared","medium":null,"aa":1}"#,
        1,
    );
    assert_eq!(
        error_of(&event_extra),
        Error::new("events[0].aa", Reason::UnknownField)
    );
    let event_known_extra = GOOD.replacen(
        r#"{"type":"AllBlocksCleared"}"#,
        r#"{"type":"AllBlocksCleared","medium":null,"zz":1}"#,
        1,
    );
    assert_eq!(
        error_of(&event_known_extra),
        Error::new("events[0].medium", Reason::UnknownField)
    );
    let no_type = GOOD.replacen(r#"{"type":"AllBlocksCleared"}"#, "{}", 1);
    assert_eq!(
        error_of(&no_type),
        Error::new("events[0].type", Reason::Missing)
    );
}

#[test]
fn the_last_of_duplicate_keys_wins() {
    let record = GOOD.replacen(r#""seq":3"#, r#""seq":-1,"seq":3"#, 1);
    assert_eq!(decode(record.as_bytes(), 1 << 20).unwrap(), sample(1));
    let record = GOOD.replacen(r#""events":["#, r#""events":5,"events":["#, 1);
    assert_eq!(decode(record.as_bytes(), 1 << 20).unwrap(), sample(1));
}

#[test]
fn a_syntax_error_wins_over_an_earlier_field_error() {
    let record = GOOD
        .replacen(r#""seq":3"#, r#""seq":-1"#, 1)
        .replacen("}}", "}", 1);
    assert!(matches!(error_of(&record).reason, Reason::NotJson(_)));
    let record = GOOD.replacen(r#""seq":3"#, r#""seq":-1"#, 1) + "x";
    assert!(matches!(error_of(&record).reason, Reason::NotJson(_)));
}

#[test]
fn garbage_and_oversize_are_refused() {
    for payload in [&b""[..], b"not json", b"[1,2]", b"\"batch\"", b"\xff\xfe"] {
        let error = decode(payload, 1 << 20).unwrap_err();
        assert_eq!(error.field, "");
    }
    assert_eq!(
        decode(b"[1,2]", 1 << 20).unwrap_err().reason.to_string(),
        "expected an object, got list"
    );
    let error = decode(GOOD.as_bytes(), 100).unwrap_err();
    assert_eq!(
        error.reason.to_string(),
        format!("record of {} bytes exceeds the 100 limit", GOOD.len())
    );
}

#[test]
fn a_single_event_decodes_under_its_path() {
    let event = decode_event(
        br#"{"type":"BlockSWAEvicted","block_hashes":[1,2]}"#,
        "event",
    )
    .unwrap();
    assert_eq!(
        event,
        Event::SwaEvicted {
            hashes: vec![1, 2].into()
        }
    );
    let error = decode_event(
        br#"{"type":"BlockSWAEvicted","block_hashes":[1,"x"]}"#,
        "event",
    )
    .unwrap_err();
    assert_eq!(error.field, "event.block_hashes[1]");
    assert_eq!(decode_event(b"[]", "ev").unwrap_err().field, "ev");
}

#[test]
fn the_record_fast_path_agrees_with_the_slots_or_gives_up() {
    use super::decode::decode_slots;
    use super::record::canonical_batch;
    let plain = |version: u8, digest: Option<&str>| {
        let mut batch = sample(version);
        batch.header.meta_json = None;
        batch.header.digest = digest.map(str::to_string);
        String::from_utf8(encode(&batch).unwrap()).unwrap()
    };
    let mut taken = vec![
        plain(1, None),
        plain(2, None),
        plain(2, Some("00000000000000ff")),
    ];
    taken.push(plain(2, None).replace(r#""ts":12.5"#, r#""ts":-12"#));
    taken.push(plain(2, None).replace(r#""seq":3"#, r#""seq":-0"#));
    taken.push(plain(2, None) + " \n");
    // an event outside the encoder's layout goes through the slots inside the fast record path
    taken.push(plain(2, None).replace(
        r#"{"type":"AllBlocksCleared"}"#,
        r#"{ "type" : "AllBlocksCleared" }"#,
    ));
    for text in &taken {
        let fast = canonical_batch(text.as_bytes()).unwrap_or_else(|| panic!("not taken: {text}"));
        assert_eq!(decode_slots(text.as_bytes()), Ok((fast, None)), "{text}");
    }
    let base = plain(2, None);
    let refused = [
        String::from_utf8(encode(&sample(2)).unwrap()).unwrap(), // has a meta
        format!(" {base}"),
        base.replace(r#""v":2"#, r#""v":4"#),
        base.replace(r#""v":2"#, r#""v":2.0"#),
        base.replace(r#""seq":3"#, r#""seq":-3"#),
        base.replace(r#""seq":3"#, r#""seq":18446744073709551616"#),
        base.replace(r#""ts":12.5"#, r#""ts":1e400"#),
        base.replace(r#""ts":12.5"#, r#""ts":"12.5""#),
        base.replace(r#""source":"worker-0""#, r#""source":"w\u00e9""#),
        base.replace(r#""epoch":"e1""#, r#""epoch":1"#),
        base.replace(r#""digest":null"#, r#""digest":1"#),
        base.replace(r#""meta":null}"#, r#""meta":null,"x":1}"#),
        base.replace(r#""meta":null}"#, r#""meta":null,"v":2}"#),
        base.replace(
            r#""block_hashes":[7470307888890966271]"#,
            r#""block_hashes":[]"#,
        ),
        base.replace(
            r#"{"type":"AllBlocksCleared"}"#,
            r#"{"type":"AllBlocksCleared""#,
        ),
        base.clone() + "x",
        base[..base.len() - 1].to_string(),
    ];
    for text in &refused {
        assert!(canonical_batch(text.as_bytes()).is_none(), "taken: {text}");
    }
}

#[test]
fn a_removal_reason_round_trips_in_version_3_only() {
    for reason in RemovalReason::ALL {
        let mut batch = sample(3);
        batch.events.push(Event::Removed {
            hashes: vec![5].into(),
            medium: Some("CPU".into()),
            reason: Some(reason),
        });
        let text = encode(&batch).unwrap();
        assert!(std::str::from_utf8(&text)
            .unwrap()
            .contains(&format!(r#""medium":"CPU","reason":"{}"}}"#, reason.name())));
        let decoded = decode(&text, DEFAULT_MAX_RECORD_BYTES).unwrap();
        assert_eq!(decoded.events, joined(&batch));
        let general = decode::decode_slots(&text).unwrap().0;
        assert_eq!(general.events, joined(&batch), "the general path agrees");
        for version in [1, 2] {
            batch.header.version = version;
            let error = encode(&batch).unwrap_err();
            assert_eq!(
                error.field,
                format!("events[{}].reason", batch.events.len() - 1)
            );
            let older = std::str::from_utf8(&text).unwrap().replacen(
                r#""v":3"#,
                &format!(r#""v":{version}"#),
                1,
            );
            let error = error_of(&older);
            let on_the_wire = joined(&batch).len() - 1;
            assert_eq!(error.field, format!("events[{on_the_wire}].reason"));
            assert!(
                error.reason.to_string().contains("needs wire version 3"),
                "{error:?}"
            );
            batch.header.version = 3;
        }
    }
}

#[test]
fn a_bad_removal_reason_is_named() {
    let removal = r#"{"type":"BlockRemoved","block_hashes":[5],"medium":"GPU"}"#;
    let with = |reason: &str| {
        let event = removal.replace("}", &format!(r#","reason":{reason}}}"#));
        GOOD.replace(r#""v":1"#, r#""v":3"#)
            .replace(r#"{"type":"AllBlocksCleared"}"#, &event)
    };
    let error = error_of(&with(r#""lost""#));
    assert_eq!(error.field, "events[0].reason");
    assert!(error.reason.to_string().contains("\"lost\""), "{error:?}");
    assert_eq!(error_of(&with("1")).field, "events[0].reason");
    let null = decode(with("null").as_bytes(), DEFAULT_MAX_RECORD_BYTES).unwrap();
    assert!(matches!(
        null.events[0],
        Event::Removed { reason: None, .. }
    ));
    let stored_with_reason = GOOD.replace(
        r#""lora_id":null,"medium":"GPU"},{"type":"BlockStored""#,
        r#""lora_id":null,"medium":"GPU","reason":null},{"type":"BlockStored""#,
    );
    assert_eq!(
        error_of(&stored_with_reason),
        Error::new("events[1].reason", Reason::UnknownField)
    );
}

/// A value of each field kind, for one event of every declared type.
trait SampleField: crate::events::FieldKind {
    fn sample() -> Self::Value;
}

mod samples {
    use super::SampleField;
    use crate::event_types::{kind, with_event_types};
    use crate::events::{event_of, Event, Hashes, Medium, RemovalReason, Tokens};

    macro_rules! sample_fields {
        ($($kind:ident => $value:expr;)*) => {$(
            impl SampleField for kind::$kind {
                fn sample() -> Self::Value {
                    $value
                }
            }
        )*};
    }

    sample_fields! {
        BlockSize => 2;
        TokenList => Tokens::from_slice(&[1, 2, 4294967295, 0]);
        HashList => Hashes::from_slice(&[i64::MIN, i64::MAX]);
        OptionalInt => Some(7);
        OptionalMedium => Some(Medium::CPU);
        OptionalReason => Some(RemovalReason::Demoted);
    }

    macro_rules! every_type {
        ($(
            $(#[$doc:meta])*
            $variant:ident $(($wrap:ident))? = $name:literal {
                $($(#[$fdoc:meta])* $field:ident: $kind:ident = $wire:literal, $presence:ident since $since:literal;)*
            }
        )*) => {
            /// One event of every type in the table, each field holding its kind's sample.
            pub(super) fn every_type() -> Vec<Event> {
                vec![$({
                    $(let $field = <kind::$kind as SampleField>::sample();)*
                    event_of!($variant [$($wrap)?] { $($field),* })
                }),*]
            }
        };
    }
    with_event_types!(every_type);
}

#[test]
fn every_declared_type_round_trips_through_both_paths() {
    use super::canonical::canonical_event;
    use super::decode_parts::Scratch;
    use super::scan::Scanner;
    use crate::event_types::EventType;

    let events = samples::every_type();
    let types: Vec<EventType> = events.iter().map(Event::event_type).collect();
    assert_eq!(types, EventType::ALL.to_vec());
    let batch = Batch {
        header: header(WIRE_VERSION),
        events,
    };
    let bytes = encode(&batch).unwrap();
    assert_eq!(decode(&bytes, DEFAULT_MAX_RECORD_BYTES).unwrap(), batch);
    for event in &batch.events {
        let one = Batch {
            header: header(1),
            events: vec![event.clone()],
        };
        let one = match event.said_after(1) {
            Some(_) => Batch {
                header: header(WIRE_VERSION),
                ..one
            },
            None => one,
        };
        let record = encode(&one).unwrap();
        let text = String::from_utf8(record).unwrap();
        let start = text.find("{\"type\"").unwrap();
        let end = text.find("],\"digest\"").unwrap();
        let object = &text[start..end];
        // The fast path takes what the encoder writes, and reads what the slots read.
        let mut scanner = Scanner::new(object.as_bytes());
        let fast = canonical_event(&mut scanner, &mut Scratch::default());
        assert_eq!(fast.as_ref(), Some(event), "{object}");
        let spaced = object.replacen("\"type\":", "\"type\": ", 1);
        assert_eq!(
            &decode_event(spaced.as_bytes(), "e").unwrap(),
            event,
            "{spaced}"
        );
        // Its name is the wire's `type`.
        let name = event.event_type().name();
        assert!(
            object.starts_with(&format!("{{\"type\":\"{name}\"")),
            "{object}"
        );
    }
}
