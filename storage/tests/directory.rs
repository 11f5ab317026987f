//! The room directory store against a real redis-server and in process: the same contract on
//! both (pins first, region filter, search, paging, removal, entries of a dead node hidden and
//! swept, a restarted node's purge).
// Test helpers outside `#[test]` fns are test code too (clippy's allow-unwrap-in-tests skips them).
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;

use kit::redis::RedisServer;
use protocol::client::RoomEntry;
use protocol::{NodeId, RoomId};
use storage::directory::{DirectoryStore, ListArgs, Page, Pin, PinScope, Update};
use storage::redis::Redis;

const NOW: u64 = 1_000_000;
const STALE: u64 = 3_000;

fn entry(room: &str, title: &str, members: u64, region: Option<&str>) -> RoomEntry {
    RoomEntry {
        room: RoomId::from(room),
        title: title.into(),
        owner: format!("owner-{room}").as_str().into(),
        members,
        seated: 0,
        score: members as f64,
        robots: false,
        locked: false,
        region: region.map(str::to_owned),
        pinned: false,
        // Some in a PK: the flag comes back as it went in.
        pk: members % 2 == 1,
    }
}

fn args(limit: usize) -> ListArgs {
    ListArgs {
        limit,
        now_ms: NOW,
        stale_ms: STALE,
        ..ListArgs::default()
    }
}

fn ids(p: &Page) -> Vec<&str> {
    p.rooms.iter().map(|e| e.room.as_str()).collect()
}

/// Every room of a listing, page by page (bounded).
async fn all_pages(store: &DirectoryStore, mut a: ListArgs) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..1000 {
        let page = store.list(&a).await.unwrap();
        out.extend(page.rooms.iter().map(|e| e.room.as_str().to_owned()));
        match page.cursor {
            Some(c) => a.cursor = Some(c),
            None => return out,
        }
    }
    panic!("listing never ended");
}

