//! A robot room's configuration: who the robots are and what they do, validated before it is
//! stored (the admin API) and again when a room's owner reads it.

use protocol::client::gift::MAX_GIFT_COUNT;
use protocol::client::room::{DEFAULT_SEATS, MAX_SEATS, MAX_TITLE_CHARS, MIN_SEATS};
use protocol::{RoomId, UserId};
use serde::{Deserialize, Serialize};

pub use protocol::ids::ROBOT_PREFIX;
/// Most robots in one room.
pub const MAX_ROBOTS: usize = 20;
/// Longest robot display name, in characters.
pub const MAX_NAME_CHARS: usize = 40;
/// Most chat phrases in one configuration.
pub const MAX_PHRASES: usize = 100;
/// Shortest interval between one robot's actions of a kind, in seconds.
pub const MIN_EVERY_S: f64 = 0.2;
/// Longest interval, in seconds (a day).
pub const MAX_EVERY_S: f64 = 86_400.0;

/// Whether `user` is a robot (its id starts with [`ROBOT_PREFIX`], which no client token may
/// carry: a robot never passes as a human, nor a human as a robot).
pub fn is_robot(user: &UserId) -> bool {
    user.is_robot()
}

/// One robot.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RobotSpec {
    /// Its user id (`bot:…`).
    pub id: UserId,
    /// Its display name.
    #[serde(default)]
    pub name: String,
}

/// Taking and leaving seats.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeatBehaviour {
    /// Mean seconds between a robot's attempts to take a free seat.
    pub every_s: f64,
    /// Mean seconds a robot stays seated.
    pub stay_s: f64,
}

/// Chatting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChatBehaviour {
    /// Mean seconds between a robot's messages.
    pub every_s: f64,
    /// What robots say, chosen at random.
    pub phrases: Vec<String>,
}

/// Sending gifts from a robot budget.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GiftBehaviour {
    /// Mean seconds between a robot's gifts.
    pub every_s: f64,
    /// The catalog gift sent.
    pub gift: String,
    /// How many at a time.
    #[serde(default = "one")]
    pub count: u32,
    /// Most coins each robot spends in total (its wallet, funded through the admin API, must
    /// hold at least this much when the configuration is stored).
    pub budget: i64,
}

fn one() -> u32 {
    1
}

fn yes() -> bool {
    true
}

fn default_seats() -> u32 {
    DEFAULT_SEATS
}

fn default_jitter() -> f64 {
    0.3
}

/// A robot room's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RobotConfig {
    /// The room.
    pub room: RoomId,
    /// Its title, when the robots' owner creates it.
    #[serde(default)]
    pub title: String,
    /// Its seat count, when created.
    #[serde(default = "default_seats")]
    pub seats: u32,
    /// Whether the robots run.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Create the room (owned by the first robot) when it does not exist; `false` for robots
    /// that only visit a human room, which must exist.
    #[serde(default = "yes")]
    pub create: bool,
    /// Robots are present only while the room has fewer humans than this (robots in human
    /// rooms: they leave as humans arrive); always present when absent.
    #[serde(default)]
    pub fill_below: Option<u32>,
    /// The robots.
    pub robots: Vec<RobotSpec>,
    /// Seat behaviour, if any.
    #[serde(default)]
    pub seat: Option<SeatBehaviour>,
    /// Chat behaviour, if any.
    #[serde(default)]
    pub chat: Option<ChatBehaviour>,
    /// Gift behaviour, if any.
    #[serde(default)]
    pub gift: Option<GiftBehaviour>,
    /// Each interval is drawn uniformly within ±`jitter` of its mean (0..=1).
    #[serde(default = "default_jitter")]
    pub jitter: f64,
}

/// Why a configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct BadConfig(pub String);

fn bad(msg: impl Into<String>) -> BadConfig {
    BadConfig(msg.into())
}

fn check_every(what: &str, s: f64) -> Result<(), BadConfig> {
    if s.is_finite() && (MIN_EVERY_S..=MAX_EVERY_S).contains(&s) {
        Ok(())
    } else {
        Err(bad(format!(
            "{what} must be {MIN_EVERY_S}..={MAX_EVERY_S} seconds"
        )))
    }
}

