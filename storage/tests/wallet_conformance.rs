//! Conformance of the wallet operations on every ledger engine (SQLite and PostgreSQL always,
//! Scylla when `CHORUS_SCYLLA_NODES` is set): statements.

#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::sync::Arc;

use protocol::UserId;
use storage::StorageError;
use storage::ledger::{
    BeginOutcome, DebitOutcome, GiftOutcome, HistoryQuery, Ledger, Movement, MovementKind, Payment,
    RefundOutcome, SettlementOrder, SettlementOutcome, TopUpOutcome, TransferOrder,
    TransferOutcome, day_of, now_ms,
};

use crate::support::ledger as fixture;
use fixture::{Fixture, postgres, scylla, sqlite};

conformance!(
    a_statement_lists_every_booking_newest_first,
    a_statement_pages_by_cursor_and_kind,
    statement_pages_never_skip_or_repeat_while_bookings_land,
    only_sellers_transfer_once_per_request_within_the_daily_limit,
    a_transfer_racing_the_sellers_gifts_never_overdraws,
    a_request_id_reused_at_once_books_one_transfer,
    a_payment_credits_once_however_often_it_is_notified,
    a_refund_after_spending_is_a_debt_that_blocks_gifts_until_covered,
    a_host_settles_earnings_once_and_never_more_than_earned,
    a_settlement_id_reused_at_once_settles_once,
    a_reward_credits_once_per_user_and_period_under_concurrent_calls,
);

/// Every movement of `user`, page by page from the newest (at most `max_pages` pages).
async fn walk(l: &Ledger, user: &UserId, limit: usize, max_pages: usize) -> Vec<Movement> {
    let mut out = Vec::new();
    let mut cursor = None;
    for _ in 0..max_pages {
        let q = HistoryQuery {
            cursor: cursor.clone(),
            limit,
            kind: None,
        };
        let page = l.history(user, &q).await.unwrap();
        assert!(page.movements.len() <= limit);
        out.extend(page.movements);
        match page.next {
            Some(next) => cursor = Some(next),
            None => return out,
        }
    }
    panic!("more than {max_pages} pages");
}

async fn a_statement_lists_every_booking_newest_first(f: Fixture) {
    let (alice, bob) = (f.user("alice"), f.user("bob"));
    let room = f.room("r");
    f.ledger.grant(&alice, 1_000, "g1").await.unwrap();
    // A retried grant is one movement.
    f.ledger.grant(&alice, 1_000, "g1").await.unwrap();
    let order = f.order(&alice, "gift-1", &room, 100, std::slice::from_ref(&bob));
    f.ledger.install_fence(&room, 1, "n1").await.unwrap();
    f.ledger.send_gift(&order, 1).await.unwrap();
    f.ledger.send_gift(&order, 1).await.unwrap();

    let a = walk(&f.ledger, &alice, 10, 5).await;
    assert_eq!(a.len(), 2, "{a:?}");
    assert_eq!(a[0].kind, MovementKind::GiftSent);
    assert_eq!(
        (a[0].amount, a[0].balance_after),
        (-100, Some(900)),
        "{a:?}"
    );
    assert_eq!(a[0].counterparty.as_deref(), Some(bob.as_str()));
    assert_eq!(a[0].key, order.gift_id.to_string());
    assert_eq!(a[1].kind, MovementKind::Grant);
    assert_eq!((a[1].amount, a[1].balance_after), (1_000, Some(1_000)));
    assert_eq!(a[1].key, "g1");

    let b = walk(&f.ledger, &bob, 10, 5).await;
    assert_eq!(b.len(), 1, "{b:?}");
    assert_eq!(b[0].kind, MovementKind::GiftReceived);
    assert_eq!(b[0].amount, 50);
    assert_eq!(b[0].counterparty.as_deref(), Some(alice.as_str()));
    assert_eq!(f.ledger.earnings(&bob).await.unwrap(), 50);
    // A user with no bookings has an empty statement.
    assert!(walk(&f.ledger, &f.user("nobody"), 10, 1).await.is_empty());
}

