//! multipart/form-data for POST uploads, read as it arrives: the fields before the file into
//! memory (bounded), the file as a stream that ends at the part's closing boundary. Fields
//! after the file are not read (S3 ignores them).

use bytes::{Bytes, BytesMut};
use futures_util::Stream;
use hyper::body::Body;
use s3s::StdError;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

/// The fields before the file, and where the file's bytes start.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Head {
    /// Name and value of each field, in order, names as sent.
    pub fields: Vec<(String, String)>,
    /// The file part's `filename`, if it has one.
    pub filename: Option<String>,
}

/// Why a form cannot be read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum FormError {
    /// The fields before the file do not fit in the limit.
    TooLarge,
    /// Not a form that can be read.
    Malformed(String),
    /// The body failed (cut off, or idle too long).
    Body(String),
}

/// The boundary a `multipart/form-data` content type names.
pub(crate) fn boundary(content_type: Option<&http::HeaderValue>) -> Option<String> {
    let v = String::from_utf8_lossy(content_type?.as_bytes()).into_owned();
    v.split(';')
        .skip(1)
        .find_map(|p| {
            let (k, val) = p.split_once('=')?;
            k.trim()
                .eq_ignore_ascii_case("boundary")
                .then(|| val.trim().trim_matches('"').to_string())
        })
        .filter(|b| !b.is_empty())
}

/// What a part's head says: its field name and file name.
fn disposition(head: &str) -> (String, Option<String>) {
    let mut name = String::new();
    let mut filename = None;
    for line in head.split("\r\n") {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        if !k.trim().eq_ignore_ascii_case("content-disposition") {
            continue;
        }
        for p in v.split(';') {
            let Some((k, v)) = p.split_once('=') else {
                continue;
            };
            let v = v.trim().trim_matches('"').to_string();
            match k.trim().to_ascii_lowercase().as_str() {
                "name" => name = v,
                "filename" => filename = Some(v),
                _ => {}
            }
        }
    }
    (name, filename)
}

/// Parses the fields in `buf` up to the file part. `Ok(None)`: more bytes are needed. On
/// success, also returns the offset of the file's first byte.
fn parse_head(buf: &[u8], boundary: &str) -> Result<Option<(Head, Option<usize>)>, String> {
    let delimiter = format!("--{boundary}");
    let next_part = format!("\r\n--{boundary}");
    let Some(first) = find(buf, delimiter.as_bytes(), 0) else {
        return Ok(None);
    };
    let mut fields = Vec::new();
    let mut at = first + delimiter.len();
    loop {
        if buf.len() < at + 2 {
            return Ok(None);
        }
        if &buf[at..at + 2] == b"--" {
            // The form ends without a file.
            let head = Head {
                fields,
                filename: None,
            };
            return Ok(Some((head, None)));
        }
        if &buf[at..at + 2] != b"\r\n" {
            return Err("a boundary is not followed by a line end".into());
        }
        let head_start = at + 2;
        let Some(head_end) = find(buf, b"\r\n\r\n", head_start) else {
            return Ok(None);
        };
        let (name, filename) = disposition(&String::from_utf8_lossy(&buf[head_start..head_end]));
        let value_start = head_end + 4;
        if name.eq_ignore_ascii_case("file") {
            let head = Head { fields, filename };
            return Ok(Some((head, Some(value_start))));
        }
        let Some(end) = find(buf, next_part.as_bytes(), value_start) else {
            return Ok(None);
        };
        let value = String::from_utf8_lossy(&buf[value_start..end]).into_owned();
        fields.push((name, value));
        at = end + next_part.len();
    }
}

/// Reads the form's fields, at most about `max` bytes of its body; returns them and the file
/// (`None`: the form has no file part).
pub(crate) async fn read<B>(
    content_type: Option<&http::HeaderValue>,
    mut body: B,
    max: usize,
) -> Result<(Head, Option<File<B>>), FormError>
where
    B: Body<Data = Bytes, Error = StdError> + Unpin,
{
    let Some(boundary) = boundary(content_type) else {
        return Err(FormError::Malformed("the form has no boundary".into()));
    };
    let mut buf = BytesMut::new();
    loop {
        match parse_head(&buf, &boundary).map_err(FormError::Malformed)? {
            Some((head, None)) => return Ok((head, None)),
            Some((head, Some(start))) => {
                let _ = buf.split_to(start);
                let file = File {
                    body,
                    pending: buf,
                    delimiter: format!("\r\n--{boundary}").into_bytes(),
                    done: false,
                };
                return Ok((head, Some(file)));
            }
            None if buf.len() >= max => return Err(FormError::TooLarge),
            None => {}
        }
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        match frame {
            None => {
                return Err(FormError::Malformed(
                    "the form ends before its fields do".into(),
                ))
            }
            Some(Err(e)) => return Err(FormError::Body(e.to_string())),
            Some(Ok(f)) => {
                if let Ok(data) = f.into_data() {
                    buf.extend_from_slice(&data);
                }
            }
        }
    }
}

