//! A job's view of the group transaction: the gift path's statements, prepared once and held
//! by the writer ([`Hot`]), and the house's takings, written once per group ([`Tx`]).

use std::cell::{Cell, RefCell, RefMut};

use rusqlite::{Connection, Statement, params};

use super::app_rank::AppRankDeltas;
use crate::{Result, StorageError};

pub(super) const SQL_FENCE: &str = "SELECT fence FROM room_owner WHERE room = ?1";
pub(super) const SQL_COINS: &str = "SELECT coins FROM account WHERE user = ?1";
pub(super) const SQL_SET_COINS: &str = "UPDATE account SET coins = ?2 WHERE user = ?1";
pub(super) const SQL_NEW_SAGA: &str =
    "INSERT INTO gift_saga (gift_id, room, order_json, state, fence, reason,
   balance_after, updated_ms)
 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)
 ON CONFLICT (gift_id) DO NOTHING";
// Credits and leaderboard totals add to rows that almost always exist already: a plain
// `UPDATE` finds the row with one b-tree search, where an upsert first searched for a place to
// insert, met the conflict, and then ran its update (1.5 % of the ledger benchmark's
// instructions, docs/BENCHMARKS-LOG.md). The rare first row is inserted after it.
pub(super) const SQL_CREDIT: &str = "UPDATE account SET earnings = earnings + ?2 WHERE user = ?1";
pub(super) const SQL_CREDIT_NEW: &str = "INSERT INTO account (user, earnings) VALUES (?1, ?2)";
pub(super) const SQL_FACT: &str =
    "INSERT INTO settled_gift (gift_id, receiver, room, day, sender, amount,
   earnings)
 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)";
pub(super) const SQL_RANK: &str = "UPDATE gift_rank SET total = total + ?5
 WHERE room = ?1 AND board = ?2 AND day = ?3 AND user = ?4";
pub(super) const SQL_RANK_NEW: &str = "INSERT INTO gift_rank (room, board, day, user, total)
 VALUES (?1, ?2, ?3, ?4, ?5)";

/// The gift path's statements, prepared once on the writer's connection and held for its life.
/// Through the connection's statement cache, every execution also hashed its SQL text twice and
/// moved the statement out of the cache's LRU list and back: ~1,100 instructions per statement,
/// about a tenth of a gift's instructions on the writer (measured: docs/BENCHMARKS-LOG.md). The cache
/// still serves the colder statements.
pub(super) struct Hot<'c> {
    pub(super) fence: RefCell<Statement<'c>>,
    pub(super) coins: RefCell<Statement<'c>>,
    pub(super) set_coins: RefCell<Statement<'c>>,
    pub(super) new_saga: RefCell<Statement<'c>>,
    pub(super) credit: RefCell<Statement<'c>>,
    pub(super) fact: RefCell<Statement<'c>>,
    pub(super) rank: RefCell<Statement<'c>>,
    pub(super) app_rank: RefCell<Statement<'c>>,
}

impl<'c> Hot<'c> {
    pub(super) fn prepare(conn: &'c Connection) -> rusqlite::Result<Self> {
        let p = |sql| conn.prepare(sql).map(RefCell::new);
        Ok(Self {
            fence: p(SQL_FENCE)?,
            coins: p(SQL_COINS)?,
            set_coins: p(SQL_SET_COINS)?,
            new_saga: p(SQL_NEW_SAGA)?,
            credit: p(SQL_CREDIT)?,
            fact: p(SQL_FACT)?,
            rank: p(SQL_RANK)?,
            app_rank: p(super::app_rank::SQL_APP_RANK)?,
        })
    }
}

/// One of [`Hot`]'s statements, for one execution (a job never holds two at once).
pub(super) fn hot<'a, 'c>(stmt: &'a RefCell<Statement<'c>>) -> Result<RefMut<'a, Statement<'c>>> {
    stmt.try_borrow_mut()
        .map_err(|_| StorageError::backend_msg("a held statement is already in use"))
}

/// [`HOUSE_ACCOUNTS`] index of the platform's revenue.
pub(super) const PLATFORM_REVENUE: usize = 0;
/// [`HOUSE_ACCOUNTS`] index of the lucky prizes paid.
pub(super) const LUCKY_PAID: usize = 1;

/// The house accounts' takings of one group so far, by [`HOUSE_ACCOUNTS`] index.
pub(super) type HouseTakings = [i64; 2];

/// The `house` rows a gift adds to: the platform's revenue and the lucky prizes paid.
pub(super) const HOUSE_ACCOUNTS: [&str; 2] = ["platform_revenue", "lucky_paid"];

/// A job's view of the group transaction: the writer's connection (through `Deref`), its
/// [`Hot`] statements, and the house's takings of the group's jobs so far. Every gift adds to
/// the same `house` rows, so they are written once per group, just before it commits
/// ([`Tx::write_house`]), not once per gift: one statement per gift fewer, the same totals in
/// the same transaction.
pub(super) struct Tx<'t, 'c> {
    pub(super) conn: &'c Connection,
    pub(super) hot: &'t Hot<'c>,
    pub(super) house: Cell<HouseTakings>,
    /// The app-board totals of the group's gifts so far, written with the house's takings.
    pub(super) app_ranks: RefCell<AppRankDeltas>,
}

impl std::ops::Deref for Tx<'_, '_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl<'t, 'c> Tx<'t, 'c> {
    pub(super) fn new(conn: &'c Connection, hot: &'t Hot<'c>) -> Self {
        Self {
            conn,
            hot,
            house: Cell::new([0; 2]),
            app_ranks: RefCell::new(AppRankDeltas::default()),
        }
    }

    /// Adds `delta` to house account `account` ([`HOUSE_ACCOUNTS`]) when the group commits.
    pub(super) fn add_house(&self, account: usize, delta: i64) -> Result<()> {
        let mut takings = self.house.get();
        let slot = takings
            .get_mut(account)
            .ok_or_else(|| StorageError::backend_msg(format!("no house account {account}")))?;
        *slot = slot
            .checked_add(delta)
            .ok_or_else(|| StorageError::backend_msg("house takings would overflow"))?;
        self.house.set(takings);
        Ok(())
    }

    /// Writes the group's takings into the `house` rows and its app-board totals into
    /// `app_rank`, and zeroes them.
    pub(super) fn write_house(&self) -> rusqlite::Result<()> {
        let mut stmt = self
            .hot
            .app_rank
            .try_borrow_mut()
            .map_err(|_| rusqlite::Error::InvalidQuery)?;
        self.app_ranks
            .try_borrow_mut()
            .map_err(|_| rusqlite::Error::InvalidQuery)?
            .write(&mut stmt)?;
        for (name, delta) in HOUSE_ACCOUNTS.iter().zip(self.house.take()) {
            if delta != 0 {
                self.conn
                    .prepare_cached("UPDATE house SET amount = amount + ?1 WHERE name = ?2")?
                    .execute(params![delta, name])?;
            }
        }
        Ok(())
    }
}
