//! Object bodies from the store to s3s: the store's streams are `Send`, s3s wants
//! `Send + Sync` with a known remaining length.

use bytes::Bytes;
use futures_util::Stream;
use railstore_store::Body;
use s3s::stream::{ByteStream, RemainingLength};
use s3s::StdError;
use std::pin::Pin;
use std::sync::Mutex;
use std::task::{Context, Poll};

/// An object body on its way out. The mutex is never locked (only `get_mut`); it makes the
/// stream `Sync` as s3s requires.
pub(crate) struct Outgoing {
    inner: Mutex<Body>,
    remaining: u64,
    what: String,
}

impl Outgoing {
    pub fn new(body: Body, len: u64, what: String) -> Outgoing {
        Outgoing {
            inner: Mutex::new(body),
            remaining: len,
            what,
        }
    }
}

impl Stream for Outgoing {
    type Item = Result<Bytes, StdError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let body = this.inner.get_mut().unwrap_or_else(|p| p.into_inner());
        match body.as_mut().poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Ready(Some(Ok(b))) => {
                this.remaining = this.remaining.saturating_sub(b.len() as u64);
                Poll::Ready(Some(Ok(b)))
            }
            Poll::Ready(Some(Err(e))) => {
                // The status line is gone already: the connection is cut, the client sees a
                // short body.
                tracing::error!(object = %this.what, error = %e, "reading an object failed mid-body");
                Poll::Ready(Some(Err(Box::new(e))))
            }
        }
    }
}

impl ByteStream for Outgoing {
    fn remaining_length(&self) -> RemainingLength {
        RemainingLength::new_exact(usize::try_from(self.remaining).unwrap_or(usize::MAX))
    }
}
