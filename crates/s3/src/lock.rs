//! Object lock: buckets made with it (or given it while versioning is on), their default
//! retention, each version's retention and legal hold, and the lock headers of writes and
//! reads. The store keeps a version's lock in its stored headers and refuses to delete a
//! locked version ([`railstore_store::retention`]); this module speaks S3 about it.
//!
//! A bucket's lock lives in its `object-lock` setting: `Enabled`, or `Enabled MODE days N` /
//! `Enabled MODE years N` with a default retention. Lock cannot be turned off, and versioning
//! of a bucket with lock cannot be suspended (`versioning.rs` asks [`enabled`]).

use crate::errors::{
    err, invalid_argument, invalid_bucket_state, invalid_request, no_configuration, store_error,
};
use crate::service::RailS3;
use http::StatusCode;
use railstore_store::retention::{self, LockMode, Retention};
use railstore_store::{StoreError, Versioning};
use s3s::dto::*;
use s3s::{S3Error, S3ErrorCode, S3Request, S3Response, S3Result};
use std::collections::BTreeMap;

/// The bucket setting that holds a bucket's object lock.
const SETTING: &str = "object-lock";
const DAY_MS: i64 = 86_400_000;

/// A bucket's default retention: applied to new versions written without lock headers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct DefaultRule {
    mode: LockMode,
    /// `true`: `count` is years (365 days each, as S3 counts them); else days.
    years: bool,
    count: i32,
}

impl DefaultRule {
    fn encode(&self) -> String {
        let unit = if self.years { "years" } else { "days" };
        format!("Enabled {} {unit} {}", self.mode.as_str(), self.count)
    }

    fn decode(v: &str) -> Option<DefaultRule> {
        let mut it = v.split(' ').skip(1);
        let mode = LockMode::parse(it.next()?)?;
        let years = it.next()? == "years";
        let count = it.next()?.parse().ok()?;
        Some(DefaultRule { mode, years, count })
    }

    fn length_ms(&self) -> i64 {
        i64::from(self.count) * DAY_MS * if self.years { 365 } else { 1 }
    }
}

/// Whether `bucket` has object lock (an error if there is no such bucket).
pub(crate) fn enabled(s3: &RailS3, bucket: &str) -> S3Result<bool> {
    Ok(setting(s3, bucket)?.is_some())
}

fn setting(s3: &RailS3, bucket: &str) -> S3Result<Option<String>> {
    s3.store
        .bucket_setting(bucket, SETTING)
        .map_err(store_error)
}

/// Turns object lock on for a bucket just made with `x-amz-bucket-object-lock-enabled`:
/// versioning on first, so no version is ever written unversioned.
pub(crate) async fn enable_on_new_bucket(s3: &RailS3, bucket: &str) -> S3Result<()> {
    s3.store
        .set_versioning(bucket, Versioning::Enabled)
        .await
        .map_err(store_error)?;
    s3.store
        .set_bucket_setting(bucket, SETTING, Some("Enabled".into()))
        .await
        .map_err(store_error)
}

fn malformed(msg: impl Into<String>) -> S3Error {
    err(S3ErrorCode::MalformedXML, msg)
}

/// The refusal of retention and legal-hold requests on a bucket without object lock.
fn no_lock() -> S3Error {
    invalid_request("Bucket is missing Object Lock Configuration")
}

fn mode_of(s: Option<&str>) -> S3Result<LockMode> {
    let s = s.ok_or_else(|| malformed("The retention mode is missing"))?;
    LockMode::parse(s).ok_or_else(|| malformed(format!("Unknown retention mode {s:?}")))
}

fn ms_of(t: &Timestamp) -> i64 {
    let t = time::OffsetDateTime::from(t.clone());
    (t.unix_timestamp_nanos() / 1_000_000) as i64
}

/// A stored retain-until time as S3 sends it.
pub(crate) fn timestamp_of(ms: i64) -> S3Result<Timestamp> {
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(ms) * 1_000_000)
        .map(Timestamp::from)
        .map_err(|_| invalid_argument("The retain-until date is out of range"))
}

