//! The run's history: every client operation (invoke, then ok, fail or unknown), every
//! sequenced event each client received, every fault, as one JSON object per line in
//! `history.jsonl`. The checkers read it back from the file, so a run can be checked again
//! offline (`chorus-loadtest chaos-check --out DIR`).

use std::io::{BufRead, BufWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Milliseconds since the Unix epoch: the clock node logs use too, so both line up.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// What a line records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    /// An operation was sent.
    Invoke,
    /// It succeeded.
    Ok,
    /// It definitely failed (an error reply that means "not done").
    Fail,
    /// Its outcome is unknown (time-out, connection lost, `UNAVAILABLE`/`INTERNAL` on a gift).
    Unknown,
    /// A sequenced event arrived at a client.
    Event,
    /// A client saw a gap in a room's sequence (it rejoins with `since`).
    Gap,
    /// A fault started (`op` names it) or ended (`op` = `heal:<name>`).
    Fault,
    /// A phase of the run (`op`: `start`, `faults_end`, `quiesced`, `end`).
    Phase,
}

/// One line of the history. Fields that do not apply are left out.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Record {
    /// When (ms since the Unix epoch).
    pub t: u64,
    /// What.
    pub kind: Option<Kind>,
    /// The client (user id) or the fault target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<String>,
    /// The operation (`chat.send`, `gift.send`, …), event name, or fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub op: Option<String>,
    /// The room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room: Option<String>,
    /// The gateway the client talked to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    /// The operation's id within its client (invoke and completion share it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// Epoch (events, join replies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epoch: Option<u64>,
    /// Seq (events, join and chat replies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<u64>,
    /// A join's `since` was given (a resume).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<(u64, u64)>,
    /// A join reply's `resync`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resync: Option<bool>,
    /// Chat text (unique per run), so a chat is traced from send to every delivery.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A gift's `req_id`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub req: Option<String>,
    /// A gift's order id (reply, or `gift` event).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<String>,
    /// Coins a gift costs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coins: Option<i64>,
    /// Error code or description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub err: Option<String>,
    /// Milliseconds the operation took (completions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ms: Option<u64>,
}

impl Record {
    /// A record of `kind` stamped now.
    pub fn new(kind: Kind) -> Self {
        Self {
            t: now_ms(),
            kind: Some(kind),
            ..Self::default()
        }
    }

    /// The kind (a line without one reads as a phase marker).
    pub fn kind(&self) -> Kind {
        self.kind.unwrap_or(Kind::Phase)
    }
}

/// Where records go: a buffered JSONL file shared by every task of the run.
#[derive(Clone)]
pub struct Recorder {
    out: Arc<Mutex<BufWriter<std::fs::File>>>,
    /// A record could not be written: the history has a hole.
    failed: Arc<std::sync::atomic::AtomicBool>,
}

impl Recorder {
    /// Creates (truncates) `path`.
    ///
    /// # Errors
    /// When the file cannot be created.
    pub fn create(path: &Path) -> std::io::Result<Self> {
        let f = std::fs::File::create(path)?;
        Ok(Self {
            out: Arc::new(Mutex::new(BufWriter::new(f))),
            failed: Arc::default(),
        })
    }

    /// Appends one record. A record that cannot be written is remembered: the checkers would
    /// see a hole (fewer acknowledgements to check), so [`Recorder::flush`] fails the run
    /// rather than let it pass on less.
    pub fn put(&self, r: &Record) {
        let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        let line = serde_json::to_string(r).unwrap_or_default();
        if writeln!(out, "{line}").is_err() {
            eprintln!("chaos: history write failed");
            self.failed
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Flushes what is buffered.
    ///
    /// # Errors
    /// When a record could not be written, now or before.
    pub fn flush(&self) -> std::io::Result<()> {
        let mut out = self.out.lock().unwrap_or_else(PoisonError::into_inner);
        out.flush()?;
        if self.failed.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(std::io::Error::other(
                "a history record could not be written",
            ));
        }
        Ok(())
    }
}

/// Reads a history file back.
///
/// # Errors
/// When the file cannot be read or a line is not a record.
pub fn load(path: &Path) -> anyhow::Result<Vec<Record>> {
    let f = std::fs::File::open(path)?;
    let mut out = Vec::new();
    for (i, line) in std::io::BufReader::new(f).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let r: Record = serde_json::from_str(&line)
            .map_err(|e| anyhow::anyhow!("{}:{}: {e}", path.display(), i + 1))?;
        out.push(r);
    }
    Ok(out)
}
