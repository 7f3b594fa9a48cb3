//! The snapshot file format (format version 1):
//!
//! ```text
//! gshare-snapshot\n                 magic line
//! {header JSON}\n                   one line: versions, created_at, lengths, sha256, what was left out
//! state section (state_len bytes)   every table of the state file, from one read transaction
//! secrets section (secrets_len)     optional: an age (scrypt) file holding key rings and kubeconfigs
//! ```
//!
//! `sha256` covers both sections, so a truncated or altered file is refused before anything is
//! touched. The state section is table-generic: each table is written with its name and value
//! kind, so a table added by a later change is carried without this module knowing it.
//!
//! State section: for each table, `b'T'`, u32 name length, name, u8 value kind (0 bytes, 1 u64,
//! 2 i64), u64 entry count, then per entry u32 key length, key (UTF-8), u32 value length, value
//! (u64/i64 big-endian); `b'E'` ends the section.

use std::collections::BTreeMap;

use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata, TableDefinition, TableHandle, WriteTransaction};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

pub const MAGIC: &[u8] = b"gshare-snapshot\n";
pub const FORMAT_VERSION: u32 = 1;
/// The header line is small; anything longer is not ours.
const MAX_HEADER: usize = 64 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("not a gshare snapshot (it does not start with `gshare-snapshot`); was it made by another program?")]
    NotASnapshot,
    #[error("the snapshot header is unreadable: {0}")]
    BadHeader(String),
    #[error(
        "the snapshot is in format {found}, newer than this gshare reads ({FORMAT_VERSION}); restore it with the gshare that made it ({binary})"
    )]
    NewerFormat { found: u32, binary: String },
    #[error("the snapshot is truncated: {have} bytes after the header, {want} expected")]
    Truncated { have: u64, want: u64 },
    #[error("the snapshot is damaged: its content hash is {actual}, the header says {expected}")]
    HashMismatch { expected: String, actual: String },
    #[error("the snapshot's state section is damaged: {0}")]
    BadState(String),
    #[error("table `{table}` has a key/value kind snapshots do not know; nothing was written")]
    UnknownTable { table: String },
    #[error("state file: {0}")]
    Store(String),
}

fn store_err(e: impl std::fmt::Display) -> FormatError {
    FormatError::Store(e.to_string())
}

/// What a snapshot says about itself.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Header {
    /// Always `gshare-snapshot`.
    pub format: String,
    pub format_version: u32,
    /// The state file's schema version at the time of the snapshot.
    pub schema_version: u64,
    /// The gshare version that wrote it.
    pub binary_version: String,
    /// RFC 3339 UTC.
    pub created_at: String,
    pub created_at_ms: i64,
    /// `manual`, `scheduled`, `pre-upgrade`, ...
    pub reason: String,
    /// Hex SHA-256 of everything after the header line.
    pub sha256: String,
    pub state_len: u64,
    pub secrets_len: u64,
    pub secrets: SecretsInfo,
    /// Entry count per table.
    pub tables: BTreeMap<String, u64>,
    /// Key ids of the internal (operator token) signing ring when the snapshot was taken.
    #[serde(default)]
    pub signing_kids: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SecretsInfo {
    pub included: bool,
    /// `age-scrypt` when included.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub encryption: Option<String>,
    /// When included: the files inside (relative names). When not: what was left out.
    #[serde(default)]
    pub files: Vec<String>,
    #[serde(default)]
    pub omitted: Vec<String>,
}

/// The state of one read transaction, encoded.
pub struct StateDump {
    pub bytes: Vec<u8>,
    pub tables: BTreeMap<String, u64>,
    pub schema_version: u64,
}

#[derive(Clone, Copy)]
enum Kind {
    Bytes = 0,
    U64 = 1,
    I64 = 2,
}

fn def_bytes(name: &str) -> TableDefinition<'_, &'static str, &'static [u8]> {
    TableDefinition::new(name)
}
fn def_u64(name: &str) -> TableDefinition<'_, &'static str, u64> {
    TableDefinition::new(name)
}
fn def_i64(name: &str) -> TableDefinition<'_, &'static str, i64> {
    TableDefinition::new(name)
}

fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_be_bytes());
    out.extend_from_slice(b);
}

