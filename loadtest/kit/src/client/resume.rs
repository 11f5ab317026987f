//! A client that follows one room through everything the protocol can throw at it: it
//! rejoins with `since` on `room.left`, on a seq gap or epoch change it cannot explain, and
//! after a close (1001 drain, 4000 slow consumer, a lost connection) it reconnects — to the
//! next gateway in its list — and resumes. These are the client rules of PROTOCOL.md.

use std::time::Duration;

use protocol::{ErrorCode, RoomId};
use tokio::time::Instant;

use super::{Client, ClientError, Event, connect};

/// How long a resume keeps retrying while the room's ownership moves.
pub const RESUME_BUDGET: Duration = Duration::from_secs(30);
/// Pause between reconnect attempts.
const RECONNECT_PAUSE: Duration = Duration::from_millis(100);

/// A client bound to one room that resumes by itself.
pub struct ResumingClient {
    urls: Vec<String>,
    token: String,
    next_url: usize,
    client: Client,
    room: RoomId,
    /// Resumes done (rejoin with `since`).
    pub resumes: u64,
    /// Resumes answered with `resync: true` (state replaced from the snapshot).
    pub resyncs: u64,
    /// Reconnections after a close.
    pub reconnects: u64,
}

impl ResumingClient {
    /// Connects to the first of `urls` and joins `room`.
    ///
    /// # Errors
    /// Connection or join failures.
    pub async fn connect(
        urls: Vec<String>,
        token: String,
        room: RoomId,
    ) -> Result<Self, ClientError> {
        let first = urls.first().cloned().unwrap_or_default();
        let client = connect(&first, Some(&token)).await?;
        let mut me = Self {
            urls,
            token,
            next_url: 1,
            client,
            room,
            resumes: 0,
            resyncs: 0,
            reconnects: 0,
        };
        me.rejoin().await?;
        me.resumes = 0;
        Ok(me)
    }

    /// The underlying client (to send requests).
    pub fn client(&mut self) -> &mut Client {
        &mut self.client
    }

    /// The next event of any kind, after repairing whatever needed repair.
    ///
    /// # Errors
    /// Time-outs, and failures that no resume can repair within [`RESUME_BUDGET`].
    pub async fn next_event(&mut self, wait: Duration) -> Result<Event, ClientError> {
        loop {
            match self.client.next_event(wait).await {
                Ok(e) if e.ev == "room.left" && e.d["room"] == self.room.as_str() => {
                    self.rejoin().await?;
                }
                Ok(e) if e.room.as_ref() == Some(&self.room) && e.seq.is_some() => {
                    if self
                        .client
                        .position(&self.room)
                        .is_some_and(|p| p.gap_pending)
                    {
                        // Drop the event that revealed the gap: the resume replays it in order.
                        self.rejoin().await?;
                        continue;
                    }
                    return Ok(e);
                }
                Ok(e) => return Ok(e),
                Err(ClientError::Closed(_) | ClientError::Ws(_)) => self.reconnect().await?,
                Err(e) => return Err(e),
            }
        }
    }

    async fn rejoin(&mut self) -> Result<(), ClientError> {
        let deadline = Instant::now() + RESUME_BUDGET;
        loop {
            match self.client.join(&self.room, true, None).await {
                Ok(ok) => {
                    self.resumes += 1;
                    if ok["resync"] == true {
                        self.resyncs += 1;
                    }
                    return Ok(());
                }
                Err(e) if e.code() == Some(ErrorCode::Unavailable) && Instant::now() < deadline => {
                    tokio::time::sleep(RECONNECT_PAUSE).await;
                }
                Err(e) => return Err(e),
            }
        }
    }

    async fn reconnect(&mut self) -> Result<(), ClientError> {
        let since = self.client.since(&self.room);
        let deadline = Instant::now() + RESUME_BUDGET;
        loop {
            let url = self.urls[self.next_url % self.urls.len().max(1)].clone();
            self.next_url += 1;
            match connect(&url, Some(&self.token)).await {
                Ok(c) => {
                    self.client = c;
                    break;
                }
                Err(e) if Instant::now() >= deadline => return Err(e),
                Err(_) => tokio::time::sleep(RECONNECT_PAUSE).await,
            }
        }
        self.reconnects += 1;
        if let Some(s) = since {
            self.client.set_position(&self.room, s.epoch, s.seq);
        }
        self.rejoin().await
    }
}
