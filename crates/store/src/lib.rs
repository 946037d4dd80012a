//! The store (DESIGN §3.6): buckets and objects over the reliability manager, with read/write
//! separation below it. [`Store::open`] composes devices, placement, redundancy and rails; the
//! `s3` crate speaks S3 on top. See `docs/store.md`.

pub mod array;
mod background;
pub mod config;
mod devices;
pub mod error;
mod grow;
mod headers;
mod identity;
mod ids;
mod listing;
mod load;
mod memory;
pub mod metrics;
pub mod multipart;
mod online;
mod open;
mod record;
mod repair;
pub mod retention;
mod risk;
mod scrubber;
mod store;
pub mod types;
mod versions;
mod warmup;

pub use background::RepairStatus;
pub use config::{
    DeviceKind, DevicesConfig, RepairConfig, SeparationConfig, StoreConfig, EXAMPLE_TOML,
};
pub use error::{Result, StoreError};
pub use grow::GrowReport;
pub use identity::{DeviceHealth, NotCurrent};
pub use ids::{random_id, seed_ids_on_this_thread};
pub use load::LoadReport;
pub use memory::MemoryUse;
pub use metrics::{DeviceStatus, StoreStatus, WindowStatus};
pub use multipart::{multipart_etag, PART_NUMBER_MAX};
pub use railstore_redundancy::{Mechanism, RepairOptions, RepairProgress, RepairReport};
pub use record::TAG_VOLUME;
pub use risk::RiskReport;
pub use scrubber::ScrubRecord;
pub use store::{check_bucket_name, Store, KEY_BYTES_MAX};
pub use types::{
    body_from, collect_body, Body, BucketInfo, ChecksumsAtEnd, GetObject, ListEntry, ListPage,
    ListQuery, ObjectInfo, PartInfo, PartOptions, PutOptions, RangeSpec, SentMd5, UploadInfo,
    WriteCondition, ACL_HEADER,
};
pub use versions::{version_name, Deleted, VersionEntry, VersionPage, VersionQuery, Versioning};
