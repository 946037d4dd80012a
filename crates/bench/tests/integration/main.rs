//! The crate's integration tests, one module per file, built and linked as one binary.

mod kv_bench;
mod mixed_bench;