pub(crate) async fn get_object_lock_configuration(
    s3: &RailS3,
    req: S3Request<GetObjectLockConfigurationInput>,
) -> S3Result<S3Response<GetObjectLockConfigurationOutput>> {
    let Some(v) = setting(s3, &req.input.bucket)? else {
        return Err(no_configuration(
            S3ErrorCode::ObjectLockConfigurationNotFoundError,
            "Object Lock configuration does not exist for this bucket",
        ));
    };
    let rule = DefaultRule::decode(&v).map(|r| ObjectLockRule {
        default_retention: Some(DefaultRetention {
            mode: Some(ObjectLockRetentionMode::from(r.mode.as_str().to_string())),
            days: (!r.years).then_some(r.count),
            years: r.years.then_some(r.count),
        }),
    });
    Ok(S3Response::new(GetObjectLockConfigurationOutput {
        object_lock_configuration: Some(ObjectLockConfiguration {
            object_lock_enabled: Some(ObjectLockEnabled::from(
                ObjectLockEnabled::ENABLED.to_string(),
            )),
            rule,
        }),
    }))
}

pub(crate) async fn put_object_lock_configuration(
    s3: &RailS3,
    req: S3Request<PutObjectLockConfigurationInput>,
) -> S3Result<S3Response<PutObjectLockConfigurationOutput>> {
    let input = req.input;
    let bucket = &input.bucket;
    let config = input.object_lock_configuration.unwrap_or_default();
    if config.object_lock_enabled.as_ref().map(|e| e.as_str()) != Some(ObjectLockEnabled::ENABLED) {
        return Err(malformed("ObjectLockEnabled must be Enabled"));
    }
    let rule = match config.rule.and_then(|r| r.default_retention) {
        None => None,
        Some(d) => {
            let mode = mode_of(d.mode.as_ref().map(|m| m.as_str()))?;
            let (years, count) = match (d.days, d.years) {
                (Some(_), Some(_)) => {
                    return Err(malformed(
                        "A default retention takes Days or Years, not both",
                    ))
                }
                (Some(n), None) => (false, n),
                (None, Some(n)) => (true, n),
                (None, None) => {
                    return Err(malformed("A default retention needs Days or Years"));
                }
            };
            if count <= 0 {
                let mut e = err(
                    S3ErrorCode::Custom("InvalidRetentionPeriod".into()),
                    "The retention period must be a positive number of days or years",
                );
                e.set_status_code(StatusCode::BAD_REQUEST);
                return Err(e);
            }
            Some(DefaultRule { mode, years, count })
        }
    };
    if !enabled(s3, bucket)?
        && s3.store.versioning(bucket).map_err(store_error)? != Versioning::Enabled
    {
        return Err(invalid_bucket_state(
            "Object Lock configuration cannot be enabled on a bucket without versioning \
             enabled",
        ));
    }
    let value = rule.map_or_else(|| "Enabled".to_string(), |r| r.encode());
    s3.store
        .set_bucket_setting(bucket, SETTING, Some(value))
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(PutObjectLockConfigurationOutput::default()))
}

/// Lock headers a write asked for (PutObject, CreateMultipartUpload, CopyObject).
pub(crate) struct Requested<'a> {
    pub mode: Option<&'a str>,
    pub until: Option<&'a Timestamp>,
    pub legal_hold: Option<&'a str>,
}

/// The lock headers of a write input.
macro_rules! lock_requested {
    ($input:expr) => {
        crate::lock::Requested {
            mode: $input.object_lock_mode.as_ref().map(|m| m.as_str()),
            until: $input.object_lock_retain_until_date.as_ref(),
            legal_hold: $input
                .object_lock_legal_hold_status
                .as_ref()
                .map(|s| s.as_str()),
        }
    };
}
pub(crate) use lock_requested;

