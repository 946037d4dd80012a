//! Bucket policy documents: the grammar S3 takes (Version, Statement; Effect, Principal,
//! Action, Resource, Condition) and their evaluation for a request: an explicit Deny wins,
//! then an Allow, else the policy says nothing.

use super::condition::{self, Condition, Context};
use serde_json::{Map, Value};

/// What a policy says of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    Deny,
    Allow,
    /// No statement applies.
    Silent,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Statement {
    allow: bool,
    /// `*` (or `{"AWS": "*"}`): everyone; otherwise the principals named.
    everyone: bool,
    /// The principals named (`{"AWS": …}` or `{"CanonicalUser": …}`): a user's canonical id,
    /// or `arn:aws:iam::ID:root` / `arn:aws:iam::ID:user/NAME` (a user here is its own
    /// account).
    principals: Vec<String>,
    actions: Vec<String>,
    resources: Vec<String>,
    /// The `Condition` block (`condition.rs`): all must hold for the statement to apply.
    conditions: Vec<Condition>,
}

/// A parsed bucket policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Policy {
    statements: Vec<Statement>,
}

/// One string or a list of them.
fn strings(v: &Value, what: &str) -> Result<Vec<String>, String> {
    match v {
        Value::String(s) => Ok(vec![s.clone()]),
        Value::Array(a) if !a.is_empty() => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| format!("{what} must be strings"))
            })
            .collect(),
        _ => Err(format!("{what} must be a string or a list of strings")),
    }
}

fn field<'v>(m: &'v Map<String, Value>, name: &str) -> Option<&'v Value> {
    m.get(name)
}

fn statement(m: &Map<String, Value>, bucket: &str) -> Result<Statement, String> {
    for k in m.keys() {
        if !matches!(
            k.as_str(),
            "Sid" | "Effect" | "Principal" | "Action" | "Resource" | "Condition"
        ) {
            return Err(format!(
                "{k} is not supported in a bucket policy statement (NotPrincipal, NotAction and \
                 NotResource are not)"
            ));
        }
    }
    let allow = match field(m, "Effect").and_then(Value::as_str) {
        Some("Allow") => true,
        Some("Deny") => false,
        _ => return Err("a statement's Effect is Allow or Deny".into()),
    };
    let principals = match field(m, "Principal") {
        Some(Value::String(s)) if s == "*" => vec!["*".to_string()],
        Some(Value::Object(p)) if !p.is_empty() => {
            let mut named = Vec::new();
            for (kind, v) in p {
                if kind != "AWS" && kind != "CanonicalUser" {
                    return Err(format!(
                        "a statement's Principal names AWS or CanonicalUser principals, not {kind}"
                    ));
                }
                named.extend(strings(v, "principals")?);
            }
            named
        }
        _ => return Err("a statement needs a Principal".into()),
    };
    let everyone = principals.iter().any(|s| s == "*");
    let actions = strings(
        field(m, "Action").ok_or("a statement needs an Action")?,
        "actions",
    )?;
    for a in &actions {
        if a != "*" && !a.to_ascii_lowercase().starts_with("s3:") {
            return Err(format!("action {a:?} is not an S3 action"));
        }
    }
    let resources = strings(
        field(m, "Resource").ok_or("a statement needs a Resource")?,
        "resources",
    )?;
    for r in &resources {
        let Some(path) = r.strip_prefix("arn:aws:s3:::") else {
            return Err(format!("resource {r:?} is not an S3 ARN"));
        };
        let named = path.split('/').next().unwrap_or_default();
        if !wildcard_match(named, bucket, false) {
            return Err(format!(
                "Policy has invalid resource: {r:?} is not in bucket {bucket}"
            ));
        }
    }
    let conditions = match field(m, "Condition") {
        None => Vec::new(),
        Some(Value::Object(c)) => condition::parse(c)?,
        Some(_) => return Err("a statement's Condition is an object".into()),
    };
    Ok(Statement {
        allow,
        everyone,
        principals,
        actions,
        resources,
        conditions,
    })
}