async fn contract(store: DirectoryStore) {
    let (n1, n2) = (NodeId::from("n1"), NodeId::from("n2"));
    assert!(store.list(&args(10)).await.unwrap().rooms.is_empty());
    let puts: Vec<Update> = (0..30)
        .map(|i| {
            let region = if i % 2 == 0 { Some("eu") } else { Some("us") };
            Update::Put(entry(
                &format!("room-{i:02}"),
                &format!("Party {i}"),
                i,
                region,
            ))
        })
        .chain([
            Update::Put(entry("jazz", "Late Night Jazz", 5, Some("eu"))),
            Update::Put(entry("Blues", "smoky BLUES bar", 7, None)),
        ])
        .collect();
    store.publish(&n1, NOW, &puts).await.unwrap();

    // Ranked by score, highest first; paging covers everything once.
    let first = store.list(&args(5)).await.unwrap();
    assert_eq!(
        ids(&first),
        ["room-29", "room-28", "room-27", "room-26", "room-25"]
    );
    // The entries come back as they went in (a PK flag too).
    assert_eq!(first.rooms[0], entry("room-29", "Party 29", 29, Some("us")));
    assert!(first.rooms[0].pk && !first.rooms[1].pk);
    let every = all_pages(&store, args(7)).await;
    assert_eq!(every.len(), 32);
    assert_eq!(every.iter().collect::<HashSet<_>>().len(), 32);

    // Region filter: only the owner's region.
    let eu = all_pages(
        &store,
        ListArgs {
            region: Some("eu".into()),
            ..args(4)
        },
    )
    .await;
    assert_eq!(eu.len(), 16, "{eu:?}");
    assert!(eu.contains(&"jazz".to_owned()) && !eu.contains(&"Blues".to_owned()));

    // Search: id prefix, title prefix, title word prefix, any case.
    let search = |q: &str| ListArgs {
        query: Some(q.into()),
        ..args(50)
    };
    assert_eq!(ids(&store.list(&search("JA")).await.unwrap()), ["jazz"]);
    assert_eq!(ids(&store.list(&search("late n")).await.unwrap()), ["jazz"]);
    assert_eq!(ids(&store.list(&search("nig")).await.unwrap()), ["jazz"]);
    assert_eq!(ids(&store.list(&search("blues")).await.unwrap()), ["Blues"]);
    assert_eq!(store.list(&search("room-1")).await.unwrap().rooms.len(), 10);
    assert!(store.list(&search("zzz")).await.unwrap().rooms.is_empty());
    let party_eu = ListArgs {
        region: Some("eu".into()),
        ..search("party")
    };
    assert_eq!(all_pages(&store, party_eu).await.len(), 15);
    // Search pages too.
    let paged = all_pages(
        &store,
        ListArgs {
            limit: 4,
            ..search("room")
        },
    )
    .await;
    assert_eq!(paged.len(), 30);

    // Pins first: a global pin everywhere, a region pin in its region only, an expired pin
    // nowhere; a pin of a room not in the directory shows nothing.
    let pin = |scope, region: Option<&str>, until| Pin {
        scope,
        region: region.map(str::to_owned),
        until,
        at: NOW,
    };
    store
        .pin(&"room-03".into(), &pin(PinScope::Global, None, None))
        .await
        .unwrap();
    store
        .pin(&"room-04".into(), &pin(PinScope::Region, Some("eu"), None))
        .await
        .unwrap();
    store
        .pin(
            &"room-05".into(),
            &pin(PinScope::Global, None, Some(NOW - 1)),
        )
        .await
        .unwrap();
    store
        .pin(&"ghost".into(), &pin(PinScope::Global, None, None))
        .await
        .unwrap();
    let first = store.list(&args(3)).await.unwrap();
    assert_eq!(ids(&first), ["room-03", "room-29", "room-28"]);
    assert!(first.rooms[0].pinned && !first.rooms[1].pinned);
    let eu_first = store
        .list(&ListArgs {
            region: Some("eu".into()),
            ..args(3)
        })
        .await
        .unwrap();
    assert_eq!(ids(&eu_first), ["room-04", "room-03", "room-28"]);
    // A pinned room is listed once over all pages.
    let every = all_pages(&store, args(2)).await;
    assert_eq!(every.len(), 32);
    assert_eq!(every.iter().filter(|r| *r == "room-03").count(), 1);
    assert_eq!(store.pins().await.unwrap().len(), 4);
    assert!(store.unpin(&"room-03".into()).await.unwrap());
    assert!(!store.unpin(&"room-03".into()).await.unwrap());
    assert_eq!(ids(&store.list(&args(1)).await.unwrap()), ["room-29"]);

    // An update moves a room; a title change re-indexes its search.
    store
        .publish(
            &n1,
            NOW,
            &[Update::Put(entry("room-00", "Quiz night", 100, Some("us")))],
        )
        .await
        .unwrap();
    assert_eq!(ids(&store.list(&args(1)).await.unwrap()), ["room-00"]);
    assert_eq!(
        ids(&store.list(&search("quiz")).await.unwrap()),
        ["room-00"]
    );
    assert!(
        !ids(&store.list(&search("party 0")).await.unwrap()).contains(&"room-00"),
        "the old title is no longer searched"
    );
    let eu_all = all_pages(
        &store,
        ListArgs {
            region: Some("eu".into()),
            ..args(50)
        },
    )
    .await;
    assert!(!eu_all.contains(&"room-00".to_owned()), "moved out of eu");

    // Removal (close, unload): gone from ranking, region and search. Another node's
    // removal of a room it does not own does nothing.
    store
        .publish(&n2, NOW, &[Update::Remove("room-29".into())])
        .await
        .unwrap();
    assert_eq!(all_pages(&store, args(50)).await.len(), 32);
    store
        .publish(&n1, NOW, &[Update::Remove("room-29".into())])
        .await
        .unwrap();
    let every = all_pages(&store, args(50)).await;
    assert_eq!(every.len(), 31);
    assert!(!every.contains(&"room-29".to_owned()));
    assert!(
        store
            .list(&search("room-29"))
            .await
            .unwrap()
            .rooms
            .is_empty()
    );

    // A second node's rooms; then n2 stops publishing: its entries are hidden once stale,
    // and the sweep removes them.
    store
        .publish(
            &n2,
            NOW,
            &[Update::Put(entry("other", "Elsewhere", 1000, Some("eu")))],
        )
        .await
        .unwrap();
    assert_eq!(ids(&store.list(&args(1)).await.unwrap()), ["other"]);
    let later = NOW + STALE + 1;
    store.publish(&n1, later, &[]).await.unwrap();
    let a = ListArgs {
        now_ms: later,
        ..args(1)
    };
    assert_eq!(ids(&store.list(&a).await.unwrap()), ["room-00"]);
    assert!(
        store
            .list(&ListArgs {
                now_ms: later,
                ..search("else")
            })
            .await
            .unwrap()
            .rooms
            .is_empty()
    );
    assert_eq!(store.sweep_dead(later, STALE).await.unwrap(), 1);
    assert_eq!(store.sweep_dead(later, STALE).await.unwrap(), 0);
    // n2 comes back: its old entry does not come back by itself.
    store.publish(&n2, later, &[]).await.unwrap();
    assert!(
        !all_pages(
            &store,
            ListArgs {
                now_ms: later,
                ..args(50)
            }
        )
        .await
        .contains(&"other".to_owned())
    );

    // A restarted node purges what it published before.
    assert_eq!(store.purge_node(&n1).await.unwrap(), 31);
    assert!(store.list(&a).await.unwrap().rooms.is_empty());

    // A search reads at most MAX_SEARCH_DEPTH index entries: 2,100 rooms match (one entry
    // each: an id, no title), the listing ends after 2,000 of them. A listing without a query
    // is not cut.
    let deep: Vec<Update> = (0..2_100)
        .map(|i| Update::Put(entry(&format!("deep-{i:04}"), "", 1, None)))
        .collect();
    store.publish(&n1, NOW, &deep).await.unwrap();
    let search = ListArgs {
        query: Some("deep".into()),
        ..args(50)
    };
    let found = all_pages(&store, search).await;
    assert_eq!(found.len(), storage::directory::MAX_SEARCH_DEPTH);
    assert_eq!(found.iter().collect::<HashSet<_>>().len(), found.len());
    assert_eq!(all_pages(&store, args(50)).await.len(), 2_100);
    assert_eq!(store.purge_node(&n1).await.unwrap(), 2_100);

    // A cursor this store never gave is refused.
    let bad = ListArgs {
        cursor: Some("nope".into()),
        ..args(5)
    };
    assert!(store.list(&bad).await.is_err());
}