async fn a_statement_pages_by_cursor_and_kind(f: Fixture) {
    let (u, v) = (f.user("u"), f.user("v"));
    let room = f.room("r");
    f.ledger.install_fence(&room, 1, "n1").await.unwrap();
    for i in 0..25 {
        f.ledger.grant(&u, 10, &format!("k{i}")).await.unwrap();
    }
    for i in 0..3 {
        let o = f.order(&u, &format!("g{i}"), &room, 1, std::slice::from_ref(&v));
        f.ledger.send_gift(&o, 1).await.unwrap();
    }
    let all = walk(&f.ledger, &u, 10, 10).await;
    assert_eq!(all.len(), 28);
    // Newest first: the gifts, then the grants from k24 down to k0; balances run backwards.
    assert!(all[..3].iter().all(|m| m.kind == MovementKind::GiftSent));
    let keys: Vec<&str> = all[3..].iter().map(|m| m.key.as_str()).collect();
    let want: Vec<String> = (0..25).rev().map(|i| format!("k{i}")).collect();
    assert_eq!(keys, want);
    assert_eq!(all[0].balance_after, Some(247));
    assert_eq!(all[3].balance_after, Some(250));
    assert_eq!(all[27].balance_after, Some(10));

    // The last page says there is no next one.
    let q = HistoryQuery {
        cursor: None,
        limit: 28,
        kind: None,
    };
    assert_eq!(f.ledger.history(&u, &q).await.unwrap().next, None);

    // One kind only, paged too.
    let mut cursor = None;
    let mut grants = 0;
    for _ in 0..10 {
        let q = HistoryQuery {
            cursor: cursor.clone(),
            limit: 7,
            kind: Some(MovementKind::Grant),
        };
        let page = f.ledger.history(&u, &q).await.unwrap();
        assert!(page.movements.iter().all(|m| m.kind == MovementKind::Grant));
        grants += page.movements.len();
        cursor = page.next;
        if cursor.is_none() {
            break;
        }
    }
    assert_eq!(grants, 25);
    let q = HistoryQuery {
        cursor: None,
        limit: 10,
        kind: Some(MovementKind::Settlement),
    };
    assert!(f.ledger.history(&u, &q).await.unwrap().movements.is_empty());

    // A cursor this engine did not make is refused, not misread.
    let q = HistoryQuery {
        cursor: Some("not a cursor".into()),
        limit: 10,
        kind: None,
    };
    assert!(matches!(
        f.ledger.history(&u, &q).await,
        Err(StorageError::Invalid { .. })
    ));
}

