//! Conformance of guard purchases on every ledger engine (SQLite and PostgreSQL always,
//! Scylla when `CHORUS_SCYLLA_NODES` is set): paid once per request id, never overdrawn nor
//! bought in debt, extended from the later of now and the current expiry, listed only while
//! in force, and every coin accounted for.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use protocol::UserId;
use storage::StorageError;
use storage::ledger::{
    GiftOutcome, Guard, GuardOrder, GuardOutcome, HistoryQuery, Ledger, MovementKind, Payment,
    now_ms,
};

use crate::support::ledger as fixture;
use fixture::{Fixture, postgres, scylla, sqlite};

conformance!(
    a_guard_is_paid_once_per_request_and_extends_from_its_end,
    a_request_id_reused_at_once_books_one_guard,
    guards_never_overdraw_nor_sell_in_debt_and_refusals_change_nothing,
    an_ended_guard_is_not_listed_and_a_new_one_starts_from_now,
    standings_answer_each_user_in_order_as_standing_does,
);

const DAY_MS: i64 = 86_400_000;

fn order(buyer: &UserId, host: &UserId, req: &str, price: i64, duration_ms: i64) -> GuardOrder {
    GuardOrder {
        buyer: buyer.clone(),
        host: host.clone(),
        plan: "week".into(),
        duration_ms,
        price,
        host_share: price / 2,
        req_id: req.into(),
    }
}

async fn kinds(l: &Ledger, user: &UserId) -> Vec<(MovementKind, i64)> {
    let q = HistoryQuery {
        cursor: None,
        limit: 50,
        kind: None,
    };
    let page = l.history(user, &q).await.unwrap();
    page.movements.iter().map(|m| (m.kind, m.amount)).collect()
}

async fn a_guard_is_paid_once_per_request_and_extends_from_its_end(f: Fixture) {
    let (fan, host) = (f.user("fan"), f.user("host"));
    let l = &f.ledger;
    l.grant(&fan, 1_000, "seed").await.unwrap();
    let before = now_ms();
    let first = l
        .buy_guard(&order(&fan, &host, "g1", 300, 7 * DAY_MS))
        .await
        .unwrap();
    let GuardOutcome::Bought {
        expires_ms: e1,
        balance: 700,
        applied: true,
    } = first
    else {
        panic!("{first:?}")
    };
    assert!(e1 >= before + 7 * DAY_MS && e1 <= now_ms() + 7 * DAY_MS);
    // The same request again, at once: nothing moves, the same guard is answered.
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (l, o) = (l.clone(), order(&fan, &host, "g1", 300, 7 * DAY_MS));
        tasks.push(tokio::spawn(async move { l.buy_guard(&o).await.unwrap() }));
    }
    for t in tasks {
        assert_eq!(
            t.await.unwrap(),
            GuardOutcome::Bought {
                expires_ms: e1,
                balance: 700,
                applied: false
            }
        );
    }
    // A second purchase while it runs extends it from its end, not from now.
    let second = l
        .buy_guard(&order(&fan, &host, "g2", 300, 7 * DAY_MS))
        .await
        .unwrap();
    assert_eq!(
        second,
        GuardOutcome::Bought {
            expires_ms: e1 + 7 * DAY_MS,
            balance: 400,
            applied: true
        }
    );
    // The key of another purchase (host, plan or price) moves nothing.
    let other = f.user("other-host");
    for o in [
        order(&fan, &other, "g1", 300, 7 * DAY_MS),
        order(&fan, &host, "g1", 301, 7 * DAY_MS),
    ] {
        assert_eq!(l.buy_guard(&o).await.unwrap(), GuardOutcome::KeyReused);
    }
    assert_eq!(l.balance(&fan).await.unwrap(), 400);
    let now = now_ms();
    let listed = l.guards_of_host(&host, now).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (&listed[0].buyer, listed[0].expires_ms),
        (&fan, e1 + 7 * DAY_MS)
    );
    assert_eq!(l.guards_of_buyer(&fan, now).await.unwrap(), listed);
    // The standing a connecting session reads: the same guards and the lifetime spend.
    let spent = l.lifetime_spent(&fan).await.unwrap();
    assert_eq!(
        l.standing(&fan, now).await.unwrap(),
        (listed.clone(), spent)
    );
    assert!(l.guards_of_host(&other, now).await.unwrap().is_empty());
    // The host earned half of each price; the platform kept the rest.
    assert_eq!(l.earnings(&host).await.unwrap(), 300);
    let fan_lines = kinds(l, &fan).await;
    assert_eq!(
        fan_lines
            .iter()
            .filter(|(k, _)| *k == MovementKind::Guard)
            .map(|(_, a)| *a)
            .collect::<Vec<_>>(),
        vec![-300, -300]
    );
    let host_lines = kinds(l, &host).await;
    assert_eq!(
        host_lines,
        vec![
            (MovementKind::GuardIncome, 150),
            (MovementKind::GuardIncome, 150)
        ]
    );
    let t = l.audit_totals().await.unwrap();
    assert_eq!(t.platform_revenue, 300, "{t:?}");
    assert!(t.is_conserved(), "{t:?}");
}

