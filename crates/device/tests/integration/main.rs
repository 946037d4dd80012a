//! The crate's integration tests, one module per file, built and linked as one binary.

mod common;
mod crash;
mod faulty;
mod file_faults;
mod model;
mod random_bytes;
mod sim;
mod single_file;