/// Copies every table visible to `txn` (one read transaction: a consistent cut) into a state
/// section. A table of a kind this module does not know is an error, never silently skipped.
pub fn dump(txn: &ReadTransaction) -> Result<StateDump, FormatError> {
    if txn.list_multimap_tables().map_err(store_err)?.next().is_some() {
        return Err(FormatError::UnknownTable { table: "(multimap table)".into() });
    }
    let mut names: Vec<String> =
        txn.list_tables().map_err(store_err)?.map(|h| h.name().to_string()).collect::<Vec<_>>();
    names.sort();
    let mut out = Vec::with_capacity(1 << 20);
    let mut tables = BTreeMap::new();
    let mut schema_version = 0;
    for name in names {
        // Tries the table as one value kind: `Some(count)` when it is that kind (entries written),
        // `None` on a kind mismatch. `$enc` turns a value into its bytes.
        macro_rules! try_kind {
            ($def:expr, $kind:expr, $enc:expr) => {
                match txn.open_table($def) {
                    Ok(t) => {
                        let count = t.len().map_err(store_err)?;
                        out.push(b'T');
                        put_bytes(&mut out, name.as_bytes());
                        out.push($kind as u8);
                        out.extend_from_slice(&count.to_be_bytes());
                        for item in t.iter().map_err(store_err)? {
                            let (k, v) = item.map_err(store_err)?;
                            put_bytes(&mut out, k.value().as_bytes());
                            put_bytes(&mut out, $enc(k.value(), v.value()).as_ref());
                        }
                        Some(count)
                    }
                    Err(redb::TableError::TableTypeMismatch { .. }) => None,
                    Err(e) => return Err(store_err(e)),
                }
            };
        }
        let mut count = try_kind!(def_bytes(&name), Kind::Bytes, |_: &str, v: &[u8]| v.to_vec());
        if count.is_none() {
            count = try_kind!(def_u64(&name), Kind::U64, |k: &str, v: u64| {
                if name == "meta" && k == "schema_version" {
                    schema_version = v;
                }
                v.to_be_bytes()
            });
        }
        if count.is_none() {
            count = try_kind!(def_i64(&name), Kind::I64, |_: &str, v: i64| v.to_be_bytes());
        }
        if let Some(count) = count {
            tables.insert(name, count);
            continue;
        }
        return Err(FormatError::UnknownTable { table: name });
    }
    out.push(b'E');
    Ok(StateDump { bytes: out, tables, schema_version })
}

/// A cursor over a state section.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], FormatError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.buf.len());
        let end = end.ok_or_else(|| FormatError::BadState(format!("ends early at byte {}", self.at)))?;
        let s = &self.buf[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn u8(&mut self) -> Result<u8, FormatError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<usize, FormatError> {
        let b = self.take(4)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize)
    }
    fn u64(&mut self) -> Result<u64, FormatError> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_be_bytes(a))
    }
    fn blob(&mut self) -> Result<&'a [u8], FormatError> {
        let n = self.u32()?;
        self.take(n)
    }
    fn str(&mut self) -> Result<&'a str, FormatError> {
        std::str::from_utf8(self.blob()?).map_err(|e| FormatError::BadState(e.to_string()))
    }
}

