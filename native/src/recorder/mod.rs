//! The primary's event recorder: the tree records what changed, the core hashes it later.
//!
//! The serving loop pays only for a record: each change of the tree (a node stored under its
//! parent with its tokens, removed, tombstoned, restored, split; everything cleared) is one op
//! in a buffer, with no hash and no Python object per page. The ops are applied in order to a
//! node table (`table`) on whichever thread needs the result first: the publisher's encoder
//! thread (`worker`: off the serving loop, never holding the GIL) or a caller of
//! `take_events()` / `state_digest()`.
//! The table hashes pages (`crate::hashing`), keeps the state digest (`crate::digest`) and makes
//! the events (`crate::events`), one `Stored` per stored node: the v2 wire's chained form, which
//! the bindings expand to one event per page for Python callers. `records` encodes a cut step
//! (or an epoch's opening) straight into v2 log records for the publisher; `worker` does that
//! for each cut step.
//!
//! The pure-Python twin is `tests/oracles/sink.py` (the tree's old recording sink),
//! held equal by differential tests.

mod error;
mod ops;
mod pipeline;
mod plan;
mod records;
mod table;
mod worker;

pub use error::{Error, Result};
pub use ops::{NodeId, Op, OpLog};
pub use pipeline::{Cut, CutId, Outcome, Recorder};
pub use plan::{bound, page_events, plan_batches, runs_of, split_events, BatchLimits, Run};
pub use records::{opening_records, step_records, Numbering, Record, Sequencer, TokenIds};
pub use table::NodeTable;
pub use worker::{Done, EncodeWorker, Job};
