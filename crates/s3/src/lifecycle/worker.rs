//! The lifecycle worker: one pass over every bucket with rules, deleting the objects whose
//! expiry has come and aborting the multipart uploads older than their rule allows.

use super::{expiry, rule_prefix, rules, DAY};
use railstore_store::{ListQuery, Store, StoreError, WriteCondition};
use s3s::dto::ExpirationStatus;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// What one pass of [`expire`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ExpiryReport {
    /// Buckets with lifecycle rules.
    pub buckets: usize,
    /// Objects deleted because a rule expired them.
    pub objects_deleted: u64,
    /// Multipart uploads aborted because a rule's `DaysAfterInitiation` passed.
    pub uploads_aborted: u64,
    /// Deletes or aborts that failed (logged; the next pass tries again).
    pub errors: u64,
}

/// Applies every bucket's lifecycle rules as of `now`. An object is deleted only if it is
/// still the version judged expired (its ETag and time are the condition), so a newer write
/// under the key survives the pass. (A change of tags keeps the version: an object whose tags
/// stopped matching a rule between the judgement and the delete still goes.)
pub async fn expire(store: &Store, now: SystemTime) -> ExpiryReport {
    let mut report = ExpiryReport::default();
    for bucket in store.list_buckets() {
        let rules = rules(store, &bucket.name);
        if rules.is_empty() {
            continue;
        }
        report.buckets += 1;
        let enabled = |r: &&s3s::dto::LifecycleRule| r.status.as_str() == ExpirationStatus::ENABLED;
        if rules.iter().filter(enabled).any(|r| r.expiration.is_some()) {
            expire_objects(store, &bucket.name, &rules, now, &mut report).await;
        }
        let aborts: Vec<(&str, u64)> = rules
            .iter()
            .filter(enabled)
            .filter_map(|r| {
                let days = r
                    .abort_incomplete_multipart_upload
                    .as_ref()?
                    .days_after_initiation?;
                Some((rule_prefix(r), u64::try_from(days).ok()?))
            })
            .collect();
        if !aborts.is_empty() {
            abort_uploads(store, &bucket.name, &aborts, now, &mut report).await;
        }
    }
    report
}

async fn expire_objects(
    store: &Store,
    bucket: &str,
    rules: &[s3s::dto::LifecycleRule],
    now: SystemTime,
    report: &mut ExpiryReport,
) {
    let mut after = None;
    loop {
        let q = ListQuery {
            prefix: String::new(),
            delimiter: None,
            after: after.take(),
            max_keys: 1000,
        };
        let page = match store.list_objects(bucket, &q) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(bucket, error = %e, "lifecycle: listing failed");
                report.errors += 1;
                return;
            }
        };
        for entry in &page.objects {
            let Ok(info) = store.head_object(bucket, &entry.key) else {
                continue;
            };
            let Some((at, rule)) = expiry(rules, &info) else {
                continue;
            };
            if at > now {
                continue;
            }
            let condition = WriteCondition::Version {
                etag: info.etag.clone(),
                last_modified: info.last_modified,
            };
            match store
                .delete_object_if(bucket, &info.key, Some(&condition))
                .await
            {
                Ok(true) => {
                    report.objects_deleted += 1;
                    tracing::debug!(bucket, key = %info.key, rule, "lifecycle: expired");
                }
                Ok(false) | Err(StoreError::PreconditionFailed(_)) => {}
                Err(e) => {
                    tracing::warn!(bucket, key = %info.key, error = %e, "lifecycle: delete failed");
                    report.errors += 1;
                }
            }
        }
        match (page.truncated, page.next_after) {
            (true, Some(next)) => after = Some(next),
            _ => return,
        }
    }
}

async fn abort_uploads(
    store: &Store,
    bucket: &str,
    rules: &[(&str, u64)],
    now: SystemTime,
    report: &mut ExpiryReport,
) {
    let uploads = match store.list_uploads(bucket, "") {
        Ok(u) => u,
        Err(e) => {
            tracing::warn!(bucket, error = %e, "lifecycle: listing uploads failed");
            report.errors += 1;
            return;
        }
    };
    let day = DAY.as_secs();
    for u in uploads {
        let initiated = u
            .initiated
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
            .as_secs();
        let due = rules
            .iter()
            .filter(|(prefix, _)| u.key.starts_with(prefix))
            .map(|(_, days)| {
                UNIX_EPOCH + Duration::from_secs((initiated + days * day).div_ceil(day) * day)
            })
            .min();
        if due.is_none_or(|d| d > now) {
            continue;
        }
        match store.abort_multipart(bucket, &u.key, &u.upload_id).await {
            Ok(()) => report.uploads_aborted += 1,
            Err(StoreError::NoSuchUpload(_)) => {}
            Err(e) => {
                tracing::warn!(bucket, key = %u.key, error = %e, "lifecycle: abort failed");
                report.errors += 1;
            }
        }
    }
}
