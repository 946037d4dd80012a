//! Access control lists: who owns a bucket or an object, and what it grants to whom.
//!
//! An ACL is an owner (a user's canonical id) and grants of `READ`, `WRITE`, `READ_ACP`,
//! `WRITE_ACP` or `FULL_CONTROL` to a user or to a group (everyone, or every signed user).
//! Requests set them with a canned ACL (`x-amz-acl`), grant headers (`x-amz-grant-read: id=…,
//! uri=…, emailAddress=…`) or an `AccessControlPolicy` document; an email names a user and is
//! kept as that user's id. Where they are kept is `stored.rs`; the ACL and ownership-controls
//! operations are `api.rs`; the decision that reads them is `access.rs`.

mod api;
mod stored;

pub(crate) use api::*;
pub(crate) use stored::*;

use crate::errors::{err, invalid_argument, invalid_request};
use crate::users::{User, Users};
use http::HeaderMap;
use s3s::dto;
use s3s::{S3ErrorCode, S3Result};
use serde::{Deserialize, Serialize};

const ALL_USERS_URI: &str = "http://acs.amazonaws.com/groups/global/AllUsers";
const AUTHENTICATED_USERS_URI: &str = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers";
const LOG_DELIVERY_URI: &str = "http://acs.amazonaws.com/groups/s3/LogDelivery";

/// What a grant allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Permission {
    /// Buckets: list. Objects: read the bytes.
    Read,
    /// Buckets: write, overwrite and delete objects. Objects: nothing.
    Write,
    /// Read the ACL.
    ReadAcp,
    /// Change the ACL.
    WriteAcp,
    /// All four.
    FullControl,
}

impl Permission {
    fn as_str(self) -> &'static str {
        match self {
            Permission::Read => "READ",
            Permission::Write => "WRITE",
            Permission::ReadAcp => "READ_ACP",
            Permission::WriteAcp => "WRITE_ACP",
            Permission::FullControl => "FULL_CONTROL",
        }
    }

    fn parse(s: &str) -> Option<Permission> {
        Some(match s {
            "READ" => Permission::Read,
            "WRITE" => Permission::Write,
            "READ_ACP" => Permission::ReadAcp,
            "WRITE_ACP" => Permission::WriteAcp,
            "FULL_CONTROL" => Permission::FullControl,
            _ => return None,
        })
    }

    /// Whether a grant of `self` gives `wanted`.
    fn gives(self, wanted: Permission) -> bool {
        self == wanted || self == Permission::FullControl
    }
}

/// Whom a grant is to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum Grantee {
    /// A user, by canonical id.
    User(String),
    /// Everyone, signed or not.
    AllUsers,
    /// Every signed request.
    AuthenticatedUsers,
    /// S3's log delivery group (kept and shown; it matches no request here).
    LogDelivery,
}

impl Grantee {
    fn is_group(&self) -> bool {
        !matches!(self, Grantee::User(_))
    }

    /// Whether a grant to it reaches the public (everyone, or every signed user).
    fn is_public(&self) -> bool {
        matches!(self, Grantee::AllUsers | Grantee::AuthenticatedUsers)
    }

    fn group(uri: &str) -> S3Result<Grantee> {
        match uri {
            ALL_USERS_URI => Ok(Grantee::AllUsers),
            AUTHENTICATED_USERS_URI => Ok(Grantee::AuthenticatedUsers),
            LOG_DELIVERY_URI => Ok(Grantee::LogDelivery),
            _ => Err(invalid_argument(format!("Invalid group uri {uri:?}"))),
        }
    }

    /// A user named by id (who must exist) or email (who must exist; kept as the id).
    fn user_by_id(users: &Users, id: &str) -> S3Result<Grantee> {
        users
            .by_id(id)
            .map(|u| Grantee::User(u.id.clone()))
            .ok_or_else(|| invalid_argument(format!("Invalid id: no user has the id {id:?}")))
    }

