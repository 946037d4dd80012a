//! The signature and policy of a POST upload: who signed the form (Version 2: HMAC-SHA1 of
//! the policy; Version 4: HMAC-SHA256 under the day's signing key), and whether the form's
//! fields keep to the policy (its expiration and conditions), as S3 checks them.

use crate::users::{User, Users};
use crate::util::{constant_time_eq, hex};
use base64_simd::STANDARD as B64;
use hmac::{Hmac, Mac};
use http::StatusCode;
use s3s::dto::{Timestamp, TimestampFormat};
use serde_json::Value;
use std::time::SystemTime;

/// A refusal: status, S3 error code, message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Refusal(pub StatusCode, pub &'static str, pub String);

fn bad(code: &'static str, msg: impl Into<String>) -> Refusal {
    Refusal(StatusCode::BAD_REQUEST, code, msg.into())
}

fn denied(msg: impl Into<String>) -> Refusal {
    Refusal(StatusCode::FORBIDDEN, "AccessDenied", msg.into())
}

/// The fields of a form, looked up by name without regard to case (as S3 does).
pub(crate) struct Fields<'f>(pub &'f [(String, String)]);

impl<'f> Fields<'f> {
    pub(crate) fn get(&self, name: &str) -> Option<&'f str> {
        self.0
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<sha2::Sha256> as Mac>::new_from_slice(key).expect("any key length");
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// HMAC-SHA1 (RFC 2104) on s3s's SHA-1, for Version 2 signatures.
fn hmac_sha1(key: &[u8], msg: &[u8]) -> Vec<u8> {
    use s3s::crypto::{Checksum, Sha1};
    let mut k = if key.len() > 64 {
        Sha1::checksum(key).as_ref().to_vec()
    } else {
        key.to_vec()
    };
    k.resize(64, 0);
    let pad = |x: u8| k.iter().map(|b| b ^ x).collect::<Vec<u8>>();
    let mut inner = Sha1::new();
    inner.update(&pad(0x36));
    inner.update(msg);
    let inner = inner.finalize();
    let mut outer = Sha1::new();
    outer.update(&pad(0x5c));
    outer.update(inner.as_ref());
    outer.finalize().as_ref().to_vec()
}

/// The user with this access key (and a secret: the default main user of an embedder that
/// authenticates requests itself has none, and signs no form).
fn signer<'u>(users: &'u Users, key_id: &str) -> Result<&'u User, Refusal> {
    users
        .by_access_key(key_id)
        .filter(|u| !u.secret_key.is_empty())
        .ok_or_else(|| {
            Refusal(
                StatusCode::FORBIDDEN,
                "InvalidAccessKeyId",
                "The AWS access key Id you provided does not exist in our records.".into(),
            )
        })
}

/// Checks the form's signature over its policy; returns the policy text and who signed it,
/// or `None` for an anonymous form (no key, no signature, no policy), which the bucket's ACL
/// or policy may still admit.
pub(crate) fn authenticate<'f, 'u>(
    fields: &Fields<'f>,
    users: &'u Users,
) -> Result<Option<(&'f str, &'u User)>, Refusal> {
    let policy = fields.get("policy");
    if let Some(key_id) = fields.get("AWSAccessKeyId") {
        let Some(signature) = fields.get("signature") else {
            return Err(bad(
                "InvalidArgument",
                "Bucket POST must contain a field named 'Signature'",
            ));
        };
        let Some(policy) = policy else {
            return Err(bad(
                "InvalidArgument",
                "Bucket POST must contain a field named 'Policy'",
            ));
        };
        let user = signer(users, key_id)?;
        let want = B64.encode_to_string(hmac_sha1(user.secret_key.as_bytes(), policy.as_bytes()));
        if !constant_time_eq(want.as_bytes(), signature.trim().as_bytes()) {
            return Err(signature_mismatch());
        }
        return Ok(Some((policy, user)));
    }
    if let Some(credential) = fields.get("x-amz-credential") {
        let (Some(signature), Some(policy)) = (fields.get("x-amz-signature"), policy) else {
            return Err(bad(
                "InvalidArgument",
                "Bucket POST must contain the fields 'x-amz-signature' and 'policy'",
            ));
        };
        if fields.get("x-amz-algorithm") != Some("AWS4-HMAC-SHA256") {
            return Err(bad(
                "InvalidArgument",
                "x-amz-algorithm must be AWS4-HMAC-SHA256",
            ));
        }
        // AKID/yyyymmdd/region/service/aws4_request
        let parts: Vec<&str> = credential.split('/').collect();
        let [key_id, date, region, service, "aws4_request"] = parts[..] else {
            return Err(bad("InvalidArgument", "malformed x-amz-credential"));
        };
        let user = signer(users, key_id)?;
        let k_date = hmac_sha256(
            format!("AWS4{}", user.secret_key).as_bytes(),
            date.as_bytes(),
        );
        let k_region = hmac_sha256(&k_date, region.as_bytes());
        let k_service = hmac_sha256(&k_region, service.as_bytes());
        let k_signing = hmac_sha256(&k_service, b"aws4_request");
        let want = hex(&hmac_sha256(&k_signing, policy.as_bytes()));
        if !constant_time_eq(want.as_bytes(), signature.trim().as_bytes()) {
            return Err(signature_mismatch());
        }
        return Ok(Some((policy, user)));
    }
    if policy.is_some() || fields.get("signature").is_some() {
        return Err(denied("Access Denied: the form's policy is not signed."));
    }
    Ok(None)
}

