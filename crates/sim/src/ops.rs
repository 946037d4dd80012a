//! Running the plan's operations through the store's API, as an S3 front end would.

use crate::model::Read;
use crate::plan::{MultipartEnd, Op, BUCKET, KEYS};
use railstore_store::{
    body_from, collect_body, ListQuery, PartOptions, PutOptions, RangeSpec, Store, StoreError,
};
use std::collections::BTreeMap;

/// What an operation got back.
#[derive(Debug)]
pub enum Outcome {
    /// A put: success, or the error.
    Put(Result<(), String>),
    /// A delete: whether the object existed, or the error.
    Delete(Result<bool, String>),
    /// A read.
    Get(Read),
    /// A listing: keys and common prefixes merged in order, or the error.
    List(Result<Vec<String>, String>),
    /// A multipart upload.
    Multipart(MultipartOutcome),
    /// Uploads aborted, or the error.
    Cleanup(Result<usize, String>),
}

/// How a multipart upload went.
#[derive(Debug, Default)]
pub struct MultipartOutcome {
    /// The upload could not even start (the error).
    pub create: Option<String>,
    /// Parts whose upload failed.
    pub parts_failed: usize,
    /// The completion's answer, if one was sent: `Ok`, or (refused on its merits, error).
    pub complete: Option<Result<(), (bool, String)>>,
    /// The abort's answer, if one was sent: `Ok`, or (refused on its merits, error).
    pub abort: Option<Result<(), (bool, String)>>,
}

/// Errors that say the store refused the request on its merits (nothing changed), not that
/// something failed along the way.
pub fn refused_on_merits(e: &StoreError) -> bool {
    matches!(
        e,
        StoreError::NoSuchUpload(_)
            | StoreError::InvalidPart { .. }
            | StoreError::InvalidPartOrder
            | StoreError::EntityTooSmall { .. }
            | StoreError::InvalidArgument(_)
            | StoreError::PreconditionFailed(_)
            | StoreError::NoSuchKey { .. }
    )
}

/// Reads `key` (or a range of it).
pub async fn read(store: &Store, key: &str, range: Option<RangeSpec>) -> Read {
    match store.get_object(BUCKET, key, range).await {
        Ok(g) => {
            let size = g.info.size;
            let r = g.range;
            match collect_body(g.body).await {
                Ok(bytes) => Read::Body {
                    size,
                    range: r,
                    bytes,
                },
                Err(e) => Read::Error(format!("reading the body: {e}")),
            }
        }
        Err(StoreError::NoSuchKey { .. }) => Read::Absent,
        Err(StoreError::InvalidRange { .. }) => Read::InvalidRange,
        Err(e) => Read::Error(e.to_string()),
    }
}

/// Lists `prefix` page by page; keys and common prefixes in the order pages give them.
pub async fn list(
    store: &Store,
    prefix: &str,
    delimiter: bool,
    max_keys: usize,
) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut after = None;
    for _ in 0..1000 {
        let page = store
            .list_objects(
                BUCKET,
                &ListQuery {
                    prefix: prefix.to_string(),
                    delimiter: delimiter.then(|| "/".to_string()),
                    after: after.clone(),
                    max_keys,
                },
            )
            .map_err(|e| e.to_string())?;
        let mut entries: Vec<String> = page.objects.iter().map(|o| o.key.clone()).collect();
        entries.extend(page.prefixes.iter().cloned());
        entries.sort();
        if entries.len() > max_keys {
            return Err(format!(
                "a page of {} entries where at most {max_keys} were asked for",
                entries.len()
            ));
        }
        out.extend(entries);
        if !page.truncated {
            return Ok(out);
        }
        if page.next_after.is_none() || page.next_after == after {
            return Err(format!(
                "a truncated page without progress (next after {:?})",
                page.next_after
            ));
        }
        after = page.next_after;
        tokio::task::yield_now().await;
    }
    Err("more than 1000 pages".into())
}

/// Runs one operation. `bodies` holds the bytes of a put's body or a multipart upload's
/// parts.
pub async fn run(store: Store, op: Op, bodies: Vec<Vec<u8>>) -> Outcome {
    match op {
        Op::Put { key, .. } => {
            let body = bodies.into_iter().next().unwrap_or_default();
            Outcome::Put(
                store
                    .put_object(BUCKET, KEYS[key], body_from(body), PutOptions::default())
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string()),
            )
        }
        Op::Delete { key } => Outcome::Delete(
            store
                .delete_object(BUCKET, KEYS[key])
                .await
                .map_err(|e| e.to_string()),
        ),
        Op::Get { key, range } => Outcome::Get(read(&store, KEYS[key], range).await),
        Op::List {
            prefix,
            delimiter,
            max_keys,
        } => Outcome::List(list(&store, prefix, delimiter, max_keys).await),
        Op::Multipart {
            key, resend, end, ..
        } => Outcome::Multipart(multipart(store, KEYS[key], bodies, resend, end).await),
        Op::CleanupUploads => Outcome::Cleanup(cleanup(&store).await),
    }
}