/// Readers walk the statement page by page while grants land. Each walk must hold no
/// duplicate, and must hold every movement that the final statement places below the walk's
/// first movement (nothing lands between pages already read).
async fn statement_pages_never_skip_or_repeat_while_bookings_land(f: Fixture) {
    const WRITERS: usize = 4;
    const GRANTS_PER_WRITER: usize = 40;
    let u = f.user("busy");
    let ledger = f.ledger.clone();
    // Writers book half their grants, then wait until a walk has read a statement of more
    // than one page, then book the rest: some walks page through real statements while
    // grants land, however fast the engine books.
    let (paged_tx, paged) = tokio::sync::watch::channel(false);
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (l, u, mut paged) = (ledger.clone(), u.clone(), paged.clone());
        writers.push(tokio::spawn(async move {
            for i in 0..GRANTS_PER_WRITER {
                if i == GRANTS_PER_WRITER / 2 {
                    let wait = paged.wait_for(|p| *p);
                    tokio::time::timeout(std::time::Duration::from_secs(20), wait)
                        .await
                        .expect("no walk read more than a page")
                        .unwrap();
                }
                l.grant(&u, 1, &format!("w{w}-{i}")).await.unwrap();
            }
        }));
    }
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (l, u, done) = (ledger.clone(), u.clone(), Arc::clone(&done));
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            let mut walks = Vec::new();
            // Up to 200 walks once one read more than a page (the writers wait for that).
            let mut paged_walks = 0;
            while !done.load(std::sync::atomic::Ordering::Acquire) && paged_walks < 200 {
                assert!(
                    started.elapsed() < std::time::Duration::from_secs(60),
                    "the walks took over a minute"
                );
                let w = walk(&l, &u, 7, 100).await;
                if *paged_tx.borrow() {
                    paged_walks += 1;
                } else if w.len() > 7 {
                    paged_tx.send_replace(true);
                }
                walks.push(w);
            }
            walks
        })
    };
    for w in writers {
        w.await.unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Release);
    let walks = reader.await.unwrap();
    // Wait (bounded) until every grant shows: on PostgreSQL a movement shows once every
    // older transaction has ended.
    let total = WRITERS * GRANTS_PER_WRITER;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let full = loop {
        let full = walk(&ledger, &u, 50, 100).await;
        if full.len() == total || tokio::time::Instant::now() > deadline {
            break full;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    let keys: Vec<&str> = full.iter().map(|m| m.key.as_str()).collect();
    assert_eq!(keys.len(), total);
    assert_eq!(keys.iter().collect::<HashSet<_>>().len(), total);
    assert!(
        walks.iter().any(|w| w.len() > 7),
        "no walk read more than one page"
    );
    for w in &walks {
        let seen: HashSet<&str> = w.iter().map(|m| m.key.as_str()).collect();
        assert_eq!(seen.len(), w.len(), "a walk repeated a movement");
        let Some(first) = w.first() else { continue };
        let at = keys.iter().position(|k| *k == first.key).unwrap();
        for k in &keys[at..] {
            assert!(seen.contains(k), "a walk skipped {k}");
        }
    }
}

fn transfer(from: &UserId, to: &UserId, amount: i64, req: &str, limit: i64) -> TransferOrder {
    TransferOrder {
        from: from.clone(),
        to: to.clone(),
        amount,
        req_id: req.into(),
        daily_limit: limit,
        day: day_of(now_ms()),
    }
}

async fn only_sellers_transfer_once_per_request_within_the_daily_limit(f: Fixture) {
    let (seller, user) = (f.user("seller"), f.user("user"));
    let l = &f.ledger;
    l.grant(&seller, 1_000, "stock").await.unwrap();
    l.grant(&user, 100, "u").await.unwrap();
    // Not a seller yet: refused, nothing moves.
    let t = transfer(&seller, &user, 100, "t1", 500);
    assert_eq!(l.transfer(&t).await.unwrap(), TransferOutcome::NotSeller);
    l.set_seller(&seller, true).await.unwrap();
    assert!(l.is_seller(&seller).await.unwrap());
    assert!(!l.is_seller(&user).await.unwrap());
    // A regular user cannot transfer either.
    let back = transfer(&user, &seller, 10, "b1", 500);
    assert_eq!(l.transfer(&back).await.unwrap(), TransferOutcome::NotSeller);
    let done = l.transfer(&t).await.unwrap();
    assert_eq!(
        done,
        TransferOutcome::Done {
            balance: 900,
            applied: true
        }
    );
    // The same request again: the first result, nothing moves.
    let again = l.transfer(&t).await.unwrap();
    assert_eq!(
        again,
        TransferOutcome::Done {
            balance: 900,
            applied: false
        }
    );
    // The same request id for another transfer is refused.
    let reused = transfer(&seller, &user, 101, "t1", 500);
    assert_eq!(
        l.transfer(&reused).await.unwrap(),
        TransferOutcome::KeyReused
    );
    assert_eq!(l.balance(&seller).await.unwrap(), 900);
    assert_eq!(l.balance(&user).await.unwrap(), 200);
    // The daily limit: 100 used of 500.
    let big = transfer(&seller, &user, 401, "t2", 500);
    assert_eq!(
        l.transfer(&big).await.unwrap(),
        TransferOutcome::DailyLimit { remaining: 400 }
    );
    let rest = transfer(&seller, &user, 400, "t3", 500);
    assert!(matches!(
        l.transfer(&rest).await.unwrap(),
        TransferOutcome::Done { balance: 500, .. }
    ));
    // Not more than the seller holds, whatever the limit.
    let nsf = transfer(&seller, &user, 501, "t4", 10_000);
    assert_eq!(
        l.transfer(&nsf).await.unwrap(),
        TransferOutcome::InsufficientFunds { balance: 500 }
    );
    // Over both the limit (500 used of 900) and the balance (500): the limit is the answer,
    // on every engine.
    let both = transfer(&seller, &user, 600, "t6", 900);
    assert_eq!(
        l.transfer(&both).await.unwrap(),
        TransferOutcome::DailyLimit { remaining: 400 }
    );
    assert!(
        l.transfer(&transfer(&seller, &seller, 1, "self", 500))
            .await
            .is_err()
    );
    // Both statements show the transfer, each with the other side.
    let s = walk(l, &seller, 10, 5).await;
    assert_eq!((s[0].kind, s[0].amount), (MovementKind::Transfer, -400));
    assert_eq!(s[0].counterparty.as_deref(), Some(user.as_str()));
    assert_eq!(s[0].balance_after, Some(500));
    assert_eq!(s.len(), 3, "{s:?}");
    let u = walk(l, &user, 10, 5).await;
    assert_eq!((u[0].kind, u[0].amount), (MovementKind::Transfer, 400));
    assert_eq!(u[0].balance_after, Some(600));
    assert_eq!(u[0].counterparty.as_deref(), Some(seller.as_str()));
    // Unmarked: refused again.
    l.set_seller(&seller, false).await.unwrap();
    let after = transfer(&seller, &user, 1, "t5", 500);
    assert_eq!(
        l.transfer(&after).await.unwrap(),
        TransferOutcome::NotSeller
    );
    assert!(l.audit_totals().await.unwrap().is_conserved());
}

/// A seller sends gifts while transfers from them land: whatever the interleaving, the seller
/// never goes below zero and every coin is accounted for.
async fn a_transfer_racing_the_sellers_gifts_never_overdraws(f: Fixture) {
    let (seller, user, host) = (f.user("seller"), f.user("user"), f.user("host"));
    let room = f.room("r");
    let l = f.ledger.clone();
    l.install_fence(&room, 1, "n1").await.unwrap();
    l.grant(&seller, 1_000, "stock").await.unwrap();
    l.set_seller(&seller, true).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..10 {
        let l = l.clone();
        let t = transfer(&seller, &user, 100, &format!("t{i}"), 1_000_000);
        tasks.push(tokio::spawn(async move {
            match l.transfer(&t).await.unwrap() {
                TransferOutcome::Done { .. } => 100,
                TransferOutcome::InsufficientFunds { .. } => 0,
                other => panic!("{other:?}"),
            }
        }));
    }
    for i in 0..10 {
        let l = l.clone();
        let o = f.order(
            &seller,
            &format!("g{i}"),
            &room,
            100,
            std::slice::from_ref(&host),
        );
        tasks.push(tokio::spawn(async move {
            match l.send_gift(&o, 1).await.unwrap() {
                GiftOutcome::Settled { .. } => 100,
                GiftOutcome::InsufficientFunds { .. } => 0,
                other => panic!("{other:?}"),
            }
        }));
    }
    let mut spent = 0;
    for t in tasks {
        spent += t.await.unwrap();
    }
    assert_eq!(spent, 1_000, "exactly the seller's coins were spent");
    assert_eq!(l.balance(&seller).await.unwrap(), 0);
    let totals = l.audit_totals().await.unwrap();
    assert!(totals.is_conserved(), "{totals:?}");
}

/// Two transfers under one request id, to different receivers for different amounts, at once:
/// one is booked, the other answers `KeyReused`; only the booked one's coins moved (one debit,
/// one credit) and the audit counts it alone.
async fn a_request_id_reused_at_once_books_one_transfer(f: Fixture) {
    let seller = f.user("seller");
    let l = &f.ledger;
    l.grant(&seller, 10_000, "stock").await.unwrap();
    l.set_seller(&seller, true).await.unwrap();
    let (mut left, mut transferred) = (10_000, 0);
    for round in 0..4 {
        let (x, y) = (f.user(&format!("x{round}")), f.user(&format!("y{round}")));
        let req = format!("t{round}");
        let small = transfer(&seller, &x, 1, &req, 1_000_000);
        let big = transfer(&seller, &y, 1_000, &req, 1_000_000);
        let (a, b) = tokio::join!(l.transfer(&small), l.transfer(&big));
        let (a, b) = (a.unwrap(), b.unwrap());
        let (won, lost, balance) = match (a, b) {
            (
                TransferOutcome::Done {
                    applied: true,
                    balance,
                },
                TransferOutcome::KeyReused,
            ) => (&small, &big, balance),
            (
                TransferOutcome::KeyReused,
                TransferOutcome::Done {
                    applied: true,
                    balance,
                },
            ) => (&big, &small, balance),
            other => panic!("round {round}: {other:?}"),
        };
        left -= won.amount;
        transferred += won.amount;
        assert_eq!(balance, left, "round {round}");
        assert_eq!(l.balance(&seller).await.unwrap(), left);
        assert_eq!(l.balance(&won.to).await.unwrap(), won.amount);
        assert_eq!(l.balance(&lost.to).await.unwrap(), 0);
        assert!(walk(l, &lost.to, 10, 2).await.is_empty());
        // Asked again: the loser is still refused, the winner is a repeat.
        assert_eq!(l.transfer(lost).await.unwrap(), TransferOutcome::KeyReused);
        assert_eq!(
            l.transfer(won).await.unwrap(),
            TransferOutcome::Done {
                balance: left,
                applied: false
            }
        );
    }
    // One debit per round on the seller's statement.
    let debits: Vec<i64> = walk(l, &seller, 20, 5)
        .await
        .iter()
        .filter(|m| m.kind == MovementKind::Transfer)
        .map(|m| m.amount)
        .collect();
    assert_eq!(debits.len(), 4, "{debits:?}");
    assert_eq!(-debits.iter().sum::<i64>(), transferred);
    let t = l.audit_totals().await.unwrap();
    assert_eq!(t.transferred, transferred, "{t:?}");
    assert!(t.is_conserved(), "{t:?}");
    assert_eq!(t.negative_accounts, 0);
}

fn payment(id: &str, user: &UserId, coins: i64) -> Payment {
    Payment {
        id: id.into(),
        user: user.clone(),
        product: "coins_pack".into(),
        coins,
    }
}

async fn a_payment_credits_once_however_often_it_is_notified(f: Fixture) {
    let u = f.user("payer");
    let l = f.ledger.clone();
    let first = l.top_up(&payment("pay-1", &u, 100)).await.unwrap();
    assert_eq!(
        first,
        TopUpOutcome::Credited {
            balance: 100,
            applied: true,
            debt_paid: 0
        }
    );
    let again = l.top_up(&payment("pay-1", &u, 100)).await.unwrap();
    assert!(matches!(
        again,
        TopUpOutcome::Credited {
            balance: 100,
            applied: false,
            ..
        }
    ));
    // The same payment id for another amount or user moves nothing.
    let reused = l.top_up(&payment("pay-1", &u, 999)).await.unwrap();
    assert_eq!(reused, TopUpOutcome::KeyReused);
    // A provider retrying one payment 20 times at once: credited once.
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let (l, p) = (l.clone(), payment("pay-2", &u, 50));
        tasks.push(tokio::spawn(async move { l.top_up(&p).await.unwrap() }));
    }
    let mut applied = 0;
    for t in tasks {
        if let TopUpOutcome::Credited { applied: true, .. } = t.await.unwrap() {
            applied += 1;
        }
    }
    assert_eq!(applied, 1);
    assert_eq!(l.balance(&u).await.unwrap(), 150);
    let lines = walk(&l, &u, 10, 5).await;
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines.iter().all(|m| m.kind == MovementKind::TopUp));
    let t = l.audit_totals().await.unwrap();
    assert_eq!(t.topped_up, 150);
    assert!(t.is_conserved(), "{t:?}");
}

