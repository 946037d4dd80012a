//! Object bytes under AES-256-CTR: streams that encrypt a body on its way to the store and
//! decrypt a stored range on its way out.
//!
//! CTR keeps sizes and offsets, so ranges, listings and part sizes are the plaintext's. Every
//! write of a part gets its own random IV (kept with the part, then with the object), so parts
//! are encrypted before anyone knows where they will start, and a part sent again never reuses
//! a keystream. Integrity is the store's (CRCs on every piece) and the ETag's.

use super::keys::Key;
use aes::Aes256;
use bytes::{Bytes, BytesMut};
use ctr::cipher::{KeyIvInit, StreamCipher, StreamCipherSeek};
use futures_util::Stream;
use md5::{Digest, Md5};
use railstore_store::{Body, StoreError};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

type Ctr = ctr::Ctr128BE<Aes256>;

/// An object's (or upload's) data key, opened, and the IV of a single-part object.
#[derive(Clone)]
pub(crate) struct DataKey {
    pub key: Key,
    pub iv: [u8; 16],
}

impl DataKey {
    /// The keystream from `iv`, at its start.
    fn cipher(&self, iv: &[u8; 16]) -> Ctr {
        Ctr::new((&self.key[..]).into(), iv.into())
    }
}

/// The plaintext's MD5, once an [`Encrypting`] body has ended (for the ETag and `Content-MD5`).
#[derive(Clone, Default)]
pub(crate) struct PlainMd5(Arc<Mutex<Option<[u8; 16]>>>);

impl PlainMd5 {
    pub fn get(&self) -> Option<[u8; 16]> {
        *self.0.lock().unwrap()
    }
}

/// A body encrypted as it streams from `iv`; `content_md5` (the client's
/// `Content-MD5`) is checked against the plaintext, and a mismatch ends the body with
/// `BadDigest`, so the store keeps nothing.
pub(crate) struct Encrypting {
    inner: Body,
    cipher: Ctr,
    md5: Option<Md5>,
    content_md5: Option<[u8; 16]>,
    plain_md5: PlainMd5,
}

impl Encrypting {
    pub fn new(
        inner: Body,
        key: &DataKey,
        iv: [u8; 16],
        content_md5: Option<[u8; 16]>,
    ) -> (Encrypting, PlainMd5) {
        let plain_md5 = PlainMd5::default();
        let body = Encrypting {
            inner,
            cipher: key.cipher(&iv),
            md5: Some(Md5::new()),
            content_md5,
            plain_md5: plain_md5.clone(),
        };
        (body, plain_md5)
    }
}

impl Stream for Encrypting {
    type Item = Result<Bytes, StoreError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let Some(md5) = this.md5.as_mut() else {
            return Poll::Ready(None);
        };
        match this.inner.as_mut().poll_next(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(Some(Ok(plain))) => {
                md5.update(&plain);
                let mut out = BytesMut::from(&plain[..]);
                this.cipher.apply_keystream(&mut out);
                Poll::Ready(Some(Ok(out.freeze())))
            }
            Poll::Ready(Some(Err(e))) => {
                this.md5 = None;
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                let sum: [u8; 16] = this.md5.take().expect("checked above").finalize().into();
                if this.content_md5.is_some_and(|want| want != sum) {
                    return Poll::Ready(Some(Err(StoreError::BadDigest(
                        "The Content-MD5 you specified did not match what we received.".into(),
                    ))));
                }
                *this.plain_md5.0.lock().unwrap() = Some(sum);
                Poll::Ready(None)
            }
        }
    }
}

/// Where an object's parts start, and their IVs: what [`Decrypting`] needs to find each
/// byte's keystream. Never empty.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PartMap(Vec<(u64, [u8; 16])>);

impl PartMap {
    /// A single-part object: one keystream from byte 0.
    pub fn single(iv: [u8; 16]) -> PartMap {
        PartMap(vec![(0, iv)])
    }

    /// A multipart object's parts, from their sizes and IVs (as many of each, at least one).
    pub fn multipart(sizes: &[u64], ivs: &[[u8; 16]]) -> Option<PartMap> {
        if sizes.is_empty() || sizes.len() != ivs.len() {
            return None;
        }
        let mut at = 0;
        let mut v = Vec::with_capacity(sizes.len());
        for (size, iv) in sizes.iter().zip(ivs) {
            v.push((at, *iv));
            at += size;
        }
        Some(PartMap(v))
    }

    /// The part holding byte `offset`: its index, start and IV.
    fn find(&self, offset: u64) -> (usize, u64, [u8; 16]) {
        let i = self.0.partition_point(|(start, _)| *start <= offset).max(1) - 1;
        let (start, iv) = self.0[i];
        (i, start, iv)
    }

    /// Where part `i + 1` starts.
    fn next_start(&self, i: usize) -> Option<u64> {
        self.0.get(i + 1).map(|(s, _)| *s)
    }
}

/// A stored range, decrypted as it streams; `start` is the range's first byte in the object.
pub(crate) struct Decrypting {
    inner: Body,
    key: DataKey,
    parts: PartMap,
    at: u64,
    /// The keystream in use: the part's index and its cipher, positioned at `at`.
    current: Option<(usize, Ctr)>,
}

