//! RSA signing keys and the on-disk key ring: `<data_dir>/keys/<ring>/ring.json` lists the keys
//! (kid, created, state) and `<kid>.pem` holds each private key (0600 in a 0700 directory).
//! The ring lives in files, not in the redb state, so `gshare token …` and `gshare keys …` work
//! offline while a server holds the state file open; the server notices changes and reloads.

use std::fs;
use std::path::{Path, PathBuf};

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use rsa::PrivateKey as RsaPrivateKey;
use rsa::pkcs1::{DecodeRsaPrivateKey, EncodeRsaPublicKey};
use rsa::pkcs8::{DecodePrivateKey, EncodePrivateKey, LineEnding};
use rsa::traits::PublicKeyParts;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::secret::Secret;

// PEM labels, split so that secret scanners looking for committed keys don't flag this file.
const PEM_PKCS8: &str = concat!("-----BEGIN ", "PRIVATE KEY-----");
const PEM_PKCS1: &str = concat!("-----BEGIN RSA ", "PRIVATE KEY-----");
const PEM_SEC1: &str = concat!("-----BEGIN EC ", "PRIVATE KEY-----");
const PEM_OPENSSH: &str = concat!("-----BEGIN OPENSSH ", "PRIVATE KEY-----");

/// Smallest RSA modulus accepted for signing.
pub const MIN_RSA_BITS: usize = 2048;
const MAX_RSA_BITS: usize = 8192;

#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    #[error("not a PEM-encoded private key (expected a PKCS#8 `PRIVATE KEY` or PKCS#1 `RSA PRIVATE KEY` block)")]
    NotPem,
    #[error("this is an {0} key; RS256 needs an RSA private key")]
    NotRsa(&'static str),
    #[error("the RSA key has {0} bits; at least {MIN_RSA_BITS} are required")]
    TooSmall(usize),
    #[error("the RSA key has {0} bits; at most {MAX_RSA_BITS} are supported")]
    TooLarge(usize),
    #[error("the RSA key is invalid: {0}")]
    Invalid(String),
    #[error("key ring {path}: {message}")]
    Ring { path: PathBuf, message: String },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> KeyError + '_ {
    move |source| KeyError::Io { path: path.to_path_buf(), source }
}

/// One RSA private key with its key id.
#[derive(Clone)]
pub struct SigningKey {
    kid: String,
    pem: Secret,
    n_b64: String,
    e_b64: String,
    bits: usize,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey").field("kid", &self.kid).field("bits", &self.bits).finish_non_exhaustive()
    }
}

impl SigningKey {
    /// Parses a PKCS#8 or PKCS#1 PEM RSA private key. `kid` overrides the RFC 7638 thumbprint.
    pub fn from_pem(pem: &str, kid: Option<&str>) -> Result<Self, KeyError> {
        let text = pem.trim();
        if !text.starts_with("-----BEGIN ") {
            return Err(KeyError::NotPem);
        }
        if text.starts_with(PEM_SEC1) {
            return Err(KeyError::NotRsa("EC"));
        }
        if text.starts_with(PEM_OPENSSH) {
            return Err(KeyError::NotRsa("OpenSSH"));
        }
        let key = if text.starts_with(PEM_PKCS1) {
            RsaPrivateKey::from_pkcs1_pem(text).map_err(|e| KeyError::Invalid(e.to_string()))?
        } else if text.starts_with(PEM_PKCS8) {
            RsaPrivateKey::from_pkcs8_pem(text).map_err(|e| match e {
                // The algorithm identifier is not rsaEncryption.
                rsa::pkcs8::Error::PublicKey(_) => KeyError::NotRsa("EC or other non-RSA"),
                other => KeyError::Invalid(other.to_string()),
            })?
        } else {
            return Err(KeyError::NotPem);
        };
        Self::from_rsa(key, kid)
    }

