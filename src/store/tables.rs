//! The typed tables domains declare: [`JsonTable`] (JSON records under string keys) and
//! [`KeySet`] (key-only index tables), their readers and writers, and key walks.

use std::marker::PhantomData;

use redb::{ReadTransaction, ReadableTable, ReadableTableMetadata, TableDefinition};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{StoreError, WriteTxn};

/// The smallest string above every string that starts with `prefix` (`None`: no bound, `prefix` is
/// empty or all `char::MAX`). UTF-8 sorts bytewise as code points do, so this bounds a key range.
pub(super) fn prefix_end(prefix: &str) -> Option<String> {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        // The next scalar value (surrogates are not chars).
        let next = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(next) = next {
            chars.push(next);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// Which end a key walk starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyOrder {
    /// Highest key first (ids are ULIDs: newest first).
    Descending,
    /// Lowest key first.
    Ascending,
}

/// Walks the keys that start with `prefix` in `order`, handing `f` what follows the prefix,
/// until `f` says stop. With `below`, only keys under `prefix + below` (a descending walk resumes
/// after it). Keys only: nothing is decoded.
fn walk_keys<V: redb::Value + 'static>(
    table: &impl ReadableTable<&'static str, V>,
    prefix: &str,
    below: Option<&str>,
    order: KeyOrder,
    mut f: impl FnMut(&str) -> bool,
) -> Result<(), StoreError> {
    use std::ops::Bound;
    let end = match below {
        Some(b) => Some(format!("{prefix}{b}")),
        None => prefix_end(prefix),
    };
    let upper = match &end {
        Some(e) => Bound::Excluded(e.as_str()),
        None => Bound::Unbounded,
    };
    let range = table.range::<&str>((Bound::Included(prefix), upper))?;
    let mut go_on = |key: &str| match key.strip_prefix(prefix) {
        Some(rest) => f(rest),
        None => false,
    };
    match order {
        KeyOrder::Descending => {
            for item in range.rev() {
                if !go_on(item?.0.value()) {
                    break;
                }
            }
        }
        KeyOrder::Ascending => {
            for item in range {
                if !go_on(item?.0.value()) {
                    break;
                }
            }
        }
    }
    Ok(())
}

/// A table of keys without values: an index (`<value>\0<id>`) walked in key order or asked about
/// one key, nothing decoded. Like [`JsonTable`], it is only a name to the store.
#[derive(Clone, Copy)]
pub struct KeySet {
    name: &'static str,
}

impl KeySet {
    pub const fn new(name: &'static str) -> Self {
        Self { name }
    }

