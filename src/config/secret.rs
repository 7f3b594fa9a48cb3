//! Secrets at the bottom of the program: [`Secret`] values (redacted in `Debug`) and secret
//! files (0600, written atomically) in private directories (0700). Configuration holds secrets
//! and every layer above writes secret files, so this depends on nothing of the crate.

use std::fmt;
use std::fs;
use std::io::Write;
use std::path::Path;

use serde::Deserialize;

/// A value that must never reach logs: `Debug` and `Display` print `<redacted>`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(Secret)
    }
}

/// Creates `dir` (and parents) with mode 0700. An existing directory is used as it is (its mode
/// is the admin's: nothing is changed on what this process did not create), unless others could
/// replace what is kept in it: one writable by group or others (a 1777 `/tmp`, say), or reached
/// through a symlink owned by another user (not root), is refused, naming it.
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    let refuse = |why: String| std::io::Error::new(std::io::ErrorKind::PermissionDenied, why);
    match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return fs::DirBuilder::new().recursive(true).mode(0o700).create(dir);
        }
        Err(e) => return Err(e),
        Ok(link) if link.file_type().is_symlink() => {
            let me = own_uid();
            if link.uid() != 0 && me.is_some_and(|me| link.uid() != me) {
                return Err(refuse(format!(
                    "{} is a symlink owned by uid {}, not by this user or root: its owner could point it elsewhere",
                    dir.display(),
                    link.uid()
                )));
            }
        }
        Ok(_) => {}
    }
    let meta = fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(refuse(format!("{} is not a directory", dir.display())));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(refuse(format!(
            "{} is writable by group or others (mode {:o}): others could replace what gshare keeps there; use a directory only this user can write",
            dir.display(),
            meta.mode() & 0o7777
        )));
    }
    Ok(())
}

/// This process's user (the owner of `/proc/self`); `None` where that cannot be read.
fn own_uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata("/proc/self").ok().map(|m| m.uid())
}

/// Writes a secret file atomically: a 0600 temp file in the same directory, fsync, rename, fsync dir.
pub fn write_private_file(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    let dir = path.parent().unwrap_or(Path::new("."));
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("file");
    let tmp = dir.join(format!(".{name}.tmp-{}", ulid::Ulid::new()));
    let result = (|| {
        let mut f = fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        fs::rename(&tmp, path)?;
        fs::File::open(dir)?.sync_all()
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn mode(p: &Path) -> u32 {
        fs::metadata(p).unwrap().permissions().mode() & 0o7777
    }

    #[test]
    fn private_dirs_are_made_0700_and_existing_ones_are_left_alone_or_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let made = tmp.path().join("a/b");
        create_private_dir(&made).unwrap();
        assert_eq!(mode(&made), 0o700);
        // An existing directory the admin made 0755 is used as it is.
        let open = tmp.path().join("open");
        fs::create_dir(&open).unwrap();
        fs::set_permissions(&open, fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir(&open).unwrap();
        assert_eq!(mode(&open), 0o755, "nothing is chmodded that this process did not create");
        // A 1777 directory (or one reached through a symlink) is refused, and left as it was.
        let shared = tmp.path().join("shared");
        fs::create_dir(&shared).unwrap();
        fs::set_permissions(&shared, fs::Permissions::from_mode(0o1777)).unwrap();
        let e = create_private_dir(&shared).unwrap_err().to_string();
        assert!(e.contains("shared") && e.contains("1777"), "{e}");
        assert_eq!(mode(&shared), 0o1777);
        let link = tmp.path().join("link");
        std::os::unix::fs::symlink(&shared, &link).unwrap();
        assert!(create_private_dir(&link).unwrap_err().to_string().contains("writable by group or others"));
        assert_eq!(mode(&shared), 0o1777);
        // A symlink of ours to a private directory is fine.
        let good = tmp.path().join("good");
        std::os::unix::fs::symlink(&made, &good).unwrap();
        create_private_dir(&good).unwrap();
        // Not a directory.
        let file = tmp.path().join("file");
        fs::write(&file, b"x").unwrap();
        assert!(create_private_dir(&file).is_err());
        // A symlink owned by another user (only root can make one here).
        if own_uid() == Some(0) {
            let foreign = tmp.path().join("foreign");
            std::os::unix::fs::symlink(&made, &foreign).unwrap();
            std::os::unix::fs::lchown(&foreign, Some(4242), Some(4242)).unwrap();
            // Neither root's nor ours: refused.
            assert!(create_private_dir(&foreign).unwrap_err().to_string().contains("uid 4242"));
        }
    }
}
