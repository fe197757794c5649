//! What the strict decoder (`super::decode`) and its fast paths (`super::canonical`,
//! `super::record`) share: the reused int-list buffers and the guess of a record's event count.

/// Reused buffers for the int lists of one event.
#[derive(Default)]
pub(super) struct Scratch {
    pub(super) hashes: Vec<i64>,
    pub(super) tokens: Vec<u32>,
}

/// Room for the events of a common record of `data`'s size: a store in the encoder's layout
/// takes 128 bytes or more of JSON (a record of smaller events regrows once or twice). A
/// `WireBatch` keeps this buffer, so guessing high (64 bytes an event) held twice the room.
pub(super) fn events_capacity(data: &[u8]) -> usize {
    (data.len() / 128).min(256)
}
