//! Keys: the server's master key, the keys derived from it for SSE-S3 and for each KMS key
//! id, and data keys sealed under them.
//!
//! Every object (or multipart upload) has its own random data key and IV. The data key is
//! stored sealed (AES-256-GCM) under a key-encryption key: the customer's key for SSE-C, else
//! HMAC-SHA256(master, purpose) — `sse-s3`, or `kms:<key id>` for KMS, so each key id is its own
//! key without a key server. The master key never leaves the process; it lives in one file.

use aes_gcm::aead::{Aead, KeyInit, Payload};
use aes_gcm::{Aes256Gcm, Nonce};
use hmac::{Hmac, Mac};
use rand::RngCore;
use sha2::Sha256;
use std::path::Path;
use zeroize::Zeroizing;

/// A 256-bit key, wiped when dropped.
pub(crate) type Key = Zeroizing<[u8; 32]>;

const NONCE_BYTES: usize = 12;
const TAG_BYTES: usize = 16;
/// A sealed data key: nonce, then the key encrypted, then the tag.
pub(crate) const SEALED_BYTES: usize = NONCE_BYTES + 32 + TAG_BYTES;

/// The server's master key, from which SSE-S3 and KMS keys derive; without one the server
/// refuses SSE-S3 and KMS (SSE-C needs none).
#[derive(Clone, Default)]
pub struct Keyring {
    master: Option<Key>,
}

impl PartialEq for Keyring {
    fn eq(&self, other: &Self) -> bool {
        self.master.as_deref() == other.master.as_deref()
    }
}

impl Eq for Keyring {}

impl std::fmt::Debug for Keyring {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = if self.master.is_some() {
            "master key set"
        } else {
            "no master key"
        };
        write!(f, "Keyring({state})")
    }
}

impl Keyring {
    /// A keyring with this master key.
    pub fn new(master: [u8; 32]) -> Keyring {
        Keyring {
            master: Some(Zeroizing::new(master)),
        }
    }

    /// Reads the master key from `path` (64 hex digits), or makes a new random one and writes
    /// it there (the file is the key: keep it private, and back it up — without it, every
    /// SSE-S3 and KMS object is unreadable). Returns the keyring and whether the key is new.
    pub fn load_or_create(path: &Path) -> std::io::Result<(Keyring, bool)> {
        let bad = |why: String| std::io::Error::new(std::io::ErrorKind::InvalidData, why);
        match std::fs::read_to_string(path) {
            Ok(text) => {
                let raw = hex_decode(text.trim()).ok_or_else(|| {
                    bad(format!(
                        "{}: a master key is 64 hex digits and nothing else",
                        path.display()
                    ))
                })?;
                Ok((Keyring::new(*raw), false))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let mut key = Zeroizing::new([0u8; 32]);
                rand::rngs::OsRng.fill_bytes(&mut key[..]);
                let text = Zeroizing::new(format!("{}\n", crate::util::hex(&key[..])));
                write_new_private(path, text.as_bytes())?;
                Ok((Keyring::new(*key), true))
            }
            Err(e) => Err(e),
        }
    }

    /// A public name of the master key (an HMAC of it, in hex), to tell one key from another
    /// without revealing either; `None` without a master key.
    pub fn key_id(&self) -> Option<String> {
        let k = self.derive("key id")?;
        Some(crate::util::hex(&k[..16]))
    }

    /// The key-encryption key for `purpose` (`sse-s3`, `kms:<id>`).
    pub(crate) fn derive(&self, purpose: &str) -> Option<Key> {
        let master = self.master.as_ref()?;
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(&master[..]).expect("any key size");
        mac.update(b"railstore sse ");
        mac.update(purpose.as_bytes());
        let out = mac.finalize().into_bytes();
        let mut key = Zeroizing::new([0u8; 32]);
        key.copy_from_slice(&out);
        Some(key)
    }
}

/// A new random key or IV.
pub(crate) fn random<const N: usize>() -> [u8; N] {
    let mut v = [0u8; N];
    rand::rngs::OsRng.fill_bytes(&mut v);
    v
}

/// Seals `data_key` under `kek`; `context` (the scheme) must be given again to open it.
pub(crate) fn seal(kek: &Key, data_key: &Key, context: &[u8]) -> Vec<u8> {
    let nonce: [u8; NONCE_BYTES] = random();
    let cipher = Aes256Gcm::new_from_slice(&kek[..]).expect("a 32-byte key");
    let sealed = cipher
        .encrypt(
            Nonce::from_slice(&nonce),
            Payload {
                msg: &data_key[..],
                aad: context,
            },
        )
        .expect("AES-GCM encrypts any short message");
    let mut out = nonce.to_vec();
    out.extend_from_slice(&sealed);
    out
}

/// Opens a sealed data key; `None` when `kek` or `context` is not the one it was sealed with,
/// or the bytes were changed.
pub(crate) fn unseal(kek: &Key, sealed: &[u8], context: &[u8]) -> Option<Key> {
    if sealed.len() != SEALED_BYTES {
        return None;
    }
    let (nonce, body) = sealed.split_at(NONCE_BYTES);
    let cipher = Aes256Gcm::new_from_slice(&kek[..]).expect("a 32-byte key");
    let plain = Zeroizing::new(
        cipher
            .decrypt(
                Nonce::from_slice(nonce),
                Payload {
                    msg: body,
                    aad: context,
                },
            )
            .ok()?,
    );
    let mut key = Zeroizing::new([0u8; 32]);
    key.copy_from_slice(plain.get(..32)?);
    Some(key)
}

fn hex_decode(s: &str) -> Option<Key> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut key = Zeroizing::new([0u8; 32]);
    for (i, out) in key.iter_mut().enumerate() {
        *out = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(key)
}

/// Writes a new file that only its owner can read; never replaces one.
fn write_new_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut f = options.open(path)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    if let Some(dir) = path.parent().and_then(|d| std::fs::File::open(d).ok()) {
        dir.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sealed_keys_open_only_with_their_key_and_context() {
        let ring = Keyring::new([7; 32]);
        let a = ring.derive("kms:testkey-1").unwrap();
        let b = ring.derive("kms:testkey-2").unwrap();
        assert_ne!(a[..], b[..], "each key id is its own key");
        let other = Keyring::new([8; 32]).derive("kms:testkey-1").unwrap();
        assert_ne!(a[..], other[..], "keys derive from the master key");
        let data = Zeroizing::new(random::<32>());
        let sealed = seal(&a, &data, b"aws:kms");
        assert_eq!(sealed.len(), SEALED_BYTES);
        assert_eq!(unseal(&a, &sealed, b"aws:kms").unwrap()[..], data[..]);
        assert!(unseal(&b, &sealed, b"aws:kms").is_none());
        assert!(unseal(&a, &sealed, b"AES256").is_none());
        let mut changed = sealed.clone();
        changed[20] ^= 1;
        assert!(unseal(&a, &changed, b"aws:kms").is_none());
        assert!(Keyring::default().derive("sse-s3").is_none());
    }

    #[test]
    fn the_master_key_file_is_made_once_then_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("master.key");
        let (made, new) = Keyring::load_or_create(&path).unwrap();
        assert!(new);
        let (read, new) = Keyring::load_or_create(&path).unwrap();
        assert!(!new);
        assert_eq!(
            made.derive("sse-s3").unwrap()[..],
            read.derive("sse-s3").unwrap()[..]
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o077, 0, "only its owner may read it");
        }
        std::fs::write(&path, "not a key").unwrap();
        assert!(Keyring::load_or_create(&path).is_err());
    }
}
