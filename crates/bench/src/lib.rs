//! railstore's benchmarks (DESIGN §3.7): each prints what it measured and on what, writes
//! JSON/CSV and a Markdown summary, draws its plots and shows progress on long runs.

pub mod device;
pub mod ec;
pub mod ec_klauspost;
#[cfg(feature = "cuda")]
pub mod ec_offload;
mod ec_report;
pub mod harness;
pub mod kv;
pub mod meter;
pub mod mixed;
pub mod plot;
pub mod progress;
pub mod remote;
pub mod s3load;
pub mod trace;
pub mod volume_bench;
