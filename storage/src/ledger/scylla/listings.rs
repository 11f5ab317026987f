//! The room indexes (open sagas, owed gift events) and the scans: leaderboards and the audit's
//! ledger-wide totals.

use std::collections::HashMap;

use ::scylla::value::CqlTimestamp;
use protocol::{RoomId, UserId};
use uuid::Uuid;

use super::super::{Board, EntryKind, GiftOrder, SagaRecord, SagaState, Totals, now_ms};
use super::{ScyllaLedger, cql_day, now_ts, unknown};
use crate::Result;

impl ScyllaLedger {
    pub(in crate::ledger) async fn pending_sagas(
        &self,
        room: &RoomId,
        min_age_ms: i64,
    ) -> Result<Vec<SagaRecord>> {
        let before = now_ms().saturating_sub(min_age_ms);
        let ids: Vec<(Uuid,)> = self.scan(&self.st.open_list, (room.as_str(),)).await?;
        let mut out = Vec::new();
        for (id,) in ids {
            match self.read_saga(id).await? {
                Some(rec) if rec.state.is_terminal() => {
                    self.write(&self.st.open_del, (room.as_str(), id)).await?;
                }
                Some(rec) if rec.updated_ms <= before => out.push(rec),
                _ => {}
            }
        }
        Ok(out)
    }

    pub(in crate::ledger) async fn rooms_with_open_sagas(
        &self,
        min_age_ms: i64,
    ) -> Result<Vec<RoomId>> {
        // A full scan of the open-saga index's partition keys: a background sweep's query,
        // never on a request path. `pending_sagas` prunes finished entries as it reads.
        let rooms: Vec<(String,)> = self.scan(&self.st.open_rooms, ()).await?;
        let mut out = Vec::new();
        for (room,) in rooms {
            let room = RoomId::new(room);
            if !self.pending_sagas(&room, min_age_ms).await?.is_empty() {
                out.push(room);
            }
        }
        let owing: Vec<(String,)> = self.scan(&self.st.unpublished_rooms, ()).await?;
        for (room,) in owing {
            let room = RoomId::new(room);
            if !out.contains(&room) && !self.unpublished_gifts(&room, min_age_ms).await?.is_empty()
            {
                out.push(room);
            }
        }
        Ok(out)
    }

    pub(in crate::ledger) async fn mark_unpublished(&self, gift_id: Uuid) -> Result<()> {
        match self.read_saga(gift_id).await? {
            Some(rec) if rec.state == SagaState::Settled => {
                self.write(
                    &self.st.unpublished_add,
                    (rec.order.room.as_str(), gift_id, now_ts()),
                )
                .await
            }
            _ => Ok(()),
        }
    }

    pub(in crate::ledger) async fn unpublished_gifts(
        &self,
        room: &RoomId,
        min_age_ms: i64,
    ) -> Result<Vec<GiftOrder>> {
        let before = now_ms().saturating_sub(min_age_ms);
        let mut marks: Vec<(Uuid, Option<CqlTimestamp>)> = self
            .scan(&self.st.unpublished_list, (room.as_str(),))
            .await?;
        marks.retain(|(_, at)| at.map_or(0, |t| t.0) <= before);
        marks.sort_by_key(|(_, at)| at.map_or(0, |t| t.0));
        let mut out = Vec::with_capacity(marks.len());
        for (id, _) in marks {
            if let Some(rec) = self.read_saga(id).await? {
                out.push(rec.order);
            }
        }
        Ok(out)
    }

    pub(in crate::ledger) async fn take_unpublished(
        &self,
        room: &RoomId,
        gift_id: Uuid,
    ) -> Result<bool> {
        // An unknown outcome is an error, and the caller leaves the record for a later sweep. If
        // the delete did land, nobody publishes that event: lost, never shown twice.
        self.lwt(&self.st.unpublished_take, (room.as_str(), gift_id))
            .await
            .map_err(|()| unknown("take of an unpublished gift: outcome unknown"))
    }

    pub(in crate::ledger) async fn leaderboard(
        &self,
        room: &RoomId,
        board: Board,
        first_day: i64,
        limit: usize,
    ) -> Result<Vec<(UserId, i64)>> {
        let days: Vec<(i32,)> = self
            .scan(&self.st.days_since, (room.as_str(), cql_day(first_day)))
            .await?;
        let mut totals: HashMap<String, i64> = HashMap::new();
        for (day,) in days {
            let facts: Vec<(String, String, i64)> = self
                .scan(&self.st.facts_of_day, (room.as_str(), day))
                .await?;
            for (sender, receiver, amount) in facts {
                let who = match board {
                    Board::Senders => sender,
                    Board::Receivers => receiver,
                };
                *totals.entry(who).or_default() += amount;
            }
        }
        let mut ranked: Vec<(String, i64)> = totals.into_iter().collect();
        ranked.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        ranked.truncate(limit);
        Ok(ranked
            .into_iter()
            .map(|(u, v)| (UserId::new(u), v))
            .collect())
    }

    /// A quorum read of one wallet head: the cluster answers at the consistency writes need
    /// (`/readyz`).
    pub(in crate::ledger) async fn check_writable(&self) -> Result<()> {
        self.read_head("-readyz-").await.map(drop)
    }

    pub(in crate::ledger) async fn audit_totals(&self) -> Result<Totals> {
        let mut totals = Totals::default();
        let wallets: Vec<WalletScanRow> = self.scan(&self.st.scan_wallets, ()).await?;
        let mut heads: HashMap<String, i64> = HashMap::new();
        for (account, balance, kind, amount) in wallets {
            heads.insert(account, balance.unwrap_or(0));
            if kind.as_deref() == Some(EntryKind::Grant.as_str()) {
                totals.granted += amount.unwrap_or(0);
            }
        }
        for balance in heads.values() {
            totals.coins += balance;
            if *balance < 0 {
                totals.negative_accounts += 1;
            }
        }
        let earnings: Vec<(Option<i64>,)> = self.scan(&self.st.scan_earnings, ()).await?;
        totals.earnings = earnings.iter().filter_map(|r| r.0).sum();
        let house: Vec<(Option<i64>, Option<i64>)> = self.scan(&self.st.scan_house, ()).await?;
        for (platform, lucky) in house {
            totals.platform_revenue += platform.unwrap_or(0);
            totals.lucky_paid += lucky.unwrap_or(0);
        }
        (
            totals.topped_up,
            totals.refunded,
            totals.debt,
            totals.transferred,
        ) = self.payment_totals().await?;
        // Settled earnings left the earnings sum (negative rows there): counted apart.
        totals.settled = self.settled_total().await?;
        Ok(totals)
    }
}

/// `account_id, balance, kind, amount` of one wallet row (statics repeated on every row).
pub(super) type WalletScanRow = (String, Option<i64>, Option<String>, Option<i64>);
