//! Small pure pieces: S3's URL encoding of keys, opaque continuation tokens, conditional
//! requests, timestamps.

use s3s::dto::{ETagCondition, Timestamp, TimestampFormat};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Encodes a key, prefix or delimiter for `encoding-type=url` responses the way S3 does:
/// unreserved characters and `/` stay, every other byte (a space too) becomes `%XX`.
pub(crate) fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'/' | b'*' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

/// A continuation token: opaque to clients, the key or common prefix the page ended at.
pub(crate) fn token_encode(after: &str) -> String {
    base64_simd::URL_SAFE_NO_PAD.encode_to_string(after.as_bytes())
}

/// Reads a token [`token_encode`] made; `None` when it is not one.
pub(crate) fn token_decode(token: &str) -> Option<String> {
    let raw = base64_simd::URL_SAFE_NO_PAD.decode_to_vec(token).ok()?;
    String::from_utf8(raw).ok()
}

pub(crate) fn timestamp(t: SystemTime) -> Timestamp {
    Timestamp::from(t)
}

pub(crate) fn system_time(t: &Timestamp) -> SystemTime {
    SystemTime::from(time::OffsetDateTime::from(t.clone()))
}

/// Whole seconds since the epoch (HTTP dates have no finer resolution).
fn seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_secs()
}

/// An HTTP date, as stored for `Expires`.
pub(crate) fn http_date(t: &Timestamp) -> Option<String> {
    let mut buf = Vec::new();
    t.format(TimestampFormat::HttpDate, &mut buf).ok()?;
    String::from_utf8(buf).ok()
}

pub(crate) fn parse_http_date(s: &str) -> Option<Timestamp> {
    Timestamp::parse(TimestampFormat::HttpDate, s).ok()
}

/// The conditional headers of a read.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Conditions<'a> {
    pub if_match: Option<&'a ETagCondition>,
    pub if_none_match: Option<&'a ETagCondition>,
    pub if_modified_since: Option<&'a Timestamp>,
    pub if_unmodified_since: Option<&'a Timestamp>,
}

/// What the conditions say about an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    Proceed,
    /// 304 (reads only).
    NotModified,
    /// 412.
    PreconditionFailed,
}

fn matches(c: &ETagCondition, etag: &str) -> bool {
    match c {
        ETagCondition::Any => true,
        ETagCondition::ETag(e) => e.value() == etag.trim_matches('"'),
    }
}

impl Conditions<'_> {
    /// Evaluates the conditions in RFC 9110's order (S3 follows it): `If-Match`, else
    /// `If-Unmodified-Since`; then `If-None-Match`, else `If-Modified-Since`.
    pub fn evaluate(&self, etag: &str, last_modified: SystemTime) -> Verdict {
        let modified = seconds(last_modified);
        match (self.if_match, self.if_unmodified_since) {
            (Some(c), _) if !matches(c, etag) => return Verdict::PreconditionFailed,
            (None, Some(t)) if modified > seconds(system_time(t)) => {
                return Verdict::PreconditionFailed
            }
            _ => {}
        }
        match (self.if_none_match, self.if_modified_since) {
            (Some(c), _) if matches(c, etag) => Verdict::NotModified,
            (None, Some(t)) if modified <= seconds(system_time(t)) => Verdict::NotModified,
            _ => Verdict::Proceed,
        }
    }

    pub fn any(&self) -> bool {
        self.if_match.is_some()
            || self.if_none_match.is_some()
            || self.if_modified_since.is_some()
            || self.if_unmodified_since.is_some()
    }
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Compares secrets (tokens, signatures) in time that depends on their length only.
pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use s3s::dto::ETag;

    #[test]
    fn url_encoding_follows_s3() {
        assert_eq!(url_encode("a/b c+d%é~"), "a/b%20c%2Bd%25%C3%A9%7E");
        assert_eq!(url_encode("plain-key_1.txt"), "plain-key_1.txt");
    }

    #[test]
    fn tokens_round_trip_any_key() {
        for k in ["", "a/b", "ünïcödé/ +=&?", "\u{10FFFF}"] {
            assert_eq!(token_decode(&token_encode(k)).as_deref(), Some(k));
        }
        assert_eq!(token_decode("***"), None);
    }

    #[test]
    fn conditions_follow_rfc_9110() {
        let t0 = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let before = timestamp(t0 - Duration::from_secs(10));
        let after = timestamp(t0 + Duration::from_secs(10));
        let same = timestamp(t0);
        let yes = ETagCondition::ETag(ETag::Strong("abc".into()));
        let no = ETagCondition::ETag(ETag::Strong("xyz".into()));
        let any = ETagCondition::Any;
        let eval = |c: Conditions<'_>| c.evaluate("abc", t0 + Duration::from_millis(500));
        use Verdict::*;
        assert_eq!(eval(Conditions::default()), Proceed);
        assert_eq!(
            eval(Conditions {
                if_match: Some(&yes),
                ..Default::default()
            }),
            Proceed
        );
        assert_eq!(
            eval(Conditions {
                if_match: Some(&any),
                ..Default::default()
            }),
            Proceed
        );
        assert_eq!(
            eval(Conditions {
                if_match: Some(&no),
                ..Default::default()
            }),
            PreconditionFailed
        );
        assert_eq!(
            eval(Conditions {
                if_none_match: Some(&yes),
                ..Default::default()
            }),
            NotModified
        );
        assert_eq!(
            eval(Conditions {
                if_none_match: Some(&no),
                ..Default::default()
            }),
            Proceed
        );
        assert_eq!(
            eval(Conditions {
                if_modified_since: Some(&same),
                ..Default::default()
            }),
            NotModified
        );
        assert_eq!(
            eval(Conditions {
                if_modified_since: Some(&before),
                ..Default::default()
            }),
            Proceed
        );
        assert_eq!(
            eval(Conditions {
                if_unmodified_since: Some(&before),
                ..Default::default()
            }),
            PreconditionFailed
        );
        assert_eq!(
            eval(Conditions {
                if_unmodified_since: Some(&after),
                ..Default::default()
            }),
            Proceed
        );
        // If-Match wins over If-Unmodified-Since, If-None-Match over If-Modified-Since.
        assert_eq!(
            eval(Conditions {
                if_match: Some(&yes),
                if_unmodified_since: Some(&before),
                ..Default::default()
            }),
            Proceed
        );
        assert_eq!(
            eval(Conditions {
                if_none_match: Some(&no),
                if_modified_since: Some(&after),
                ..Default::default()
            }),
            Proceed
        );
    }
}
