//! `chorus admin rooms …`: the room directory (`GET /admin/rooms`), its directory pins, and
//! the app backend's messages, attributes and moderation in a room, and its closing,
//! reopening and changing of a room.

use clap::Subcommand;
use serde_json::json;

/// The room directory calls of `chorus admin rooms`.
#[derive(Debug, Clone, Subcommand)]
pub enum RoomsVerb {
    /// `GET /admin/rooms`: one page of the directory, pinned rooms first.
    List {
        /// The previous page's `cursor`.
        #[arg(long)]
        cursor: Option<String>,
        /// Rooms per page (1..=100).
        #[arg(long)]
        limit: Option<u32>,
        /// Only rooms whose owner is in this region.
        #[arg(long)]
        region: Option<String>,
        /// Search: a prefix of the room id, the title or a title word.
        #[arg(long)]
        query: Option<String>,
    },
    /// `POST /admin/rooms/{room}/pin`: list the room first (a directory pin).
    Pin {
        /// Room id.
        room: String,
        /// Pin it in one region's listings only.
        #[arg(long)]
        region: Option<String>,
        /// Unpin it by itself after this long (e.g. `2h`).
        #[arg(long = "for", value_parser = humantime::parse_duration)]
        ttl: Option<std::time::Duration>,
    },
    /// `DELETE /admin/rooms/{room}/pin`.
    Unpin {
        /// Room id.
        room: String,
    },
    /// `GET /admin/directory/pins`: every directory pin.
    Pins,
    /// `POST /admin/rooms/{room}/messages`: a `custom` event from the app's backend.
    Message {
        /// Room id.
        room: String,
        /// The message's `type` (e.g. `notice`).
        #[arg(name = "type")]
        kind: String,
        /// Its `data`, as JSON (e.g. `'{"text":"Welcome"}'`).
        #[arg(long, value_parser = parse_json)]
        data: Option<serde_json::Value>,
        /// Send it only to the members in the room now, unsequenced and not kept.
        #[arg(long)]
        volatile: bool,
    },
    /// `POST /admin/rooms/{room}/moderation`: kick, ban or mute a user, or lift a ban or mute.
    Moderate {
        /// Room id.
        room: String,
        /// `kick`, `ban`, `unban`, `mute` or `unmute`.
        #[arg(value_parser = ["kick", "ban", "unban", "mute", "unmute"])]
        action: String,
        /// The user.
        user: String,
        /// How long a ban or mute holds (a kick: bans for that long too); none: until lifted.
        #[arg(long)]
        seconds: Option<u64>,
    },
    /// `POST /admin/rooms/{room}/close`: close the room; its owner cannot reopen it.
    Close {
        /// Room id.
        room: String,
        /// Why, as joiners are told.
        #[arg(long)]
        reason: Option<String>,
    },
    /// `POST /admin/rooms/{room}/open`: reopen the room, whoever closed it.
    Open {
        /// Room id.
        room: String,
    },
    /// `POST /admin/rooms/{room}/pk`: start a PK, a gift battle between two teams of seats.
    PkStart {
        /// Room id.
        room: String,
        /// Its length, 30..=3600 s (300 when not given).
        #[arg(long)]
        seconds: Option<u32>,
        /// The red team's seats, comma-separated (with --blue; neither: the halves).
        #[arg(long, value_delimiter = ',')]
        red: Option<Vec<u32>>,
        /// The blue team's seats, comma-separated.
        #[arg(long, value_delimiter = ',')]
        blue: Option<Vec<u32>>,
    },
    /// `POST /admin/pk`: match two rooms for a PK between them (each room is one side).
    PkMatch {
        /// The first room.
        room: String,
        /// The other room.
        vs: String,
        /// Its length, 30..=3600 s (300 when not given).
        #[arg(long)]
        seconds: Option<u32>,
        /// The app's own id for the match (made up when not given).
        #[arg(long)]
        link: Option<String>,
    },
    /// `DELETE /admin/rooms/{room}/pk`: end the PK that is on.
    PkStop {
        /// Room id.
        room: String,
    },
    /// `PATCH /admin/rooms/{room}`: change the room's info, as `room.update` does.
    Update {
        /// Room id.
        room: String,
        /// New title.
        #[arg(long)]
        title: Option<String>,
        /// New notice (announcement).
        #[arg(long)]
        notice: Option<String>,
        /// New cover URL (empty to clear).
        #[arg(long)]
        cover: Option<String>,
        /// `free` or `apply`.
        #[arg(long, value_parser = ["free", "apply"])]
        seat_mode: Option<String>,
        /// Reserve seat 0 for the owner (`true`) or stop reserving it.
        #[arg(long)]
        host_seat: Option<bool>,
        /// Mute the chat for everyone but the owner and the admins, or lift that.
        #[arg(long)]
        chat_muted: Option<bool>,
        /// Slow mode's interval in seconds (0..=300; 0: off).
        #[arg(long)]
        slow_mode: Option<u32>,
    },
    /// `PUT /admin/rooms/{room}/attrs`: set or remove room attributes.
    Attrs {
        /// Room id.
        room: String,
        /// `KEY=JSON` to set (repeatable), e.g. `--set 'theme="night"'`.
        #[arg(long = "set", value_parser = parse_attr)]
        set: Vec<(String, serde_json::Value)>,
        /// A key to remove (repeatable).
        #[arg(long = "remove")]
        remove: Vec<String>,
    },
}

