//! The event model of the native core: what a batch holds once decoded, and what the encoder
//! writes. It mirrors `cache.events.types` (docs/design.md §4).
//!
//! A `Stored` may hold several pages (the v2 wire's chain compaction, or vLLM's multi-block
//! form): `hashes[i]` is page i, its parent is `hashes[i - 1]` (the first page's is `parent`),
//! and its tokens are `tokens[i * block_size..(i + 1) * block_size]`.

use std::borrow::Cow;
use std::ops::Deref;

use smallvec::SmallVec;

use crate::event_types::{kind, with_event_types, FieldKind};

/// The block hashes of an event: up to two inline (most events name one or two pages), more on
/// the heap. The same 24 bytes as a `Vec`.
pub type Hashes = SmallVec<[i64; 2]>;

/// The token ids of a `Stored`: up to four inline (one or two pages of size 1 or 2), more on
/// the heap. The same 24 bytes as a `Vec`.
pub type Tokens = SmallVec<[u32; 4]>;

/// Where a block's KV lives (`"GPU"`, `"CPU"`, ...), as the wire names it. The usual names are
/// static strings, so decoding one costs no allocation (a batch holds one per store); any other
/// text is kept as it came.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Medium(Cow<'static, str>);

impl Medium {
    /// `"GPU"`, the medium of nearly every event.
    pub const GPU: Medium = Medium(Cow::Borrowed("GPU"));
    /// `"CPU"`.
    pub const CPU: Medium = Medium(Cow::Borrowed("CPU"));

    /// The medium named `text` (the usual names without allocating).
    pub fn new(text: &str) -> Self {
        Self::usual(text).unwrap_or_else(|| Medium(Cow::Owned(text.to_owned())))
    }

    /// The static medium named `text`, if it is one of the usual names.
    fn usual(text: &str) -> Option<Self> {
        match text {
            "GPU" => Some(Self::GPU),
            "CPU" => Some(Self::CPU),
            _ => None,
        }
    }
}

impl Deref for Medium {
    type Target = str;

    fn deref(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Medium {
    fn from(text: &str) -> Self {
        Medium::new(text)
    }
}

impl From<String> for Medium {
    fn from(text: String) -> Self {
        Self::usual(&text).unwrap_or(Medium(Cow::Owned(text)))
    }
}

/// Why a block left a tier (`BlockRemoved.reason`, wire version 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemovalReason {
    /// The block left the cache.
    Evicted,
    /// The block left this tier and is still held on a lower one.
    Demoted,
}

impl RemovalReason {
    /// Every reason, in the order the wire names them.
    pub const ALL: [RemovalReason; 2] = [RemovalReason::Evicted, RemovalReason::Demoted];

    /// The reason's name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            RemovalReason::Evicted => "evicted",
            RemovalReason::Demoted => "demoted",
        }
    }

    /// The reason named `text`, if any.
    pub fn from_name(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|reason| reason.name() == text)
    }
}

/// The `Event` enum (and the struct a variant wraps) of the table of event types.
macro_rules! declare_events {
    (@enum [$($variants:tt)*]) => {
        /// One state change of a source's tree (its types: `crate::event_types`).
        #[derive(Clone, Debug, PartialEq)]
        pub enum Event {
            $($variants)*
        }
    };
    (@enum [$($variants:tt)*]
        $(#[$doc:meta])* $variant:ident ($wrap:ident) = $name:literal {
            $($(#[$fdoc:meta])* $field:ident: $kind:ident = $wire:literal, $presence:ident since $since:literal;)*
        }
        $($rest:tt)*
    ) => {
        $(#[$doc])*
        #[derive(Clone, Debug, PartialEq)]
        pub struct $wrap {
            $($(#[$fdoc])* pub $field: <kind::$kind as FieldKind>::Value,)*
        }
        declare_events!(@enum [$($variants)* $(#[$doc])* $variant($wrap),] $($rest)*);
    };
    (@enum [$($variants:tt)*] $(#[$doc:meta])* $variant:ident = $name:literal {} $($rest:tt)*) => {
        declare_events!(@enum [$($variants)* $(#[$doc])* $variant,] $($rest)*);
    };
    (@enum [$($variants:tt)*]
        $(#[$doc:meta])* $variant:ident = $name:literal {
            $($(#[$fdoc:meta])* $field:ident: $kind:ident = $wire:literal, $presence:ident since $since:literal;)*
        }
        $($rest:tt)*
    ) => {
        declare_events!(@enum [$($variants)*
            $(#[$doc])* $variant {
                $($(#[$fdoc])* $field: <kind::$kind as FieldKind>::Value,)*
            },
        ] $($rest)*);
    };
    ($($rows:tt)*) => {
        declare_events!(@enum [] $($rows)*);
    };
}
with_event_types!(declare_events);

/// The envelope of one batch (one log record).
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    /// The wire version the batch was read from or will be written as (1, 2 or 3).
    pub version: u8,
    pub source: String,
    pub epoch: String,
    pub seq: u64,
    pub ts: f64,
    pub digest: Option<String>,
    /// The `meta` object as its JSON text (present on the first batch of an epoch).
    pub meta_json: Option<String>,
}

/// One decoded batch.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    pub header: Header,
    pub events: Vec<Event>,
}

impl Batch {
    /// Whether this batch can open an epoch: seq 0 and `AllBlocksCleared` first.
    pub fn starts_epoch(&self) -> bool {
        self.header.seq == 0 && matches!(self.events.first(), Some(Event::Cleared))
    }
}
