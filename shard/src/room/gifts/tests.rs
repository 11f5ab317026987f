use super::{
    Asked, Crash, InFlight, RECOVERY_MIN_AGE_MS, SagaStart, Sweep, answer_from_ledger, saga,
};
use protocol::ErrorCode;
use protocol::link::Command;
use storage::StorageError;
use storage::ledger::{GiftOrder, GiftOutcome, Ledger, gift_id, legacy_gift_id};
use uuid::Uuid;

/// Most bytes a saga's future may take (see [`saga`]).
const SAGA_MAX_BYTES: usize = 1000;

const NOW: i64 = 1_000_000_000;

#[test]
fn a_clean_sweep_stops_and_the_next_failure_starts_it_again() {
    let s = Sweep::default();
    assert!(s.failed(NOW), "the load starts the sweep");
    assert!(!s.claim(), "one sweep at a time");
    let seen = s.seen();
    assert!(
        s.go_on(NOW, seen),
        "the pass at load is followed by one more"
    );
    assert!(!s.go_on(NOW + RECOVERY_MIN_AGE_MS, seen), "then it stops");
    assert!(s.failed(NOW + 60_000), "a failure while stopped starts it");
    assert!(!s.failed(NOW + 60_000), "a second failure finds it running");
}

#[test]
fn the_sweep_goes_on_until_a_failure_is_old_enough_to_be_listed() {
    let s = Sweep::default();
    assert!(s.failed(NOW));
    let seen = s.seen();
    assert!(s.go_on(NOW + RECOVERY_MIN_AGE_MS - 1, seen));
    assert!(!s.go_on(NOW + RECOVERY_MIN_AGE_MS, seen));
}

#[test]
fn a_failure_racing_the_stop_is_not_lost() {
    let s = Sweep::default();
    assert!(s.claim());
    let seen = s.seen();
    // A saga fails while the sweep still runs (an old timestamp: only the count tells).
    assert!(!s.failed(NOW - 10 * RECOVERY_MIN_AGE_MS));
    assert!(s.go_on(NOW, seen), "the sweep must look again");
    assert!(!s.claim(), "and it still holds the sweep");
}

/// The room actor boxes a saga per gift: it must stay a small block for glibc (see
/// [`saga`]). It took 1,024 bytes while it held the command inline, 848 with it boxed.
#[tokio::test]
async fn a_saga_fits_in_a_small_block() {
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open("sqlite", dir.path()).await.unwrap();
    let future = saga(start(ledger, order(gift_id(&"alice".into(), "q1")), None));
    let size = std::mem::size_of_val(&future);
    drop(future);
    assert!(
        size <= SAGA_MAX_BYTES,
        "a saga's future is {size} bytes, more than {SAGA_MAX_BYTES}"
    );
}

fn command(req_id: &str) -> Command {
    serde_json::from_value(serde_json::json!({
        "req": 1, "gateway": "g1", "session": 1, "user": "alice", "client_id": 7,
        "room": "r1",
        "cmd": { "Op": { "Gift": { "room": "r1", "req_id": req_id, "gift": "rose", "to": ["bob"] } } }
    }))
    .unwrap()
}

fn order(gift_id: Uuid) -> GiftOrder {
    GiftOrder {
        gift_id,
        sender: "alice".into(),
        room: "r1".into(),
        gift: "rose".into(),
        count: 1,
        unit_price: 10,
        recipients: vec!["bob".into()],
        share_bp: 7_000,
        lucky: None,
        created_ms: 0,
        request: 0,
    }
}

fn start(ledger: Ledger, order: GiftOrder, legacy: Option<Uuid>) -> SagaStart {
    SagaStart {
        cmd: Box::new(command("q1")),
        order,
        legacy,
        ledger,
        fence: 1,
        in_flight: InFlight::default(),
        open_in: None,
        crash: Crash::No,
    }
}