fn parse_attr(s: &str) -> Result<(String, serde_json::Value), String> {
    let (k, v) = s.split_once('=').ok_or("expected KEY=JSON")?;
    Ok((k.to_owned(), parse_json(v)?))
}

pub(super) fn parse_json(s: &str) -> Result<serde_json::Value, String> {
    serde_json::from_str(s).map_err(|e| format!("not JSON: {e}"))
}

/// `%`-encodes a query value or a path segment (a user id may hold `|`, `+` or `@`).
pub(super) fn encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl RoomsVerb {
    /// The HTTP method, path and body of the call.
    pub fn request(&self) -> (&'static str, String, Option<serde_json::Value>) {
        match self {
            Self::List {
                cursor,
                limit,
                region,
                query,
            } => {
                let mut q: Vec<String> = Vec::new();
                if let Some(c) = cursor {
                    q.push(format!("cursor={}", encode(c)));
                }
                if let Some(l) = limit {
                    q.push(format!("limit={l}"));
                }
                if let Some(r) = region {
                    q.push(format!("region={}", encode(r)));
                }
                if let Some(s) = query {
                    q.push(format!("query={}", encode(s)));
                }
                let path = if q.is_empty() {
                    "/admin/rooms".to_owned()
                } else {
                    format!("/admin/rooms?{}", q.join("&"))
                };
                ("GET", path, None)
            }
            Self::Pin { room, region, ttl } => {
                let mut body = match region {
                    Some(r) => json!({"scope": "region", "region": r}),
                    None => json!({"scope": "global"}),
                };
                if let Some(d) = ttl {
                    let now = std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .unwrap_or_default();
                    body["until"] = json!((now + *d).as_millis() as u64);
                }
                ("POST", format!("/admin/rooms/{room}/pin"), Some(body))
            }
            Self::Unpin { room } => ("DELETE", format!("/admin/rooms/{room}/pin"), None),
            Self::Pins => ("GET", "/admin/directory/pins".into(), None),
            Self::Message {
                room,
                kind,
                data,
                volatile,
            } => {
                let mut body = json!({"type": kind});
                if let Some(d) = data {
                    body["data"] = d.clone();
                }
                if *volatile {
                    body["volatile"] = true.into();
                }
                (
                    "POST",
                    format!("/admin/rooms/{}/messages", encode(room)),
                    Some(body),
                )
            }
            Self::Moderate {
                room,
                action,
                user,
                seconds,
            } => {
                let mut body = json!({"action": action, "user": user});
                if let Some(s) = seconds {
                    body["seconds"] = (*s).into();
                }
                (
                    "POST",
                    format!("/admin/rooms/{}/moderation", encode(room)),
                    Some(body),
                )
            }
            Self::Close { room, reason } => {
                let body = reason.as_ref().map(|r| json!({ "reason": r }));
                ("POST", format!("/admin/rooms/{}/close", encode(room)), body)
            }
            Self::Open { room } => ("POST", format!("/admin/rooms/{}/open", encode(room)), None),
            Self::PkStart {
                room,
                seconds,
                red,
                blue,
            } => {
                let mut body = serde_json::Map::new();
                if let Some(s) = seconds {
                    body.insert("seconds".into(), json!(s));
                }
                if let Some(r) = red {
                    body.insert("red".into(), json!(r));
                }
                if let Some(b) = blue {
                    body.insert("blue".into(), json!(b));
                }
                let path = format!("/admin/rooms/{}/pk", encode(room));
                ("POST", path, Some(body.into()))
            }
            Self::PkMatch {
                room,
                vs,
                seconds,
                link,
            } => {
                let mut body = serde_json::Map::new();
                body.insert("rooms".into(), json!([room, vs]));
                if let Some(s) = seconds {
                    body.insert("seconds".into(), json!(s));
                }
                if let Some(l) = link {
                    body.insert("link".into(), json!(l));
                }
                ("POST", "/admin/pk".into(), Some(body.into()))
            }
            Self::PkStop { room } => ("DELETE", format!("/admin/rooms/{}/pk", encode(room)), None),
            Self::Update {
                room,
                title,
                notice,
                cover,
                seat_mode,
                host_seat,
                chat_muted,
                slow_mode,
            } => {
                let fields = [
                    ("title", title.as_ref().map(|v| json!(v))),
                    ("notice", notice.as_ref().map(|v| json!(v))),
                    ("cover", cover.as_ref().map(|v| json!(v))),
                    ("seat_mode", seat_mode.as_ref().map(|v| json!(v))),
                    ("host_seat", host_seat.map(|v| json!(v))),
                    ("chat_muted", chat_muted.map(|v| json!(v))),
                    ("slow_mode", slow_mode.map(|v| json!(v))),
                ];
                let body: serde_json::Map<String, serde_json::Value> = fields
                    .into_iter()
                    .filter_map(|(k, v)| Some((k.to_owned(), v?)))
                    .collect();
                (
                    "PATCH",
                    format!("/admin/rooms/{}", encode(room)),
                    Some(body.into()),
                )
            }
            Self::Attrs { room, set, remove } => {
                let set: serde_json::Map<String, serde_json::Value> = set.iter().cloned().collect();
                let body = json!({"set": set, "remove": remove});
                (
                    "PUT",
                    format!("/admin/rooms/{}/attrs", encode(room)),
                    Some(body),
                )
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_encodes_its_filters() {
        let v = RoomsVerb::List {
            cursor: Some("r40".into()),
            limit: Some(5),
            region: None,
            query: Some("late night".into()),
        };
        assert_eq!(
            v.request().1,
            "/admin/rooms?cursor=r40&limit=5&query=late%20night"
        );
        let pin = RoomsVerb::Pin {
            room: "r1".into(),
            region: Some("eu".into()),
            ttl: None,
        };
        let msg = RoomsVerb::Message {
            room: "r1".into(),
            kind: "notice".into(),
            data: Some(json!({"text": "hi"})),
            volatile: true,
        };
        let attrs = RoomsVerb::Attrs {
            room: "r1".into(),
            set: vec![("theme".into(), json!("night"))],
            remove: vec!["song".into()],
        };
        assert_eq!(
            attrs.request(),
            (
                "PUT",
                "/admin/rooms/r1/attrs".into(),
                Some(json!({"set": {"theme": "night"}, "remove": ["song"]}))
            )
        );
        assert_eq!(
            msg.request(),
            (
                "POST",
                "/admin/rooms/r1/messages".into(),
                Some(json!({"type": "notice", "data": {"text": "hi"}, "volatile": true}))
            )
        );
        assert_eq!(
            pin.request(),
            (
                "POST",
                "/admin/rooms/r1/pin".into(),
                Some(json!({"scope": "region", "region": "eu"}))
            )
        );
        let ban = RoomsVerb::Moderate {
            room: "r1".into(),
            action: "ban".into(),
            user: "auth0|x".into(),
            seconds: Some(60),
        };
        assert_eq!(
            ban.request(),
            (
                "POST",
                "/admin/rooms/r1/moderation".into(),
                Some(json!({"action": "ban", "user": "auth0|x", "seconds": 60}))
            )
        );
    }

    #[test]
    fn close_open_and_update_send_only_what_is_given() {
        let close = RoomsVerb::Close {
            room: "r 1".into(),
            reason: Some("spam".into()),
        };
        assert_eq!(
            close.request(),
            (
                "POST",
                "/admin/rooms/r%201/close".into(),
                Some(json!({"reason": "spam"}))
            )
        );
        let pk = RoomsVerb::PkStart {
            room: "r1".into(),
            seconds: Some(120),
            red: Some(vec![1, 2]),
            blue: Some(vec![5, 6]),
        };
        assert_eq!(
            pk.request(),
            (
                "POST",
                "/admin/rooms/r1/pk".into(),
                Some(json!({"seconds": 120, "red": [1, 2], "blue": [5, 6]}))
            )
        );
        let matched = RoomsVerb::PkMatch {
            room: "r1".into(),
            vs: "r2".into(),
            seconds: None,
            link: Some("m-7".into()),
        };
        assert_eq!(
            matched.request(),
            (
                "POST",
                "/admin/pk".into(),
                Some(json!({"rooms": ["r1", "r2"], "link": "m-7"}))
            )
        );
        let stop = RoomsVerb::PkStop { room: "r1".into() };
        assert_eq!(
            stop.request(),
            ("DELETE", "/admin/rooms/r1/pk".into(), None)
        );
        let open = RoomsVerb::Open { room: "r1".into() };
        assert_eq!(
            open.request(),
            ("POST", "/admin/rooms/r1/open".into(), None)
        );
        let update = RoomsVerb::Update {
            room: "r1".into(),
            title: Some("Late".into()),
            notice: None,
            cover: None,
            seat_mode: Some("apply".into()),
            host_seat: None,
            chat_muted: Some(false),
            slow_mode: Some(0),
        };
        assert_eq!(
            update.request(),
            (
                "PATCH",
                "/admin/rooms/r1".into(),
                Some(
                    json!({"title": "Late", "seat_mode": "apply", "chat_muted": false, "slow_mode": 0})
                )
            )
        );
    }
}
