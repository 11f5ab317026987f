//! The gift saga on Scylla: room fences, the saga row's conditional moves, and the steps
//! `begin`, `debit`, `settle`, `void` and `touch`.

use ::scylla::value::CqlTimestamp;
use protocol::RoomId;
use uuid::Uuid;

use super::super::movement::{gift_effects, gift_sent};
use super::super::{
    BeginOutcome, DebitOutcome, EntryKind, FenceInstall, GiftOrder, SagaRecord, SagaState,
    SettleOutcome, VoidOutcome, VoidReason, day_of, lucky_entry_id,
};
use super::wallet::Applied;
use super::{MAX_RESENDS, ScyllaLedger, cql_day, from_cql_fence, now_ts, to_cql_fence, unknown};
use crate::{Result, StorageError};

impl ScyllaLedger {
    pub(super) async fn read_saga(&self, gift_id: Uuid) -> Result<Option<SagaRecord>> {
        let rows: Vec<SagaRow> = self.rows(&self.st.saga_read, (gift_id,)).await?;
        let Some((json, state, fence, reason, balance_after, updated)) = rows.into_iter().next()
        else {
            return Ok(None);
        };
        let (Some(json), Some(state)) = (json, state) else {
            return Err(StorageError::corrupt_msg(format!(
                "saga {gift_id} lacks order or state"
            )));
        };
        Ok(Some(SagaRecord {
            order: GiftOrder::from_json(gift_id, &json)?,
            state: SagaState::parse(&state)?,
            fence: from_cql_fence(fence)?,
            reason: reason.as_deref().map(VoidReason::parse).transpose()?,
            balance_after,
            updated_ms: updated.map_or(0, |t| t.0),
        }))
    }

    /// Fails with `Fenced` when the room's installed fence is above `fence`.
    pub(super) async fn ensure_room_fence(&self, room: &RoomId, fence: u64) -> Result<()> {
        let rows: Vec<(Option<i64>, Option<String>)> =
            self.rows(&self.st.owner_read, (room.as_str(),)).await?;
        let installed = match rows.into_iter().next() {
            Some((installed, _)) => from_cql_fence(installed)?,
            None => 0,
        };
        if installed > fence {
            return Err(StorageError::Fenced { token: fence });
        }
        Ok(())
    }

    /// Moves saga `gift_id` from `from` to `to` (an LWT): `None` when this call moved it,
    /// `Some(state)` with the state found otherwise. A saga found at `to` after an attempt
    /// whose outcome was unknown counts as moved here; after only clear refusals, a racing
    /// caller moved it (`Some(to)`).
    pub(super) async fn saga_move(
        &self,
        gift_id: Uuid,
        from: SagaState,
        to: SagaState,
        fence: u64,
        reason: Option<VoidReason>,
        balance_after: Option<i64>,
    ) -> Result<Option<SagaState>> {
        let f = to_cql_fence(fence)?;
        let values = (
            to.as_str(),
            f,
            reason.map(VoidReason::as_str),
            balance_after,
            now_ts(),
            gift_id,
            from.as_str(),
            f,
        );
        let mut unsure = false;
        for _ in 0..MAX_RESENDS {
            match self.lwt(&self.st.saga_move, &values).await {
                Ok(true) => return Ok(None),
                Ok(false) => {}
                Err(()) => unsure = true,
            }
            let Some(rec) = self.read_back(|| self.read_saga(gift_id)).await? else {
                return Err(StorageError::corrupt_msg(format!(
                    "saga {gift_id} vanished"
                )));
            };
            if rec.fence > fence {
                // A newer owner holds it. Stop; never make it terminal from here.
                return Err(StorageError::Fenced { token: fence });
            }
            if rec.state == to {
                return Ok((!unsure).then_some(to));
            }
            if rec.state != from {
                return Ok(Some(rec.state));
            }
            // Still `from` with a fence we may move: the write did not land. Send it again.
        }
        Err(unknown("saga move outcome stays unknown"))
    }

