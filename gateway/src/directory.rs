//! `room.list` and `GET /admin/rooms`: pages of the room directory
//! ([`storage::directory`]), which the shards' rooms publish. A page is cached for
//! `directory_cache_ms` (1 s), so a crowd opening the room list costs the store one read per second per
//! distinct request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use protocol::client::{self, RoomList, RoomListPage};
use protocol::{ErrorCode, SessionId};
use storage::directory::{DirectoryStore, ListArgs};
use tokio::time::Instant;

use crate::shared::Core;

/// Pages cached at once; a full cache is emptied (the next second refills it).
const CACHE_MAX: usize = 4096;

/// The directory as a gateway reads it.
pub(crate) struct Directory {
    store: DirectoryStore,
    /// Entries of a node that has not published for this long are not listed.
    stale: Duration,
    /// How long a page is served from the cache (zero: never).
    cache_ttl: Duration,
    cache: Mutex<HashMap<RoomList, (Instant, Arc<RoomListPage>)>>,
}

impl std::fmt::Debug for Directory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Directory")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// Why a page could not be read.
#[derive(Debug)]
pub(crate) struct ListError {
    pub(crate) code: ErrorCode,
    pub(crate) msg: String,
}

impl Directory {
    pub(crate) fn new(store: DirectoryStore, stale: Duration, cache_ttl: Duration) -> Arc<Self> {
        Arc::new(Self {
            store,
            stale,
            cache_ttl,
            cache: Mutex::new(HashMap::new()),
        })
    }

    /// The store (pins are written straight to it).
    pub(crate) fn store(&self) -> &DirectoryStore {
        &self.store
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<RoomList, (Instant, Arc<RoomListPage>)>> {
        // A poisoned cache only means a panic elsewhere; its pages are still whole.
        self.cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One page, from the cache when it is fresh there.
    pub(crate) async fn page(&self, req: &RoomList) -> Result<Arc<RoomListPage>, ListError> {
        req.validate().map_err(|m| ListError {
            code: ErrorCode::BadRequest,
            msg: m.to_owned(),
        })?;
        let now = Instant::now();
        if let Some((at, page)) = self.lock().get(req)
            && now.duration_since(*at) < self.cache_ttl
        {
            return Ok(page.clone());
        }
        let args = ListArgs {
            cursor: req.cursor.clone(),
            limit: req.page_size(),
            region: req.region.clone(),
            query: req.query.clone(),
            now_ms: crate::outbox::unix_ms(),
            stale_ms: self.stale.as_millis() as u64,
        };
        let page = self.store.list(&args).await.map_err(|e| ListError {
            code: e.code(),
            msg: e.to_string(),
        })?;
        let page = Arc::new(RoomListPage {
            rooms: page.rooms,
            cursor: page.cursor,
        });
        if self.cache_ttl.is_zero() {
            return Ok(page);
        }
        let mut cache = self.lock();
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.insert(req.clone(), (now, page.clone()));
        Ok(page)
    }
}

impl Core {
    /// `room.list`, answered on a task of its own.
    pub(crate) fn room_list(self: &Arc<Self>, session: SessionId, id: u64, req: RoomList) {
        let core = self.clone();
        self.tracker.spawn(async move {
            let frame = match core.directory.get() {
                Some(dir) => match dir.page(&req).await {
                    Ok(page) => client::encode_ok(id, &*page),
                    Err(e) => client::encode_err(Some(id), e.code, &e.msg),
                },
                None => client::encode_err(
                    Some(id),
                    ErrorCode::Unavailable,
                    "the room directory is not served here",
                ),
            };
            core.send_frame(session, frame);
        });
    }
}
