//! The S3 API driven by the official AWS SDK (and a bare HTTP client where the SDK will not
//! misbehave on purpose), against a server over an in-memory store on 127.0.0.1:0.

mod acl;
mod buckets;
mod checksums;
mod common;
mod cors;
mod encryption;
mod hostile;
mod lifecycle;
mod listing;
mod lock;
mod multipart;
mod objects;
mod policy;
mod post;
mod server;
mod tagging;
