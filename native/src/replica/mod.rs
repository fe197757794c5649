//! The replica block store: every source's blocks, rebuilt from decoded batches, in compact
//! arrays (no object per event or block), with residency lookups, the state digest, snapshots
//! as bytes and prefix matching across all sources in one walk of the prompt.
//!
//! The Python face is `cache.events.replica_store`; the readable reference and test oracle is
//! `cache.events.reference.replica` (the pure-Python replica tree and prefix index).

pub mod blocks;
pub mod chains;
pub mod churn;
pub mod error;
pub mod holders;
pub mod index;
pub mod ordered;
pub mod prefetch;
pub mod prefix;
pub mod replay;
pub mod snapshot;
pub mod source;
pub mod store;
pub mod swa_rule;
pub mod tiers;

pub use churn::{Churn, ChurnCounts};
pub use error::{ConsistencyError, Inconsistency, SnapshotError, TableFault};
pub use holders::HolderIndex;
pub use prefix::{match_prefix, Answer, TierHits};
pub use replay::{apply_records, LaneCursors, Run};
pub use snapshot::{from_bytes, from_bytes_keeping, to_bytes};
pub use source::{Replica, SourceMeta};
pub use store::ReplicaStore;
pub use tiers::{is_gpu, Tier, Tiers};