/// Sets the lock of a version about to be written into its stored `headers`: the one asked
/// for, else the bucket's default retention; none copied from a source.
pub(crate) fn apply_to_new(
    s3: &RailS3,
    bucket: &str,
    asked: Requested<'_>,
    headers: &mut BTreeMap<String, String>,
) -> S3Result<()> {
    retention::strip_lock(headers);
    let any = asked.mode.is_some() || asked.until.is_some() || asked.legal_hold.is_some();
    let Some(v) = setting(s3, bucket)? else {
        return if any { Err(no_lock()) } else { Ok(()) };
    };
    let now = retention::now_ms();
    let r = match (asked.mode, asked.until) {
        (Some(m), Some(u)) => {
            let mode = LockMode::parse(m)
                .ok_or_else(|| invalid_argument(format!("Unknown object lock mode {m:?}")))?;
            let until_ms = ms_of(u);
            if until_ms <= now {
                return Err(invalid_argument(
                    "The retain until date must be in the future",
                ));
            }
            Some(Retention { mode, until_ms })
        }
        (None, None) => DefaultRule::decode(&v).map(|d| Retention {
            mode: d.mode,
            until_ms: now + d.length_ms(),
        }),
        _ => {
            return Err(invalid_argument(
                "x-amz-object-lock-retain-until-date and x-amz-object-lock-mode must both be \
                 supplied",
            ))
        }
    };
    retention::set_retention(headers, r);
    match asked.legal_hold {
        None | Some("OFF") => {}
        Some("ON") => retention::set_legal_hold(headers, true),
        Some(other) => {
            return Err(invalid_argument(format!(
                "Legal hold status {other:?}: it is ON or OFF"
            )))
        }
    }
    Ok(())
}

/// Sets the lock fields of a HEAD or GET output from the version's stored lock.
macro_rules! set_lock_output {
    ($output:expr, $info:expr) => {
        if let Some(r) = railstore_store::retention::retention($info) {
            $output.object_lock_mode =
                Some(s3s::dto::ObjectLockMode::from(r.mode.as_str().to_string()));
            // A stored time is always in range.
            $output.object_lock_retain_until_date = crate::lock::timestamp_of(r.until_ms).ok();
        }
        if railstore_store::retention::legal_hold($info) {
            $output.object_lock_legal_hold_status =
                Some(s3s::dto::ObjectLockLegalHoldStatus::from("ON".to_string()));
        }
    };
}
pub(crate) use set_lock_output;

/// The version a retention or legal-hold request names, in a bucket with object lock.
async fn version_in_lock_bucket(
    s3: &RailS3,
    bucket: &str,
    key: &str,
    version_id: Option<&str>,
) -> S3Result<railstore_store::ObjectInfo> {
    let info = s3
        .store
        .head_object_version(bucket, key, version_id)
        .await
        .map_err(store_error)?;
    if !enabled(s3, bucket)? {
        return Err(no_lock());
    }
    Ok(info)
}

/// A store refusal of a lock change: 403, as S3 answers it.
fn locked(e: StoreError) -> S3Error {
    match e {
        StoreError::ObjectLocked(why) => err(S3ErrorCode::AccessDenied, why),
        e => store_error(e),
    }
}

pub(crate) async fn get_object_retention(
    s3: &RailS3,
    req: S3Request<GetObjectRetentionInput>,
) -> S3Result<S3Response<GetObjectRetentionOutput>> {
    let input = req.input;
    let info =
        version_in_lock_bucket(s3, &input.bucket, &input.key, input.version_id.as_deref()).await?;
    let r = retention::retention(&info).ok_or_else(|| {
        no_configuration(
            S3ErrorCode::NoSuchObjectLockConfiguration,
            "The specified object does not have a ObjectLock configuration",
        )
    })?;
    Ok(S3Response::new(GetObjectRetentionOutput {
        retention: Some(ObjectLockRetention {
            mode: Some(ObjectLockRetentionMode::from(r.mode.as_str().to_string())),
            retain_until_date: Some(timestamp_of(r.until_ms)?),
        }),
    }))
}