impl Policy {
    /// Parses a policy for `bucket`; the error says what is malformed.
    pub(crate) fn parse(text: &str, bucket: &str) -> Result<Policy, String> {
        let doc: Value =
            serde_json::from_str(text).map_err(|e| format!("the policy is not JSON: {e}"))?;
        let Some(doc) = doc.as_object() else {
            return Err("the policy is not a JSON object".into());
        };
        if let Some(v) = doc.get("Version") {
            if !matches!(v.as_str(), Some("2012-10-17" | "2008-10-17")) {
                return Err("Version is 2012-10-17 or 2008-10-17".into());
            }
        }
        let statements = match doc.get("Statement") {
            Some(Value::Object(s)) => vec![statement(s, bucket)?],
            Some(Value::Array(a)) if !a.is_empty() => a
                .iter()
                .map(|s| match s {
                    Value::Object(s) => statement(s, bucket),
                    _ => Err("a statement is an object".into()),
                })
                .collect::<Result<_, _>>()?,
            _ => return Err("a policy needs a Statement".into()),
        };
        Ok(Policy { statements })
    }

    /// Whether the policy grants anything to everyone (unconditionally), as
    /// GetBucketPolicyStatus and `BlockPublicPolicy` judge it.
    pub(crate) fn is_public(&self) -> bool {
        self.statements
            .iter()
            .any(|s| s.allow && s.everyone && s.conditions.is_empty())
    }

    /// What the policy says of `action` (`s3:GetObject`) on `resource`
    /// (`arn:aws:s3:::bucket/key`) by `caller` (a user's canonical id; `None`: unsigned), with
    /// the request's condition keys in `cx`. A condition that cannot be told keeps an Allow
    /// from applying and lets a Deny apply.
    pub(crate) fn decide(
        &self,
        action: &str,
        resource: &str,
        caller: Option<&str>,
        cx: &dyn Context,
    ) -> Decision {
        let applies = |s: &Statement| {
            (s.everyone || caller.is_some_and(|id| s.principals.iter().any(|p| names(p, id))))
                && s.actions.iter().any(|a| wildcard_match(a, action, true))
                && s.resources
                    .iter()
                    .any(|r| wildcard_match(r, resource, false))
        };
        let denies = |s: &Statement| s.conditions.iter().all(|c| c.holds(cx) != Some(false));
        let allows = |s: &Statement| s.conditions.iter().all(|c| c.holds(cx) == Some(true));
        if self
            .statements
            .iter()
            .any(|s| !s.allow && applies(s) && denies(s))
        {
            return Decision::Deny;
        }
        if self
            .statements
            .iter()
            .any(|s| s.allow && applies(s) && allows(s))
        {
            return Decision::Allow;
        }
        Decision::Silent
    }
}

/// Whether a policy's principal names the user `id`: the id itself, or the IAM ARN of its
/// account's root or of a user in it (each user here is its own account).
fn names(principal: &str, id: &str) -> bool {
    if principal == id {
        return true;
    }
    let Some(rest) = principal.strip_prefix("arn:aws:iam::") else {
        return false;
    };
    match rest.split_once(':') {
        Some((account, what)) => account == id && (what == "root" || what.starts_with("user/")),
        None => false,
    }
}