/// Writes a state section into `txn` (a fresh database): the inverse of [`dump`].
pub fn load(txn: &WriteTransaction, state: &[u8]) -> Result<BTreeMap<String, u64>, FormatError> {
    let mut r = Reader { buf: state, at: 0 };
    let mut tables = BTreeMap::new();
    loop {
        match r.u8()? {
            b'E' => break,
            b'T' => {}
            other => return Err(FormatError::BadState(format!("unexpected tag {other:#x} at byte {}", r.at - 1))),
        }
        let name = r.str()?.to_string();
        let kind = r.u8()?;
        let count = r.u64()?;
        match kind {
            0 => {
                let mut t = txn.open_table(def_bytes(&name)).map_err(store_err)?;
                for _ in 0..count {
                    let (k, v) = (r.str()?, r.blob()?);
                    t.insert(k, v).map_err(store_err)?;
                }
            }
            1 | 2 => {
                let mut u = if kind == 1 { Some(txn.open_table(def_u64(&name)).map_err(store_err)?) } else { None };
                let mut i = if kind == 2 { Some(txn.open_table(def_i64(&name)).map_err(store_err)?) } else { None };
                for _ in 0..count {
                    let k = r.str()?;
                    let v = r.blob()?;
                    let v: [u8; 8] =
                        v.try_into().map_err(|_| FormatError::BadState(format!("{name}/{k}: not 8 bytes")))?;
                    if let Some(t) = u.as_mut() {
                        t.insert(k, u64::from_be_bytes(v)).map_err(store_err)?;
                    }
                    if let Some(t) = i.as_mut() {
                        t.insert(k, i64::from_be_bytes(v)).map_err(store_err)?;
                    }
                }
            }
            k => return Err(FormatError::BadState(format!("table {name}: unknown value kind {k}"))),
        }
        tables.insert(name, count);
    }
    if r.at != state.len() {
        return Err(FormatError::BadState("bytes after the end marker".into()));
    }
    Ok(tables)
}

/// The schema version a state section's own `meta` table records (0 when it has none). Restore
/// trusts this, not the header: the header is a summary anyone can edit and re-hash.
pub fn schema_in(state: &[u8]) -> Result<u64, FormatError> {
    let mut r = Reader { buf: state, at: 0 };
    let mut found = 0;
    loop {
        match r.u8()? {
            b'E' => return Ok(found),
            b'T' => {}
            other => return Err(FormatError::BadState(format!("unexpected tag {other:#x}"))),
        }
        let name = r.str()?;
        let kind = r.u8()?;
        let count = r.u64()?;
        for _ in 0..count {
            let (k, v) = (r.str()?, r.blob()?);
            if name == "meta" && k == "schema_version" {
                let v: [u8; 8] =
                    v.try_into().map_err(|_| FormatError::BadState("meta/schema_version: not 8 bytes".into()))?;
                if kind != Kind::U64 as u8 {
                    return Err(FormatError::BadState("meta/schema_version is not a u64".into()));
                }
                found = u64::from_be_bytes(v);
            }
        }
    }
}

/// Visits every entry of one bytes-valued table of a state section (for `export`).
pub fn entries<'a>(state: &'a [u8], table: &str) -> Result<Vec<(&'a str, &'a [u8])>, FormatError> {
    let mut r = Reader { buf: state, at: 0 };
    let mut out = Vec::new();
    loop {
        match r.u8()? {
            b'E' => return Ok(out),
            b'T' => {}
            other => return Err(FormatError::BadState(format!("unexpected tag {other:#x}"))),
        }
        let name = r.str()?;
        let _kind = r.u8()?;
        let count = r.u64()?;
        for _ in 0..count {
            let (k, v) = (r.str()?, r.blob()?);
            if name == table {
                out.push((k, v));
            }
        }
    }
}

/// The whole file: magic, header line, sections. Fills in `sha256` and the lengths.
pub fn encode(mut header: Header, state: &[u8], secrets: &[u8]) -> Result<Vec<u8>, FormatError> {
    let mut h = Sha256::new();
    h.update(state);
    h.update(secrets);
    header.sha256 = hex::encode(h.finalize());
    header.state_len = state.len() as u64;
    header.secrets_len = secrets.len() as u64;
    header.format = "gshare-snapshot".into();
    header.format_version = FORMAT_VERSION;
    let line = serde_json::to_vec(&header).map_err(|e| FormatError::BadHeader(e.to_string()))?;
    let mut out = Vec::with_capacity(MAGIC.len() + line.len() + 1 + state.len() + secrets.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&line);
    out.push(b'\n');
    out.extend_from_slice(state);
    out.extend_from_slice(secrets);
    Ok(out)
}