async fn a_refund_after_spending_is_a_debt_that_blocks_gifts_until_covered(f: Fixture) {
    let (u, host) = (f.user("payer"), f.user("host"));
    let room = f.room("r");
    let l = &f.ledger;
    l.install_fence(&room, 1, "n1").await.unwrap();
    assert_eq!(l.refund("nope").await.unwrap(), RefundOutcome::Unknown);
    l.top_up(&payment("pay-1", &u, 100)).await.unwrap();
    let gift = f.order(&u, "g1", &room, 80, std::slice::from_ref(&host));
    assert!(matches!(
        l.send_gift(&gift, 1).await.unwrap(),
        GiftOutcome::Settled { balance: 20, .. }
    ));
    // The refund takes the 20 coins left; the 80 spent become a debt, not a negative balance.
    let r = l.refund("pay-1").await.unwrap();
    assert_eq!(
        r,
        RefundOutcome::Refunded {
            balance: 0,
            debt: 80,
            applied: true
        }
    );
    let again = l.refund("pay-1").await.unwrap();
    assert!(matches!(
        again,
        RefundOutcome::Refunded {
            applied: false,
            debt: 80,
            ..
        }
    ));
    assert_eq!(l.debt(&u).await.unwrap(), 80);
    assert!(l.audit_totals().await.unwrap().is_conserved());
    // Coins from elsewhere do not let a user in debt send. Every engine answers the refusal
    // the same way, on the batched path and step by step: nothing is spendable (balance 0).
    l.grant(&u, 50, "gift-from-ops").await.unwrap();
    let blocked = f.order(&u, "g2", &room, 10, std::slice::from_ref(&host));
    assert_eq!(
        l.send_gift(&blocked, 1).await.unwrap(),
        GiftOutcome::InsufficientFunds { balance: 0 }
    );
    let stepped = f.order(&u, "g2-steps", &room, 10, std::slice::from_ref(&host));
    assert_eq!(l.begin(&stepped, 1).await.unwrap(), BeginOutcome::Started);
    assert_eq!(
        l.debit(&stepped, 1).await.unwrap(),
        DebitOutcome::InsufficientFunds { balance: 0 }
    );
    assert_eq!(l.balance(&u).await.unwrap(), 50);
    // A top-up covers the debt first; then the user can send again.
    let paid = l.top_up(&payment("pay-2", &u, 100)).await.unwrap();
    assert_eq!(
        paid,
        TopUpOutcome::Credited {
            balance: 70,
            applied: true,
            debt_paid: 80
        }
    );
    assert_eq!(l.debt(&u).await.unwrap(), 0);
    let ok = f.order(&u, "g3", &room, 10, std::slice::from_ref(&host));
    assert!(matches!(
        l.send_gift(&ok, 1).await.unwrap(),
        GiftOutcome::Settled { balance: 60, .. }
    ));
    let lines = walk(l, &u, 20, 5).await;
    let kinds: Vec<MovementKind> = lines.iter().map(|m| m.kind).collect();
    assert_eq!(
        kinds,
        [
            MovementKind::GiftSent,
            MovementKind::TopUp,
            MovementKind::Grant,
            MovementKind::Refund,
            MovementKind::GiftSent,
            MovementKind::TopUp
        ]
    );
    assert_eq!(lines[3].amount, -20);
    let t = l.audit_totals().await.unwrap();
    assert_eq!((t.topped_up, t.refunded, t.debt), (200, 100, 0));
    assert!(t.is_conserved(), "{t:?}");
}