impl RobotConfig {
    /// Parses and validates a configuration.
    ///
    /// # Errors
    /// [`BadConfig`] saying what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<Self, BadConfig> {
        let c: Self = serde_json::from_slice(bytes).map_err(|e| bad(format!("bad JSON: {e}")))?;
        c.validate()?;
        Ok(c)
    }

    /// Checks every field's bounds.
    ///
    /// # Errors
    /// [`BadConfig`] saying what is wrong.
    pub fn validate(&self) -> Result<(), BadConfig> {
        if !(MIN_SEATS..=MAX_SEATS).contains(&self.seats) {
            return Err(bad("seats must be 1..=20"));
        }
        if self.title.chars().count() > MAX_TITLE_CHARS
            || !protocol::text::is_clean(&self.title, false)
        {
            return Err(bad("title must be at most 100 printable characters"));
        }
        if !protocol::ids::is_valid_id(self.room.as_str()) {
            return Err(bad("room must be a valid room id"));
        }
        if self.robots.is_empty() || self.robots.len() > MAX_ROBOTS {
            return Err(bad("robots must list 1..=20 robots"));
        }
        for (i, r) in self.robots.iter().enumerate() {
            if !is_robot(&r.id)
                || r.id.as_str().len() == ROBOT_PREFIX.len()
                || !protocol::ids::is_valid_id(r.id.as_str())
            {
                return Err(bad(format!(
                    "robot id {:?} must be a valid id starting with {ROBOT_PREFIX:?}",
                    r.id.as_str()
                )));
            }
            if self.robots[..i].iter().any(|o| o.id == r.id) {
                return Err(bad(format!("robot {} is listed twice", r.id)));
            }
            if r.name.chars().count() > MAX_NAME_CHARS || !protocol::text::is_clean(&r.name, false)
            {
                return Err(bad("robot names must be at most 40 printable characters"));
            }
        }
        if self.fill_below == Some(0) {
            return Err(bad("fill_below must be at least 1"));
        }
        if !(self.jitter.is_finite() && (0.0..=1.0).contains(&self.jitter)) {
            return Err(bad("jitter must be 0..=1"));
        }
        if let Some(s) = &self.seat {
            check_every("seat.every_s", s.every_s)?;
            check_every("seat.stay_s", s.stay_s)?;
        }
        if let Some(c) = &self.chat {
            check_every("chat.every_s", c.every_s)?;
            if c.phrases.is_empty() || c.phrases.len() > MAX_PHRASES {
                return Err(bad("chat.phrases must hold 1..=100 phrases"));
            }
            for p in &c.phrases {
                let n = p.chars().count();
                if n == 0
                    || n > protocol::client::MAX_CHAT_TEXT_CHARS
                    || !protocol::text::is_clean(p, true)
                {
                    return Err(bad("each phrase must be 1..=500 printable characters"));
                }
            }
        }
        if let Some(g) = &self.gift {
            check_every("gift.every_s", g.every_s)?;
            if g.count == 0 || g.count > MAX_GIFT_COUNT {
                return Err(bad("gift.count must be 1..=9999"));
            }
            if g.budget < 0 {
                return Err(bad("gift.budget must not be negative"));
            }
            if g.gift.is_empty() {
                return Err(bad("gift.gift must name a catalog gift"));
            }
        }
        Ok(())
    }

    /// Whether `user` is one of this configuration's robots.
    pub fn has(&self, user: &UserId) -> bool {
        self.robots.iter().any(|r| r.id == *user)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]
    use super::*;

    fn good() -> serde_json::Value {
        serde_json::json!({
            "room": "party",
            "robots": [{"id": "bot:amy", "name": "Amy"}, {"id": "bot:bo"}],
            "seat": {"every_s": 5, "stay_s": 30},
            "chat": {"every_s": 10, "phrases": ["hi", "🎤 sing!"]},
            "gift": {"every_s": 60, "gift": "rose", "budget": 100},
        })
    }

    fn with(patch: impl FnOnce(&mut serde_json::Value)) -> Result<RobotConfig, BadConfig> {
        let mut v = good();
        patch(&mut v);
        RobotConfig::parse(v.to_string().as_bytes())
    }

    #[test]
    fn a_good_config_parses_with_its_defaults() {
        let c = with(|_| {}).unwrap();
        assert!(c.enabled && c.create);
        assert_eq!((c.seats, c.jitter, c.fill_below), (8, 0.3, None));
        assert_eq!(c.gift.unwrap().count, 1);
        assert!(is_robot(&UserId::from("bot:amy")) && !is_robot(&UserId::from("amy")));
    }

    #[test]
    fn bad_configs_are_refused_with_what_is_wrong() {
        type Patch = Box<dyn FnOnce(&mut serde_json::Value)>;
        let cases: Vec<(&str, Patch)> = vec![
            (
                "robots must list",
                Box::new(|v| v["robots"] = serde_json::json!([])),
            ),
            (
                "starting with",
                Box::new(|v| v["robots"][0]["id"] = "amy".into()),
            ),
            (
                "twice",
                Box::new(|v| v["robots"][1]["id"] = "bot:amy".into()),
            ),
            (
                "starting with",
                Box::new(|v| v["robots"][1]["id"] = "bot:".into()),
            ),
            ("room must", Box::new(|v| v["room"] = "bad room".into())),
            (
                "seat.every_s",
                Box::new(|v| v["seat"]["every_s"] = (-1).into()),
            ),
            (
                "chat.every_s",
                Box::new(|v| v["chat"]["every_s"] = 0.into()),
            ),
            (
                "chat.phrases",
                Box::new(|v| v["chat"]["phrases"] = serde_json::json!([])),
            ),
            (
                "each phrase",
                Box::new(|v| v["chat"]["phrases"] = serde_json::json!(["x\u{202e}"])),
            ),
            (
                "gift.budget",
                Box::new(|v| v["gift"]["budget"] = (-5).into()),
            ),
            ("gift.count", Box::new(|v| v["gift"]["count"] = 0.into())),
            ("seats", Box::new(|v| v["seats"] = 21.into())),
            ("jitter", Box::new(|v| v["jitter"] = 2.into())),
            ("fill_below", Box::new(|v| v["fill_below"] = 0.into())),
            ("bad JSON", Box::new(|v| v["robots"] = "none".into())),
        ];
        for (want, patch) in cases {
            let e = with(patch).unwrap_err();
            assert!(e.0.contains(want), "{want}: {e}");
        }
    }
}
