//! Where the clients send their operations: S3, or the store itself (the baseline).

use super::*;

/// One operation done: body bytes moved and, for reads, the time to the first byte.
pub struct Done {
    pub bytes: u64,
    pub ttfb_ns: Option<u64>,
}

/// One client of a [`Target`]: an S3 client has its own connection.
pub enum Client {
    S3(Box<S3Client>),
    Store(Store),
}

/// Where a run sends its operations.
#[derive(Clone)]
pub enum Target {
    S3(Arc<Resolved>),
    Store(Store),
}

impl Target {
    /// The S3 endpoint `endpoint`, resolved once for every client.
    pub async fn s3(endpoint: &Endpoint) -> Result<Target> {
        Ok(Target::S3(endpoint.resolve().await?))
    }

    pub fn client(&self) -> Client {
        match self {
            Target::S3(ep) => Client::S3(Box::new(S3Client::new(ep.clone()))),
            Target::Store(s) => Client::Store(s.clone()),
        }
    }

    pub(super) fn name(&self) -> &'static str {
        match self {
            Target::S3(_) => "s3",
            Target::Store(_) => "store",
        }
    }
}

impl Client {
    pub async fn put(&mut self, bucket: &str, key: &str, data: &Bytes) -> Result<Done, String> {
        match self {
            Client::S3(c) => {
                c.call(Method::PUT, bucket, key, data.clone()).await?;
                Ok(Done {
                    bytes: data.len() as u64,
                    ttfb_ns: None,
                })
            }
            Client::Store(s) => {
                s.put_object(bucket, key, body_from(data.clone()), PutOptions::default())
                    .await
                    .map_err(|e| format!("put {bucket}/{key}: {e}"))?;
                Ok(Done {
                    bytes: data.len() as u64,
                    ttfb_ns: None,
                })
            }
        }
    }

    /// Reads `bucket/key`, which must be `size` bytes long.
    pub async fn get(&mut self, bucket: &str, key: &str, size: u64) -> Result<Done, String> {
        let (bytes, ttfb_ns) = match self {
            Client::S3(c) => {
                let path = format!("/{bucket}/{key}");
                let r = c.request(Method::GET, &path, Bytes::new()).await?;
                if !r.status.is_success() {
                    return Err(status_error("GET", &path, &r));
                }
                (r.bytes, r.ttfb_ns)
            }
            Client::Store(s) => {
                use futures_util::StreamExt;
                let t0 = Instant::now();
                let mut got = s
                    .get_object(bucket, key, None)
                    .await
                    .map_err(|e| format!("get {bucket}/{key}: {e}"))?;
                let ttfb = t0.elapsed().as_nanos() as u64;
                let mut n = 0u64;
                while let Some(piece) = got.body.next().await {
                    n += piece
                        .map_err(|e| format!("get {bucket}/{key}: reading: {e}"))?
                        .len() as u64;
                }
                (n, ttfb)
            }
        };
        if bytes != size {
            return Err(format!(
                "get {bucket}/{key}: {bytes} bytes instead of {size}"
            ));
        }
        Ok(Done {
            bytes,
            ttfb_ns: Some(ttfb_ns),
        })
    }

    pub(super) async fn delete(&mut self, bucket: &str, key: &str) -> Result<(), String> {
        match self {
            Client::S3(c) => {
                c.call(Method::DELETE, bucket, key, Bytes::new()).await?;
            }
            Client::Store(s) => {
                s.delete_object(bucket, key)
                    .await
                    .map_err(|e| format!("delete {bucket}/{key}: {e}"))?;
            }
        }
        Ok(())
    }

    /// Creates the bucket; one that exists already (ours) is fine.
    pub(super) async fn create_bucket(&mut self, bucket: &str) -> Result<(), String> {
        match self {
            Client::S3(c) => {
                let path = format!("/{bucket}");
                let r = c.request(Method::PUT, &path, Bytes::new()).await?;
                if r.status.is_success()
                    || (r.status == StatusCode::CONFLICT
                        && r.error_body.contains("BucketAlreadyOwnedByYou"))
                {
                    Ok(())
                } else {
                    Err(status_error("PUT", &path, &r))
                }
            }
            Client::Store(s) => s
                .create_bucket(bucket)
                .await
                .map(|_| ())
                .map_err(|e| format!("creating bucket {bucket}: {e}")),
        }
    }
}

pub(super) fn object_key(prefix: &str, i: u64) -> String {
    format!("{prefix}/obj/{i:08}")
}

pub(super) fn put_key(prefix: &str, target: &str, round: usize, client: usize, seq: u64) -> String {
    format!("{prefix}/put-{target}-{round}/{client:03}/{seq:010}")
}
