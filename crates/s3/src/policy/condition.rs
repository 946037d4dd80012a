//! A statement's `Condition` block, evaluated against what the request says (IAM's rules):
//! every operator and every key in it must hold; a key holds when the request's value matches
//! any of the policy's values. A key the request does not carry makes a condition false, except
//! for the negated operators (`StringNotEquals`, `StringNotLike`, `NumericNotEquals`,
//! `NotIpAddress`), which it makes true, `…IfExists` operators, which it makes true, and `Null`,
//! which asks exactly whether the key is missing. `ForAnyValue:` and `ForAllValues:` qualify
//! keys with several values (`s3:RequestObjectTagKeys`).
//!
//! What this server cannot know — an object's stored tags, the date, an operator it does not
//! implement, the caller's address when it was not served over TCP — is *undetermined*: an Allow that depends on it never
//! applies and a Deny that depends on it always does, so an unknown errs on the side of
//! refusing.

use super::document::wildcard_match;
use serde_json::{Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    StringEquals,
    StringNotEquals,
    StringEqualsIgnoreCase,
    StringNotEqualsIgnoreCase,
    StringLike,
    StringNotLike,
    NumericEquals,
    NumericNotEquals,
    NumericLessThan,
    NumericLessThanEquals,
    NumericGreaterThan,
    NumericGreaterThanEquals,
    Bool,
    Null,
    IpAddress,
    NotIpAddress,
    /// Date, ARN and binary operators: known to IAM, not evaluated here.
    Unevaluated,
}

impl Op {
    fn parse(name: &str) -> Option<Op> {
        Some(match name {
            "StringEquals" => Op::StringEquals,
            "StringNotEquals" => Op::StringNotEquals,
            "StringEqualsIgnoreCase" => Op::StringEqualsIgnoreCase,
            "StringNotEqualsIgnoreCase" => Op::StringNotEqualsIgnoreCase,
            "StringLike" => Op::StringLike,
            "StringNotLike" => Op::StringNotLike,
            "NumericEquals" => Op::NumericEquals,
            "NumericNotEquals" => Op::NumericNotEquals,
            "NumericLessThan" => Op::NumericLessThan,
            "NumericLessThanEquals" => Op::NumericLessThanEquals,
            "NumericGreaterThan" => Op::NumericGreaterThan,
            "NumericGreaterThanEquals" => Op::NumericGreaterThanEquals,
            "Bool" => Op::Bool,
            "Null" => Op::Null,
            "IpAddress" => Op::IpAddress,
            "NotIpAddress" => Op::NotIpAddress,
            "DateEquals"
            | "DateNotEquals"
            | "DateLessThan"
            | "DateLessThanEquals"
            | "DateGreaterThan"
            | "DateGreaterThanEquals"
            | "ArnEquals"
            | "ArnNotEquals"
            | "ArnLike"
            | "ArnNotLike"
            | "BinaryEquals" => Op::Unevaluated,
            _ => return None,
        })
    }

    /// True when the request's value is absent (negated operators match what is not there).
    fn negated(self) -> bool {
        matches!(
            self,
            Op::StringNotEquals
                | Op::StringNotEqualsIgnoreCase
                | Op::StringNotLike
                | Op::NumericNotEquals
                | Op::NotIpAddress
        )
    }

    /// Whether one request value matches one policy value (for a negated operator: the
    /// positive match, negated by the caller).
    fn matches(self, have: &str, want: &str) -> bool {
        let num = |f: fn(f64, f64) -> bool| match (have.parse::<f64>(), want.parse::<f64>()) {
            (Ok(a), Ok(b)) => f(a, b),
            _ => false,
        };
        match self {
            Op::StringEquals | Op::StringNotEquals => have == want,
            Op::StringEqualsIgnoreCase | Op::StringNotEqualsIgnoreCase => {
                have.eq_ignore_ascii_case(want)
            }
            Op::StringLike | Op::StringNotLike => wildcard_match(want, have, false),
            Op::NumericEquals | Op::NumericNotEquals => num(|a, b| a == b),
            Op::NumericLessThan => num(|a, b| a < b),
            Op::NumericLessThanEquals => num(|a, b| a <= b),
            Op::NumericGreaterThan => num(|a, b| a > b),
            Op::NumericGreaterThanEquals => num(|a, b| a >= b),
            Op::Bool => have.eq_ignore_ascii_case(want),
            Op::IpAddress | Op::NotIpAddress => in_cidr(have, want),
            Op::Null | Op::Unevaluated => false,
        }
    }
}