/// Reads only the header (for `ls`): no hash check.
pub fn read_header(prefix: &[u8]) -> Result<(Header, usize), FormatError> {
    let rest = prefix.strip_prefix(MAGIC).ok_or(FormatError::NotASnapshot)?;
    let end = rest.iter().take(MAX_HEADER).position(|b| *b == b'\n').ok_or_else(|| {
        if rest.len() < MAX_HEADER {
            FormatError::Truncated { have: 0, want: 1 }
        } else {
            FormatError::BadHeader("no end of header line".into())
        }
    })?;
    let header: Header = serde_json::from_slice(&rest[..end]).map_err(|e| FormatError::BadHeader(e.to_string()))?;
    if header.format != "gshare-snapshot" {
        return Err(FormatError::NotASnapshot);
    }
    if header.format_version > FORMAT_VERSION {
        return Err(FormatError::NewerFormat { found: header.format_version, binary: header.binary_version });
    }
    Ok((header, MAGIC.len() + end + 1))
}

/// A checked snapshot: header parsed, lengths and hash verified.
pub struct Decoded<'a> {
    pub header: Header,
    pub state: &'a [u8],
    pub secrets: &'a [u8],
}

pub fn decode(file: &[u8]) -> Result<Decoded<'_>, FormatError> {
    let (header, body_at) = read_header(file)?;
    let body = &file[body_at..];
    let want = header.state_len.saturating_add(header.secrets_len);
    if (body.len() as u64) < want {
        return Err(FormatError::Truncated { have: body.len() as u64, want });
    }
    if body.len() as u64 > want {
        return Err(FormatError::BadState(format!("{} bytes more than the header says", body.len() as u64 - want)));
    }
    let actual = hex::encode(Sha256::digest(body));
    if actual != header.sha256 {
        return Err(FormatError::HashMismatch { expected: header.sha256.clone(), actual });
    }
    let (state, secrets) = body.split_at(header.state_len as usize);
    Ok(Decoded { header, state, secrets })
}

/// `major.minor.patch` as numbers, for "is this snapshot from a newer gshare?".
pub fn version_tuple(v: &str) -> (u64, u64, u64) {
    let core = v.split(['-', '+']).next().unwrap_or("");
    let mut it = core.split('.').map(|p| p.parse::<u64>().unwrap_or(0));
    (it.next().unwrap_or(0), it.next().unwrap_or(0), it.next().unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use redb::ReadableDatabase;

    #[test]
    fn dump_and_load_round_trip_every_kind() {
        let tmp = tempfile::tempdir().unwrap();
        let db = redb::Database::create(tmp.path().join("a.redb")).unwrap();
        let w = db.begin_write().unwrap();
        w.open_table(def_bytes("things")).unwrap().insert("k1", b"{\"n\":1}".as_slice()).unwrap();
        w.open_table(def_u64("meta")).unwrap().insert("schema_version", 7).unwrap();
        w.open_table(def_i64("stamps")).unwrap().insert("x", -5).unwrap();
        w.commit().unwrap();
        let dump = dump(&db.begin_read().unwrap()).unwrap();
        assert_eq!(dump.schema_version, 7);
        assert_eq!(dump.tables.len(), 3);
        let file = encode(Header::for_test(), &dump.bytes, b"").unwrap();
        let d = decode(&file).unwrap();
        let db2 = redb::Database::create(tmp.path().join("b.redb")).unwrap();
        let w = db2.begin_write().unwrap();
        load(&w, d.state).unwrap();
        w.commit().unwrap();
        let r = db2.begin_read().unwrap();
        assert_eq!(r.open_table(def_i64("stamps")).unwrap().get("x").unwrap().unwrap().value(), -5);
        assert_eq!(r.open_table(def_u64("meta")).unwrap().get("schema_version").unwrap().unwrap().value(), 7);
        // Every truncation is named, never a panic.
        for cut in [1, 10, file.len() / 2, file.len() - 1] {
            assert!(decode(&file[..cut]).is_err(), "{cut}");
        }
        assert!(matches!(decode(b"SQLite format 3\0"), Err(FormatError::NotASnapshot)));
        assert_eq!(version_tuple("0.10.2-rc1"), (0, 10, 2));
    }

    impl Header {
        fn for_test() -> Self {
            Header {
                format: String::new(),
                format_version: 0,
                schema_version: 7,
                binary_version: "0.1.0".into(),
                created_at: String::new(),
                created_at_ms: 0,
                reason: "test".into(),
                sha256: String::new(),
                state_len: 0,
                secrets_len: 0,
                secrets: SecretsInfo::default(),
                tables: BTreeMap::new(),
                signing_kids: vec![],
            }
        }
    }
}
