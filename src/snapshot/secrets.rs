//! The optional secrets section: the key rings (`<data_dir>/keys`) and the clusters' kubeconfigs
//! (`cluster_kubeconfig_dir`), packed as JSON and encrypted with a passphrase by `age` (scrypt
//! recipient). Without `--include-secrets` they stay out and the header says so.

use std::path::{Path, PathBuf};

use age::secrecy::SecretString;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Serialize};

use crate::config::Config;

/// A passphrase; never printed.
pub struct Passphrase(SecretString);

impl std::fmt::Debug for Passphrase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

impl Passphrase {
    pub fn new(s: String) -> Result<Self, SecretsError> {
        let s = s.trim_end_matches(['\r', '\n']).to_string();
        if s.chars().count() < 8 {
            return Err(SecretsError::WeakPassphrase);
        }
        Ok(Self(SecretString::from(s)))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error("the passphrase must be at least 8 characters")]
    WeakPassphrase,
    #[error("cannot read {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("cannot write {path}: {source}")]
    Write { path: PathBuf, source: std::io::Error },
    #[error("cannot encrypt the secrets: {0}")]
    Encrypt(String),
    #[error("wrong passphrase (or the secrets section is damaged): {0}")]
    Decrypt(String),
    #[error("the decrypted secrets are unreadable: {0}")]
    Unpack(String),
}

/// One secret file, relative to its root: `keys/...` or `clusters/...`.
#[derive(Serialize, Deserialize)]
struct Packed {
    path: String,
    data_b64: String,
}

#[derive(Serialize, Deserialize)]
struct Bundle {
    files: Vec<Packed>,
}

/// The two roots: (`keys`, data_dir/keys) and (`clusters`, cluster_kubeconfig_dir).
fn roots(config: &Config) -> [(&'static str, PathBuf); 2] {
    [("keys", config.keys_dir()), ("clusters", config.cluster_kubeconfig_dir.clone())]
}

fn walk(root: &Path, rel: &str, out: &mut Vec<(String, PathBuf)>) -> Result<(), SecretsError> {
    let dir = root.join(rel);
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => return Err(SecretsError::Read { path: dir, source }),
    };
    let mut names: Vec<_> = entries.filter_map(|e| e.ok()).collect();
    names.sort_by_key(|e| e.file_name());
    for e in names {
        let name = e.file_name().to_string_lossy().into_owned();
        // Lock files and interrupted temp files are not state.
        if name.starts_with('.') {
            continue;
        }
        let sub = if rel.is_empty() { name } else { format!("{rel}/{name}") };
        let ft = e.file_type().map_err(|source| SecretsError::Read { path: e.path(), source })?;
        if ft.is_dir() {
            walk(root, &sub, out)?;
        } else if ft.is_file() {
            out.push((sub, e.path()));
        }
    }
    Ok(())
}

/// The secret files as `(name, path)`, names prefixed by their root.
pub fn list(config: &Config) -> Result<Vec<(String, PathBuf)>, SecretsError> {
    let mut out = Vec::new();
    for (prefix, root) in roots(config) {
        let mut files = Vec::new();
        walk(&root, "", &mut files)?;
        out.extend(files.into_iter().map(|(n, p)| (format!("{prefix}/{n}"), p)));
    }
    Ok(out)
}

/// What a snapshot without secrets leaves out, for its header.
pub fn omitted(config: &Config) -> Vec<String> {
    let files = list(config).unwrap_or_default();
    let keys = files.iter().filter(|(n, _)| n.starts_with("keys/")).count();
    let kubeconfigs = files.iter().filter(|(n, _)| n.starts_with("clusters/")).count();
    vec![
        format!("signing key rings and connection keys ({keys} files under {})", config.keys_dir().display()),
        format!("cluster kubeconfigs ({kubeconfigs} files under {})", config.cluster_kubeconfig_dir.display()),
    ]
}

/// Packs and encrypts the secret files; returns the age file and the names inside.
pub fn seal(config: &Config, pass: &Passphrase) -> Result<(Vec<u8>, Vec<String>), SecretsError> {
    let mut files = Vec::new();
    let mut names = Vec::new();
    for (name, path) in list(config)? {
        let data = std::fs::read(&path).map_err(|source| SecretsError::Read { path: path.clone(), source })?;
        files.push(Packed { path: name.clone(), data_b64: STANDARD.encode(data) });
        names.push(name);
    }
    let plain = serde_json::to_vec(&Bundle { files }).map_err(|e| SecretsError::Encrypt(e.to_string()))?;
    let recipient = age::scrypt::Recipient::new(pass.0.clone());
    let sealed = age::encrypt(&recipient, &plain).map_err(|e| SecretsError::Encrypt(e.to_string()))?;
    Ok((sealed, names))
}