/// Whether address `ip` is in `cidr` (`10.0.0.0/8`, `2001:db8::/32`, or one address). An
/// IPv4 address given as IPv6 (`::ffff:a.b.c.d`) counts as IPv4.
fn in_cidr(ip: &str, cidr: &str) -> bool {
    use std::net::IpAddr;
    let v4 = |a: IpAddr| match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
        a => a,
    };
    let (net, len) = cidr.split_once('/').unwrap_or((cidr, ""));
    let (Ok(ip), Ok(net)) = (ip.parse::<IpAddr>(), net.parse::<IpAddr>()) else {
        return false;
    };
    let bits = |a: IpAddr| -> (u128, u32) {
        match v4(a) {
            IpAddr::V4(v) => (u32::from(v) as u128, 32),
            IpAddr::V6(v) => (u128::from(v), 128),
        }
    };
    let ((have, width), (want, net_width)) = (bits(ip), bits(net));
    if width != net_width {
        return false;
    }
    let len = if len.is_empty() {
        width
    } else {
        match len.parse::<u32>() {
            Ok(l) if l <= width => l,
            _ => return false,
        }
    };
    let shift = width - len;
    shift >= width || have >> shift == want >> shift
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quantifier {
    Single,
    ForAnyValue,
    ForAllValues,
}

/// One key of one operator of a `Condition` block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Condition {
    op: Op,
    if_exists: bool,
    quantifier: Quantifier,
    /// Lower case: IAM's condition keys are not case-sensitive.
    key: String,
    values: Vec<String>,
}

/// What the request says of a condition key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// Its values; none when the request does not carry the key.
    Known(Vec<String>),
    /// The server cannot tell.
    Unknown,
}

/// The request as conditions see it.
pub(crate) trait Context {
    /// `key` in lower case (`s3:x-amz-server-side-encryption`).
    fn lookup(&self, key: &str) -> Lookup;
}

/// Parses a `Condition` object; the error says what is malformed.
pub(crate) fn parse(block: &Map<String, Value>) -> Result<Vec<Condition>, String> {
    let mut out = Vec::new();
    for (name, keys) in block {
        let (quantifier, rest) = if let Some(r) = name.strip_prefix("ForAnyValue:") {
            (Quantifier::ForAnyValue, r)
        } else if let Some(r) = name.strip_prefix("ForAllValues:") {
            (Quantifier::ForAllValues, r)
        } else {
            (Quantifier::Single, name.as_str())
        };
        let (base, if_exists) = match rest.strip_suffix("IfExists") {
            Some(b) if b != "Null" => (b, true),
            _ => (rest, false),
        };
        let op = Op::parse(base).ok_or_else(|| format!("unknown condition operator {name:?}"))?;
        let Value::Object(keys) = keys else {
            return Err(format!("condition {name:?} maps keys to values"));
        };
        for (key, v) in keys {
            let values = match v {
                Value::String(s) => vec![s.clone()],
                Value::Bool(b) => vec![b.to_string()],
                Value::Number(n) => vec![n.to_string()],
                Value::Array(a) if !a.is_empty() => a
                    .iter()
                    .map(|x| match x {
                        Value::String(s) => Ok(s.clone()),
                        Value::Bool(b) => Ok(b.to_string()),
                        Value::Number(n) => Ok(n.to_string()),
                        _ => Err(format!("condition values of {key:?} are strings")),
                    })
                    .collect::<Result<_, _>>()?,
                _ => return Err(format!("condition values of {key:?} are strings")),
            };
            out.push(Condition {
                op,
                if_exists,
                quantifier,
                key: key.to_ascii_lowercase(),
                values,
            });
        }
    }
    Ok(out)
}

