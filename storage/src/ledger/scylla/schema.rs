//! The keyspace's tables (created if missing at start-up) and every statement, prepared once
//! with the consistency its use needs.

use std::sync::Arc;

use ::scylla::client::session::Session;
use ::scylla::policies::retry::FallthroughRetryPolicy;
use ::scylla::statement::batch::{Batch, BatchType};
use ::scylla::statement::prepared::PreparedStatement;
use ::scylla::statement::{Consistency, SerialConsistency};

use super::{SCAN_PAGE_ROWS, backend};
use crate::Result;

pub(super) fn schema(ks: &str, rf: usize) -> Vec<String> {
    vec![
        format!(
            "CREATE KEYSPACE IF NOT EXISTS {ks} WITH replication = \
             {{'class': 'NetworkTopologyStrategy', 'replication_factor': {rf}}} \
             AND tablets = {{'enabled': false}}"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.room_owner (
               room_id text PRIMARY KEY, fence bigint, owner text, since timestamp)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.wallet (
               account_id text, entry_id uuid,
               balance bigint STATIC, version bigint STATIC,
               kind text, amount bigint, balance_after bigint, seq bigint, ref text,
               created_at timestamp,
               PRIMARY KEY ((account_id), entry_id))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.gift_saga (
               gift_id uuid PRIMARY KEY, room_id text, order_json text, state text,
               fence bigint, reason text, balance_after bigint, updated_at timestamp)"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.room_open_sagas (
               room_id text, gift_id uuid, PRIMARY KEY ((room_id), gift_id))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.room_unpublished_gifts (
               room_id text, gift_id uuid, marked_at timestamp,
               PRIMARY KEY ((room_id), gift_id))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.earnings_entries (
               receiver_id text, gift_id uuid, amount bigint, room_id text,
               PRIMARY KEY ((receiver_id), gift_id))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.settled_gifts (
               room_id text, day int, gift_id uuid, receiver_id text,
               sender_id text, amount bigint, earnings bigint,
               PRIMARY KEY ((room_id, day), gift_id, receiver_id))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.room_days (
               room_id text, day int, PRIMARY KEY ((room_id), day))"
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {ks}.settled_house (
               gift_id uuid PRIMARY KEY, platform bigint, lucky bigint)"
        ),
    ]
}

/// Every statement, prepared at start-up.
pub(super) struct Statements {
    pub(super) owner_insert: PreparedStatement,
    pub(super) owner_update: PreparedStatement,
    pub(super) owner_read: PreparedStatement,
    pub(super) wallet_head: PreparedStatement,
    pub(super) wallet_entry: PreparedStatement,
    pub(super) wallet_entry_amount: PreparedStatement,
    pub(super) wallet_change: Batch,
    pub(super) saga_insert: PreparedStatement,
    pub(super) saga_read: PreparedStatement,
    pub(super) saga_move: PreparedStatement,
    pub(super) saga_touch: PreparedStatement,
    pub(super) open_add: PreparedStatement,
    pub(super) open_del: PreparedStatement,
    pub(super) open_list: PreparedStatement,
    pub(super) open_rooms: PreparedStatement,
    pub(super) unpublished_add: PreparedStatement,
    pub(super) unpublished_list: PreparedStatement,
    pub(super) unpublished_take: PreparedStatement,
    pub(super) unpublished_rooms: PreparedStatement,
    pub(super) earn_add: PreparedStatement,
    pub(super) earn_sum: PreparedStatement,
    pub(super) fact_add: PreparedStatement,
    pub(super) facts_of_day: PreparedStatement,
    pub(super) day_add: PreparedStatement,
    pub(super) days_since: PreparedStatement,
    pub(super) house_add: PreparedStatement,
    pub(super) scan_wallets: PreparedStatement,
    pub(super) scan_earnings: PreparedStatement,
    pub(super) scan_house: PreparedStatement,
    pub(super) movements: super::movements::MovementStatements,
    pub(super) transfers: super::transfer::TransferStatements,
    pub(super) payments: super::payment::PaymentStatements,
    pub(super) settlements: super::settlement::SettlementStatements,
    pub(super) app_ranks: super::app_rank::AppRankStatements,
    pub(super) guards: super::guard::GuardStatements,
}