fn settlement(id: &str, user: &UserId, amount: i64) -> SettlementOrder {
    SettlementOrder {
        id: id.into(),
        user: user.clone(),
        amount,
        payout: amount * 2,
        period: "2026-12".into(),
    }
}

async fn a_host_settles_earnings_once_and_never_more_than_earned(f: Fixture) {
    let (fan, host) = (f.user("fan"), f.user("host"));
    let room = f.room("r");
    let l = f.ledger.clone();
    l.install_fence(&room, 1, "n1").await.unwrap();
    l.grant(&fan, 1_000, "g").await.unwrap();
    for i in 0..4 {
        // 100 coins each, 50 % to the host: 200 earnings over several gifts (and slots).
        let o = f.order(
            &fan,
            &format!("g{i}"),
            &room,
            100,
            std::slice::from_ref(&host),
        );
        l.send_gift(&o, 1).await.unwrap();
    }
    assert_eq!(l.earnings(&host).await.unwrap(), 200);
    let too_much = settlement("s0", &host, 201);
    assert_eq!(
        l.settle_earnings(&too_much).await.unwrap(),
        SettlementOutcome::InsufficientEarnings { earnings: 200 }
    );
    let s1 = settlement("s1", &host, 150);
    assert_eq!(
        l.settle_earnings(&s1).await.unwrap(),
        SettlementOutcome::Settled {
            earnings: 50,
            payout: 300,
            applied: true
        }
    );
    // Concurrent repeats of the same settlement: settled once.
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let (l, o) = (l.clone(), s1.clone());
        tasks.push(tokio::spawn(
            async move { l.settle_earnings(&o).await.unwrap() },
        ));
    }
    for t in tasks {
        assert!(matches!(
            t.await.unwrap(),
            SettlementOutcome::Settled {
                applied: false,
                earnings: 50,
                ..
            }
        ));
    }
    assert_eq!(
        l.settle_earnings(&settlement("s1", &host, 10))
            .await
            .unwrap(),
        SettlementOutcome::KeyReused
    );
    assert_eq!(l.earnings(&host).await.unwrap(), 50);
    // The host sees it in their statement.
    let q = HistoryQuery {
        cursor: None,
        limit: 10,
        kind: Some(MovementKind::Settlement),
    };
    let lines = l.history(&host, &q).await.unwrap().movements;
    assert_eq!(lines.len(), 1);
    assert_eq!((lines[0].amount, lines[0].key.as_str()), (-150, "s1"));
    let t = l.audit_totals().await.unwrap();
    assert_eq!(t.settled, 150);
    assert!(t.is_conserved(), "{t:?}");
}

