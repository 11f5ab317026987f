//! The gateway bus on Redis pub/sub: each gateway listens on its own channel. Pub/sub is
//! fire-and-forget: what is published while a gateway is disconnected is lost, so every
//! notice carried here is either recoverable (a direct message stays stored until delivered)
//! or harmless to miss (a later join or profile change supersedes it).

use std::pin::Pin;

use ::redis::Msg;
use futures_util::{Stream, StreamExt};
use protocol::NodeId;

use crate::error::{Result, StorageError};
use crate::redis::{CONNECT_TIMEOUT, Redis, map_err};

/// The bus channel of `gateway`.
pub fn bus_channel(gateway: &NodeId) -> String {
    format!("chorus:bus:{gateway}")
}

/// A subscription to one gateway's bus channel.
pub struct BusFeed {
    messages: Pin<Box<dyn Stream<Item = Msg> + Send>>,
}

impl std::fmt::Debug for BusFeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BusFeed").finish_non_exhaustive()
    }
}

impl BusFeed {
    /// Subscribes to `gateway`'s channel on a dedicated pub/sub connection.
    ///
    /// # Errors
    /// `Unavailable` when Redis cannot be reached within [`CONNECT_TIMEOUT`].
    pub async fn open(redis: &Redis, gateway: &NodeId) -> Result<Self> {
        let channel = bus_channel(gateway);
        let subscribe = async {
            let mut pubsub = redis.client().get_async_pubsub().await?;
            pubsub.subscribe(&channel).await?;
            Ok::<_, ::redis::RedisError>(pubsub)
        };
        let pubsub = tokio::time::timeout(CONNECT_TIMEOUT, subscribe)
            .await
            .map_err(|_| StorageError::unavailable_msg("subscribing to the gateway bus"))?
            .map_err(map_err)?;
        Ok(Self {
            messages: Box::pin(pubsub.into_on_message()),
        })
    }

    /// The next notice's bytes, or `None` when the connection is gone (open a new feed).
    pub async fn next(&mut self) -> Option<Vec<u8>> {
        let msg = self.messages.next().await?;
        Some(msg.get_payload_bytes().to_vec())
    }
}

/// Publishes `payload` on `gateway`'s channel; how many subscribers got it (0: the gateway is
/// not listening now).
///
/// # Errors
/// `Unavailable` when Redis cannot be reached.
pub(super) async fn publish(
    conn: &mut ::redis::aio::ConnectionManager,
    gateway: &NodeId,
    payload: &[u8],
) -> Result<u64> {
    ::redis::cmd("PUBLISH")
        .arg(bus_channel(gateway))
        .arg(payload)
        .query_async(conn)
        .await
        .map_err(map_err)
}