/// A conditional write: quorum for the commit, LOCAL_SERIAL for Paxos; no driver retries (the
/// callers' read-back decides), so an unknown outcome is never blindly repeated.
pub(super) fn lwt(mut p: PreparedStatement) -> PreparedStatement {
    p.set_consistency(Consistency::LocalQuorum);
    p.set_serial_consistency(Some(SerialConsistency::LocalSerial));
    p.set_retry_policy(Some(Arc::new(FallthroughRetryPolicy::new())));
    p
}

/// A linearizable read: it sees in-flight Paxos rounds.
pub(super) fn serial(mut p: PreparedStatement) -> PreparedStatement {
    p.set_consistency(Consistency::LocalSerial);
    p
}

/// A plain idempotent write, or a read of append-only facts.
pub(super) fn plain(mut p: PreparedStatement) -> PreparedStatement {
    p.set_consistency(Consistency::LocalQuorum);
    p.set_is_idempotent(true);
    p
}

/// A paged scan.
pub(super) fn scan(mut p: PreparedStatement) -> PreparedStatement {
    p.set_consistency(Consistency::LocalQuorum);
    p.set_is_idempotent(true);
    p.set_page_size(SCAN_PAGE_ROWS);
    p
}

pub(super) async fn prepare_all(session: &Session, ks: &str) -> Result<Statements> {
    let lwt_policy = Arc::new(FallthroughRetryPolicy::new());
    let prep = |cql: String| async move { session.prepare(cql).await.map_err(backend) };

    let head_cas = lwt(prep(format!(
        "UPDATE {ks}.wallet SET balance = ?, version = ? WHERE account_id = ? IF version = ?"
    ))
    .await?);
    let entry_insert = prep(format!(
        "INSERT INTO {ks}.wallet (account_id, entry_id, kind, amount, balance_after, seq, ref, created_at)
         VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    ))
    .await?;
    let mut wallet_change = Batch::new(BatchType::Logged);
    wallet_change.append_statement(head_cas);
    wallet_change.append_statement(entry_insert);
    wallet_change.set_consistency(Consistency::LocalQuorum);
    wallet_change.set_serial_consistency(Some(SerialConsistency::LocalSerial));
    wallet_change.set_retry_policy(Some(lwt_policy.clone()));

    Ok(Statements {
        owner_insert: lwt(prep(format!(
            "INSERT INTO {ks}.room_owner (room_id, fence, owner, since) VALUES (?, ?, ?, ?) IF NOT EXISTS"
        ))
        .await?),
        owner_update: lwt(prep(format!(
            "UPDATE {ks}.room_owner SET fence = ?, owner = ?, since = ? WHERE room_id = ? IF fence < ?"
        ))
        .await?),
        owner_read: serial(
            prep(format!("SELECT fence, owner FROM {ks}.room_owner WHERE room_id = ?")).await?,
        ),
        wallet_head: serial(
            prep(format!(
                "SELECT balance, version FROM {ks}.wallet WHERE account_id = ? LIMIT 1"
            ))
            .await?,
        ),
        wallet_entry: serial(
            prep(format!(
                "SELECT kind, balance_after FROM {ks}.wallet WHERE account_id = ? AND entry_id = ?"
            ))
            .await?,
        ),
        wallet_entry_amount: serial(
            prep(format!(
                "SELECT amount FROM {ks}.wallet WHERE account_id = ? AND entry_id = ?"
            ))
            .await?,
        ),
        wallet_change,
        saga_insert: lwt(prep(format!(
            "INSERT INTO {ks}.gift_saga (gift_id, room_id, order_json, state, fence, updated_at)
             VALUES (?, ?, ?, 'PENDING', ?, ?) IF NOT EXISTS"
        ))
        .await?),
        saga_read: serial(
            prep(format!(
                "SELECT order_json, state, fence, reason, balance_after, updated_at
                 FROM {ks}.gift_saga WHERE gift_id = ?"
            ))
            .await?,
        ),
        saga_move: lwt(prep(format!(
            "UPDATE {ks}.gift_saga SET state = ?, fence = ?, reason = ?, balance_after = ?, updated_at = ?
             WHERE gift_id = ? IF state = ? AND fence <= ?"
        ))
        .await?),
        saga_touch: lwt(prep(format!(
            "UPDATE {ks}.gift_saga SET fence = ? WHERE gift_id = ? IF fence <= ?"
        ))
        .await?),
        open_add: plain(
            prep(format!(
                "INSERT INTO {ks}.room_open_sagas (room_id, gift_id) VALUES (?, ?)"
            ))
            .await?,
        ),
        open_del: plain(
            prep(format!(
                "DELETE FROM {ks}.room_open_sagas WHERE room_id = ? AND gift_id = ?"
            ))
            .await?,
        ),
        open_list: scan(
            prep(format!(
                "SELECT gift_id FROM {ks}.room_open_sagas WHERE room_id = ?"
            ))
            .await?,
        ),
        open_rooms: scan(prep(format!("SELECT DISTINCT room_id FROM {ks}.room_open_sagas")).await?),
        unpublished_add: plain(
            prep(format!(
                "INSERT INTO {ks}.room_unpublished_gifts (room_id, gift_id, marked_at) VALUES (?, ?, ?)"
            ))
            .await?,
        ),
        unpublished_list: scan(
            prep(format!(
                "SELECT gift_id, marked_at FROM {ks}.room_unpublished_gifts WHERE room_id = ?"
            ))
            .await?,
        ),
        unpublished_take: lwt(prep(format!(
            "DELETE FROM {ks}.room_unpublished_gifts WHERE room_id = ? AND gift_id = ? IF EXISTS"
        ))
        .await?),
        unpublished_rooms: scan(
            prep(format!(
                "SELECT DISTINCT room_id FROM {ks}.room_unpublished_gifts"
            ))
            .await?,
        ),
        earn_add: plain(
            prep(format!(
                "INSERT INTO {ks}.earnings_entries (receiver_id, gift_id, amount, room_id)
                 VALUES (?, ?, ?, ?)"
            ))
            .await?,
        ),
        earn_sum: plain(
            prep(format!(
                "SELECT SUM(amount) FROM {ks}.earnings_entries WHERE receiver_id = ?"
            ))
            .await?,
        ),
        fact_add: plain(
            prep(format!(
                "INSERT INTO {ks}.settled_gifts
                   (room_id, day, gift_id, receiver_id, sender_id, amount, earnings)
                 VALUES (?, ?, ?, ?, ?, ?, ?)"
            ))
            .await?,
        ),
        facts_of_day: scan(
            prep(format!(
                "SELECT sender_id, receiver_id, amount FROM {ks}.settled_gifts
                 WHERE room_id = ? AND day = ?"
            ))
            .await?,
        ),
        day_add: plain(
            prep(format!(
                "INSERT INTO {ks}.room_days (room_id, day) VALUES (?, ?)"
            ))
            .await?,
        ),
        days_since: scan(
            prep(format!(
                "SELECT day FROM {ks}.room_days WHERE room_id = ? AND day >= ?"
            ))
            .await?,
        ),
        house_add: plain(
            prep(format!(
                "INSERT INTO {ks}.settled_house (gift_id, platform, lucky) VALUES (?, ?, ?)"
            ))
            .await?,
        ),
        scan_wallets: scan(
            prep(format!(
                "SELECT account_id, balance, kind, amount FROM {ks}.wallet"
            ))
            .await?,
        ),
        scan_earnings: scan(prep(format!("SELECT amount FROM {ks}.earnings_entries")).await?),
        scan_house: scan(prep(format!("SELECT platform, lucky FROM {ks}.settled_house")).await?),
        movements: super::movements::prepare(session, ks).await?,
        transfers: super::transfer::prepare(session, ks).await?,
        payments: super::payment::prepare(session, ks).await?,
        settlements: super::settlement::prepare(session, ks).await?,
        app_ranks: super::app_rank::prepare(session, ks).await?,
        guards: super::guard::prepare(session, ks).await?,
    })
}