    fn user_by_email(users: &Users, email: &str) -> S3Result<Grantee> {
        users
            .by_email(email)
            .map(|u| Grantee::User(u.id.clone()))
            .ok_or_else(|| {
                err(
                    S3ErrorCode::from_bytes(b"UnresolvableGrantByEmailAddress").expect("a code"),
                    format!("The email address {email:?} you provided does not match any account on record."),
                )
            })
    }

    /// Whether a request by `caller` (`None`: unsigned) is this grantee; group grants count
    /// only when `public` (the public access block's `IgnorePublicAcls` turns them off).
    fn matches(&self, caller: Option<&str>, public: bool) -> bool {
        match self {
            Grantee::User(id) => caller == Some(id.as_str()),
            Grantee::AllUsers => public,
            Grantee::AuthenticatedUsers => public && caller.is_some(),
            Grantee::LogDelivery => false,
        }
    }
}

/// One grant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Grant {
    pub grantee: Grantee,
    pub permission: Permission,
}

/// An owner and its grants. The owner may always read and change the ACL, whatever the
/// grants say (so revoking every grant cannot lock it out).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Acl {
    pub owner: String,
    pub grants: Vec<Grant>,
}

/// The canned ACLs S3 defines, by their `x-amz-acl` names.
const CANNED: &[&str] = &[
    "private",
    "public-read",
    "public-read-write",
    "authenticated-read",
    "bucket-owner-read",
    "bucket-owner-full-control",
    "log-delivery-write",
];

/// The grant headers and the permission each gives.
const GRANT_HEADERS: &[(&str, Permission)] = &[
    ("x-amz-grant-read", Permission::Read),
    ("x-amz-grant-write", Permission::Write),
    ("x-amz-grant-read-acp", Permission::ReadAcp),
    ("x-amz-grant-write-acp", Permission::WriteAcp),
    ("x-amz-grant-full-control", Permission::FullControl),
];

impl Acl {
    /// The owner alone, with full control: every new bucket's and object's ACL.
    pub(crate) fn private(owner: &str) -> Acl {
        Acl {
            owner: owner.to_string(),
            grants: vec![Grant {
                grantee: Grantee::User(owner.to_string()),
                permission: Permission::FullControl,
            }],
        }
    }

    /// A canned ACL for a resource owned by `owner` in a bucket owned by `bucket_owner`.
    pub(crate) fn canned(name: &str, owner: &str, bucket_owner: &str) -> S3Result<Acl> {
        let mut acl = Acl::private(owner);
        let mut grant = |grantee, permission| {
            acl.grants.push(Grant {
                grantee,
                permission,
            })
        };
        match name {
            "private" => {}
            "public-read" => grant(Grantee::AllUsers, Permission::Read),
            "public-read-write" => {
                grant(Grantee::AllUsers, Permission::Read);
                grant(Grantee::AllUsers, Permission::Write);
            }
            "authenticated-read" => grant(Grantee::AuthenticatedUsers, Permission::Read),
            "bucket-owner-read" if bucket_owner != owner => {
                grant(Grantee::User(bucket_owner.to_string()), Permission::Read)
            }
            "bucket-owner-full-control" if bucket_owner != owner => grant(
                Grantee::User(bucket_owner.to_string()),
                Permission::FullControl,
            ),
            "bucket-owner-read" | "bucket-owner-full-control" => {}
            "log-delivery-write" => {
                grant(Grantee::LogDelivery, Permission::Write);
                grant(Grantee::LogDelivery, Permission::ReadAcp);
            }
            other => {
                return Err(invalid_argument(format!(
                    "Unknown canned ACL {other:?}: one of {}",
                    CANNED.join(", ")
                )))
            }
        }
        Ok(acl)
    }