/// The file part's bytes, streamed from the request body.
pub(crate) struct File<B> {
    body: B,
    /// Read but not yet passed on: what might be the start of the closing boundary is held.
    pending: BytesMut,
    delimiter: Vec<u8>,
    done: bool,
}

/// The form broke off inside the file.
#[derive(Debug)]
pub(crate) struct FileError(pub(crate) String);

impl std::fmt::Display for FileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for FileError {}

impl<B> Stream for File<B>
where
    B: Body<Data = Bytes, Error = StdError> + Unpin,
{
    type Item = Result<Bytes, FileError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        loop {
            if this.done {
                return Poll::Ready(None);
            }
            if let Some(end) = find(&this.pending, &this.delimiter, 0) {
                this.done = true;
                let last = this.pending.split_to(end).freeze();
                this.pending.clear();
                if last.is_empty() {
                    return Poll::Ready(None);
                }
                return Poll::Ready(Some(Ok(last)));
            }
            let keep = this.delimiter.len() - 1;
            if this.pending.len() > keep {
                let n = this.pending.len() - keep;
                return Poll::Ready(Some(Ok(this.pending.split_to(n).freeze())));
            }
            match ready!(Pin::new(&mut this.body).poll_frame(cx)) {
                None => {
                    this.done = true;
                    let e = FileError("the form ends inside its file".into());
                    return Poll::Ready(Some(Err(e)));
                }
                Some(Err(e)) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(FileError(e.to_string()))));
                }
                Some(Ok(f)) => {
                    if let Ok(data) = f.into_data() {
                        this.pending.extend_from_slice(&data);
                    }
                }
            }
        }
    }
}

pub(crate) fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if from > hay.len() || needle.is_empty() {
        return None;
    }
    hay[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use hyper::body::Frame;
    use std::collections::VecDeque;

    /// A body that arrives in the pieces given.
    struct Pieces(VecDeque<Bytes>);

    impl Body for Pieces {
        type Data = Bytes;
        type Error = StdError;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, StdError>>> {
            Poll::Ready(self.0.pop_front().map(|b| Ok(Frame::data(b))))
        }
    }

    fn form(parts: &[(&str, &str)], file: Option<&str>) -> Vec<u8> {
        let mut out = Vec::new();
        for (k, v) in parts {
            out.extend_from_slice(
                format!("--XyZ\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n")
                    .as_bytes(),
            );
        }
        if let Some(f) = file {
            out.extend_from_slice(
                format!(
                    "--XyZ\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.txt\"\r\n\
                     Content-Type: application/octet-stream\r\n\r\n{f}\r\n"
                )
                .as_bytes(),
            );
        }
        out.extend_from_slice(b"--XyZ--\r\n");
        out
    }

    /// A body that arrives `piece` bytes at a time.
    fn body(bytes: Vec<u8>, piece: usize) -> Pieces {
        Pieces(bytes.chunks(piece).map(Bytes::copy_from_slice).collect())
    }

    fn content_type() -> http::HeaderValue {
        http::HeaderValue::from_static("multipart/form-data; boundary=XyZ")
    }

    #[tokio::test]
    async fn fields_then_the_file_in_pieces_of_any_size() {
        let data = "line one\r\n--Xy not the boundary\r\n".repeat(50);
        let f = form(&[("key", "k"), ("policy", "p\r\nq")], Some(&data));
        for piece in [1, 2, 7, 64, 5000] {
            let (head, file) = read(Some(&content_type()), body(f.clone(), piece), 4096)
                .await
                .unwrap();
            assert_eq!(
                head.fields,
                vec![
                    ("key".into(), "k".into()),
                    ("policy".into(), "p\r\nq".into())
                ]
            );
            assert_eq!(head.filename.as_deref(), Some("a.txt"));
            let got: Vec<u8> = file
                .unwrap()
                .map(|r| r.unwrap())
                .collect::<Vec<_>>()
                .await
                .concat();
            assert_eq!(got, data.as_bytes(), "pieces of {piece}");
        }
    }

    #[tokio::test]
    async fn bad_forms_are_named() {
        let f = form(&[("key", "k")], None);
        let (head, file) = read(Some(&content_type()), body(f, 3), 4096).await.unwrap();
        assert!(file.is_none());
        assert_eq!(head.fields.len(), 1);
        let f = form(&[("policy", &"p".repeat(10_000))], Some("x"));
        assert_eq!(
            read(Some(&content_type()), body(f, 100), 4096).await.err(),
            Some(FormError::TooLarge)
        );
        let f = form(&[("key", "k")], Some("data"));
        let cut = f.len() - 12;
        let (_, file) = read(Some(&content_type()), body(f[..cut].to_vec(), 5), 4096)
            .await
            .unwrap();
        let last = file.unwrap().collect::<Vec<_>>().await.pop().unwrap();
        assert!(
            last.is_err(),
            "a file cut off is an error, not a short file"
        );
        let none = http::HeaderValue::from_static("multipart/form-data");
        assert!(matches!(
            read(Some(&none), body(Vec::new(), 1), 10).await,
            Err(FormError::Malformed(_))
        ));
    }
}
