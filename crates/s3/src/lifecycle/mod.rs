//! Lifecycle: Put/Get/DeleteBucketLifecycleConfiguration (validated, kept as given), the
//! `x-amz-expiration` header on objects a rule will expire, and the worker that applies the
//! rules ([`expire`]): it deletes expired objects and aborts old multipart uploads.
//!
//! Buckets are unversioned, so noncurrent-version and delete-marker rules are accepted and
//! have nothing to act on. Transitions (storage tiers) are refused.

mod worker;

pub use worker::{expire, ExpiryReport};

use crate::errors::{
    err, invalid_argument, invalid_request, no_configuration, not_implemented, store_error,
};
use crate::service::RailS3;
use railstore_store::{ObjectInfo, Store};
use s3s::dto::*;
use s3s::{S3ErrorCode, S3Request, S3Response, S3Result};
use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The bucket setting that holds the rules: s3s's `LifecycleRule`s as JSON (s3s is pinned).
const SETTING: &str = "lifecycle";
const RULES_MAX: usize = 1000;
const ID_CHARS_MAX: usize = 255;
const DAY: Duration = Duration::from_secs(86_400);

/// A bucket's rules (none when it has no configuration, or it cannot be read).
pub(crate) fn rules(store: &Store, bucket: &str) -> Vec<LifecycleRule> {
    crate::fields::json_setting(store, bucket, SETTING).unwrap_or_default()
}

fn malformed(why: &str) -> s3s::S3Error {
    err(S3ErrorCode::MalformedXML, why)
}

/// Whether `t` is midnight UTC, as lifecycle dates must be.
fn at_midnight(t: &Timestamp) -> bool {
    let t = time::OffsetDateTime::from(t.clone());
    (t.unix_timestamp() + i64::from(t.offset().whole_seconds())).rem_euclid(86_400) == 0
}

fn check_date(date: Option<&Timestamp>) -> S3Result<()> {
    match date {
        Some(d) if !at_midnight(d) => Err(invalid_argument("'Date' must be at midnight GMT")),
        _ => Ok(()),
    }
}

/// Checks one rule; gives it an ID when it has none.
fn check_rule(rule: &mut LifecycleRule) -> S3Result<()> {
    let id = rule.id.get_or_insert_with(|| {
        use rand::Rng;
        let n: u64 = rand::thread_rng().gen();
        format!("{n:016x}")
    });
    // Rule IDs are sent back in `x-amz-expiration`, quoted.
    if !id.chars().all(|c| c.is_ascii_graphic() || c == ' ') || id.contains('"') {
        return Err(invalid_argument(
            "A rule ID is printable ASCII without double quotes",
        ));
    }
    if id.chars().count() > ID_CHARS_MAX {
        return Err(invalid_argument(format!(
            "ID length should not exceed allowed limit of {ID_CHARS_MAX}"
        )));
    }
    match rule.status.as_str() {
        ExpirationStatus::ENABLED | ExpirationStatus::DISABLED => {}
        _ => return Err(malformed("Status must be Enabled or Disabled")),
    }
    if rule.prefix.is_some() && rule.filter.is_some() {
        return Err(malformed("A rule has a Prefix or a Filter, not both"));
    }
    if let Some(e) = &rule.expiration {
        if e.days.is_some() && e.date.is_some() {
            return Err(malformed("Expiration has Days or Date, not both"));
        }
        if e.days.is_some_and(|d| d <= 0) {
            return Err(invalid_argument(
                "'Days' for Expiration action must be a positive integer",
            ));
        }
        check_date(e.date.as_ref())?;
    }
    if let Some(n) = &rule.noncurrent_version_expiration {
        if n.noncurrent_days.is_some_and(|d| d <= 0) {
            return Err(invalid_argument(
                "'NoncurrentDays' for NoncurrentVersionExpiration action must be a positive \
                 integer",
            ));
        }
    }
    let filter = rule.filter.as_ref();
    let tags_or_sizes = filter.is_some_and(|f| {
        f.tag.is_some()
            || f.object_size_greater_than.is_some()
            || f.object_size_less_than.is_some()
            || f.and.as_ref().is_some_and(|a| {
                a.tags.as_ref().is_some_and(|t| !t.is_empty())
                    || a.object_size_greater_than.is_some()
                    || a.object_size_less_than.is_some()
            })
    });
    if rule.abort_incomplete_multipart_upload.is_some() && tags_or_sizes {
        // Uploads have no tags or size yet: such a rule would abort every upload it prefixes.
        return Err(invalid_request(
            "AbortIncompleteMultipartUpload cannot be specified with a tag or size filter",
        ));
    }
    if let Some(a) = &rule.abort_incomplete_multipart_upload {
        if a.days_after_initiation.is_none_or(|d| d <= 0) {
            return Err(invalid_argument(
                "'DaysAfterInitiation' for AbortIncompleteMultipartUpload action must be a \
                 positive integer",
            ));
        }
    }
    for t in rule.transitions.iter().flatten() {
        check_date(t.date.as_ref())?;
    }
    if rule.transitions.as_ref().is_some_and(|t| !t.is_empty())
        || rule
            .noncurrent_version_transitions
            .as_ref()
            .is_some_and(|t| !t.is_empty())
    {
        return Err(not_implemented(
            "lifecycle transitions are not supported: railstore has no storage tiers",
        ));
    }
    if rule.expiration.is_none()
        && rule.noncurrent_version_expiration.is_none()
        && rule.abort_incomplete_multipart_upload.is_none()
    {
        return Err(malformed(
            "At least one action needs to be specified in a rule",
        ));
    }
    Ok(())
}