    /// The ACL a request's headers ask for — a canned `x-amz-acl`, or `x-amz-grant-*` grants
    /// (exactly those: no grant to the owner is added, as S3 does) — for a resource `owner`
    /// owns in a bucket `bucket_owner` owns; `None` when they ask for none. Both at once is
    /// 400 `InvalidRequest`.
    pub(crate) fn from_headers(
        headers: &HeaderMap,
        users: &Users,
        owner: &str,
        bucket_owner: &str,
    ) -> S3Result<Option<Acl>> {
        let canned = canned_header(headers)?;
        let mut grants = Vec::new();
        for (name, permission) in GRANT_HEADERS {
            for value in headers.get_all(*name) {
                let value = value
                    .to_str()
                    .map_err(|_| invalid_argument(format!("{name} is not text")))?;
                for grantee in parse_grantees(value, users)? {
                    grants.push(Grant {
                        grantee,
                        permission: *permission,
                    });
                }
            }
        }
        let has_grants = GRANT_HEADERS.iter().any(|(n, _)| headers.contains_key(*n));
        match (canned, has_grants) {
            (Some(_), true) => Err(invalid_request(
                "Specifying both Canned ACLs and Header Grants is not allowed",
            )),
            (Some(c), false) => Acl::canned(&c, owner, bucket_owner).map(Some),
            (None, true) => Ok(Some(Acl {
                owner: owner.to_string(),
                grants,
            })),
            (None, false) => Ok(None),
        }
    }

    /// The ACL an `AccessControlPolicy` document sets on a resource `owner` owns (the
    /// document's owner, if named, must be that one).
    pub(crate) fn from_policy(
        policy: &dto::AccessControlPolicy,
        users: &Users,
        owner: &str,
    ) -> S3Result<Acl> {
        if let Some(id) = policy.owner.as_ref().and_then(|o| o.id.as_deref()) {
            if id != owner {
                return Err(err(
                    S3ErrorCode::AccessDenied,
                    "The owner an ACL names is not the resource's owner",
                ));
            }
        }
        let mut grants = Vec::new();
        for g in policy.grants.iter().flatten() {
            let (Some(grantee), Some(permission)) = (&g.grantee, &g.permission) else {
                return Err(malformed_acl("a Grant needs a Grantee and a Permission"));
            };
            let permission = Permission::parse(permission.as_str())
                .ok_or_else(|| malformed_acl("an unknown Permission"))?;
            let grantee = match grantee.type_.as_str() {
                dto::Type::CANONICAL_USER => {
                    let id = grantee
                        .id
                        .as_deref()
                        .ok_or_else(|| malformed_acl("a CanonicalUser grantee needs an ID"))?;
                    Grantee::user_by_id(users, id)?
                }
                dto::Type::AMAZON_CUSTOMER_BY_EMAIL => {
                    let email = grantee.email_address.as_deref().ok_or_else(|| {
                        malformed_acl("an AmazonCustomerByEmail grantee needs an EmailAddress")
                    })?;
                    Grantee::user_by_email(users, email)?
                }
                dto::Type::GROUP => Grantee::group(
                    grantee
                        .uri
                        .as_deref()
                        .ok_or_else(|| malformed_acl("a Group grantee needs a URI"))?,
                )?,
                other => return Err(malformed_acl(&format!("unknown grantee type {other:?}"))),
            };
            grants.push(Grant {
                grantee,
                permission,
            });
        }
        Ok(Acl {
            owner: owner.to_string(),
            grants,
        })
    }

    /// Whether `caller` (`None`: unsigned) has `wanted`. Group grants count only when
    /// `public`; the owner always has `READ_ACP` and `WRITE_ACP`.
    pub(crate) fn allows(&self, caller: Option<&User>, wanted: Permission, public: bool) -> bool {
        self.allows_id(caller.map(|u| u.id.as_str()), wanted, public)
    }

    /// As [`Acl::allows`], for the user with this canonical id.
    pub(crate) fn allows_id(&self, caller: Option<&str>, wanted: Permission, public: bool) -> bool {
        let owner = caller == Some(self.owner.as_str());
        if owner && matches!(wanted, Permission::ReadAcp | Permission::WriteAcp) {
            return true;
        }
        self.grants
            .iter()
            .any(|g| g.permission.gives(wanted) && g.grantee.matches(caller, public))
    }

    /// Whether anything is granted to everyone or every signed user.
    pub(crate) fn is_public(&self) -> bool {
        self.grants.iter().any(|g| g.grantee.is_public())
    }