async fn cleanup(store: &Store) -> Result<usize, String> {
    let uploads = store.list_uploads(BUCKET, "").map_err(|e| e.to_string())?;
    let mut n = 0;
    for u in uploads {
        match store.abort_multipart(BUCKET, &u.key, &u.upload_id).await {
            Ok(()) => n += 1,
            Err(StoreError::NoSuchUpload(_)) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(n)
}

fn split(e: StoreError) -> (bool, String) {
    (refused_on_merits(&e), e.to_string())
}

async fn multipart(
    store: Store,
    key: &'static str,
    parts: Vec<Vec<u8>>,
    resend: Vec<usize>,
    end: MultipartEnd,
) -> MultipartOutcome {
    let mut out = MultipartOutcome::default();
    let id = match store
        .create_multipart(BUCKET, key, PutOptions::default())
        .await
    {
        Ok(id) => id,
        Err(e) => {
            out.create = Some(e.to_string());
            return out;
        }
    };
    let uploads = parts.iter().enumerate().map(|(i, p)| {
        let store = store.clone();
        let id = id.clone();
        let p = p.clone();
        async move {
            store
                .upload_part(
                    BUCKET,
                    key,
                    &id,
                    i as u32 + 1,
                    body_from(p),
                    PartOptions::default(),
                )
                .await
        }
    });
    let results = futures_util::future::join_all(uploads).await;
    let mut etags: BTreeMap<u32, String> = BTreeMap::new();
    for (i, r) in results.into_iter().enumerate() {
        match r {
            Ok(p) => {
                etags.insert(i as u32 + 1, p.etag);
            }
            Err(_) => out.parts_failed += 1,
        }
    }
    for &i in &resend {
        if let Err(_e) = store
            .upload_part(
                BUCKET,
                key,
                &id,
                i as u32 + 1,
                body_from(parts[i].clone()),
                PartOptions::default(),
            )
            .await
        {
            out.parts_failed += 1;
        }
    }
    let list: Vec<(u32, String)> = (1..=parts.len() as u32)
        .map(|n| (n, etags.get(&n).cloned().unwrap_or_else(|| "0".repeat(32))))
        .collect();
    let complete = {
        let store = store.clone();
        let id = id.clone();
        let list = list.clone();
        move || async move {
            store
                .complete_multipart(BUCKET, key, &id, &list, BTreeMap::new(), None)
                .await
                .map(|_| ())
                .map_err(split)
        }
    };
    let abort = {
        let store = store.clone();
        let id = id.clone();
        move || async move { store.abort_multipart(BUCKET, key, &id).await.map_err(split) }
    };
    match end {
        MultipartEnd::Complete => out.complete = Some(complete().await),
        MultipartEnd::Abort => out.abort = Some(abort().await),
        MultipartEnd::RaceAbort => {
            let c = tokio::spawn(complete());
            let a = tokio::spawn(abort());
            out.complete = Some(joined(c.await));
            out.abort = Some(joined(a.await));
        }
        MultipartEnd::RaceResend => {
            let again = {
                let store = store.clone();
                let id = id.clone();
                let p = parts[0].clone();
                tokio::spawn(async move {
                    store
                        .upload_part(BUCKET, key, &id, 1, body_from(p), PartOptions::default())
                        .await
                })
            };
            let c = tokio::spawn(complete());
            out.complete = Some(joined(c.await));
            // A part sent again after the completion finds no upload: that is fine.
            let _ = again.await;
        }
        MultipartEnd::Abandon => {}
    }
    out
}

/// A racing task's answer; its panic goes on up (the harness reports it).
fn joined<T>(r: Result<T, tokio::task::JoinError>) -> T {
    match r {
        Ok(v) => v,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        // Only a runtime shutting down cancels a task, and it drops this one with it.
        Err(e) => panic!("a racing task was cancelled: {e}"),
    }
}

/// The message of a panicked task.
pub fn panic_text(e: tokio::task::JoinError) -> String {
    if e.is_panic() {
        let p = e.into_panic();
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into());
        format!("panicked: {msg}")
    } else {
        "cancelled".into()
    }
}
