//! The crate's integration tests, one module per file, built and linked as one binary.

mod common;
mod nbd_client;
mod nbd_structured;
mod volumes;