    /// The owner's full control and nothing else (or nothing at all): what a bucket whose
    /// ownership is `BucketOwnerEnforced` may have.
    pub(crate) fn owner_only(&self) -> bool {
        self.grants
            .iter()
            .all(|g| g.grantee == Grantee::User(self.owner.clone()))
    }

    /// The owner as S3 shows it.
    pub(crate) fn owner_dto(&self, users: &Users) -> dto::Owner {
        owner_dto(users, &self.owner)
    }

    /// The grants as S3 shows them: groups first, then users, each in the order given.
    pub(crate) fn grants_dto(&self, users: &Users) -> Vec<dto::Grant> {
        let groups = self.grants.iter().filter(|g| g.grantee.is_group());
        let people = self.grants.iter().filter(|g| !g.grantee.is_group());
        groups
            .chain(people)
            .map(|g| {
                let grantee = match &g.grantee {
                    Grantee::User(id) => dto::Grantee {
                        display_name: Some(users.display_name(id).to_string()),
                        email_address: None,
                        id: Some(id.clone()),
                        type_: dto::Type::from_static(dto::Type::CANONICAL_USER),
                        uri: None,
                    },
                    group => dto::Grantee {
                        display_name: None,
                        email_address: None,
                        id: None,
                        type_: dto::Type::from_static(dto::Type::GROUP),
                        uri: Some(
                            match group {
                                Grantee::AllUsers => ALL_USERS_URI,
                                Grantee::AuthenticatedUsers => AUTHENTICATED_USERS_URI,
                                _ => LOG_DELIVERY_URI,
                            }
                            .to_string(),
                        ),
                    },
                };
                dto::Grant {
                    grantee: Some(grantee),
                    permission: Some(dto::Permission::from(g.permission.as_str().to_string())),
                }
            })
            .collect()
    }
}

/// The user `id` as S3 shows an owner.
pub(crate) fn owner_dto(users: &Users, id: &str) -> dto::Owner {
    dto::Owner {
        display_name: Some(users.display_name(id).to_string()),
        id: Some(id.to_string()),
    }
}

/// A request's `x-amz-acl`, checked to be a canned ACL S3 knows.
pub(crate) fn canned_header(headers: &HeaderMap) -> S3Result<Option<String>> {
    let Some(v) = headers.get("x-amz-acl") else {
        return Ok(None);
    };
    let v = v
        .to_str()
        .map_err(|_| invalid_argument("x-amz-acl is not text"))?
        .trim();
    if !CANNED.contains(&v) {
        return Err(invalid_argument(format!(
            "Unknown canned ACL {v:?}: one of {}",
            CANNED.join(", ")
        )));
    }
    Ok(Some(v.to_string()))
}

/// Whether a request sets an ACL by header (canned or grants).
pub(crate) fn asks_acl(headers: &HeaderMap) -> bool {
    headers.contains_key("x-amz-acl") || GRANT_HEADERS.iter().any(|(n, _)| headers.contains_key(*n))
}

fn malformed_acl(why: &str) -> s3s::S3Error {
    err(
        S3ErrorCode::MalformedACLError,
        format!("The XML you provided was not well-formed or did not validate against our published schema: {why}"),
    )
}