    pub(in crate::ledger) async fn install_fence(
        &self,
        room: &RoomId,
        fence: u64,
        owner: &str,
    ) -> Result<FenceInstall> {
        let f = to_cql_fence(fence)?;
        for _ in 0..MAX_RESENDS {
            let insert = (room.as_str(), f, owner, now_ts());
            // `IF NOT EXISTS` applied: the room had no owner row (none is ever deleted). An
            // earlier attempt whose outcome was unknown and did apply makes this one fail, and
            // the read-back below answers `Installed`: only a known first counts as first.
            if self.lwt(&self.st.owner_insert, insert).await == Ok(true) {
                return Ok(FenceInstall::First);
            }
            let update = (f, owner, now_ts(), room.as_str(), f);
            if self.lwt(&self.st.owner_update, update).await == Ok(true) {
                return Ok(FenceInstall::Installed);
            }
            let rows: Vec<(Option<i64>, Option<String>)> = self
                .read_back(|| self.rows(&self.st.owner_read, (room.as_str(),)))
                .await?;
            if let Some((cur, who)) = rows.into_iter().next() {
                let cur = from_cql_fence(cur)?;
                if cur == fence && who.as_deref() == Some(owner) {
                    return Ok(FenceInstall::Installed);
                }
                if cur >= fence {
                    return Ok(FenceInstall::Stale { current: cur });
                }
            }
        }
        Err(unknown("fence install outcome stays unknown"))
    }

    pub(in crate::ledger) async fn begin(
        &self,
        order: &GiftOrder,
        fence: u64,
    ) -> Result<BeginOutcome> {
        self.ensure_room_fence(&order.room, fence).await?;
        let json = order.to_json()?;
        let values = (
            order.gift_id,
            order.room.as_str(),
            json.as_str(),
            to_cql_fence(fence)?,
            now_ts(),
        );
        for _ in 0..MAX_RESENDS {
            let out = self.lwt(&self.st.saga_insert, &values).await;
            if out == Ok(true) {
                self.write(&self.st.open_add, (order.room.as_str(), order.gift_id))
                    .await?;
                return Ok(BeginOutcome::Started);
            }
            if let Some(rec) = self.read_back(|| self.read_saga(order.gift_id)).await? {
                order.same_request_as(&rec.order)?;
                if rec.fence > fence {
                    return Err(StorageError::Fenced { token: fence });
                }
                if !rec.state.is_terminal() {
                    self.write(&self.st.open_add, (order.room.as_str(), order.gift_id))
                        .await?;
                }
                return Ok(BeginOutcome::Existing(rec));
            }
        }
        Err(unknown("saga insert outcome stays unknown"))
    }

    /// What every saga step after `begin` starts with: the room's fence checked, then the
    /// saga read; `Fenced` when the saga was moved by a newer owner, `None` when it is unknown.
    async fn saga_for_step(&self, order: &GiftOrder, fence: u64) -> Result<Option<SagaRecord>> {
        self.ensure_room_fence(&order.room, fence).await?;
        match self.read_saga(order.gift_id).await? {
            Some(rec) if rec.fence > fence => Err(StorageError::Fenced { token: fence }),
            found => Ok(found),
        }
    }

