//! The crate's integration tests, one module per file, built and linked as one binary.

mod cluster_cli;
mod common;
mod console;
mod ec_bench_cli;
mod grow_cli;
mod mixed_serve_cli;
mod mttdl_cli;
mod offline_after_crash;
mod remote_bench_cli;
mod repair_bench_cli;
mod s3_bench_cli;
mod scale_bench_cli;
mod serve_cli;
mod store_cli;
mod volume_bench_cli;
mod volumes_nbd;