/// `id="…", uri="…", emailAddress="…"` (quotes optional), as the grant headers list them.
fn parse_grantees(value: &str, users: &Users) -> S3Result<Vec<Grantee>> {
    let mut out = Vec::new();
    for item in value.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let (kind, v) = item
            .split_once('=')
            .ok_or_else(|| invalid_argument(format!("a grantee {item:?} is not kind=value")))?;
        let v = v.trim().trim_matches('"');
        out.push(match kind.trim().to_ascii_lowercase().as_str() {
            "id" => Grantee::user_by_id(users, v)?,
            "emailaddress" => Grantee::user_by_email(users, v)?,
            "uri" => Grantee::group(v)?,
            other => {
                return Err(invalid_argument(format!(
                    "a grantee is id=, uri= or emailAddress=, not {other}="
                )))
            }
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn users() -> Users {
        let u = |id: &str, key: &str, email: &str| User {
            id: id.into(),
            display_name: format!("{id} name"),
            email: Some(email.into()),
            access_key: key.into(),
            secret_key: "s".into(),
        };
        Users::new(vec![u("main", "K1", "main@x"), u("alt", "K2", "alt@x")]).unwrap()
    }

    #[test]
    fn canned_acls_grant_what_s3_says_and_groups_come_first() {
        let users = users();
        let main = users.by_id("main");
        let alt = users.by_id("alt");
        let acl = Acl::canned("public-read-write", "main", "main").unwrap();
        let shown: Vec<_> = acl
            .grants_dto(&users)
            .into_iter()
            .map(|g| {
                let e = g.grantee.unwrap();
                (
                    e.uri.or(e.id).unwrap(),
                    g.permission.unwrap().as_str().to_string(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                (ALL_USERS_URI.to_string(), "READ".to_string()),
                (ALL_USERS_URI.to_string(), "WRITE".to_string()),
                ("main".to_string(), "FULL_CONTROL".to_string()),
            ]
        );
        assert!(acl.allows(None, Permission::Write, true));
        assert!(
            !acl.allows(None, Permission::Write, false),
            "IgnorePublicAcls"
        );
        assert!(!acl.allows(None, Permission::ReadAcp, true));
        let auth = Acl::canned("authenticated-read", "main", "main").unwrap();
        assert!(auth.allows(alt, Permission::Read, true));
        assert!(!auth.allows(None, Permission::Read, true));
        assert!(auth.is_public());
        let owned = Acl::canned("bucket-owner-full-control", "alt", "main").unwrap();
        assert!(owned.allows(main, Permission::Read, true));
        assert!(Acl::canned("bucket-owner-read", "main", "main")
            .unwrap()
            .owner_only());
        assert!(Acl::canned("public", "main", "main").is_err());
    }

    #[test]
    fn the_owner_keeps_its_acl_rights_with_no_grants() {
        let users = users();
        let empty = Acl {
            owner: "main".into(),
            grants: Vec::new(),
        };
        assert!(empty.allows(users.by_id("main"), Permission::WriteAcp, true));
        assert!(!empty.allows(users.by_id("main"), Permission::Read, true));
        assert!(!empty.allows(users.by_id("alt"), Permission::ReadAcp, true));
    }

    #[test]
    fn grant_headers_name_users_by_id_or_email_and_groups_by_uri() {
        let users = users();
        let mut h = HeaderMap::new();
        h.insert("x-amz-grant-full-control", "id=alt".parse().unwrap());
        h.insert(
            "x-amz-grant-read",
            format!("emailAddress=\"MAIN@x\", uri=\"{ALL_USERS_URI}\"")
                .parse()
                .unwrap(),
        );
        let acl = Acl::from_headers(&h, &users, "main", "main")
            .unwrap()
            .unwrap();
        assert_eq!(acl.grants.len(), 3);
        assert!(acl.allows(users.by_id("alt"), Permission::WriteAcp, true));
        assert!(!acl.allows(users.by_id("main"), Permission::Write, true));
        let mut bad = HeaderMap::new();
        bad.insert("x-amz-grant-read", "id=nobody".parse().unwrap());
        assert_eq!(
            Acl::from_headers(&bad, &users, "main", "main")
                .unwrap_err()
                .code(),
            &S3ErrorCode::InvalidArgument
        );
        let mut email = HeaderMap::new();
        email.insert("x-amz-grant-read", "emailAddress=no@x".parse().unwrap());
        assert_eq!(
            Acl::from_headers(&email, &users, "main", "main")
                .unwrap_err()
                .code()
                .as_str(),
            "UnresolvableGrantByEmailAddress"
        );
        let mut both = h.clone();
        both.insert("x-amz-acl", "private".parse().unwrap());
        assert!(Acl::from_headers(&both, &users, "main", "main").is_err());
        assert_eq!(
            Acl::from_headers(&HeaderMap::new(), &users, "main", "main").unwrap(),
            None
        );
    }
}
