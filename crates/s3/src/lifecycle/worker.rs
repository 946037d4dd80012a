//! The lifecycle worker: one pass over every bucket with rules, deleting the objects whose
//! expiry has come (in a bucket with versioning: hiding them behind a delete marker), the
//! older versions whose `NoncurrentVersionExpiration` has come, delete markers left with no
//! versions to hide (`ExpiredObjectDeleteMarker`), and aborting the multipart uploads older
//! than their rule allows.

use super::{applies, days_after, expiry, rule_prefix, rules};
use railstore_store::{
    version_name, ListQuery, ObjectInfo, Store, StoreError, VersionEntry, VersionQuery,
    WriteCondition,
};
use s3s::dto::{ExpirationStatus, LifecycleRule};
use std::time::SystemTime;

/// What one pass of [`expire`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ExpiryReport {
    /// Buckets with lifecycle rules.
    pub buckets: usize,
    /// Objects deleted because a rule expired them.
    pub objects_deleted: u64,
    /// Older versions and delete markers removed because a rule expired them.
    pub versions_deleted: u64,
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
        let on_versions = |r: &LifecycleRule| {
            r.noncurrent_version_expiration.is_some()
                || r.expiration
                    .as_ref()
                    .is_some_and(|e| e.expired_object_delete_marker == Some(true))
        };
        if rules.iter().filter(enabled).any(on_versions) {
            expire_versions(store, &bucket.name, &rules, now, &mut report).await;
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
            let Ok(info) = store.head_object(bucket, &entry.key).await else {
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
                Ok(d) if d.existed => {
                    report.objects_deleted += 1;
                    tracing::debug!(bucket, key = %info.key, rule, "lifecycle: expired");
                }
                Ok(_)
                | Err(StoreError::PreconditionFailed(_))
                | Err(StoreError::ObjectLocked(_)) => {}
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

/// Walks the bucket's versions a key at a time and removes those the rules expire.
async fn expire_versions(
    store: &Store,
    bucket: &str,
    rules: &[LifecycleRule],
    now: SystemTime,
    report: &mut ExpiryReport,
) {
    let mut q = VersionQuery {
        max_keys: 1000,
        ..VersionQuery::default()
    };
    // The versions of the key being read, newest first (a key may span pages).
    let mut key_versions: Vec<VersionEntry> = Vec::new();
    loop {
        let page = match store.list_versions(bucket, &q) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(bucket, error = %e, "lifecycle: listing versions failed");
                report.errors += 1;
                return;
            }
        };
        for v in page.versions {
            if key_versions
                .first()
                .is_some_and(|f| f.info.key != v.info.key)
            {
                let versions = std::mem::take(&mut key_versions);
                expire_key_versions(store, bucket, rules, now, &versions, report).await;
            }
            key_versions.push(v);
        }
        if !page.truncated {
            break;
        }
        q.key_marker = page.next_key_marker;
        q.version_marker = page.next_version_marker;
    }
    expire_key_versions(store, bucket, rules, now, &key_versions, report).await;
}

/// Which of one key's versions (newest first) the rules expire as of `now`: older versions
/// `NoncurrentDays` after they stopped being current (beyond the `NewerNoncurrentVersions`
/// kept), and a delete marker that is all the key has left.
pub(super) fn expired_versions<'v>(
    rules: &[LifecycleRule],
    versions: &'v [VersionEntry],
    now: SystemTime,
) -> Vec<&'v ObjectInfo> {
    let mut out = Vec::new();
    for (i, v) in versions.iter().enumerate().skip(1) {
        let info = &v.info;
        // It stopped being current when the next newer version was made.
        let since = versions[i - 1].info.last_modified;
        let tags = crate::tagging::stored(info);
        let expired = rules.iter().filter(|r| applies(r, info, &tags)).any(|r| {
            let Some(n) = &r.noncurrent_version_expiration else {
                return false;
            };
            let keep = n.newer_noncurrent_versions.unwrap_or(0).max(0) as usize;
            let days = n.noncurrent_days.and_then(|d| u64::try_from(d).ok());
            i > keep
                && days
                    .and_then(|d| days_after(since, d))
                    .is_some_and(|at| at <= now)
        });
        if expired {
            out.push(info);
        }
    }
    if let [only] = versions {
        let tags = crate::tagging::stored(&only.info);
        let expired_marker = only.info.delete_marker
            && rules
                .iter()
                .filter(|r| applies(r, &only.info, &tags))
                .any(|r| {
                    r.expiration
                        .as_ref()
                        .is_some_and(|e| e.expired_object_delete_marker == Some(true))
                });
        if expired_marker {
            out.push(&only.info);
        }
    }
    out
}

async fn expire_key_versions(
    store: &Store,
    bucket: &str,
    rules: &[LifecycleRule],
    now: SystemTime,
    versions: &[VersionEntry],
    report: &mut ExpiryReport,
) {
    for info in expired_versions(rules, versions, now) {
        let id = version_name(info.version_id.as_deref());
        let condition = WriteCondition::Version {
            etag: info.etag.clone(),
            last_modified: info.last_modified,
        };
        // A locked version outlives its lifecycle rule (S3 does the same).
        match store
            .delete_version(bucket, &info.key, id, Some(&condition), false)
            .await
        {
            Ok(d) if d.existed => {
                report.versions_deleted += 1;
                tracing::debug!(bucket, key = %info.key, version = id, "lifecycle: version expired");
            }
            Ok(_) | Err(StoreError::PreconditionFailed(_)) | Err(StoreError::ObjectLocked(_)) => {}
            Err(e) => {
                tracing::warn!(bucket, key = %info.key, error = %e, "lifecycle: delete failed");
                report.errors += 1;
            }
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
    for u in uploads {
        let due = rules
            .iter()
            .filter(|(prefix, _)| u.key.starts_with(prefix))
            .filter_map(|(_, days)| days_after(u.initiated, *days))
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