impl Condition {
    /// Whether the condition holds for the request; `None` when that cannot be told.
    pub(crate) fn holds(&self, cx: &dyn Context) -> Option<bool> {
        if self.op == Op::Unevaluated {
            return None;
        }
        let Lookup::Known(have) = cx.lookup(&self.key) else {
            return None;
        };
        if self.op == Op::Null {
            let want_missing = self.values.iter().any(|v| v.eq_ignore_ascii_case("true"));
            return Some(have.is_empty() == want_missing);
        }
        if have.is_empty() {
            return Some(match self.quantifier {
                Quantifier::ForAllValues => true,
                Quantifier::ForAnyValue => false,
                Quantifier::Single => self.if_exists || self.op.negated(),
            });
        }
        let matches_any = |h: &String| self.values.iter().any(|w| self.op.matches(h, w));
        let positive = match self.quantifier {
            Quantifier::ForAllValues => have.iter().all(matches_any),
            Quantifier::Single | Quantifier::ForAnyValue => have.iter().any(matches_any),
        };
        Some(positive != self.op.negated())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct Given(HashMap<&'static str, Vec<&'static str>>);

    impl Context for Given {
        fn lookup(&self, key: &str) -> Lookup {
            if key == "aws:sourceip" && !self.0.contains_key(key) {
                return Lookup::Unknown;
            }
            Lookup::Known(
                self.0
                    .get(key)
                    .map(|v| v.iter().map(|s| s.to_string()).collect())
                    .unwrap_or_default(),
            )
        }
    }

    fn one(json: &str) -> Condition {
        let v: Value = serde_json::from_str(json).unwrap();
        let mut c = parse(v.as_object().unwrap()).unwrap();
        assert_eq!(c.len(), 1);
        c.remove(0)
    }

    #[test]
    fn missing_keys_follow_iam() {
        let none = Given(HashMap::new());
        let sse = Given(HashMap::from([(
            "s3:x-amz-server-side-encryption",
            vec!["AES256"],
        )]));
        let null = one(r#"{"Null": {"s3:x-amz-server-side-encryption": "true"}}"#);
        assert_eq!(null.holds(&none), Some(true));
        assert_eq!(null.holds(&sse), Some(false));
        let ne = one(r#"{"StringNotEquals": {"s3:x-amz-server-side-encryption": "aws:kms"}}"#);
        assert_eq!(
            ne.holds(&none),
            Some(true),
            "negated: a missing key matches"
        );
        assert_eq!(ne.holds(&sse), Some(true));
        let eq =
            one(r#"{"StringEquals": {"S3:X-Amz-Server-Side-Encryption": ["aws:kms", "AES256"]}}"#);
        assert_eq!(eq.holds(&none), Some(false));
        assert_eq!(eq.holds(&sse), Some(true), "keys are not case-sensitive");
        let if_exists =
            one(r#"{"StringEqualsIfExists": {"s3:x-amz-server-side-encryption": "aws:kms"}}"#);
        assert_eq!(if_exists.holds(&none), Some(true));
        assert_eq!(if_exists.holds(&sse), Some(false));
    }

    #[test]
    fn addresses_in_networks() {
        assert!(in_cidr("10.1.2.3", "10.0.0.0/8"));
        assert!(!in_cidr("11.1.2.3", "10.0.0.0/8"));
        assert!(in_cidr("127.0.0.1", "127.0.0.1"));
        assert!(in_cidr("::ffff:127.0.0.1", "127.0.0.0/8"));
        assert!(in_cidr("2001:db8::1", "2001:db8::/32"));
        assert!(!in_cidr("2001:db9::1", "2001:db8::/32"));
        assert!(!in_cidr("10.1.2.3", "2001:db8::/32"));
        assert!(in_cidr("1.2.3.4", "0.0.0.0/0"));
        assert!(!in_cidr("1.2.3.4", "1.2.3.0/33"));
        assert!(!in_cidr("not an address", "10.0.0.0/8"));
        let cx = Given(HashMap::from([("aws:sourceip", vec!["192.168.1.9"])]));
        let not_in = one(r#"{"NotIpAddress": {"aws:SourceIp": ["10.0.0.0/8", "172.16.0.0/12"]}}"#);
        assert_eq!(not_in.holds(&cx), Some(true));
        let inside = one(r#"{"IpAddress": {"aws:SourceIp": "192.168.0.0/16"}}"#);
        assert_eq!(inside.holds(&cx), Some(true));
    }

    #[test]
    fn operators_and_quantifiers() {
        let cx = Given(HashMap::from([
            ("s3:prefix", vec!["public/photos"]),
            ("s3:max-keys", vec!["10"]),
            ("aws:securetransport", vec!["false"]),
            ("s3:requestobjecttagkeys", vec!["a", "b"]),
        ]));
        let like = one(r#"{"StringLike": {"s3:prefix": "public/*"}}"#);
        assert_eq!(like.holds(&cx), Some(true));
        let not_like = one(r#"{"StringNotLike": {"s3:prefix": "public/*"}}"#);
        assert_eq!(not_like.holds(&cx), Some(false));
        let le = one(r#"{"NumericLessThanEquals": {"s3:max-keys": 10}}"#);
        assert_eq!(le.holds(&cx), Some(true));
        let gt = one(r#"{"NumericGreaterThan": {"s3:max-keys": "10"}}"#);
        assert_eq!(gt.holds(&cx), Some(false));
        let tls = one(r#"{"Bool": {"aws:SecureTransport": "true"}}"#);
        assert_eq!(tls.holds(&cx), Some(false));
        let all =
            one(r#"{"ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["a", "b", "c"]}}"#);
        assert_eq!(all.holds(&cx), Some(true));
        let all_short = one(r#"{"ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["a"]}}"#);
        assert_eq!(all_short.holds(&cx), Some(false));
        let any = one(r#"{"ForAnyValue:StringEquals": {"s3:RequestObjectTagKeys": ["b", "z"]}}"#);
        assert_eq!(any.holds(&cx), Some(true));
        let ip = one(r#"{"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}"#);
        assert_eq!(ip.holds(&cx), None, "an address the server does not know");
        let v: Value = serde_json::from_str(r#"{"StringSorta": {"k": "v"}}"#).unwrap();
        assert!(parse(v.as_object().unwrap()).is_err());
    }
}