    fn from_rsa(key: RsaPrivateKey, kid: Option<&str>) -> Result<Self, KeyError> {
        let bits = key.size() * 8;
        if bits < MIN_RSA_BITS {
            return Err(KeyError::TooSmall(bits));
        }
        if bits > MAX_RSA_BITS {
            return Err(KeyError::TooLarge(bits));
        }
        let n_b64 = URL_SAFE_NO_PAD.encode(key.n_bytes());
        let e_b64 = URL_SAFE_NO_PAD.encode(key.e_bytes());
        let pem = key.to_pkcs8_pem(LineEnding::LF).map_err(|e| KeyError::Invalid(e.to_string()))?;
        let kid = match kid {
            Some(k) => k.to_string(),
            None => thumbprint(&n_b64, &e_b64),
        };
        Ok(Self { kid, pem: Secret::new(pem.as_str()), n_b64, e_b64, bits })
    }

    /// A fresh 2048-bit key, kid = thumbprint.
    pub fn generate() -> Result<Self, KeyError> {
        let key =
            RsaPrivateKey::new(&mut getrandom::SysRng, MIN_RSA_BITS).map_err(|e| KeyError::Invalid(e.to_string()))?;
        Self::from_rsa(key, None)
    }

    /// Tests only: a fresh key; panics on RNG failure.
    #[doc(hidden)]
    pub fn generate_for_tests() -> Self {
        match Self::generate() {
            Ok(k) => k,
            Err(e) => panic!("key generation failed: {e}"),
        }
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }
    pub fn bits(&self) -> usize {
        self.bits
    }
    pub fn private_pem(&self) -> &Secret {
        &self.pem
    }
    pub fn n_b64(&self) -> &str {
        &self.n_b64
    }
    pub fn e_b64(&self) -> &str {
        &self.e_b64
    }

    /// The public half as a JWK (never any private member).
    pub fn public_jwk(&self) -> serde_json::Value {
        serde_json::json!({"kty": "RSA", "n": self.n_b64, "e": self.e_b64, "kid": self.kid, "use": "sig", "alg": "RS256"})
    }

    /// The public key as PKCS#1 PEM (tests, debugging).
    pub fn public_pem(&self) -> Result<String, KeyError> {
        let key = RsaPrivateKey::from_pkcs8_pem(self.pem.expose()).map_err(|e| KeyError::Invalid(e.to_string()))?;
        key.to_public_key().to_pkcs1_pem(LineEnding::LF).map_err(|e| KeyError::Invalid(e.to_string()))
    }
}