/// `*` (any run) and `?` (any one character) patterns, as IAM matches actions (without
/// regard to case) and resources.
pub(crate) fn wildcard_match(pattern: &str, text: &str, ignore_case: bool) -> bool {
    let norm = |s: &str| -> Vec<char> {
        if ignore_case {
            s.to_ascii_lowercase().chars().collect()
        } else {
            s.chars().collect()
        }
    };
    let (p, t) = (norm(pattern), norm(text));
    // Iterative matching with backtracking to the last `*`.
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::condition::Lookup;

    /// A request that carries only the headers given; its address is unknown.
    struct Headers(Vec<(&'static str, &'static str)>);

    impl Context for Headers {
        fn lookup(&self, key: &str) -> Lookup {
            if key == "aws:sourceip" {
                return Lookup::Unknown;
            }
            let values = self.0.iter().filter(|(k, _)| *k == key);
            Lookup::Known(values.map(|(_, v)| v.to_string()).collect())
        }
    }

    const PLAIN: &Headers = &Headers(Vec::new());

    fn policy(statement: &str) -> Result<Policy, String> {
        Policy::parse(
            &format!(r#"{{"Version": "2012-10-17", "Statement": [{statement}]}}"#),
            "bkt",
        )
    }

    #[test]
    fn patterns_match_as_iam_does() {
        assert!(wildcard_match("s3:Get*", "s3:getobject", true));
        assert!(wildcard_match(
            "arn:aws:s3:::bkt/*",
            "arn:aws:s3:::bkt/a/b",
            false
        ));
        assert!(!wildcard_match(
            "arn:aws:s3:::bkt/*",
            "arn:aws:s3:::bkt",
            false
        ));
        assert!(wildcard_match("a?c*e", "abcxxe", false));
        assert!(!wildcard_match("a?c", "ac", false));
        assert!(!wildcard_match("ABC", "abc", false));
    }

    #[test]
    fn deny_beats_allow_and_conditions_refuse() {
        let p = policy(
            r#"{"Effect": "Allow", "Principal": "*", "Action": "s3:*", "Resource": "arn:aws:s3:::bkt/*"},
               {"Effect": "Deny", "Principal": {"AWS": ["*"]}, "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::bkt/keep/*"}"#,
        )
        .unwrap();
        assert!(p.is_public());
        let get = p.decide("s3:GetObject", "arn:aws:s3:::bkt/a", None, PLAIN);
        assert_eq!(get, Decision::Allow);
        let keep = p.decide("s3:DeleteObject", "arn:aws:s3:::bkt/keep/x", None, PLAIN);
        assert_eq!(keep, Decision::Deny);
        let list = p.decide("s3:ListBucket", "arn:aws:s3:::bkt", None, PLAIN);
        assert_eq!(list, Decision::Silent);
        let c = policy(
            r#"{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject", "Resource": "arn:aws:s3:::bkt/*",
                "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}}}"#,
        )
        .unwrap();
        assert!(!c.is_public());
        let got = c.decide("s3:GetObject", "arn:aws:s3:::bkt/a", None, PLAIN);
        assert_eq!(got, Decision::Silent);
        let named = policy(
            r#"{"Effect": "Allow", "Principal": {"AWS": ["arn:aws:iam::alt:root", "arn:aws:iam::other:user/alt"]}, "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::bkt"},
               {"Effect": "Allow", "Principal": {"CanonicalUser": "carol"}, "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::bkt"}"#,
        )
        .unwrap();
        assert!(!named.is_public());
        let list = |who| named.decide("s3:ListBucket", "arn:aws:s3:::bkt", who, PLAIN);
        assert_eq!(list(Some("alt")), Decision::Allow);
        assert_eq!(list(Some("carol")), Decision::Allow);
        assert_eq!(
            list(Some("other")),
            Decision::Allow,
            "a user here is its own account"
        );
        assert_eq!(list(Some("dave")), Decision::Silent);
        assert_eq!(list(None), Decision::Silent);
    }

    #[test]
    fn a_deny_applies_when_its_conditions_hold_or_cannot_be_told() {
        let p = policy(
            r#"{"Effect": "Deny", "Principal": "*", "Action": "s3:PutObject", "Resource": "arn:aws:s3:::bkt/*",
                "Condition": {"StringNotEquals": {"s3:x-amz-server-side-encryption": "AES256"}}},
               {"Effect": "Deny", "Principal": "*", "Action": "s3:DeleteObject", "Resource": "arn:aws:s3:::bkt/*",
                "Condition": {"NotIpAddress": {"aws:SourceIp": "10.0.0.0/8"}}}"#,
        )
        .unwrap();
        let put = |cx: &Headers| p.decide("s3:PutObject", "arn:aws:s3:::bkt/k", None, cx);
        assert_eq!(put(PLAIN), Decision::Deny, "unencrypted");
        let sse = Headers(vec![("s3:x-amz-server-side-encryption", "AES256")]);
        assert_eq!(put(&sse), Decision::Silent);
        let kms = Headers(vec![("s3:x-amz-server-side-encryption", "aws:kms")]);
        assert_eq!(put(&kms), Decision::Deny);
        let delete = p.decide("s3:DeleteObject", "arn:aws:s3:::bkt/k", None, PLAIN);
        assert_eq!(
            delete,
            Decision::Deny,
            "the address is unknown: the deny stands"
        );
    }

    #[test]
    fn malformed_policies_say_why() {
        for bad in [
            r#"{"Effect": "Allow", "NotPrincipal": {"AWS": "x"}, "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::bkt"}"#,
            r#"{"Effect": "Maybe", "Principal": "*", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::bkt"}"#,
            r#"{"Effect": "Allow", "Principal": "*", "Action": "ec2:Run", "Resource": "arn:aws:s3:::bkt"}"#,
            r#"{"Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket", "Resource": "arn:aws:s3:::other"}"#,
            r#"{"Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket"}"#,
        ] {
            assert!(policy(bad).is_err(), "{bad}");
        }
        assert!(Policy::parse("{}", "bkt").is_err());
        assert!(Policy::parse("not json", "bkt").is_err());
        let any = policy(
            r#"{"Effect": "Allow", "Principal": "*", "Action": "s3:ListBucket", "Resource": ["arn:aws:s3:::*", "arn:aws:s3:::*/*"]}"#,
        );
        assert!(any.is_ok());
    }
}