/// Two settlements under one id at once, for different amounts of one host and then for two
/// hosts: one is settled, the other answers `KeyReused`; only the settled one left earnings.
async fn a_settlement_id_reused_at_once_settles_once(f: Fixture) {
    let (fan, host, other) = (f.user("fan"), f.user("host"), f.user("other"));
    let room = f.room("r");
    let l = &f.ledger;
    l.install_fence(&room, 1, "n1").await.unwrap();
    l.grant(&fan, 1_000, "g").await.unwrap();
    // 50 % to the recipient: the host earns 300, the other 100.
    for (i, (to, unit)) in [(&host, 200), (&host, 200), (&host, 200), (&other, 200)]
        .into_iter()
        .enumerate()
    {
        let o = f.order(
            &fan,
            &format!("g{i}"),
            &room,
            unit,
            std::slice::from_ref(to),
        );
        l.send_gift(&o, 1).await.unwrap();
    }
    let mut earned = [(host.clone(), 300), (other.clone(), 100)];
    let mut settled = 0;
    let rounds = [
        (settlement("s1", &host, 100), settlement("s1", &host, 30)),
        (settlement("s2", &host, 50), settlement("s2", &other, 60)),
    ];
    for (a, b) in &rounds {
        let (ra, rb) = tokio::join!(l.settle_earnings(a), l.settle_earnings(b));
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        let (won, lost) = match (ra, rb) {
            (SettlementOutcome::Settled { applied: true, .. }, SettlementOutcome::KeyReused) => {
                (a, b)
            }
            (SettlementOutcome::KeyReused, SettlementOutcome::Settled { applied: true, .. }) => {
                (b, a)
            }
            other => panic!("{}: {other:?}", a.id),
        };
        settled += won.amount;
        for (who, have) in &mut earned {
            if *who == won.user {
                *have -= won.amount;
            }
            assert_eq!(l.earnings(who).await.unwrap(), *have, "{}", a.id);
        }
        assert_eq!(
            l.settle_earnings(lost).await.unwrap(),
            SettlementOutcome::KeyReused
        );
    }
    // One settlement line per settled id, on its host's statement.
    let q = HistoryQuery {
        cursor: None,
        limit: 10,
        kind: Some(MovementKind::Settlement),
    };
    let mut lines = 0;
    for u in [&host, &other] {
        lines += l.history(u, &q).await.unwrap().movements.len();
    }
    assert_eq!(lines, 2);
    let t = l.audit_totals().await.unwrap();
    assert_eq!(t.settled, settled, "{t:?}");
    assert!(t.is_conserved(), "{t:?}");
}