/// Two purchases under one request id at once, for another host or plan and price: one is
/// booked, the other answers `KeyReused`; one price paid, one guard, one host's earnings.
async fn a_request_id_reused_at_once_books_one_guard(f: Fixture) {
    let l = &f.ledger;
    let mut platform = 0;
    for round in 0..4 {
        let fan = f.user(&format!("fan{round}"));
        let (h1, h2) = (
            f.user(&format!("h1-{round}")),
            f.user(&format!("h2-{round}")),
        );
        l.grant(&fan, 1_000, "seed").await.unwrap();
        let week = order(&fan, &h1, "g", 300, 7 * DAY_MS);
        // Even rounds: another host; odd rounds: the same host, another plan and price.
        let other_host = if round % 2 == 0 { &h2 } else { &h1 };
        let mut month = order(&fan, other_host, "g", 500, 30 * DAY_MS);
        month.plan = "month".into();
        let before = now_ms();
        let (a, b) = tokio::join!(l.buy_guard(&week), l.buy_guard(&month));
        let (a, b) = (a.unwrap(), b.unwrap());
        let (won, lost, expires_ms) = match (a, b) {
            (
                GuardOutcome::Bought {
                    applied: true,
                    expires_ms,
                    ..
                },
                GuardOutcome::KeyReused,
            ) => (&week, &month, expires_ms),
            (
                GuardOutcome::KeyReused,
                GuardOutcome::Bought {
                    applied: true,
                    expires_ms,
                    ..
                },
            ) => (&month, &week, expires_ms),
            other => panic!("round {round}: {other:?}"),
        };
        platform += won.platform_share();
        assert_eq!(l.balance(&fan).await.unwrap(), 1_000 - won.price);
        assert!(expires_ms >= before + won.duration_ms, "round {round}");
        assert!(expires_ms <= now_ms() + won.duration_ms, "round {round}");
        // One guard, of the winner's host, for the winner's duration.
        let now = now_ms();
        let held = l.guards_of_buyer(&fan, now).await.unwrap();
        assert_eq!(held.len(), 1, "round {round}: {held:?}");
        assert_eq!((&held[0].host, held[0].expires_ms), (&won.host, expires_ms));
        assert_eq!(l.guards_of_host(&won.host, now).await.unwrap(), held);
        if lost.host != won.host {
            assert!(l.guards_of_host(&lost.host, now).await.unwrap().is_empty());
            assert_eq!(l.earnings(&lost.host).await.unwrap(), 0);
            assert!(kinds(l, &lost.host).await.is_empty());
        }
        assert_eq!(l.earnings(&won.host).await.unwrap(), won.host_share);
        assert_eq!(
            kinds(l, &won.host).await,
            vec![(MovementKind::GuardIncome, won.host_share)]
        );
        // One debit: the winner's price.
        let paid: Vec<i64> = kinds(l, &fan)
            .await
            .into_iter()
            .filter(|(k, _)| *k == MovementKind::Guard)
            .map(|(_, a)| a)
            .collect();
        assert_eq!(paid, vec![-won.price], "round {round}");
        // Asked again: the loser is still refused, the winner is a repeat.
        assert_eq!(l.buy_guard(lost).await.unwrap(), GuardOutcome::KeyReused);
        assert_eq!(
            l.buy_guard(won).await.unwrap(),
            GuardOutcome::Bought {
                expires_ms,
                balance: 1_000 - won.price,
                applied: false
            }
        );
    }
    let t = l.audit_totals().await.unwrap();
    assert_eq!(t.platform_revenue, platform, "{t:?}");
    assert!(t.is_conserved(), "{t:?}");
    assert_eq!(t.negative_accounts, 0);
}