    pub const fn name(&self) -> &'static str {
        self.name
    }

    /// Values are empty byte strings, not `()`: a table of the bytes kind, which snapshots carry.
    fn def(&self) -> TableDefinition<'static, &'static str, &'static [u8]> {
        TableDefinition::new(self.name)
    }

    /// Adds a key; returns whether it is new.
    pub fn insert(&self, txn: &WriteTxn, key: &str) -> Result<bool, StoreError> {
        let empty: &[u8] = &[];
        Ok(txn.open_table(self.def())?.insert(key, empty)?.is_none())
    }

    /// Removes a key; returns whether it was there.
    pub fn remove(&self, txn: &WriteTxn, key: &str) -> Result<bool, StoreError> {
        Ok(txn.open_table(self.def())?.remove(key)?.is_some())
    }

    /// Removes every key (to rebuild the index).
    pub fn clear(&self, txn: &WriteTxn) -> Result<(), StoreError> {
        txn.open_table(self.def())?.retain(|_, _| false)?;
        Ok(())
    }

    pub fn contains(&self, txn: &ReadTransaction, key: &str) -> Result<bool, StoreError> {
        match txn.open_table(self.def()) {
            Ok(t) => Ok(t.get(key)?.is_some()),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Every key, in key order (tests and repairs compare an index with its source).
    pub fn keys(&self, txn: &ReadTransaction) -> Result<Vec<String>, StoreError> {
        let mut out = Vec::new();
        self.walk(txn, "", None, KeyOrder::Ascending, |k| {
            out.push(k.to_string());
            true
        })?;
        Ok(out)
    }

    /// Walks the keys under `prefix` in `order`, below `below` when given (see `walk_keys`).
    pub fn walk(
        &self,
        txn: &ReadTransaction,
        prefix: &str,
        below: Option<&str>,
        order: KeyOrder,
        f: impl FnMut(&str) -> bool,
    ) -> Result<(), StoreError> {
        match txn.open_table(self.def()) {
            Ok(t) => walk_keys(&t, prefix, below, order, f),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

/// A table of JSON-encoded records under string keys, typed by `T`.
pub struct JsonTable<T> {
    name: &'static str,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for JsonTable<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for JsonTable<T> {}

impl<T: Serialize + DeserializeOwned> JsonTable<T> {
    pub const fn new(name: &'static str) -> Self {
        Self { name, _t: PhantomData }
    }

    /// The table's name (what [`Store::table_generation`] is asked about).
    pub const fn name(&self) -> &'static str {
        self.name
    }

    fn def(&self) -> TableDefinition<'static, &'static str, &'static [u8]> {
        TableDefinition::new(self.name)
    }

    fn decode(&self, key: &str, bytes: &[u8]) -> Result<T, StoreError> {
        serde_json::from_slice(bytes).map_err(|e| StoreError::Decode {
            table: self.name,
            key: key.to_string(),
            message: e.to_string(),
        })
    }

    pub fn get(&self, txn: &ReadTransaction, key: &str) -> Result<Option<T>, StoreError> {
        let table = match txn.open_table(self.def()) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let value = table.get(key)?;
        value.map(|v| self.decode(key, v.value())).transpose()
    }

    /// Records whose key starts with `prefix` (`""`: all), in key order, from either kind of table.
    fn collect(
        &self,
        table: &impl ReadableTable<&'static str, &'static [u8]>,
        prefix: &str,
    ) -> Result<Vec<(String, T)>, StoreError> {
        let mut out = Vec::new();
        for item in table.range(prefix..)? {
            let (k, v) = item?;
            let key = k.value();
            if !key.starts_with(prefix) {
                break;
            }
            let value = self.decode(key, v.value())?;
            out.push((key.to_string(), value));
        }
        Ok(out)
    }

    fn read_table(&self, txn: &ReadTransaction, prefix: &str) -> Result<Vec<(String, T)>, StoreError> {
        match txn.open_table(self.def()) {
            Ok(t) => self.collect(&t, prefix),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(Vec::new()),
            Err(e) => Err(e.into()),
        }
    }

    /// How many records (nothing is decoded).
    pub fn len(&self, txn: &ReadTransaction) -> Result<u64, StoreError> {
        match txn.open_table(self.def()) {
            Ok(t) => Ok(t.len()?),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// Is there a record under `key`? (Nothing decoded.)
    pub fn contains(&self, txn: &ReadTransaction, key: &str) -> Result<bool, StoreError> {
        match txn.open_table(self.def()) {
            Ok(t) => Ok(t.get(key)?.is_some()),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Walks the keys in `order`, below `below` when given, until `f` says stop; nothing is
    /// decoded.
    pub fn walk_keys(
        &self,
        txn: &ReadTransaction,
        below: Option<&str>,
        order: KeyOrder,
        f: impl FnMut(&str) -> bool,
    ) -> Result<(), StoreError> {
        match txn.open_table(self.def()) {
            Ok(t) => walk_keys(&t, "", below, order, f),
            Err(redb::TableError::TableDoesNotExist(_)) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// All records in key order.
    pub fn list(&self, txn: &ReadTransaction) -> Result<Vec<(String, T)>, StoreError> {
        self.read_table(txn, "")
    }

    /// Records whose key starts with `prefix`, in key order.
    pub fn list_prefix(&self, txn: &ReadTransaction, prefix: &str) -> Result<Vec<(String, T)>, StoreError> {
        self.read_table(txn, prefix)
    }

    /// All records, inside a write transaction (to decide under the writer lock).
    pub fn list_in_write(&self, txn: &WriteTxn) -> Result<Vec<(String, T)>, StoreError> {
        self.collect(&txn.raw().open_table(self.def())?, "")
    }

    /// Records whose key starts with `prefix`, in key order, inside a write transaction.
    pub fn list_prefix_in_write(&self, txn: &WriteTxn, prefix: &str) -> Result<Vec<(String, T)>, StoreError> {
        self.collect(&txn.raw().open_table(self.def())?, prefix)
    }

    pub fn get_in_write(&self, txn: &WriteTxn, key: &str) -> Result<Option<T>, StoreError> {
        let table = txn.raw().open_table(self.def())?;
        let value = table.get(key)?;
        value.map(|v| self.decode(key, v.value())).transpose()
    }

    pub fn put(&self, txn: &WriteTxn, key: &str, value: &T) -> Result<(), StoreError> {
        let bytes = serde_json::to_vec(value).map_err(|e| StoreError::Backend(e.to_string()))?;
        let mut table = txn.open_table(self.def())?;
        table.insert(key, bytes.as_slice())?;
        Ok(())
    }

    /// Removes a record; returns whether it existed.
    pub fn delete(&self, txn: &WriteTxn, key: &str) -> Result<bool, StoreError> {
        let mut table = txn.open_table(self.def())?;
        let existed = table.remove(key)?.is_some();
        Ok(existed)
    }

    /// Removes every record whose key starts with `prefix`; returns how many.
    pub fn delete_prefix(&self, txn: &WriteTxn, prefix: &str) -> Result<usize, StoreError> {
        let mut table = txn.open_table(self.def())?;
        let keys: Vec<String> = {
            let mut keys = Vec::new();
            for item in table.range(prefix..)? {
                let (k, _) = item?;
                if !k.value().starts_with(prefix) {
                    break;
                }
                keys.push(k.value().to_string());
            }
            keys
        };
        for k in &keys {
            table.remove(k.as_str())?;
        }
        Ok(keys.len())
    }
}
