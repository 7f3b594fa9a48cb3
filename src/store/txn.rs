//! The one write transaction type: redb's, plus the names of the tables written in it. Every
//! write goes through it — [`super::JsonTable`] and [`super::KeySet`] writers, and
//! [`WriteTxn::open_table`] for code that opens a redb table itself — so the commit knows
//! exactly which tables it changed (the per-table generations behind events and every cache),
//! with nothing to remember and no thread-local state.

use std::cell::RefCell;
use std::ops::Deref;

use redb::{Key, Table, TableDefinition, TableError, TableHandle, Value, WriteTransaction};

pub struct WriteTxn {
    inner: WriteTransaction,
    written: RefCell<Vec<String>>,
    logged: RefCell<Vec<String>>,
}

/// What a commit changed: the tables and noted keys (their generations move), and the keys
/// logged with [`WriteTxn::log_key`] (kept in the store's short change log).
#[derive(Debug, Default)]
pub struct Committed {
    pub written: Vec<String>,
    pub logged: Vec<String>,
}

impl WriteTxn {
    pub(super) fn new(inner: WriteTransaction) -> Self {
        Self { inner, written: RefCell::new(Vec::new()), logged: RefCell::new(Vec::new()) }
    }

    /// Notes that this transaction writes table `name`.
    pub(super) fn note(&self, name: &str) {
        let mut w = self.written.borrow_mut();
        if !w.iter().any(|n| n == name) {
            w.push(name.to_string());
        }
    }

    /// Notes a finer name than a table that this transaction changes (one owner's sessions, say):
    /// the commit bumps its generation like a table's, read with [`super::Store::table_generation`].
    /// Costs one map entry per distinct name; the name must not be a table's.
    pub fn note_key(&self, name: &str) {
        self.note(name);
    }

    /// Logs a name in the store's change log ([`super::Store::logged_since`]) when this
    /// transaction commits: a cache kept beside the store learns exactly which rows changed since
    /// it last looked (the fit check's per-card summary), instead of reading them all again.
    /// Names nothing by itself: note a key too, so readers learn that something changed.
    pub fn log_key(&self, name: &str) {
        self.logged.borrow_mut().push(name.to_string());
    }

    /// Commits durably; returns the tables written and the keys logged.
    pub(super) fn commit(self) -> Result<Committed, redb::CommitError> {
        let written = self.written.into_inner();
        let logged = self.logged.into_inner();
        self.inner.commit()?;
        Ok(Committed { written, logged })
    }

    /// redb's transaction, for the store's readers inside a write (they change nothing).
    pub(super) fn raw(&self) -> &WriteTransaction {
        &self.inner
    }

    pub(super) fn abort(self) {
        let _ = self.inner.abort();
    }

    /// Opens a redb table to change it (the commit counts it as written). Reads inside a write
    /// go through [`super::JsonTable`]'s `*_in_write` readers.
    pub fn open_table<K: Key + 'static, V: Value + 'static>(
        &self,
        definition: TableDefinition<'_, K, V>,
    ) -> Result<Table<'_, K, V>, TableError> {
        self.note(definition.name());
        self.inner.open_table(definition)
    }
}

/// redb's other methods (listing tables, deleting one …) stay reachable; `open_table` above
/// shadows redb's, so a table opened through a `WriteTxn` is always counted.
impl Deref for WriteTxn {
    type Target = WriteTransaction;

    fn deref(&self) -> &WriteTransaction {
        &self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{JsonTable, Store};

    #[tokio::test]
    async fn every_way_of_writing_names_the_table() {
        let tmp = tempfile::tempdir().unwrap();
        let store = Store::open(&tmp.path().join("s.redb"), &[crate::store::FIRST_SCHEMA]).unwrap();
        const A: JsonTable<u64> = JsonTable::new("txn_test_a");
        const B: TableDefinition<&str, u64> = TableDefinition::new("txn_test_b");
        let before = store.table_generation(&["txn_test_a"]);
        store.write(|txn| A.put(txn, "k", &1)).await.unwrap();
        let after_a = store.table_generation(&["txn_test_a"]);
        assert!(after_a > before);
        assert_eq!(store.table_generation(&["txn_test_b"]), 0, "B not written yet");
        store
            .write(|txn| {
                txn.open_table(B)?.insert("k", 2)?;
                Ok(())
            })
            .await
            .unwrap();
        assert!(store.table_generation(&["txn_test_b"]) > after_a, "a raw open_table counts");
        assert_eq!(store.table_generation(&["txn_test_a"]), after_a, "A untouched by the second commit");
        // A rolled-back write names nothing in the next commit.
        let _ = store
            .write(|txn| {
                A.put(txn, "k", &3)?;
                Err::<(), _>(crate::store::StoreError::Backend("no".into()))
            })
            .await;
        store
            .write(|txn| {
                txn.open_table(B)?.insert("k", 4)?;
                Ok(())
            })
            .await
            .unwrap();
        assert_eq!(store.table_generation(&["txn_test_a"]), after_a, "the aborted write left no trace");
    }
}