async fn guards_never_overdraw_nor_sell_in_debt_and_refusals_change_nothing(f: Fixture) {
    let (fan, host, poor) = (f.user("fan"), f.user("host"), f.user("poor"));
    let l = &f.ledger;
    // A guard of oneself and malformed orders are refused before the engine.
    let mut own = order(&fan, &fan, "self", 10, DAY_MS);
    assert!(matches!(
        l.buy_guard(&own).await,
        Err(StorageError::Invalid { .. })
    ));
    own.host = host.clone();
    own.price = 0;
    assert!(matches!(
        l.buy_guard(&own).await,
        Err(StorageError::Invalid { .. })
    ));
    // No coins: refused, nothing recorded (the same request later, with coins, is booked).
    let o = order(&poor, &host, "p1", 50, DAY_MS);
    assert_eq!(
        l.buy_guard(&o).await.unwrap(),
        GuardOutcome::InsufficientFunds { balance: 0 }
    );
    assert!(l.guards_of_host(&host, now_ms()).await.unwrap().is_empty());
    assert!(kinds(l, &poor).await.is_empty());
    // Twenty purchases at once against coins for five: five are booked, none overdraws.
    l.grant(&fan, 5 * 40, "seed").await.unwrap();
    let ledger = Arc::new(l.clone());
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (l, o) = (
            Arc::clone(&ledger),
            order(&fan, &host, &format!("c{i}"), 40, DAY_MS),
        );
        tasks.push(tokio::spawn(async move { l.buy_guard(&o).await.unwrap() }));
    }
    let (mut bought, mut refused) = (0, 0);
    for t in tasks {
        match t.await.unwrap() {
            GuardOutcome::Bought { balance, .. } => {
                assert!(balance >= 0);
                bought += 1;
            }
            GuardOutcome::InsufficientFunds { balance } => {
                assert!((0..40).contains(&balance));
                refused += 1;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!((bought, refused), (5, 15));
    assert_eq!(l.balance(&fan).await.unwrap(), 0);
    // Five days bought, each extending the last: the guard runs five days from about now.
    let g = l.guards_of_buyer(&fan, now_ms()).await.unwrap();
    assert_eq!(g.len(), 1);
    assert!(g[0].expires_ms > now_ms() + 5 * DAY_MS - 60_000, "{g:?}");
    assert!(g[0].expires_ms <= now_ms() + 5 * DAY_MS, "{g:?}");
    // A debt (a refunded top-up already spent) blocks a purchase, whatever the coins.
    let debtor = f.user("debtor");
    let pay = |id: &str, coins| Payment {
        id: id.into(),
        user: debtor.clone(),
        product: "pack".into(),
        coins,
    };
    l.top_up(&pay("pay-1", 100)).await.unwrap();
    assert!(matches!(
        l.buy_guard(&order(&debtor, &host, "d1", 80, DAY_MS))
            .await
            .unwrap(),
        GuardOutcome::Bought { balance: 20, .. }
    ));
    l.refund("pay-1").await.unwrap();
    l.grant(&debtor, 500, "later").await.unwrap();
    // (A grant does not pay a debt; only a top-up does.)
    let debt = l.debt(&debtor).await.unwrap();
    assert!(debt > 0);
    assert_eq!(
        l.buy_guard(&order(&debtor, &host, "d2", 80, DAY_MS))
            .await
            .unwrap(),
        GuardOutcome::InDebt { debt }
    );
    assert_eq!(l.balance(&debtor).await.unwrap(), 500);
    let t = l.audit_totals().await.unwrap();
    assert!(t.is_conserved(), "{t:?}");
    assert_eq!(t.negative_accounts, 0);
}

async fn an_ended_guard_is_not_listed_and_a_new_one_starts_from_now(f: Fixture) {
    let (fan, host) = (f.user("fan"), f.user("host"));
    let l = &f.ledger;
    l.grant(&fan, 100, "seed").await.unwrap();
    const SHORT_MS: i64 = 200;
    let GuardOutcome::Bought { expires_ms: e1, .. } = l
        .buy_guard(&order(&fan, &host, "s1", 10, SHORT_MS))
        .await
        .unwrap()
    else {
        panic!()
    };
    // Reads filter by the time they are given: in force just before its end, gone at it.
    assert_eq!(l.guards_of_host(&host, e1 - 1).await.unwrap().len(), 1);
    assert!(l.guards_of_host(&host, e1).await.unwrap().is_empty());
    assert!(l.guards_of_buyer(&fan, e1).await.unwrap().is_empty());
    // Once it has ended, a purchase runs from now, not from the old end.
    let deadline = Instant::now() + Duration::from_secs(10);
    while now_ms() <= e1 + 50 {
        assert!(
            Instant::now() < deadline,
            "the clock did not pass the guard's end"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let before = now_ms();
    let GuardOutcome::Bought { expires_ms: e2, .. } = l
        .buy_guard(&order(&fan, &host, "s2", 10, SHORT_MS))
        .await
        .unwrap()
    else {
        panic!()
    };
    assert!(e2 >= before + SHORT_MS, "{e2} vs {before}");
    assert!(
        e2 > e1 + SHORT_MS,
        "extended from now, not from the old end"
    );
    assert!(l.audit_totals().await.unwrap().is_conserved());
}

/// The batched read a room makes of its members' standing: each user's standing in the order
/// asked, as the one-user read answers it: a guard who also sent a gift, a sender without a
/// guard, a user the ledger never saw, and a user asked twice (answered twice).
async fn standings_answer_each_user_in_order_as_standing_does(f: Fixture) {
    let [fan, sender, stranger, host] = ["fan", "sender", "stranger", "host"].map(|n| f.user(n));
    let room = f.room("r");
    let l = &f.ledger;
    for u in [&fan, &sender] {
        l.grant(u, 1_000, "seed").await.unwrap();
    }
    let GuardOutcome::Bought { expires_ms, .. } = l
        .buy_guard(&order(&fan, &host, "g1", 300, 7 * DAY_MS))
        .await
        .unwrap()
    else {
        panic!("the guard was not bought")
    };
    for (s, unit) in [(&fan, 20), (&sender, 35)] {
        let gift = f.order(s, "gift-1", &room, unit, std::slice::from_ref(&host));
        let out = l.send_gift(&gift, 1).await.unwrap();
        assert!(matches!(out, GiftOutcome::Settled { .. }), "{out:?}");
    }
    let now = now_ms();
    let users = [fan.clone(), sender.clone(), stranger.clone(), fan.clone()];
    let batch = l.standings(&users, now).await.unwrap();
    let mut one_by_one = Vec::new();
    for u in &users {
        one_by_one.push(l.standing(u, now).await.unwrap());
    }
    assert_eq!(batch, one_by_one);
    // What each answer holds, so that equal answers cannot both be wrong.
    let guard = Guard {
        buyer: fan.clone(),
        host: host.clone(),
        expires_ms,
    };
    let fan_spent = l.lifetime_spent(&fan).await.unwrap();
    assert!(fan_spent >= 20, "{fan_spent}");
    assert_eq!(batch[0], (vec![guard], fan_spent));
    assert_eq!(batch[1], (Vec::new(), 35));
    assert_eq!(batch[2], (Vec::new(), 0));
    assert_eq!(batch[3], batch[0]);
    // The order asked is the order answered.
    let reversed: Vec<UserId> = users.iter().rev().cloned().collect();
    let mut expected = batch.clone();
    expected.reverse();
    assert_eq!(l.standings(&reversed, now).await.unwrap(), expected);
    assert!(l.standings(&[], now).await.unwrap().is_empty());
}