    pub(in crate::ledger) async fn debit(
        &self,
        order: &GiftOrder,
        fence: u64,
    ) -> Result<DebitOutcome> {
        let Some(rec) = self.saga_for_step(order, fence).await? else {
            return Ok(DebitOutcome::Missing);
        };
        match rec.state {
            SagaState::Debited | SagaState::Settled => {
                return Ok(DebitOutcome::Debited {
                    balance: rec.balance_after.unwrap_or(0),
                });
            }
            SagaState::Voided => {
                return Ok(match rec.reason {
                    Some(VoidReason::InsufficientFunds) => DebitOutcome::InsufficientFunds {
                        balance: rec.balance_after.unwrap_or(0),
                    },
                    _ => DebitOutcome::Voided,
                });
            }
            SagaState::Pending => {}
        }
        let o = &rec.order;
        let sender = o.sender.as_str();
        let reference = format!("gift:{}:{}", o.room, o.gift_id);
        // A sender who owes a debt (a refund of spent coins) cannot send: the void path.
        let applied = if self.debt_sum(sender).await? > 0 {
            Applied::Insufficient { balance: 0 }
        } else {
            self.wallet_apply(sender, o.gift_id, EntryKind::Debit, -o.total(), &reference)
                .await?
        };
        let (kind, after, nsf) = match applied {
            Applied::Held {
                kind,
                balance_after,
                ..
            } => (kind, balance_after, None),
            Applied::Insufficient { balance } => {
                // The void claim under the same key: a racing debit attempt can no longer land.
                match self
                    .wallet_apply(sender, o.gift_id, EntryKind::Void, 0, &reference)
                    .await?
                {
                    Applied::Held {
                        kind,
                        balance_after,
                        ..
                    } => (kind, balance_after, Some(balance)),
                    Applied::Insufficient { .. } => {
                        return Err(StorageError::corrupt_msg("a void claim cannot overdraw"));
                    }
                }
            }
        };
        match kind {
            EntryKind::Debit => {
                let moved = self
                    .saga_move(
                        o.gift_id,
                        SagaState::Pending,
                        SagaState::Debited,
                        fence,
                        None,
                        after,
                    )
                    .await?;
                match moved {
                    None | Some(SagaState::Settled | SagaState::Debited) => {
                        Ok(DebitOutcome::Debited {
                            balance: after.unwrap_or(0),
                        })
                    }
                    Some(state) => Err(StorageError::corrupt_msg(format!(
                        "gift {} debited but saga is {}",
                        o.gift_id,
                        state.as_str()
                    ))),
                }
            }
            _ => {
                let reason = if nsf.is_some() {
                    VoidReason::InsufficientFunds
                } else {
                    VoidReason::Recovered
                };
                self.saga_move(
                    o.gift_id,
                    SagaState::Pending,
                    SagaState::Voided,
                    fence,
                    Some(reason),
                    nsf,
                )
                .await?;
                self.write(&self.st.open_del, (o.room.as_str(), o.gift_id))
                    .await?;
                Ok(match nsf {
                    Some(balance) => DebitOutcome::InsufficientFunds { balance },
                    None => DebitOutcome::Voided,
                })
            }
        }
    }

    pub(in crate::ledger) async fn settle(
        &self,
        order: &GiftOrder,
        fence: u64,
    ) -> Result<SettleOutcome> {
        let Some(rec) = self.saga_for_step(order, fence).await? else {
            return Ok(SettleOutcome::Missing);
        };
        match rec.state {
            SagaState::Settled => {
                return Ok(SettleOutcome::AlreadySettled {
                    balance: rec.balance_after.unwrap_or(0),
                });
            }
            SagaState::Pending | SagaState::Voided => {
                return Ok(SettleOutcome::NotDebited(rec.state));
            }
            SagaState::Debited => {}
        }
        // The facts: idempotent, keyed by the gift id; rewriting them yields identical rows.
        let o = &rec.order;
        let earned = o.earnings_per_recipient();
        let day = cql_day(day_of(o.created_ms));
        for r in &o.recipients {
            self.write(
                &self.st.earn_add,
                (r.as_str(), o.gift_id, earned, o.room.as_str()),
            )
            .await?;
            let fact = (
                o.room.as_str(),
                day,
                o.gift_id,
                r.as_str(),
                o.sender.as_str(),
                o.per_recipient(),
                earned,
            );
            self.write(&self.st.fact_add, fact).await?;
        }
        self.write(&self.st.day_add, (o.room.as_str(), day)).await?;
        self.add_app_ranks(o).await?;
        let prize = o.prize();
        self.write(&self.st.house_add, (o.gift_id, o.platform_share(), prize))
            .await?;
        let mut balance = rec.balance_after.unwrap_or(0);
        if prize > 0 {
            let reference = format!("lucky:{}:{}", o.room, o.gift_id);
            let sender = o.sender.as_str();
            match self
                .wallet_apply(
                    sender,
                    lucky_entry_id(o.gift_id),
                    EntryKind::Lucky,
                    prize,
                    &reference,
                )
                .await?
            {
                Applied::Held { balance_after, .. } => {
                    balance = balance_after.unwrap_or(balance);
                }
                Applied::Insufficient { .. } => {
                    return Err(StorageError::corrupt_msg("a prize cannot overdraw"));
                }
            }
        }
        // The statement lines, stamped with the order's time: a rewrite is identical.
        let debited = rec.balance_after.unwrap_or(0);
        let mut lines = vec![gift_sent(o, debited)];
        lines.extend(gift_effects(o, balance));
        self.write_movements(&lines).await?;
        // Last, the saga moves to SETTLED.
        let moved = self
            .saga_move(
                o.gift_id,
                SagaState::Debited,
                SagaState::Settled,
                fence,
                None,
                Some(balance),
            )
            .await?;
        self.write(&self.st.open_del, (o.room.as_str(), o.gift_id))
            .await?;
        Ok(match moved {
            None => SettleOutcome::Settled { balance },
            // A racing settle moved it first (the effects above are idempotent).
            Some(SagaState::Settled) => SettleOutcome::AlreadySettled { balance },
            Some(state) => SettleOutcome::NotDebited(state),
        })
    }

