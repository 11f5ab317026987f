//! The nodes' audit lines (target `chorus::audit`, written by the shards): when each room's
//! runtime started serving with which fence, when it stopped and why, and every saga a
//! recovery moved. Read from the node logs kept in the run's directory.

use std::path::Path;

/// One audit line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditLine {
    /// When (ms since the Unix epoch, the node's clock).
    pub t: u64,
    /// The log file (node) it came from.
    pub node: String,
    /// `serve`, `stop` or `recover`.
    pub what: String,
    /// The room.
    pub room: String,
    /// The fence.
    pub fence: u64,
    /// The lease owner (`<node id>/<boot id>`).
    pub owner: String,
    /// `why` of a stop, `outcome` of a recovery.
    pub detail: String,
    /// The gift of a recovery.
    pub gift: String,
}

/// Removes ANSI colour sequences (`ESC [ … m`) that the node's log formatter may write.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // Skip up to and including the final letter of the sequence.
            for n in chars.by_ref() {
                if n.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// Days from 1970-01-01 to the civil date (Howard Hinnant's `days_from_civil`).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = if y >= 0 { y } else { y - 399 } / 400;
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Parses `2026-12-05T10:05:00.453280Z` into ms since the Unix epoch.
pub fn parse_rfc3339_ms(s: &str) -> Option<u64> {
    let s = s.strip_suffix('Z')?;
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|p| p.parse::<i64>().ok());
    let (y, mo, da) = (d.next()??, d.next()??, d.next()??);
    let (hms, frac) = time.split_once('.').unwrap_or((time, "0"));
    let mut t = hms.split(':').map(|p| p.parse::<i64>().ok());
    let (h, mi, se) = (t.next()??, t.next()??, t.next()??);
    let frac3: String = frac.chars().chain("000".chars()).take(3).collect();
    let ms = frac3.parse::<i64>().ok()?;
    let secs = days_from_civil(y, mo, da) * 86_400 + h * 3600 + mi * 60 + se;
    u64::try_from(secs * 1000 + ms).ok()
}

/// Parses one log line; `None` unless it is an audit line.
pub fn parse_line(node: &str, raw: &str) -> Option<AuditLine> {
    if !raw.contains("chorus::audit") {
        return None;
    }
    let line = strip_ansi(raw);
    let mut tokens = line.split_whitespace();
    let t = parse_rfc3339_ms(tokens.next()?)?;
    let _level = tokens.next()?;
    if tokens.next()? != "chorus::audit:" {
        return None;
    }
    let what = tokens.next()?.to_owned();
    let mut a = AuditLine {
        t,
        node: node.to_owned(),
        what,
        room: String::new(),
        fence: 0,
        owner: String::new(),
        detail: String::new(),
        gift: String::new(),
    };
    for kv in tokens {
        let Some((k, v)) = kv.split_once('=') else {
            continue;
        };
        // String fields are written quoted.
        let v = v.trim_matches('"');
        match k {
            "room" => a.room = v.to_owned(),
            "fence" => a.fence = v.parse().unwrap_or(0),
            "owner" => a.owner = v.to_owned(),
            "why" | "outcome" => a.detail = v.to_owned(),
            "gift" => a.gift = v.to_owned(),
            _ => {}
        }
    }
    Some(a)
}

/// Every audit line of every `*.log` file in `dir`, oldest first.
///
/// # Errors
/// When the directory cannot be read.
pub fn load(dir: &Path) -> anyhow::Result<Vec<AuditLine>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("log") {
            continue;
        }
        let node = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&std::fs::read(&path)?).into_owned();
        out.extend(text.lines().filter_map(|l| parse_line(&node, l)));
    }
    out.sort_by_key(|a| a.t);
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "test code")]
    use super::*;

    #[test]
    fn parses_timestamps() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01.5Z"), Some(1500));
        assert_eq!(
            parse_rfc3339_ms("2026-12-05T10:05:00.453280Z"),
            Some(1_796_465_100_453)
        );
    }

    #[test]
    fn parses_coloured_and_plain_audit_lines() {
        let coloured = "\u{1b}[2m2026-12-05T10:05:00.453280Z\u{1b}[0m \u{1b}[32m INFO\u{1b}[0m \u{1b}[2mchorus::audit\u{1b}[0m\u{1b}[2m:\u{1b}[0m serve \u{1b}[3mroom\u{1b}[0m\u{1b}[2m=\u{1b}[0mr1 \u{1b}[3mfence\u{1b}[0m\u{1b}[2m=\u{1b}[0m7 \u{1b}[3mowner\u{1b}[0m\u{1b}[2m=\u{1b}[0ms1/abc";
        let a = parse_line("s1-0", coloured).unwrap();
        assert_eq!(
            (a.what.as_str(), a.room.as_str(), a.fence),
            ("serve", "r1", 7)
        );
        assert_eq!(a.owner, "s1/abc");
        let plain = "2026-12-05T10:05:00.5Z  INFO chorus::audit: stop room=r1 fence=7 owner=s1/abc why=lease_lost";
        let a = parse_line("s1-0", plain).unwrap();
        assert_eq!((a.what.as_str(), a.detail.as_str()), ("stop", "lease_lost"));
        assert!(parse_line("s1", "2026-12-05T10:05:00.5Z  INFO shard::node: up").is_none());
    }
}
