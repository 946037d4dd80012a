//! The admin API's volume operations (docs/volumes.md). Like every admin operation, each is
//! named by its method, path and query: no body is read.
//!
//! - `GET /admin/v1/volumes`: every volume.
//! - `GET /admin/v1/volumes/NAME`: one volume, with the objects it has stored.
//! - `POST /admin/v1/volumes/NAME?size=1GiB[&mechanism=M][&object-size=4MiB]`: creates it (201).
//! - `POST /admin/v1/volumes/NAME/resize?size=2GiB`: changes its size.
//! - `DELETE /admin/v1/volumes/NAME`: deletes it and its data.

use super::{error, json, not_found, query_value};
use bytes::Bytes;
use http::{Method, Response, StatusCode};
use railstore_store::StoreError;
use railstore_volume::{parse_mechanism, parse_size, VolumeError, VolumeSpec, Volumes};

/// Answers `/admin/v1/volumes…`; `rest` is the path after `volumes`.
pub(super) async fn answer(
    volumes: Option<&Volumes>,
    method: &Method,
    path: &str,
    rest: &[&str],
    query: &str,
) -> Response<Bytes> {
    let Some(volumes) = volumes else {
        return error(
            StatusCode::NOT_FOUND,
            "NoVolumes",
            "this server does not serve volumes",
        );
    };
    // Names are percent-encoded in the path (the CLI encodes every byte a name may not hold).
    let decoded: Vec<String> = rest
        .iter()
        .map(|p| crate::guard::percent_decode(p))
        .collect();
    let rest: Vec<&str> = decoded.iter().map(String::as_str).collect();
    let result = match (method, rest.as_slice()) {
        (&Method::GET, []) => Ok(json(StatusCode::OK, &volumes.list())),
        (&Method::GET, [name]) => volumes.info(name).await.map(|v| json(StatusCode::OK, &v)),
        (&Method::POST, [name]) => match spec(name, query) {
            Ok(spec) => volumes
                .create(spec)
                .await
                .map(|v| json(StatusCode::CREATED, &v)),
            Err(e) => Err(e),
        },
        (&Method::POST, [name, "resize"]) => match size(query) {
            Ok(size) => volumes
                .resize(name, size)
                .await
                .map(|v| json(StatusCode::OK, &v)),
            Err(e) => Err(e),
        },
        (&Method::DELETE, [name]) => volumes
            .delete(name)
            .await
            .map(|_| json(StatusCode::OK, &serde_json::json!({ "deleted": name }))),
        _ => return not_found(method, path),
    };
    result.unwrap_or_else(|e| volume_error(&e))
}

fn size(query: &str) -> Result<u64, VolumeError> {
    let s = query_value(query, "size")
        .ok_or_else(|| VolumeError::Invalid("size is required (size=1GiB)".into()))?;
    parse_size(&s)
}

fn spec(name: &str, query: &str) -> Result<VolumeSpec, VolumeError> {
    let mut spec = VolumeSpec::new(name, size(query)?);
    if let Some(m) = query_value(query, "mechanism") {
        spec.mechanism = parse_mechanism(&m)?;
    }
    if let Some(o) = query_value(query, "object-size") {
        spec.object_bytes = parse_size(&o)?;
    }
    Ok(spec)
}

fn volume_error(e: &VolumeError) -> Response<Bytes> {
    let (status, code) = match e {
        VolumeError::Invalid(_) | VolumeError::OutOfRange { .. } => {
            (StatusCode::BAD_REQUEST, "InvalidArgument")
        }
        VolumeError::Exists(_) => (StatusCode::CONFLICT, "VolumeExists"),
        VolumeError::NotFound(_) | VolumeError::Deleted(_) => {
            (StatusCode::NOT_FOUND, "NoSuchVolume")
        }
        VolumeError::Store(StoreError::ShuttingDown) => {
            (StatusCode::SERVICE_UNAVAILABLE, "ShuttingDown")
        }
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
    };
    error(status, code, &e.to_string())
}