#[tokio::test]
async fn memory_engine_keeps_the_contract() {
    contract(DirectoryStore::memory()).await;
}

#[tokio::test]
async fn standalone_engine_keeps_the_contract_and_its_pins_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let store = DirectoryStore::memory_with_pins_file(dir.path())
        .await
        .unwrap();
    contract(store).await;
    // The contract left three pins (room-04, room-05, ghost): a reopened store has them.
    let reopened = DirectoryStore::memory_with_pins_file(dir.path())
        .await
        .unwrap();
    let pins = reopened.pins().await.unwrap();
    let mut rooms: Vec<&str> = pins.keys().map(RoomId::as_str).collect();
    rooms.sort_unstable();
    assert_eq!(rooms, ["ghost", "room-04", "room-05"]);
    assert_eq!(pins[&RoomId::from("room-04")].region.as_deref(), Some("eu"));
    assert!(reopened.unpin(&"ghost".into()).await.unwrap());
    let again = DirectoryStore::memory_with_pins_file(dir.path())
        .await
        .unwrap();
    assert_eq!(again.pins().await.unwrap().len(), 2);
}

#[tokio::test]
async fn redis_engine_keeps_the_contract() {
    let server = RedisServer::start().await.unwrap();
    let redis = Redis::connect(&server.url()).await.unwrap();
    contract(DirectoryStore::redis(&redis)).await;
    // Nothing is left behind: every index of a removed room is gone.
    let mut conn = redis.conn();
    let keys: Vec<String> = ::redis::cmd("KEYS")
        .arg("dir:*")
        .query_async(&mut conn)
        .await
        .unwrap();
    let left: Vec<&String> = keys
        .iter()
        .filter(|k| !["dir:alive", "dir:pins"].contains(&k.as_str()))
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");
}