impl Decrypting {
    pub fn new(inner: Body, key: DataKey, parts: PartMap, start: u64) -> Decrypting {
        Decrypting {
            inner,
            key,
            parts,
            at: start,
            current: None,
        }
    }

    fn decrypt(&mut self, buf: &mut [u8]) {
        let mut done = 0;
        while done < buf.len() {
            let (i, start, iv) = self.parts.find(self.at);
            if self.current.as_ref().map(|(c, _)| *c) != Some(i) {
                let mut c = self.key.cipher(&iv);
                c.seek(self.at - start);
                self.current = Some((i, c));
            }
            let end = self
                .parts
                .next_start(i)
                .map_or(buf.len(), |next| {
                    (done as u64 + (next - self.at)).min(buf.len() as u64) as usize
                })
                .max(done + 1);
            let (_, c) = self.current.as_mut().expect("set above");
            c.apply_keystream(&mut buf[done..end]);
            self.at += (end - done) as u64;
            done = end;
        }
    }
}

impl Stream for Decrypting {
    type Item = Result<Bytes, StoreError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        match this.inner.as_mut().poll_next(cx) {
            Poll::Ready(Some(Ok(stored))) => {
                let mut out = BytesMut::from(&stored[..]);
                this.decrypt(&mut out);
                Poll::Ready(Some(Ok(out.freeze())))
            }
            other => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use zeroize::Zeroizing;

    fn key() -> DataKey {
        DataKey {
            key: Zeroizing::new([3; 32]),
            iv: [9; 16],
        }
    }

    fn body(pieces: Vec<Vec<u8>>) -> Body {
        Box::pin(futures_util::stream::iter(
            pieces.into_iter().map(|p| Ok(Bytes::from(p))),
        ))
    }

    async fn collect(mut b: impl Stream<Item = Result<Bytes, StoreError>> + Unpin) -> Vec<u8> {
        let mut out = Vec::new();
        while let Some(p) = b.next().await {
            out.extend_from_slice(&p.unwrap());
        }
        out
    }

    /// Parts encrypted alone, read back as one object from any offset in pieces of any size.
    #[tokio::test]
    async fn ranges_across_parts_decrypt_to_the_plaintext() {
        let sizes = [1000u64, 17, 4096, 333];
        let ivs = [[2u8; 16], [5; 16], [6; 16], [9; 16]];
        let plain: Vec<u8> = (0..sizes.iter().sum::<u64>())
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let mut stored = Vec::new();
        let mut at = 0usize;
        for (size, iv) in sizes.iter().zip(ivs) {
            let part = plain[at..at + *size as usize].to_vec();
            let (enc, md5) = Encrypting::new(body(vec![part.clone()]), &key(), iv, None);
            let sealed = collect(enc).await;
            assert_ne!(sealed, part);
            assert_eq!(md5.get().unwrap(), <[u8; 16]>::from(Md5::digest(&part)));
            stored.extend(sealed);
            at += *size as usize;
        }
        let map = PartMap::multipart(&sizes, &ivs).unwrap();
        assert!(PartMap::multipart(&sizes, &ivs[1..]).is_none());
        for (start, end, piece) in [
            (0, plain.len(), 64),
            (990, 1020, 7),
            (1016, 1018, 1),
            (5000, plain.len(), 100),
            (3, 5200, 4096),
        ] {
            let pieces = stored[start..end].chunks(piece).map(<[u8]>::to_vec);
            let dec = Decrypting::new(body(pieces.collect()), key(), map.clone(), start as u64);
            assert!(collect(dec).await == plain[start..end], "{start}..{end}");
        }
    }

    /// Two IVs never share a keystream; one IV always gives the same bytes.
    #[tokio::test]
    async fn each_iv_is_its_own_keystream() {
        let plain = vec![0u8; 4096];
        let sealed = |iv: [u8; 16]| {
            let (enc, _) = Encrypting::new(body(vec![plain.clone()]), &key(), iv, None);
            collect(enc)
        };
        let mut iv = [1u8; 16];
        let one = sealed(iv).await;
        iv[15] ^= 1;
        assert_ne!(one, sealed(iv).await);
        iv[15] ^= 1;
        assert_eq!(one, sealed(iv).await);
    }

    #[tokio::test]
    async fn a_wrong_content_md5_ends_the_body_with_bad_digest() {
        let (mut enc, md5) =
            Encrypting::new(body(vec![b"abc".to_vec()]), &key(), [0; 16], Some([0; 16]));
        assert!(enc.next().await.unwrap().is_ok());
        assert!(matches!(
            enc.next().await,
            Some(Err(StoreError::BadDigest(_)))
        ));
        assert!(md5.get().is_none());
        let single = PartMap::single(key().iv);
        let (enc, _) = Encrypting::new(body(vec![b"hello world".to_vec()]), &key(), key().iv, None);
        let sealed = collect(enc).await;
        let dec = Decrypting::new(body(vec![sealed[6..].to_vec()]), key(), single, 6);
        assert_eq!(collect(dec).await, b"world");
    }
}
