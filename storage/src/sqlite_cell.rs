//! One SQLite connection shared by async callers, for the small stores a connect or a user
//! operation touches (profiles, follows, direct messages).
//!
//! Callers wait their turn on an async lock, as futures, and only the caller holding it runs on
//! the blocking pool. A lock taken inside `spawn_blocking` would instead park one pool thread per
//! waiting caller: a burst of connects then grows the pool to hundreds of threads, each with its
//! stack and allocator cache, for a connection that serves one call at a time anyway.

use std::path::Path;
use std::sync::Arc;

use rusqlite::Connection;
use tokio::sync::Mutex;

use crate::error::{Result, StorageError};

/// A SQLite connection behind an async lock.
#[derive(Debug, Clone)]
pub struct SqliteCell {
    conn: Arc<Mutex<Connection>>,
    /// What the store is called in errors.
    what: &'static str,
}

impl SqliteCell {
    /// Wraps an open connection; `what` names the store in errors.
    pub(crate) fn new(conn: Connection, what: &'static str) -> Self {
        Self {
            conn: Arc::new(Mutex::new(conn)),
            what,
        }
    }

    /// Runs `f` on the connection, on the blocking pool, once it is this caller's turn.
    pub(crate) async fn call<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let mut conn = Arc::clone(&self.conn).lock_owned().await;
        let what = self.what;
        tokio::task::spawn_blocking(move || {
            f(&mut conn).map_err(|e| StorageError::backend(what, e))
        })
        .await
        .map_err(|e| StorageError::backend(what, e))?
    }
}

/// Opens `<dir>/<file>` on the blocking pool, creating the directory, the file and `schema`,
/// in WAL mode (a reader runs beside a writer) with a 5 s busy time-out; `what` names the
/// store in errors.
pub(crate) async fn open_wal(
    dir: &Path,
    file: &'static str,
    schema: &'static str,
    what: &'static str,
) -> Result<Connection> {
    let dir = dir.to_owned();
    let backend =
        move |e: &dyn std::fmt::Display| StorageError::backend_msg(format!("{what}: {e}"));
    tokio::task::spawn_blocking(move || -> Result<Connection> {
        std::fs::create_dir_all(&dir).map_err(|e| backend(&e))?;
        let conn = Connection::open(dir.join(file)).map_err(|e| backend(&e))?;
        conn.busy_timeout(std::time::Duration::from_secs(5))
            .map_err(|e| backend(&e))?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| backend(&e))?;
        conn.execute_batch(schema).map_err(|e| backend(&e))?;
        Ok(conn)
    })
    .await
    .map_err(|e| backend(&e))?
}