async fn a_reward_credits_once_per_user_and_period_under_concurrent_calls(f: Fixture) {
    let u = f.user("newbie");
    let l = f.ledger.clone();
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let (l, u) = (l.clone(), u.clone());
        tasks.push(tokio::spawn(async move {
            l.reward(&u, 30, "signup").await.unwrap()
        }));
    }
    let mut applied = 0;
    for t in tasks {
        if t.await.unwrap().applied {
            applied += 1;
        }
    }
    assert_eq!(applied, 1);
    assert!(l.reward(&u, 5, "checkin:1").await.unwrap().applied);
    assert!(!l.reward(&u, 5, "checkin:1").await.unwrap().applied);
    assert!(l.reward(&u, 5, "checkin:2").await.unwrap().applied);
    // An admin grant cannot take a reward's key (reward keys hold a space).
    assert!(l.grant(&u, 7, "signup").await.unwrap().applied);
    assert_eq!(l.balance(&u).await.unwrap(), 47);
    let lines = walk(&l, &u, 10, 5).await;
    let rewards = lines
        .iter()
        .filter(|m| m.kind == MovementKind::Reward)
        .count();
    assert_eq!((lines.len(), rewards), (4, 3), "{lines:?}");
    assert!(l.audit_totals().await.unwrap().is_conserved());
}
