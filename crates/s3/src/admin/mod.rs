//! The admin API (docs/admin.md): JSON over HTTP under `/admin/v1/`, on the S3 listener,
//! every request authenticated by `Authorization: Bearer <admin token>` before anything else
//! is looked at. No request body is read: every operation is named by its method and path.
//! The console's page and scripts under `/admin/console/` are static and public (`console.rs`);
//! what they show comes from this API, with the token the operator gives the page.
//!
//! - `GET /admin/v1/status`: the store's status (as `/status`).
//! - `GET /admin/v1/latency[?seconds=N]`: S3 read and write latency per second, the last
//!   N seconds (300 at most and by default).
//! - `POST /admin/v1/devices/N/fail[?reason=TEXT]`: takes device N out of service.
//! - `POST /admin/v1/devices/N/replace[?path=P]`: rebuilds failed device N onto an empty device
//!   at its place, or at absolute path P (recorded: the device lives there from then on), in
//!   the background (202, the rebuild's status).
//! - `POST /admin/v1/devices/add?count=K[&path=P]...`: adds K devices (a multiple of the group
//!   width) while serving, in the data folder's `devices/` or at the absolute paths P, one per
//!   device; the objects whose group changed move in the background (202: `added`, the devices,
//!   and `repair`, the move's status).
//! - `POST /admin/v1/devices/remove`: drains the devices the last grow added while serving:
//!   their objects move to the others in the background (202: `removing`, the devices, and
//!   `repair`, the move's status); they leave the array at the next clean shutdown.
//! - `POST /admin/v1/scrub`: verifies every object and set in the background (202).
//! - `GET /admin/v1/repair`: the rebuild or scrub running or last run (404 when none ran).
//! - `/admin/v1/volumes…`: block volumes ([`volumes`]).

use crate::latency::LatencyHistory;
use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use railstore_store::{Store, StoreError};
use railstore_volume::Volumes;

mod volumes;

/// The path prefix the admin API answers under.
pub const PREFIX: &str = "/admin/";

/// What the admin API answers from.
pub struct Admin<'a> {
    pub store: &'a Store,
    /// The admin token; without one the API is off.
    pub token: Option<&'a str>,
    /// The S3 requests' latency history.
    pub latency: &'a LatencyHistory,
    /// The store's volumes, when the server serves them.
    pub volumes: Option<&'a Volumes>,
}

impl Admin<'_> {
    /// Answers one admin request.
    pub async fn answer<B>(&self, req: &Request<B>) -> Response<Bytes> {
        let Some(token) = self.token else {
            return error(
                StatusCode::FORBIDDEN,
                "AdminDisabled",
                "the admin API is off: the server has no admin token",
            );
        };
        if !crate::guard::bearer_matches(req.headers(), token) {
            let mut resp = error(
                StatusCode::UNAUTHORIZED,
                "Unauthorized",
                "the admin API needs Authorization: Bearer <admin token>",
            );
            resp.headers_mut().insert(
                http::header::WWW_AUTHENTICATE,
                http::HeaderValue::from_static("Bearer realm=\"railstore admin\""),
            );
            return resp;
        }
        operation(self, req).await
    }
}