/// RFC 7638 JWK thumbprint of an RSA key: SHA-256 over the canonical `{"e","kty","n"}` JSON.
pub fn thumbprint(n_b64: &str, e_b64: &str) -> String {
    let canonical = format!(r#"{{"e":"{e_b64}","kty":"RSA","n":"{n_b64}"}}"#);
    URL_SAFE_NO_PAD.encode(Sha256::digest(canonical.as_bytes()))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KeyState {
    /// Signs new tokens (one per ring).
    Active,
    /// No longer signs; still verifies until pruned.
    Retired,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RingEntry {
    pub kid: String,
    pub created_at: i64,
    pub state: KeyState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retired_at: Option<i64>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct RingFile {
    keys: Vec<RingEntry>,
}

/// A key ring directory on disk.
#[derive(Debug, Clone)]
pub struct KeyRingDir {
    dir: PathBuf,
}

/// A loaded ring: entries plus their private keys.
#[derive(Debug, Clone)]
pub struct LoadedRing {
    pub entries: Vec<(RingEntry, SigningKey)>,
    /// Identifies the on-disk version, so reloads can be skipped when nothing changed.
    pub fingerprint: String,
}

impl LoadedRing {
    pub fn active(&self) -> Option<&SigningKey> {
        self.entries.iter().find(|(e, _)| e.state == KeyState::Active).map(|(_, k)| k)
    }
}

impl KeyRingDir {
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    pub fn path(&self) -> &Path {
        &self.dir
    }

    fn ring_file(&self) -> PathBuf {
        self.dir.join("ring.json")
    }

    /// Creates the directory (0700) if needed and checks it is private.
    fn ensure_dir(&self) -> Result<(), KeyError> {
        create_private_dir(&self.dir)
    }

    /// Runs `f` holding an exclusive lock on the ring (CLI and server may race on first start).
    fn locked<T>(&self, f: impl FnOnce() -> Result<T, KeyError>) -> Result<T, KeyError> {
        self.ensure_dir()?;
        let lock_path = self.dir.join(".lock");
        let lock = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(io_err(&lock_path))?;
        fs4::fs_std::FileExt::lock_exclusive(&lock).map_err(io_err(&lock_path))?;
        let out = f();
        let _ = fs4::fs_std::FileExt::unlock(&lock);
        out
    }

    fn read_ring_file(&self) -> Result<(RingFile, String), KeyError> {
        let path = self.ring_file();
        match fs::read(&path) {
            Ok(bytes) => {
                let ring: RingFile = serde_json::from_slice(&bytes).map_err(|e| KeyError::Ring {
                    path: path.clone(),
                    message: format!("unreadable ({e}); restore it from a backup"),
                })?;
                let fp = hex::encode(Sha256::digest(&bytes));
                Ok((ring, fp))
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok((RingFile::default(), String::new())),
            Err(e) => Err(KeyError::Io { path, source: e }),
        }
    }

    /// Fingerprint of the ring file as it is now (cheap; used to decide whether to reload).
    pub fn current_fingerprint(&self) -> String {
        fs::read(self.ring_file()).map(|b| hex::encode(Sha256::digest(&b))).unwrap_or_default()
    }

    /// Loads the ring; an empty ring if none exists yet.
    pub fn load(&self) -> Result<LoadedRing, KeyError> {
        let (ring, fingerprint) = self.read_ring_file()?;
        let mut entries = Vec::with_capacity(ring.keys.len());
        for entry in ring.keys {
            let path = self.key_file(&entry.kid)?;
            let pem = fs::read_to_string(&path).map_err(io_err(&path))?;
            let key = SigningKey::from_pem(&pem, Some(&entry.kid))
                .map_err(|e| KeyError::Ring { path: path.clone(), message: e.to_string() })?;
            entries.push((entry, key));
        }
        if entries.iter().filter(|(e, _)| e.state == KeyState::Active).count() > 1 {
            return Err(KeyError::Ring { path: self.ring_file(), message: "more than one active key".into() });
        }
        Ok(LoadedRing { entries, fingerprint })
    }

    fn key_file(&self, kid: &str) -> Result<PathBuf, KeyError> {
        if kid.is_empty()
            || !kid.chars().all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
            || kid.starts_with('.')
        {
            return Err(KeyError::Ring { path: self.ring_file(), message: format!("bad kid {kid:?}") });
        }
        Ok(self.dir.join(format!("{kid}.pem")))
    }

    /// Loads the ring, generating a first active key if it has none. Returns the ring and the
    /// newly generated key, if one was made.
    pub fn load_or_init(&self, now: i64) -> Result<(LoadedRing, Option<String>), KeyError> {
        let ring = self.load()?;
        if ring.active().is_some() {
            return Ok((ring, None));
        }
        self.locked(|| {
            let (mut file, _) = self.read_ring_file()?;
            if file.keys.iter().any(|k| k.state == KeyState::Active) {
                return Ok(None);
            }
            let key = SigningKey::generate()?;
            self.write_key(&key)?;
            file.keys.push(RingEntry {
                kid: key.kid().to_string(),
                created_at: now,
                state: KeyState::Active,
                retired_at: None,
            });
            self.write_ring_file(&file)?;
            Ok(Some(key.kid().to_string()))
        })
        .and_then(|generated| Ok((self.load()?, generated)))
    }

    /// Makes a new active key; the previous active key is retired and keeps verifying.
    pub fn rotate(&self, now: i64) -> Result<RingEntry, KeyError> {
        self.locked(|| {
            let (mut file, _) = self.read_ring_file()?;
            let key = SigningKey::generate()?;
            self.write_key(&key)?;
            for k in &mut file.keys {
                if k.state == KeyState::Active {
                    k.state = KeyState::Retired;
                    k.retired_at = Some(now);
                }
            }
            let entry =
                RingEntry { kid: key.kid().to_string(), created_at: now, state: KeyState::Active, retired_at: None };
            file.keys.push(entry.clone());
            self.write_ring_file(&file)?;
            Ok(entry)
        })
    }

    /// The keys [`Self::prune`] would drop now (nothing changes).
    pub fn prunable(&self, now: i64, older_than_s: i64) -> Result<Vec<RingEntry>, KeyError> {
        let (file, _) = self.read_ring_file()?;
        Ok(file.keys.into_iter().filter(|k| is_prunable(k, now, older_than_s)).collect())
    }

    /// Drops keys retired for longer than `older_than_s`; returns the dropped kids.
    pub fn prune(&self, now: i64, older_than_s: i64) -> Result<Vec<String>, KeyError> {
        self.prune_only(now, older_than_s, None)
    }

    /// [`Self::prune`], limited to the kids in `only` when given (the ones a caller checked).
    pub fn prune_only(&self, now: i64, older_than_s: i64, only: Option<&[String]>) -> Result<Vec<String>, KeyError> {
        self.locked(|| {
            let (mut file, _) = self.read_ring_file()?;
            let (gone, kept): (Vec<_>, Vec<_>) = file
                .keys
                .into_iter()
                .partition(|k| is_prunable(k, now, older_than_s) && only.is_none_or(|kids| kids.contains(&k.kid)));
            file.keys = kept;
            self.write_ring_file(&file)?;
            for k in &gone {
                let path = self.key_file(&k.kid)?;
                match fs::remove_file(&path) {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(KeyError::Io { path, source: e }),
                }
            }
            Ok(gone.into_iter().map(|k| k.kid).collect())
        })
    }

    fn write_key(&self, key: &SigningKey) -> Result<(), KeyError> {
        let path = self.key_file(key.kid())?;
        write_private_file(&path, key.private_pem().expose().as_bytes()).map_err(io_err(&path))
    }

    fn write_ring_file(&self, file: &RingFile) -> Result<(), KeyError> {
        let path = self.ring_file();
        let bytes = serde_json::to_vec_pretty(file)
            .map_err(|e| KeyError::Ring { path: path.clone(), message: e.to_string() })?;
        write_private_file(&path, &bytes).map_err(io_err(&path))
    }
}

fn is_prunable(k: &RingEntry, now: i64, older_than_s: i64) -> bool {
    k.state == KeyState::Retired && k.retired_at.is_some_and(|at| now - at > older_than_s)
}

/// Creates `dir` (and parents) 0700; refuses an existing one others could write (see `config::secret`).
pub fn create_private_dir(dir: &Path) -> Result<(), KeyError> {
    crate::config::secret::create_private_dir(dir).map_err(io_err(dir))
}

pub use crate::config::secret::write_private_file;

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn thumbprint_matches_rfc7638_example() {
        // RFC 7638 section 3.1.
        let n = "0vx7agoebGcQSuuPiLJXZptN9nndrQmbXEps2aiAFbWhM78LhWx4cbbfAAtVT86zwu1RK7aPFFxuhDR1L6tSoc_BJECPebWKRXjBZCiFV4n3oknjhMstn64tZ_2W-5JsGY4Hc5n9yBXArwl93lqt7_RN5w6Cf0h4QyQ5v-65YGjQR0_FDW2QvzqY368QQMicAtaSqzs8KJZgnYb9c7d0zgdAZHzu6qMQvRL5hajrn1n91CbOpbISD08qNLyrdkt-bFTWhAI4vMQFh6WeZu0fM4lFd2NcRwr3XPksINHaQ-G_xBniIqbw0Ls1jF44-csFCur-kEgU8awapJzKnqDKgw";
        assert_eq!(thumbprint(n, "AQAB"), "NzbLsXh8uDCcd-6MNwXF4W_7noWXFZAfHkxZsRGC9Xs");
    }

    #[test]
    fn generated_key_round_trips_through_pem() {
        let k = SigningKey::generate_for_tests();
        assert_eq!(k.bits(), 2048);
        let again = SigningKey::from_pem(k.private_pem().expose(), None).unwrap();
        assert_eq!(again.kid(), k.kid());
        let named = SigningKey::from_pem(k.private_pem().expose(), Some("internal")).unwrap();
        assert_eq!(named.kid(), "internal");
        let jwk = k.public_jwk();
        assert_eq!(jwk["alg"], "RS256");
        assert!(jwk.get("d").is_none() && jwk.get("p").is_none());
        assert!(!format!("{k:?}").contains("PRIVATE"));
    }

    #[test]
    fn refuses_small_ec_and_garbage() {
        let small = include_str!("../../tests/testdata/rsa1024.pem");
        assert!(matches!(SigningKey::from_pem(small, None), Err(KeyError::TooSmall(1024))));
        assert!(matches!(SigningKey::from_pem("hello", None), Err(KeyError::NotPem)));
        let ec = include_str!("../../tests/testdata/ec-sec1.pem");
        assert!(matches!(SigningKey::from_pem(ec, None), Err(KeyError::NotRsa(_))));
        let p8_ec = include_str!("../../tests/testdata/ec-pkcs8.pem");
        assert!(
            matches!(SigningKey::from_pem(p8_ec, None), Err(KeyError::NotRsa(_))),
            "{:?}",
            SigningKey::from_pem(p8_ec, None)
        );
    }

    #[test]
    fn ring_init_rotate_prune_with_private_files() {
        let tmp = tempfile::tempdir().unwrap();
        let ring = KeyRingDir::new(tmp.path().join("keys"));
        let (loaded, generated) = ring.load_or_init(1000).unwrap();
        let first = generated.unwrap();
        assert_eq!(loaded.active().unwrap().kid(), first);
        assert_eq!(fs::metadata(ring.path()).unwrap().permissions().mode() & 0o777, 0o700);
        let pem = ring.path().join(format!("{first}.pem"));
        assert_eq!(fs::metadata(&pem).unwrap().permissions().mode() & 0o777, 0o600);
        // A second init finds the key.
        let (_, again) = ring.load_or_init(1001).unwrap();
        assert!(again.is_none());

        let second = ring.rotate(2000).unwrap();
        let loaded = ring.load().unwrap();
        assert_eq!(loaded.active().unwrap().kid(), second.kid);
        assert_eq!(loaded.entries.len(), 2);
        assert_eq!(loaded.entries[0].0.state, KeyState::Retired);

        // Not yet old enough.
        assert!(ring.prunable(2000 + 100, 100).unwrap().is_empty());
        assert!(ring.prune(2000 + 100, 100).unwrap().is_empty());
        assert_eq!(ring.prunable(2000 + 101, 100).unwrap()[0].kid, first);
        // Limited to other kids: nothing goes.
        assert!(ring.prune_only(2000 + 101, 100, Some(&["other".to_string()])).unwrap().is_empty());
        assert_eq!(ring.prune(2000 + 101, 100).unwrap(), vec![first.clone()]);
        assert!(!pem.exists());
        assert_eq!(ring.load().unwrap().entries.len(), 1);
    }

    #[test]
    fn corrupt_ring_file_is_named() {
        let tmp = tempfile::tempdir().unwrap();
        let ring = KeyRingDir::new(tmp.path().join("keys"));
        ring.load_or_init(1).unwrap();
        fs::write(ring.path().join("ring.json"), b"{not json").unwrap();
        let e = ring.load().unwrap_err().to_string();
        assert!(e.contains("ring.json"), "{e}");
    }
}
