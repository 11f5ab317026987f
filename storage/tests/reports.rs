//! The report store (the moderation queue) against a real redis-server and against SQLite: one
//! contract on both engines (ids, filters, pages, one resolution, the bound).

use kit::redis::RedisServer;
use protocol::{RoomId, UserId};
use serde_json::value::RawValue;
use storage::redis::Redis;
use storage::reports::{NewReport, Query, Report, ReportStore, Resolution, Resolved, Status};

fn report(room: &str, reporter: &str, user: Option<&str>, reason: &str, at: u64) -> NewReport {
    NewReport {
        room: RoomId::from(room),
        reporter: UserId::from(reporter),
        user: user.map(UserId::from),
        seq: user.map(|_| 7),
        line: user.map(|u| {
            RawValue::from_string(format!(
                r#"{{"from":"{u}","text":"buy coins at x.example"}}"#
            ))
            .unwrap()
        }),
        reason: reason.to_owned(),
        text: Some(format!("{reporter} says so")),
        at,
    }
}

fn resolution(action: &str) -> Resolution {
    Resolution {
        action: action.to_owned(),
        note: Some("first offence".to_owned()),
        by: Some("mod-anna".to_owned()),
        at: 1_800_000_000_000,
    }
}

/// Every report a query finds, page by page (`limit` each), newest first.
async fn all_pages(s: &ReportStore, q: Query) -> Vec<u64> {
    let mut ids = Vec::new();
    let mut q = q;
    for _ in 0..100 {
        let page = s.list(&q).await.unwrap();
        assert!(page.reports.len() <= q.limit);
        ids.extend(page.reports.iter().map(|r| r.id));
        match page.next {
            Some(next) => q.before = Some(next),
            None => return ids,
        }
    }
    panic!("the pages never ended");
}

fn query(status: Status, limit: usize) -> Query {
    Query {
        status,
        limit,
        ..Query::default()
    }
}

