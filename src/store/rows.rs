//! Rows read and written by code that runs either in a write transaction or in a dry run of one:
//! the dry run reads the same rows from a read transaction and only notes that a `put` would
//! have changed something (the inventory's hot reports learn so, without the writer, whether a
//! report changes anything durable).

use std::cell::Cell;

use redb::ReadTransaction;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{JsonTable, Outcome, StoreError, WriteTxn};

/// Where a domain function reads and writes rows.
pub trait Rows {
    fn get<T: Serialize + DeserializeOwned>(&self, table: JsonTable<T>, key: &str) -> Result<Option<T>, StoreError>;
    fn put<T: Serialize + DeserializeOwned>(&self, table: JsonTable<T>, key: &str, value: &T)
    -> Result<(), StoreError>;
    /// Whether writes here are durable (a write transaction) or only noted (a dry run).
    fn durable(&self) -> bool;
    /// Notes a finer name than a table that this change touches ([`WriteTxn::note_key`]); a dry
    /// run notes nothing.
    fn note_key(&self, _name: &str) {}
    /// Logs a name in the store's change log ([`WriteTxn::log_key`]); a dry run logs nothing.
    fn log_key(&self, _name: &str) {}
}

impl Rows for WriteTxn {
    fn get<T: Serialize + DeserializeOwned>(&self, table: JsonTable<T>, key: &str) -> Result<Option<T>, StoreError> {
        table.get_in_write(self, key)
    }

    fn put<T: Serialize + DeserializeOwned>(
        &self,
        table: JsonTable<T>,
        key: &str,
        value: &T,
    ) -> Result<(), StoreError> {
        table.put(self, key, value)
    }

    fn durable(&self) -> bool {
        true
    }

    fn note_key(&self, name: &str) {
        WriteTxn::note_key(self, name);
    }

    fn log_key(&self, name: &str) {
        WriteTxn::log_key(self, name);
    }
}

/// A read transaction standing in for the writer: nothing is written, `put` only notes that the
/// code would change a row.
pub struct DryRun<'a> {
    txn: &'a ReadTransaction,
    would_write: Cell<bool>,
}

impl<'a> DryRun<'a> {
    pub fn new(txn: &'a ReadTransaction) -> Self {
        Self { txn, would_write: Cell::new(false) }
    }

    /// The outcome's value when the code changed nothing durable (and would have written nothing).
    pub fn verdict<T>(&self, o: Outcome<T>) -> Option<T> {
        (!o.wrote() && !self.would_write.get()).then(|| o.into_inner())
    }
}

impl Rows for DryRun<'_> {
    fn get<T: Serialize + DeserializeOwned>(&self, table: JsonTable<T>, key: &str) -> Result<Option<T>, StoreError> {
        table.get(self.txn, key)
    }

    fn put<T: Serialize + DeserializeOwned>(&self, _: JsonTable<T>, _: &str, _: &T) -> Result<(), StoreError> {
        self.would_write.set(true);
        Ok(())
    }

    fn durable(&self) -> bool {
        false
    }
}
