//! The server's users: each has its own key pair, a canonical id (what ACLs, policies and
//! owners name) and a display name. The first is the main user, which owns every bucket made
//! before buckets had owners. [`Users`] is s3s's secret-key lookup, and tells handlers who
//! sent a request.

use s3s::auth::{Credentials, S3Auth, SecretKey};
use std::sync::Arc;

/// One user.
#[derive(Clone, PartialEq, Eq)]
pub struct User {
    /// The canonical id: ACL grants and policy principals name it, listings show it as owner.
    pub id: String,
    /// The name listings and ACLs show next to the id.
    pub display_name: String,
    /// An address ACL grants may name the user by (`emailAddress=`), if any.
    pub email: Option<String>,
    /// The access key id requests are signed with.
    pub access_key: String,
    /// Its secret.
    pub secret_key: String,
}

impl User {
    /// The main user with this key pair: canonical id and display name `railstore`.
    pub fn main(access_key: impl Into<String>, secret_key: impl Into<String>) -> User {
        User {
            id: MAIN_ID.to_string(),
            display_name: MAIN_ID.to_string(),
            email: None,
            access_key: access_key.into(),
            secret_key: secret_key.into(),
        }
    }
}

impl std::fmt::Debug for User {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("User")
            .field("id", &self.id)
            .field("display_name", &self.display_name)
            .field("email", &self.email)
            .field("access_key", &self.access_key)
            .field("secret_key", &"<hidden>")
            .finish()
    }
}

/// The main user's canonical id unless configured otherwise.
pub const MAIN_ID: &str = "railstore";

/// Every user, the main one first.
#[derive(Clone, Debug)]
pub struct Users(Arc<Vec<User>>);

impl Default for Users {
    /// The main user alone, with no key pair: for embedders that authenticate requests
    /// themselves, whose every signed request is the main user's.
    fn default() -> Self {
        Users(Arc::new(vec![User::main("", "")]))
    }
}

impl Users {
    /// `users`, the main one first. Refuses none, an empty key, and two users sharing an id,
    /// an access key or an email.
    pub fn new(users: Vec<User>) -> Result<Users, String> {
        if users.is_empty() {
            return Err("at least one user is needed".into());
        }
        for (i, u) in users.iter().enumerate() {
            if u.id.is_empty() || u.access_key.is_empty() || u.secret_key.is_empty() {
                return Err(format!(
                    "user {:?}: an id, an access key and a secret key are required",
                    u.id
                ));
            }
            if u.id.contains(|c: char| c.is_whitespace() || c.is_control()) {
                return Err(format!("user id {:?} holds a space or a control", u.id));
            }
            for other in &users[..i] {
                if other.id == u.id {
                    return Err(format!("two users have the id {:?}", u.id));
                }
                if other.access_key == u.access_key {
                    return Err(format!("two users have the access key {:?}", u.access_key));
                }
                if other.email.is_some() && other.email == u.email {
                    return Err(format!("two users have the email {:?}", u.email));
                }
            }
        }
        Ok(Users(Arc::new(users)))
    }

    /// The main user: the owner of buckets made before buckets had owners.
    pub fn main(&self) -> &User {
        &self.0[0]
    }

    /// The user with this access key.
    pub fn by_access_key(&self, key: &str) -> Option<&User> {
        self.0.iter().find(|u| u.access_key == key)
    }

    /// The user with this canonical id.
    pub fn by_id(&self, id: &str) -> Option<&User> {
        self.0.iter().find(|u| u.id == id)
    }

    /// The user with this email (compared without regard to case, as addresses are).
    pub fn by_email(&self, email: &str) -> Option<&User> {
        self.0.iter().find(|u| {
            u.email
                .as_deref()
                .is_some_and(|e| e.eq_ignore_ascii_case(email))
        })
    }

    /// Who signed a request: `None` for an unsigned one. A signed request whose key is not a
    /// user's (an embedder's own authentication) is the main user's.
    pub(crate) fn caller(&self, credentials: Option<&Credentials>) -> Option<&User> {
        let c = credentials?;
        Some(
            self.by_access_key(&c.access_key)
                .unwrap_or_else(|| self.main()),
        )
    }

    /// The display name of the user with `id` (the id itself for one not known here).
    pub(crate) fn display_name<'a>(&'a self, id: &'a str) -> &'a str {
        self.by_id(id).map_or(id, |u| u.display_name.as_str())
    }
}

#[async_trait::async_trait]
impl S3Auth for Users {
    async fn get_secret_key(&self, access_key: &str) -> s3s::S3Result<SecretKey> {
        match self.by_access_key(access_key) {
            Some(u) if !u.secret_key.is_empty() => Ok(SecretKey::from(u.secret_key.as_str())),
            _ => Err(s3s::S3Error::with_message(
                s3s::S3ErrorCode::InvalidAccessKeyId,
                "The AWS Access Key Id you provided does not exist in our records.",
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(id: &str, key: &str, email: Option<&str>) -> User {
        User {
            id: id.into(),
            display_name: id.into(),
            email: email.map(str::to_string),
            access_key: key.into(),
            secret_key: "secret".into(),
        }
    }

    #[test]
    fn users_are_found_by_key_id_and_email_and_clashes_are_refused() {
        let users = Users::new(vec![
            user("main", "AK1", None),
            user("alt", "AK2", Some("alt@example.org")),
        ])
        .unwrap();
        assert_eq!(users.main().id, "main");
        assert_eq!(users.by_access_key("AK2").unwrap().id, "alt");
        assert_eq!(users.by_email("ALT@example.org").unwrap().id, "alt");
        assert!(users.by_id("nobody").is_none());
        assert!(Users::new(vec![user("a", "K", None), user("a", "L", None)]).is_err());
        assert!(Users::new(vec![user("a", "K", None), user("b", "K", None)]).is_err());
        assert!(Users::new(vec![
            user("a", "K", Some("x@y")),
            user("b", "L", Some("x@y"))
        ])
        .is_err());
        assert!(Users::new(vec![user("a b", "K", None)]).is_err());
        assert!(Users::new(Vec::new()).is_err());
    }
}
