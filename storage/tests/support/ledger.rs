//! The ledger test kit shared by the conformance suites: a fresh ledger per test on each
//! engine, and the `conformance!` macro that runs one check against every engine.

use kit::postgres::PgServer;
use protocol::{RoomId, UserId};
use storage::ledger::{GiftOrder, Ledger, gift_id, now_ms};
use uuid::Uuid;

/// A fresh ledger per test (a temp SQLite file, a fresh PostgreSQL server, or a fresh Scylla
/// keyspace), with a namespace for ids. The temp dir and the server live as long as the ledger.
pub(crate) struct Fixture {
    pub(crate) ledger: Ledger,
    pub(crate) ns: String,
    /// What the ledger was opened with (for a second handle on the same data).
    url: String,
    dir: std::path::PathBuf,
    _dir: Option<tempfile::TempDir>,
    _server: Option<PgServer>,
}

impl Fixture {
    /// Another handle on the same ledger, as a second node of a cluster opens it.
    pub(crate) async fn second_handle(&self) -> Ledger {
        Ledger::open(&self.url, &self.dir)
            .await
            .expect("open a second handle")
    }

    /// What the ledger was opened with (`""` for SQLite in [`Fixture::dir`]).
    pub(crate) fn url(&self) -> &str {
        &self.url
    }

    /// The data directory (SQLite's `ledger.db` is there).
    pub(crate) fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    pub(crate) fn user(&self, name: &str) -> UserId {
        UserId::from(format!("{}-{name}", self.ns))
    }
    pub(crate) fn room(&self, name: &str) -> RoomId {
        RoomId::from(format!("{}-{name}", self.ns))
    }
    pub(crate) fn order(
        &self,
        sender: &UserId,
        req: &str,
        room: &RoomId,
        unit: i64,
        to: &[UserId],
    ) -> GiftOrder {
        GiftOrder {
            gift_id: gift_id(sender, req),
            sender: sender.clone(),
            room: room.clone(),
            gift: "rose".into(),
            count: 1,
            unit_price: unit,
            recipients: to.to_vec(),
            share_bp: 5_000,
            lucky: None,
            created_ms: now_ms(),
            request: 0,
        }
    }
}

pub(crate) async fn sqlite() -> Fixture {
    let dir = tempfile::tempdir().expect("temp dir");
    let ledger = Ledger::open("", dir.path())
        .await
        .expect("open sqlite ledger");
    Fixture {
        ledger,
        ns: "t".into(),
        url: String::new(),
        dir: dir.path().to_owned(),
        _dir: Some(dir),
        _server: None,
    }
}

/// A PostgreSQL ledger on a server of its own, so that each test's audit sees only its money.
pub(crate) async fn postgres() -> Fixture {
    let server = PgServer::start().await.expect("start a PostgreSQL server");
    let url = server.url("postgres");
    let dir = std::env::temp_dir();
    let ledger = Ledger::open(&url, &dir)
        .await
        .expect("open the PostgreSQL ledger");
    Fixture {
        ledger,
        ns: "t".into(),
        url,
        dir,
        _dir: None,
        _server: Some(server),
    }
}

pub(crate) async fn scylla() -> Option<Fixture> {
    let Ok(nodes) = std::env::var("CHORUS_SCYLLA_NODES") else {
        println!("ledger conformance: not run against Scylla (CHORUS_SCYLLA_NODES unset)");
        return None;
    };
    // One keyspace per test, so each test's audit sees only its own money.
    let ns = Uuid::new_v4().simple().to_string();
    let url = format!("scylla://{nodes}/chorus_test_{ns}");
    let dir = std::env::temp_dir();
    let ledger = Ledger::open(&url, &dir).await.expect("connect to Scylla");
    Some(Fixture {
        ledger,
        ns,
        url,
        dir,
        _dir: None,
        _server: None,
    })
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod sqlite_engine {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::sqlite().await).await;
                }
            )*
        }
        mod postgres_engine {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name(super::postgres().await).await;
                }
            )*
        }
        mod scylla_engine {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    if let Some(f) = super::scylla().await {
                        super::$name(f).await;
                    }
                }
            )*
        }
    };
}