async fn contract(s: ReportStore) {
    // Filed: ids grow by one, and a report reads back as it went in, open.
    let a = report("r1", "ann", Some("spammer"), "spam", 1_000);
    let id1 = s.file(&a, "k1").await.unwrap();
    let id2 = s
        .file(&report("r1", "bob", None, "other", 2_000), "k2")
        .await
        .unwrap();
    let id3 = s
        .file(&report("r2", "cid", Some("spammer"), "spam", 3_000), "k3")
        .await
        .unwrap();
    let id4 = s
        .file(
            &report("r2", "ann", Some("troll"), "harassment", 4_000),
            "k4",
        )
        .await
        .unwrap();
    assert_eq!((id2, id3, id4), (id1 + 1, id1 + 2, id1 + 3));
    // A filing tried again with its key (its first answer lost) is the first report, not a
    // second one.
    assert_eq!(s.file(&a, "k1").await.unwrap(), id1);
    assert_eq!(s.file(&a, "k3").await.unwrap(), id3);
    let got = s.get(id1).await.unwrap().unwrap();
    assert_eq!(
        got,
        Report {
            id: id1,
            filed: a,
            resolution: None
        }
    );
    assert_eq!(s.get(id4 + 1).await.unwrap(), None);
    assert_eq!(s.open_count().await.unwrap(), 4);

    // The JSON a moderator reads.
    let json = serde_json::to_value(&got).unwrap();
    assert_eq!(json["status"], "open");
    assert_eq!(json["line"]["text"], "buy coins at x.example");
    assert_eq!(json["resolution"], serde_json::Value::Null);
    let room_report = serde_json::to_value(s.get(id2).await.unwrap().unwrap()).unwrap();
    assert_eq!(
        room_report["user"],
        serde_json::Value::Null,
        "the room itself"
    );

    // Lists: newest first, by status, room or reported user, in pages.
    assert_eq!(
        all_pages(&s, query(Status::Open, 50)).await,
        [id4, id3, id2, id1]
    );
    assert_eq!(
        all_pages(&s, query(Status::Open, 1)).await,
        [id4, id3, id2, id1]
    );
    let exact = s.list(&query(Status::Open, 4)).await.unwrap();
    assert_eq!(
        (exact.reports.len(), exact.next),
        (4, None),
        "a page that ends the list says so"
    );
    let first = s.list(&query(Status::Open, 3)).await.unwrap();
    assert_eq!(first.next, Some(id2));
    assert_eq!(
        all_pages(&s, query(Status::Resolved, 50)).await,
        Vec::<u64>::new()
    );
    let by_room = Query {
        room: Some(RoomId::from("r1")),
        ..query(Status::All, 50)
    };
    assert_eq!(all_pages(&s, by_room).await, [id2, id1]);
    let by_user = Query {
        user: Some(UserId::from("spammer")),
        ..query(Status::All, 1)
    };
    assert_eq!(all_pages(&s, by_user).await, [id3, id1]);
    let before = Query {
        before: Some(id3),
        ..query(Status::All, 50)
    };
    assert_eq!(all_pages(&s, before).await, [id2, id1]);

    // One resolution: the second leaves the first; an unknown id is missing.
    let Resolved::Now(r) = s.resolve(id3, &resolution("warned")).await.unwrap() else {
        panic!("not resolved now");
    };
    assert_eq!(r.resolution, Some(resolution("warned")));
    assert_eq!(serde_json::to_value(&r).unwrap()["status"], "resolved");
    let Resolved::Already(r) = s.resolve(id3, &resolution("banned")).await.unwrap() else {
        panic!("resolved twice");
    };
    assert_eq!(
        r.resolution.unwrap().action,
        "warned",
        "the first decision stays"
    );
    assert_eq!(
        s.resolve(id4 + 10, &resolution("warned")).await.unwrap(),
        Resolved::Missing
    );
    assert_eq!(s.open_count().await.unwrap(), 3, "one resolved, once");
    assert_eq!(
        all_pages(&s, query(Status::Open, 50)).await,
        [id4, id2, id1]
    );
    assert_eq!(all_pages(&s, query(Status::Resolved, 50)).await, [id3]);
    let open_of_spammer = Query {
        user: Some(UserId::from("spammer")),
        ..query(Status::Open, 50)
    };
    assert_eq!(all_pages(&s, open_of_spammer).await, [id1]);
    let resolved_in_r2 = Query {
        room: Some(RoomId::from("r2")),
        ..query(Status::Resolved, 50)
    };
    assert_eq!(all_pages(&s, resolved_in_r2).await, [id3]);

    // The bound: past it the oldest go, resolved or not, from every list.
    let s = s.with_keep(5);
    let mut last = id4;
    for i in 0..3 {
        last = s
            .file(
                &report("r3", "dan", Some("spammer"), "spam", 5_000 + i),
                &format!("bound-{i}"),
            )
            .await
            .unwrap();
    }
    let kept: Vec<u64> = (last - 4..=last).rev().collect();
    assert_eq!(all_pages(&s, query(Status::All, 2)).await, kept);
    assert_eq!(s.get(id1).await.unwrap(), None, "the oldest went");
    assert_eq!(
        s.open_count().await.unwrap(),
        4,
        "the dropped ones leave the backlog: id4 and the three new"
    );
    assert_eq!(s.get(id2).await.unwrap(), None);
    let of_spammer = Query {
        user: Some(UserId::from("spammer")),
        ..query(Status::All, 50)
    };
    assert_eq!(
        all_pages(&s, of_spammer).await,
        [last, last - 1, last - 2, id3],
        "dropped reports leave the user's list too"
    );
    let in_r1 = Query {
        room: Some(RoomId::from("r1")),
        ..query(Status::All, 50)
    };
    assert_eq!(all_pages(&s, in_r1).await, Vec::<u64>::new());
    assert_eq!(
        s.resolve(id1, &resolution("warned")).await.unwrap(),
        Resolved::Missing
    );
}

#[tokio::test]
async fn the_sqlite_store_keeps_the_contract_and_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    contract(ReportStore::sqlite(dir.path()).await.unwrap()).await;
    let again = ReportStore::sqlite(dir.path()).await.unwrap();
    let all = again.list(&query(Status::All, 50)).await.unwrap();
    assert_eq!(all.reports.len(), 5, "the reports are on disk");
    let next = again
        .file(&report("r9", "eve", None, "other", 9_000), "after-reopen")
        .await
        .unwrap();
    assert_eq!(next, all.reports[0].id + 1, "ids go on after a reopen");
}

#[tokio::test]
async fn the_redis_store_keeps_the_contract() {
    let server = RedisServer::start().await.unwrap();
    let redis = Redis::connect(&server.url()).await.unwrap();
    contract(ReportStore::redis(&redis)).await;
}