pub(crate) async fn put_bucket_lifecycle_configuration(
    s3: &RailS3,
    req: S3Request<PutBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<PutBucketLifecycleConfigurationOutput>> {
    let input = req.input;
    let mut rules = input
        .lifecycle_configuration
        .map(|c| c.rules)
        .unwrap_or_default();
    if rules.is_empty() || rules.len() > RULES_MAX {
        return Err(malformed("A lifecycle configuration has 1 to 1000 rules"));
    }
    let mut ids = HashSet::new();
    for r in &mut rules {
        check_rule(r)?;
        if !ids.insert(r.id.clone()) {
            return Err(invalid_argument("Rule ID must be unique"));
        }
    }
    let text = serde_json::to_string(&rules).expect("rules serialise");
    s3.store
        .set_bucket_setting(&input.bucket, SETTING, Some(text))
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(
        PutBucketLifecycleConfigurationOutput::default(),
    ))
}

pub(crate) async fn get_bucket_lifecycle_configuration(
    s3: &RailS3,
    req: S3Request<GetBucketLifecycleConfigurationInput>,
) -> S3Result<S3Response<GetBucketLifecycleConfigurationOutput>> {
    s3.store
        .head_bucket(&req.input.bucket)
        .map_err(store_error)?;
    let rules = rules(&s3.store, &req.input.bucket);
    if rules.is_empty() {
        return Err(no_configuration(
            S3ErrorCode::NoSuchLifecycleConfiguration,
            "The lifecycle configuration does not exist",
        ));
    }
    Ok(S3Response::new(GetBucketLifecycleConfigurationOutput {
        rules: Some(rules),
        ..GetBucketLifecycleConfigurationOutput::default()
    }))
}

pub(crate) async fn delete_bucket_lifecycle(
    s3: &RailS3,
    req: S3Request<DeleteBucketLifecycleInput>,
) -> S3Result<S3Response<DeleteBucketLifecycleOutput>> {
    s3.store
        .set_bucket_setting(&req.input.bucket, SETTING, None)
        .await
        .map_err(store_error)?;
    Ok(S3Response::new(DeleteBucketLifecycleOutput::default()))
}