/// Decrypted secret files, checked but not yet written.
pub struct Opened {
    files: Vec<(String, Vec<u8>)>,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened").field("files", &self.files.iter().map(|(n, _)| n).collect::<Vec<_>>()).finish()
    }
}

pub fn open(sealed: &[u8], pass: &Passphrase) -> Result<Opened, SecretsError> {
    let identity = age::scrypt::Identity::new(pass.0.clone());
    let plain = age::decrypt(&identity, sealed).map_err(|e| SecretsError::Decrypt(e.to_string()))?;
    let bundle: Bundle = serde_json::from_slice(&plain).map_err(|e| SecretsError::Unpack(e.to_string()))?;
    let mut files = Vec::new();
    for f in bundle.files {
        // Names come from the file: no absolute paths, no `..`.
        let ok = (f.path.starts_with("keys/") || f.path.starts_with("clusters/"))
            && f.path.split('/').all(|c| !c.is_empty() && c != "." && c != "..");
        if !ok {
            return Err(SecretsError::Unpack(format!("unexpected file name `{}`", f.path)));
        }
        let data = STANDARD.decode(&f.data_b64).map_err(|e| SecretsError::Unpack(e.to_string()))?;
        files.push((f.path, data));
    }
    Ok(Opened { files })
}

impl Opened {
    pub fn names(&self) -> Vec<String> {
        self.files.iter().map(|(n, _)| n.clone()).collect()
    }

    /// Writes the snapshot's files into a staging directory beside each root
    /// (`.<name>.restore-<tag>`, 0700; files 0600), touching neither root. Every root gets one,
    /// empty when the snapshot has no files for it: after the switch each root holds exactly the
    /// snapshot's files. On failure whatever was staged is removed.
    pub fn stage(&self, config: &Config, tag: &str) -> Result<Staged, SecretsError> {
        let mut staged = Staged { dirs: Vec::new() };
        let result = (|| {
            for (prefix, root) in roots(config) {
                let staging = staging_dir(&root, tag)?;
                crate::auth::keys::create_private_dir(&staging).map_err(|e| SecretsError::Write {
                    path: staging.clone(),
                    source: std::io::Error::other(e.to_string()),
                })?;
                staged.dirs.push((root.clone(), staging.clone()));
                for (name, data) in &self.files {
                    let Some(rel) = name.strip_prefix(prefix).and_then(|r| r.strip_prefix('/')) else { continue };
                    let path = staging.join(rel);
                    if let Some(dir) = path.parent() {
                        crate::auth::keys::create_private_dir(dir).map_err(|e| SecretsError::Write {
                            path: dir.to_path_buf(),
                            source: std::io::Error::other(e.to_string()),
                        })?;
                    }
                    crate::auth::keys::write_private_file(&path, data)
                        .map_err(|source| SecretsError::Write { path: path.clone(), source })?;
                }
            }
            Ok(())
        })();
        match result {
            Ok(()) => Ok(staged),
            Err(e) => {
                staged.discard();
                Err(e)
            }
        }
    }
}

/// `<parent>/.<name>.restore-<tag>`: beside `root`, so renaming it into place is atomic.
fn staging_dir(root: &Path, tag: &str) -> Result<PathBuf, SecretsError> {
    let name = root.file_name().and_then(|n| n.to_str()).ok_or_else(|| SecretsError::Write {
        path: root.to_path_buf(),
        source: std::io::Error::other("not a directory name that can be restored into"),
    })?;
    let parent = root.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    Ok(parent.join(format!(".{name}.restore-{tag}")))
}

/// The secret directories written beside their roots, not yet switched in.
#[derive(Debug)]
pub struct Staged {
    /// (root, its staging directory)
    pub dirs: Vec<(PathBuf, PathBuf)>,
}

impl Staged {
    /// Removes what was staged (a refused or undone restore).
    pub fn discard(&self) {
        for (_, staging) in &self.dirs {
            let _ = std::fs::remove_dir_all(staging);
        }
    }
}

/// Key ids of the internal signing ring in `keys_dir` (empty when there is none).
pub fn signing_kids(config: &Config) -> Vec<String> {
    let path = config.keys_dir().join("internal").join("ring.json");
    let Ok(bytes) = std::fs::read(&path) else { return Vec::new() };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) else { return Vec::new() };
    let mut kids: Vec<String> = v["keys"]
        .as_array()
        .map(|a| a.iter().filter_map(|k| k["kid"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    kids.sort();
    kids
}