    pub(in crate::ledger) async fn void(
        &self,
        order: &GiftOrder,
        fence: u64,
        reason: VoidReason,
    ) -> Result<VoidOutcome> {
        let Some(rec) = self.saga_for_step(order, fence).await? else {
            return Ok(VoidOutcome::Missing);
        };
        match rec.state {
            SagaState::Debited | SagaState::Settled => return Ok(VoidOutcome::Debited),
            SagaState::Voided => return Ok(VoidOutcome::Voided),
            SagaState::Pending => {}
        }
        let o = &rec.order;
        let reference = format!("gift:{}:{}", o.room, o.gift_id);
        let kind = match self
            .wallet_apply(o.sender.as_str(), o.gift_id, EntryKind::Void, 0, &reference)
            .await?
        {
            Applied::Held { kind, .. } => kind,
            Applied::Insufficient { .. } => {
                return Err(StorageError::corrupt_msg("a void claim cannot overdraw"));
            }
        };
        if kind == EntryKind::Debit {
            // The debit holds the key: mark it so the owner rolls forward; never refund.
            let after = self
                .read_entry(o.sender.as_str(), o.gift_id)
                .await?
                .and_then(|(_, a)| a);
            self.saga_move(
                o.gift_id,
                SagaState::Pending,
                SagaState::Debited,
                fence,
                None,
                after,
            )
            .await?;
            return Ok(VoidOutcome::Debited);
        }
        match self
            .saga_move(
                o.gift_id,
                SagaState::Pending,
                SagaState::Voided,
                fence,
                Some(reason),
                None,
            )
            .await?
        {
            None | Some(SagaState::Voided) => {
                self.write(&self.st.open_del, (o.room.as_str(), o.gift_id))
                    .await?;
                Ok(VoidOutcome::Voided)
            }
            Some(_) => Ok(VoidOutcome::Debited),
        }
    }

    pub(in crate::ledger) async fn touch(
        &self,
        order: &GiftOrder,
        fence: u64,
    ) -> Result<Option<SagaRecord>> {
        self.ensure_room_fence(&order.room, fence).await?;
        let f = to_cql_fence(fence)?;
        for _ in 0..MAX_RESENDS {
            let out = self.lwt(&self.st.saga_touch, (f, order.gift_id, f)).await;
            let rec = self.read_back(|| self.read_saga(order.gift_id)).await?;
            let Some(rec) = rec else {
                return Ok(None);
            };
            if rec.fence > fence {
                return Err(StorageError::Fenced { token: fence });
            }
            if rec.fence == fence || out == Ok(true) {
                return Ok(Some(rec));
            }
        }
        Err(unknown("saga touch outcome stays unknown"))
    }

    /// Whether sagas may be kept under their ids from before time-ordered gift ids
    /// ([`crate::ledger::legacy_gift_id`]). This keyspace keeps no schema version to tell a
    /// keyspace written before from one created since, so it always may: each gift with a
    /// UUIDv7 request id reads the old id once before booking.
    pub(in crate::ledger) fn may_hold_legacy_gift_ids(&self) -> bool {
        true
    }

    pub(in crate::ledger) async fn saga(&self, gift_id: Uuid) -> Result<Option<SagaRecord>> {
        self.read_saga(gift_id).await
    }
}

/// `order_json, state, fence, reason, balance_after, updated_at` of one saga row.
pub(super) type SagaRow = (
    Option<String>,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<i64>,
    Option<CqlTimestamp>,
);