/// The prefix a rule applies to (the deprecated top-level one, or its filter's).
fn rule_prefix(rule: &LifecycleRule) -> &str {
    let filter = rule.filter.as_ref();
    rule.prefix
        .as_deref()
        .or_else(|| filter.and_then(|f| f.prefix.as_deref()))
        .or_else(|| filter.and_then(|f| f.and.as_ref()?.prefix.as_deref()))
        .unwrap_or_default()
}

/// Whether an enabled rule applies to an object (prefix, tags, size).
fn applies(rule: &LifecycleRule, info: &ObjectInfo, tags: &BTreeMap<String, String>) -> bool {
    if rule.status.as_str() != ExpirationStatus::ENABLED || !info.key.starts_with(rule_prefix(rule))
    {
        return false;
    }
    let Some(f) = &rule.filter else { return true };
    let has = |t: &Tag| {
        let k = t.key.as_deref().unwrap_or_default();
        tags.get(k).map(String::as_str) == Some(t.value.as_deref().unwrap_or_default())
    };
    let size_ok = |gt: Option<i64>, lt: Option<i64>| {
        gt.is_none_or(|g| info.size as i64 > g) && lt.is_none_or(|l| (info.size as i64) < l)
    };
    let and_ok = f.and.as_ref().is_none_or(|a| {
        a.tags.iter().flatten().all(has)
            && size_ok(a.object_size_greater_than, a.object_size_less_than)
    });
    f.tag.as_ref().is_none_or(has)
        && size_ok(f.object_size_greater_than, f.object_size_less_than)
        && and_ok
}

/// When `rule` expires an object last modified at `modified`: its date, or `modified` plus
/// its days rounded up to the next midnight UTC, as S3 computes it.
fn expiry_of(rule: &LifecycleRule, modified: SystemTime) -> Option<SystemTime> {
    let e = rule.expiration.as_ref()?;
    if let Some(d) = &e.date {
        return Some(SystemTime::from(time::OffsetDateTime::from(d.clone())));
    }
    days_after(modified, u64::try_from(e.days?).ok()?)
}

/// `days` days after `t`, rounded up to the next midnight UTC (S3's lifecycle arithmetic).
fn days_after(t: SystemTime, days: u64) -> Option<SystemTime> {
    let secs = t.duration_since(UNIX_EPOCH).ok()?.as_secs() + days * DAY.as_secs();
    let day = DAY.as_secs();
    Some(UNIX_EPOCH + Duration::from_secs(secs.div_ceil(day) * day))
}

/// The earliest expiry the rules give an object, and the rule that gives it.
pub(crate) fn expiry(rules: &[LifecycleRule], info: &ObjectInfo) -> Option<(SystemTime, String)> {
    let tags = crate::tagging::stored(info);
    rules
        .iter()
        .filter(|r| applies(r, info, &tags))
        .filter_map(|r| Some((expiry_of(r, info.last_modified)?, r.id.clone()?)))
        .min()
}