fn signature_mismatch() -> Refusal {
    Refusal(
        StatusCode::FORBIDDEN,
        "SignatureDoesNotMatch",
        "The request signature we calculated does not match the signature you provided.".into(),
    )
}

/// Fields no condition needs to name: the signature's own, `x-ignore-*`, and the file's
/// checksums (they only add a check of the file; S3 names fewer, Ceph RGW these too).
fn exempt(name: &str) -> bool {
    let n = name.to_ascii_lowercase();
    matches!(
        n.as_str(),
        "policy" | "signature" | "awsaccesskeyid" | "x-amz-signature" | "file"
    ) || n.starts_with("x-ignore-")
        || n.starts_with("x-amz-checksum-")
}

/// Checks the policy (base64 JSON) against the form: its expiration against `now`, and every
/// condition; and that every field but the exempt ones is named by a condition. Returns the
/// `content-length-range` bounds, which the file's length is checked against as it streams.
pub(crate) fn check(
    policy_b64: &str,
    fields: &Fields<'_>,
    bucket: &str,
    now: SystemTime,
) -> Result<Option<(u64, u64)>, Refusal> {
    let invalid = |why: &str| bad("InvalidPolicyDocument", format!("Invalid Policy: {why}"));
    let raw = B64
        .decode_to_vec(policy_b64.trim())
        .map_err(|_| invalid("the policy is not base64"))?;
    let doc: Value = serde_json::from_slice(&raw).map_err(|_| invalid("the policy is not JSON"))?;
    let Some(doc) = doc.as_object() else {
        return Err(invalid("the policy is not a JSON object"));
    };
    let Some(expiration) = doc.get("expiration").and_then(Value::as_str) else {
        return Err(invalid("Policy missing expiration."));
    };
    // ISO 8601 in UTC, as S3 takes it: `2030-01-01T00:00:00Z` (a fraction allowed).
    let iso_utc = expiration.as_bytes().get(10) == Some(&b'T') && expiration.ends_with('Z');
    let expires = Timestamp::parse(TimestampFormat::DateTime, expiration)
        .ok()
        .filter(|_| iso_utc)
        .ok_or_else(|| invalid("Invalid 'expiration' value: not an ISO 8601 UTC date"))?;
    if SystemTime::from(time::OffsetDateTime::from(expires)) <= now {
        return Err(denied("Invalid according to Policy: Policy expired."));
    }
    let Some(conditions) = doc.get("conditions").and_then(Value::as_array) else {
        return Err(invalid("Policy missing conditions."));
    };
    // A field the form lacks is empty: `starts-with ""` holds for it, as in S3.
    let value_of = |name: &str| -> String {
        match name.to_ascii_lowercase().as_str() {
            "bucket" => bucket.to_string(),
            _ => fields.get(name).unwrap_or_default().to_string(),
        }
    };
    let failed = |c: &Value| {
        denied(format!(
            "Invalid according to Policy: Policy Condition failed: {c}"
        ))
    };
    let mut named: Vec<String> = Vec::new();
    let mut length = None;
    for c in conditions {
        match c {
            Value::Object(m) => {
                let [(name, want)] = m.iter().collect::<Vec<_>>()[..] else {
                    return Err(invalid("a condition names one field"));
                };
                let Some(want) = want.as_str() else {
                    return Err(invalid("a condition's value is a string"));
                };
                named.push(name.to_ascii_lowercase());
                if value_of(name) != want {
                    return Err(failed(c));
                }
            }
            // Operation names are taken in any case (S3 does); field names too.
            Value::Array(a) => match a
                .first()
                .and_then(Value::as_str)
                .map(str::to_ascii_lowercase)
                .as_deref()
            {
                Some(op @ ("eq" | "starts-with")) => {
                    let (Some(name), Some(want)) = (
                        a.get(1).and_then(Value::as_str),
                        a.get(2).and_then(Value::as_str),
                    ) else {
                        return Err(invalid(&format!(
                            "the {op} condition takes a field and a string"
                        )));
                    };
                    let Some(name) = name.strip_prefix('$') else {
                        return Err(invalid("a condition's field starts with $"));
                    };
                    named.push(name.to_ascii_lowercase());
                    let got = value_of(name);
                    let holds = match op {
                        "eq" => got == want,
                        _ => got.starts_with(want),
                    };
                    if !holds {
                        return Err(failed(c));
                    }
                }
                Some("content-length-range") => {
                    let bound = |i: usize| a.get(i).and_then(Value::as_u64);
                    let (Some(min), Some(max), 3) = (bound(1), bound(2), a.len()) else {
                        return Err(invalid(
                            "content-length-range takes two whole numbers, not negative",
                        ));
                    };
                    length = Some((min, max));
                }
                _ => return Err(invalid(&format!("unknown condition {c}"))),
            },
            _ => return Err(invalid(&format!("unknown condition {c}"))),
        }
    }
    for (name, _) in fields.0 {
        if !exempt(name) && !named.contains(&name.to_ascii_lowercase()) {
            return Err(denied(format!(
                "Invalid according to Policy: Extra input fields: {name}"
            )));
        }
    }
    Ok(length)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn b64(s: &str) -> String {
        B64.encode_to_string(s.as_bytes())
    }

    fn fields(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    const NOW: u64 = 1_800_000_000; // 2027-01-15

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn conditions_hold_or_name_what_failed() {
        let policy = b64(r#"{"expiration": "2030-01-01T00:00:00Z", "conditions": [
            {"bucket": "bkt"}, ["starts-with", "$key", "foo"], {"acl": "private"},
            ["eq", "$Content-Type", "text/plain"], ["content-length-range", 0, 1024]]}"#);
        let f = fields(&[
            ("key", "foo.txt"),
            ("ACL", "private"),
            ("content-type", "text/plain"),
            ("x-ignore-me", "1"),
        ]);
        assert_eq!(
            check(&policy, &Fields(&f), "bkt", at(NOW)),
            Ok(Some((0, 1024)))
        );
        let other_bucket = check(&policy, &Fields(&f), "other", at(NOW)).unwrap_err();
        assert_eq!(other_bucket.0, StatusCode::FORBIDDEN);
        let mut extra = f.clone();
        extra.push(("x-amz-meta-foo".into(), "bar".into()));
        assert!(check(&policy, &Fields(&extra), "bkt", at(NOW))
            .unwrap_err()
            .2
            .contains("Extra"));
        let wrong_key = fields(&[
            ("key", "bar"),
            ("acl", "private"),
            ("content-type", "text/plain"),
        ]);
        assert_eq!(
            check(&policy, &Fields(&wrong_key), "bkt", at(NOW))
                .unwrap_err()
                .0,
            StatusCode::FORBIDDEN
        );
        assert_eq!(
            check(&policy, &Fields(&f), "bkt", at(1_900_000_000))
                .unwrap_err()
                .2,
            "Invalid according to Policy: Policy expired."
        );
    }

    #[test]
    fn malformed_policies_are_bad_requests() {
        let f = fields(&[("key", "k")]);
        for p in [
            r#"{"conditions": [["starts-with", "$key", ""]]}"#,
            r#"{"EXPIRATION": "2030-01-01T00:00:00Z", "conditions": []}"#,
            r#"{"expiration": "2030-01-01T00:00:00Z", "CONDITIONS": []}"#,
            r#"{"expiration": "2030-01-01 00:00:00+00:00", "conditions": []}"#,
            r#"{"expiration": "2030-01-01T00:00:00Z", "conditions": [{}]}"#,
            r#"{"expiration": "2030-01-01T00:00:00Z", "conditions": [["is", "$key", "k"]]}"#,
            r#"{"expiration": "2030-01-01T00:00:00Z", "conditions": [["content-length-range", 0]]}"#,
            r#"{"expiration": "2030-01-01T00:00:00Z", "conditions": [["content-length-range", -1, 0]]}"#,
        ] {
            let got = check(&b64(p), &Fields(&f), "b", at(NOW)).unwrap_err();
            assert_eq!(got.0, StatusCode::BAD_REQUEST, "{p}");
        }
    }

    #[test]
    fn hmac_sha1_matches_rfc_2202() {
        // Test case 2 of RFC 2202.
        let got = hmac_sha1(b"Jefe", b"what do ya want for nothing?");
        assert_eq!(hex(&got), "effcdf6ae5eb2fa2d27416d5f184df9c259a7c79");
    }

    #[test]
    fn signatures_of_both_versions() {
        let user = |id: &str, key: &str, secret: &str| User {
            id: id.into(),
            display_name: id.into(),
            email: None,
            access_key: key.into(),
            secret_key: secret.into(),
        };
        let users = Users::new(vec![
            user("main", "MAIN", "other-secret"),
            user("alt", "AK", "secret"),
        ])
        .unwrap();
        let signer = &users;
        let signed_by = |r: Result<Option<(&str, &User)>, Refusal>| {
            r.map(|s| s.map(|(p, u)| (p.to_string(), u.id.clone())))
        };
        let policy = b64("{}");
        let sig = B64.encode_to_string(hmac_sha1(b"secret", policy.as_bytes()));
        let v2 = fields(&[
            ("AWSAccessKeyId", "AK"),
            ("signature", &sig),
            ("policy", &policy),
        ]);
        assert_eq!(
            signed_by(authenticate(&Fields(&v2), signer)),
            Ok(Some((policy.clone(), "alt".to_string())))
        );
        let bad_sig = fields(&[
            ("AWSAccessKeyId", "AK"),
            ("signature", "AAAA"),
            ("policy", &policy),
        ]);
        assert_eq!(
            authenticate(&Fields(&bad_sig), signer).unwrap_err().1,
            "SignatureDoesNotMatch"
        );
        let bad_key = fields(&[
            ("AWSAccessKeyId", "XX"),
            ("signature", &sig),
            ("policy", &policy),
        ]);
        assert_eq!(
            authenticate(&Fields(&bad_key), signer).unwrap_err().1,
            "InvalidAccessKeyId"
        );
        let unsigned = fields(&[("AWSAccessKeyId", "AK"), ("policy", &policy)]);
        assert_eq!(
            authenticate(&Fields(&unsigned), signer).unwrap_err().0,
            StatusCode::BAD_REQUEST
        );
        // Version 4: the signing key of the credential's day, region and service.
        let k = hmac_sha256(b"AWS4secret", b"20261126");
        let k = hmac_sha256(
            &hmac_sha256(&hmac_sha256(&k, b"us-east-1"), b"s3"),
            b"aws4_request",
        );
        let sig4 = hex(&hmac_sha256(&k, policy.as_bytes()));
        let v4 = fields(&[
            ("x-amz-algorithm", "AWS4-HMAC-SHA256"),
            ("x-amz-credential", "AK/20261126/us-east-1/s3/aws4_request"),
            ("x-amz-signature", &sig4),
            ("policy", &policy),
        ]);
        assert_eq!(
            signed_by(authenticate(&Fields(&v4), signer)),
            Ok(Some((policy.clone(), "alt".to_string())))
        );
        // Anonymous: for the bucket's ACL or policy to decide; a policy nobody signed is
        // refused.
        let anonymous = fields(&[("key", "k")]);
        assert_eq!(
            signed_by(authenticate(&Fields(&anonymous), signer)),
            Ok(None)
        );
        let unsigned_policy = fields(&[("key", "k"), ("policy", &policy)]);
        assert_eq!(
            authenticate(&Fields(&unsigned_policy), signer)
                .unwrap_err()
                .0,
            StatusCode::FORBIDDEN
        );
    }
}