/// A retry across the upgrade to time-ordered gift ids: the first attempt was booked under
/// the v5 id, the retry computes the v8 one, and must get the first result, not a second
/// debit. A ledger created since never looks the old id up, and books under the new one.
#[tokio::test]
async fn a_retry_across_the_gift_id_upgrade_gets_its_first_result() {
    const REQ: &str = "0190f1a2-b3c4-7d5e-8f60-0123456789ab";
    let (new_id, old_id) = (
        gift_id(&"alice".into(), REQ),
        legacy_gift_id(&"alice".into(), REQ).unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let ledger = booked_before_the_upgrade(dir.path(), order(old_id)).await;
    let done = saga(start(ledger.clone(), order(new_id), Some(old_id))).await;
    assert_eq!(done.key, new_id);
    assert_eq!(done.order.gift_id, old_id, "went on with the booked saga");
    assert!(
        matches!(&done.outcome, Ok(GiftOutcome::Duplicate { .. })),
        "{:?}",
        done.outcome
    );
    assert_eq!(
        ledger.balance(&"alice".into()).await.unwrap(),
        90,
        "debited once"
    );

    // A new request on the migrated ledger books under its time-ordered id.
    const NEXT: &str = "0190f1a2-b3c5-7d5e-8f60-0123456789ab";
    let next = gift_id(&"alice".into(), NEXT);
    let done = saga(start(
        ledger.clone(),
        order(next),
        legacy_gift_id(&"alice".into(), NEXT),
    ))
    .await;
    assert_eq!(done.order.gift_id, next);
    assert!(
        matches!(&done.outcome, Ok(GiftOutcome::Settled { balance: 80, .. })),
        "{:?}",
        done.outcome
    );
    assert!(ledger.saga(next).await.unwrap().is_some());
}

/// A SQLite ledger in which the version before time-ordered gift ids booked `first` (under
/// its v5 id), reopened as this version opens it: it may hold legacy ids.
async fn booked_before_the_upgrade(dir: &std::path::Path, first: GiftOrder) -> Ledger {
    let ledger = Ledger::open("sqlite", dir).await.unwrap();
    assert!(
        !ledger.may_hold_legacy_gift_ids(),
        "a fresh ledger holds no old ids"
    );
    ledger.grant(&"alice".into(), 100, "g").await.unwrap();
    ledger.install_fence(&first.room, 1, "n1").await.unwrap();
    let booked = ledger.send_gift(&first, 1).await.unwrap();
    assert!(
        matches!(booked, GiftOutcome::Settled { balance: 90, .. }),
        "{booked:?}"
    );
    drop(ledger);
    // Back to the schema before migration 2, as the old version left the file.
    let conn = rusqlite::Connection::open(dir.join("ledger.db")).unwrap();
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .unwrap();
    conn.execute_batch("DROP TABLE ledger_meta; PRAGMA user_version = 1;")
        .unwrap();
    drop(conn);
    let ledger = Ledger::open("sqlite", dir).await.unwrap();
    assert!(
        ledger.may_hold_legacy_gift_ids(),
        "migrated with sagas in it"
    );
    ledger
}

/// A request id booked before the upgrade in another room, sent again in this one: a reuse,
/// refused as one, never answered with the other room's order (nor driven under this room's
/// fence, which says nothing about the other room's owner).
#[tokio::test]
async fn a_legacy_saga_of_another_room_is_a_reused_request_id() {
    const REQ: &str = "0190f1a2-b3c4-7d5e-8f60-0123456789ab";
    let (new_id, old_id) = (
        gift_id(&"alice".into(), REQ),
        legacy_gift_id(&"alice".into(), REQ).unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let mut elsewhere = order(old_id);
    elsewhere.room = "r2".into();
    let ledger = booked_before_the_upgrade(dir.path(), elsewhere).await;
    let done = saga(start(ledger.clone(), order(new_id), Some(old_id))).await;
    assert!(
        matches!(&done.outcome, Err(StorageError::Reused { .. })),
        "{:?}",
        done.outcome
    );
    assert_eq!(
        done.order.gift_id, new_id,
        "the other room's order is not taken"
    );
    assert!(
        ledger.saga(new_id).await.unwrap().is_none(),
        "nothing booked"
    );
    assert_eq!(ledger.balance(&"alice".into()).await.unwrap(), 90);
}

/// A sender no longer in the room retries a request id that an order without a fingerprint
/// (booked before fingerprints existed) holds in another room: a reused request id, never
/// answered with the other room's result.
#[tokio::test]
async fn a_retry_from_outside_the_room_is_not_answered_with_another_rooms_order() {
    const REQ: &str = "0190f1a2-b3c4-7d5e-8f60-0123456789ab";
    let id = gift_id(&"alice".into(), REQ);
    let dir = tempfile::tempdir().unwrap();
    let ledger = Ledger::open("sqlite", dir.path()).await.unwrap();
    ledger.grant(&"alice".into(), 100, "g").await.unwrap();
    let mut elsewhere = order(id);
    elsewhere.room = "r2".into();
    ledger
        .install_fence(&elsewhere.room, 1, "n1")
        .await
        .unwrap();
    let booked = ledger.send_gift(&elsewhere, 1).await.unwrap();
    assert!(matches!(booked, GiftOutcome::Settled { .. }), "{booked:?}");
    let not_in_room = crate::room::state::rejected(ErrorCode::NotInRoom, "not in this room");
    let mut asked = Asked {
        id,
        legacy: None,
        room: "r1".into(),
        request: 42,
    };
    let answer = answer_from_ledger(&ledger, &asked, not_in_room.clone()).await;
    assert_eq!(
        answer.map_err(|e| e.code),
        Err(ErrorCode::IdempotencyConflict),
        "another room's order"
    );
    // The retry in the order's own room still gets its first result.
    asked.room = "r2".into();
    let answer = answer_from_ledger(&ledger, &asked, not_in_room).await;
    assert!(answer.is_ok(), "{answer:?}");
    assert_eq!(ledger.balance(&"alice".into()).await.unwrap(), 90);
}