/// `x-amz-expiration` for an object in `bucket`: `expiry-date="…", rule-id="…"`.
pub(crate) fn expiration_header(store: &Store, bucket: &str, info: &ObjectInfo) -> Option<String> {
    let rules = rules(store, bucket);
    if rules.is_empty() {
        return None;
    }
    let (at, id) = expiry(&rules, info)?;
    let date = crate::util::http_date(&crate::util::timestamp(at))?;
    Some(format!("expiry-date=\"{date}\", rule-id=\"{id}\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(id: &str, prefix: &str, days: i32) -> LifecycleRule {
        LifecycleRule {
            id: Some(id.into()),
            prefix: Some(prefix.into()),
            status: ExpirationStatus::from(ExpirationStatus::ENABLED.to_string()),
            expiration: Some(LifecycleExpiration {
                days: Some(days),
                ..LifecycleExpiration::default()
            }),
            abort_incomplete_multipart_upload: None,
            filter: None,
            noncurrent_version_expiration: None,
            noncurrent_version_transitions: None,
            transitions: None,
        }
    }

    fn object(key: &str, modified_secs: u64) -> ObjectInfo {
        ObjectInfo {
            key: key.into(),
            size: 3,
            last_modified: UNIX_EPOCH + Duration::from_secs(modified_secs),
            mechanism: "rep3".into(),
            ..ObjectInfo::default()
        }
    }

    #[test]
    fn expiry_is_days_later_rounded_up_to_midnight_and_the_earliest_rule_wins() {
        let day = 86_400;
        let rules = [rule("long", "logs/", 30), rule("short", "logs/tmp/", 1)];
        let o = object("logs/tmp/a", 10 * day + 5);
        let (at, id) = expiry(&rules, &o).unwrap();
        assert_eq!(id, "short");
        assert_eq!(at, UNIX_EPOCH + Duration::from_secs(12 * day));
        let (_, id) = expiry(&rules, &object("logs/a", 10 * day)).unwrap();
        assert_eq!(id, "long");
        assert!(expiry(&rules, &object("other/a", 0)).is_none());
        let mut off = rule("off", "", 1);
        off.status = ExpirationStatus::from(ExpirationStatus::DISABLED.to_string());
        assert!(expiry(&[off], &o).is_none());
    }

    #[test]
    fn rules_are_checked() {
        let mut ok = rule("r", "p/", 1);
        assert!(check_rule(&mut ok).is_ok());
        let mut no_id = rule("x", "p/", 1);
        no_id.id = None;
        check_rule(&mut no_id).unwrap();
        assert!(no_id.id.is_some(), "an ID is given");
        let mut zero = rule("r", "p/", 0);
        assert!(check_rule(&mut zero).is_err());
        let mut long = rule(&"a".repeat(256), "p/", 1);
        assert!(check_rule(&mut long).is_err());
        let mut status = rule("r", "p/", 1);
        status.status = ExpirationStatus::from("enabled".to_string());
        assert!(check_rule(&mut status).is_err());
        let mut date = rule("r", "p/", 1);
        date.expiration = Some(LifecycleExpiration {
            date: Some(Timestamp::from(
                UNIX_EPOCH + Duration::from_secs(86_400 + 5),
            )),
            ..LifecycleExpiration::default()
        });
        assert!(check_rule(&mut date).is_err(), "not at midnight");
    }

    #[test]
    fn older_versions_expire_noncurrent_days_after_they_stopped_being_current() {
        let day = 86_400;
        let version = |at: u64, marker: bool| railstore_store::VersionEntry {
            info: ObjectInfo {
                delete_marker: marker,
                ..object("k", at * day)
            },
            latest: false,
        };
        let mut r = rule("nc", "", 1);
        r.expiration = None;
        r.noncurrent_version_expiration = Some(NoncurrentVersionExpiration {
            noncurrent_days: Some(2),
            newer_noncurrent_versions: Some(1),
        });
        // Made on days 10 (current), 5 and 1: the day-1 version stopped being current on
        // day 5, the day-5 one on day 10.
        let versions = [version(10, false), version(5, false), version(1, false)];
        let at = |d: u64| UNIX_EPOCH + Duration::from_secs(d * day);
        let keys = |now| -> Vec<u64> {
            worker::expired_versions(std::slice::from_ref(&r), &versions, at(now))
                .iter()
                .map(|i| {
                    i.last_modified
                        .duration_since(UNIX_EPOCH)
                        .unwrap()
                        .as_secs()
                        / day
                })
                .collect()
        };
        assert_eq!(keys(6), Vec::<u64>::new(), "not yet two days");
        // The day-5 version is the one newer noncurrent version kept.
        assert_eq!(keys(7), vec![1]);
        assert_eq!(keys(30), vec![1]);
        // A delete marker left alone goes with ExpiredObjectDeleteMarker, not before.
        let lone = [version(3, true)];
        assert!(worker::expired_versions(std::slice::from_ref(&r), &lone, at(9)).is_empty());
        r.expiration = Some(LifecycleExpiration {
            expired_object_delete_marker: Some(true),
            ..LifecycleExpiration::default()
        });
        assert_eq!(
            worker::expired_versions(std::slice::from_ref(&r), &lone, at(9)).len(),
            1
        );
    }
}