/// An authenticated request.
async fn operation<B>(admin: &Admin<'_>, req: &Request<B>) -> Response<Bytes> {
    let (store, latency) = (admin.store, admin.latency);
    let path = req.uri().path();
    let parts: Vec<&str> = path
        .strip_prefix("/admin/v1/")
        .unwrap_or("")
        .split('/')
        .collect();
    let method = req.method();
    match (method, parts.as_slice()) {
        (&Method::GET, ["status"]) => json(StatusCode::OK, &store.status().await),
        (&Method::GET, ["latency"]) => {
            let query = req.uri().query().unwrap_or("");
            let seconds = match query_value(query, "seconds").map(|s| s.parse::<usize>()) {
                None => crate::latency::SECONDS,
                Some(Ok(n)) if (1..=crate::latency::SECONDS).contains(&n) => n,
                Some(_) => {
                    return error(
                        StatusCode::BAD_REQUEST,
                        "InvalidArgument",
                        &format!("seconds must be 1 to {}", crate::latency::SECONDS),
                    )
                }
            };
            json(StatusCode::OK, &latency.history(seconds))
        }
        (&Method::GET, ["repair"]) => match store.repair_status() {
            Some(r) => json(StatusCode::OK, &r),
            None => error(
                StatusCode::NOT_FOUND,
                "NoRepair",
                "no rebuild or scrub has run since the server started",
            ),
        },
        (&Method::POST, ["scrub"]) => match store.start_scrub("requested").await {
            Ok(r) => json(StatusCode::ACCEPTED, &r),
            Err(e) => store_error(&e),
        },
        (&Method::POST, ["devices", "add"]) => {
            let query = req.uri().query().unwrap_or("");
            let Some(Ok(count)) = query_value(query, "count").map(|c| c.parse::<usize>()) else {
                return error(
                    StatusCode::BAD_REQUEST,
                    "InvalidArgument",
                    "count=K (the devices to add, a multiple of the group width) is needed",
                );
            };
            let paths = query_values(query, "path").map(Into::into).collect();
            match store.grow_online(count, paths).await {
                Ok((report, r)) => json(
                    StatusCode::ACCEPTED,
                    &serde_json::json!({
                        "added": (report.devices_before..report.devices_after)
                            .collect::<Vec<usize>>(),
                        "paths": report.paths,
                        "repair": r,
                    }),
                ),
                Err(e) => store_error(&e),
            }
        }
        (&Method::POST, ["devices", "remove"]) => match store.drain_online().await {
            Ok(r) => json(
                StatusCode::ACCEPTED,
                &serde_json::json!({
                    "removing": store.drain_target().collect::<Vec<usize>>(),
                    "repair": r,
                }),
            ),
            Err(e) => store_error(&e),
        },
        (&Method::POST, ["devices", n, op]) => {
            let Ok(d) = n.parse::<usize>() else {
                return error(
                    StatusCode::BAD_REQUEST,
                    "InvalidArgument",
                    &format!("{n:?} is not a device number"),
                );
            };
            match *op {
                "fail" => {
                    let reason = query_value(req.uri().query().unwrap_or(""), "reason")
                        .unwrap_or_else(|| "failed by the operator".into());
                    match store.fail_device(d, &reason) {
                        Ok(()) => json(
                            StatusCode::OK,
                            &serde_json::json!({ "device": d, "healthy": false, "reason": reason }),
                        ),
                        Err(e) => store_error(&e),
                    }
                }
                "replace" => {
                    let path = query_value(req.uri().query().unwrap_or(""), "path");
                    let started = match path {
                        Some(p) => store.replace_device_at(d, std::path::Path::new(&p)).await,
                        None => store.replace_device(d).await,
                    };
                    match started {
                        Ok(r) => json(StatusCode::ACCEPTED, &r),
                        Err(e) => store_error(&e),
                    }
                }
                _ => not_found(method, path),
            }
        }
        (_, ["volumes", rest @ ..]) => {
            let query = req.uri().query().unwrap_or("");
            volumes::answer(admin.volumes, method, path, rest, query).await
        }
        _ => not_found(method, path),
    }
}

fn not_found(method: &Method, path: &str) -> Response<Bytes> {
    error(
        StatusCode::NOT_FOUND,
        "NoSuchOperation",
        &format!("no admin operation {method} {path} (docs/admin.md lists them)"),
    )
}

/// One value of a query string, percent-decoded (`+` is a space, as forms send it).
fn query_value(query: &str, name: &str) -> Option<String> {
    query_values(query, name).next()
}

/// Every value of `name` in `query`, decoded, in order.
fn query_values<'a>(query: &'a str, name: &'a str) -> impl Iterator<Item = String> + 'a {
    query.split('&').filter_map(move |pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (crate::guard::percent_decode(k) == name).then(|| crate::guard::percent_decode(v))
    })
}

fn store_error(e: &StoreError) -> Response<Bytes> {
    let (status, code) = match e {
        StoreError::InvalidArgument(_) => (StatusCode::BAD_REQUEST, "InvalidArgument"),
        StoreError::Conflict(_) => (StatusCode::CONFLICT, "Conflict"),
        StoreError::ShuttingDown => (StatusCode::SERVICE_UNAVAILABLE, "ShuttingDown"),
        _ => (StatusCode::INTERNAL_SERVER_ERROR, "InternalError"),
    };
    error(status, code, &e.to_string())
}

fn error(status: StatusCode, code: &str, message: &str) -> Response<Bytes> {
    json(
        status,
        &serde_json::json!({ "error": { "code": code, "message": message } }),
    )
}

fn json<T: serde::Serialize>(status: StatusCode, value: &T) -> Response<Bytes> {
    let body = serde_json::to_vec_pretty(value).unwrap_or_default();
    let mut resp = Response::new(Bytes::from(body));
    *resp.status_mut() = status;
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_decoded() {
        assert_eq!(
            query_value("a=1&reason=disk+pulled%2C%20slot%203", "reason").as_deref(),
            Some("disk pulled, slot 3")
        );
        assert_eq!(query_value("reason", "reason").as_deref(), Some(""));
        assert_eq!(query_value("x=1", "reason"), None);
        let paths: Vec<String> = query_values("count=6&path=%2Fa&x=1&path=%2Fb", "path").collect();
        assert_eq!(paths, ["/a", "/b"]);
    }
}