pub(crate) async fn put_object_retention(
    s3: &RailS3,
    req: S3Request<PutObjectRetentionInput>,
) -> S3Result<S3Response<PutObjectRetentionOutput>> {
    let input = req.input;
    version_in_lock_bucket(s3, &input.bucket, &input.key, input.version_id.as_deref()).await?;
    let asked = input.retention.unwrap_or_default();
    let new = match (asked.mode.as_ref(), asked.retain_until_date.as_ref()) {
        // An empty retention removes it (a governance one, with the bypass).
        (None, None) => None,
        (m, Some(u)) => Some(Retention {
            mode: mode_of(m.map(|m| m.as_str()))?,
            until_ms: ms_of(u),
        }),
        (Some(_), None) => return Err(malformed("The retain until date is missing")),
    };
    let bypass = input.bypass_governance_retention.unwrap_or(false);
    let now = retention::now_ms();
    if new.is_some_and(|r| r.until_ms <= now) {
        return Err(invalid_argument(
            "The retain until date must be in the future",
        ));
    }
    s3.store
        .update_version_headers(
            &input.bucket,
            &input.key,
            input.version_id.as_deref(),
            |current, headers| {
                if let Some(why) = retention::change_refused(current, new, bypass, now) {
                    return Err(StoreError::ObjectLocked(why));
                }
                retention::set_retention(headers, new);
                Ok(())
            },
        )
        .await
        .map_err(locked)?;
    Ok(S3Response::new(PutObjectRetentionOutput::default()))
}

pub(crate) async fn get_object_legal_hold(
    s3: &RailS3,
    req: S3Request<GetObjectLegalHoldInput>,
) -> S3Result<S3Response<GetObjectLegalHoldOutput>> {
    let input = req.input;
    let info =
        version_in_lock_bucket(s3, &input.bucket, &input.key, input.version_id.as_deref()).await?;
    let status = if retention::legal_hold(&info) {
        "ON"
    } else {
        "OFF"
    };
    Ok(S3Response::new(GetObjectLegalHoldOutput {
        legal_hold: Some(ObjectLockLegalHold {
            status: Some(ObjectLockLegalHoldStatus::from(status.to_string())),
        }),
    }))
}

pub(crate) async fn put_object_legal_hold(
    s3: &RailS3,
    req: S3Request<PutObjectLegalHoldInput>,
) -> S3Result<S3Response<PutObjectLegalHoldOutput>> {
    let input = req.input;
    version_in_lock_bucket(s3, &input.bucket, &input.key, input.version_id.as_deref()).await?;
    let status = input
        .legal_hold
        .and_then(|h| h.status)
        .map(|s| s.as_str().to_string());
    let on = match status.as_deref() {
        Some("ON") => true,
        Some("OFF") => false,
        other => {
            return Err(malformed(format!(
                "Legal hold status {other:?}: it is ON or OFF"
            )))
        }
    };
    s3.store
        .update_version_headers(
            &input.bucket,
            &input.key,
            input.version_id.as_deref(),
            |_, headers| {
                retention::set_legal_hold(headers, on);
                Ok(())
            },
        )
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(PutObjectLegalHoldOutput::default()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_rules_round_trip_through_the_setting() {
        for r in [
            DefaultRule {
                mode: LockMode::Governance,
                years: false,
                count: 1,
            },
            DefaultRule {
                mode: LockMode::Compliance,
                years: true,
                count: 7,
            },
        ] {
            assert_eq!(DefaultRule::decode(&r.encode()), Some(r));
        }
        assert_eq!(DefaultRule::decode("Enabled"), None);
        let year = DefaultRule {
            mode: LockMode::Governance,
            years: true,
            count: 1,
        };
        assert_eq!(year.length_ms(), 365 * DAY_MS);
    }

    #[test]
    fn dates_past_2106_survive() {
        let t = Timestamp::parse(TimestampFormat::DateTime, "2140-01-01T00:00:00Z").unwrap();
        let ms = ms_of(&t);
        assert_eq!(ms, 5_364_662_400_000);
        assert_eq!(timestamp_of(ms).unwrap(), t);
    }
}
