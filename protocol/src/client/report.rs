//! `report.send`: a member reports a user, one of the room's chat lines, or the room itself to
//! the app's moderators. Reports are private: no room event; the app gets them through the
//! event webhook (`report.filed`), with the reported line as the room sent it.

use std::ops::Not;

use serde::{Deserialize, Serialize};

use crate::client::custom::is_app_name;
use crate::ids::{RoomId, Seq, UserId};

/// Longest report text, in characters.
pub const MAX_REPORT_TEXT_CHARS: usize = 500;
/// How long a report is remembered: the same report again within it is a duplicate, and it
/// counts against its reporter's allowance.
pub const REPORT_WINDOW_MS: u64 = 10 * 60 * 1000;
/// Most reports one member files in one room within [`REPORT_WINDOW_MS`].
pub const MAX_REPORTS_PER_WINDOW: usize = 5;

/// `report.send` arguments.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportSend {
    /// The room.
    pub room: RoomId,
    /// The user reported; absent: the sender of `seq`, or (without `seq`) the room itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<UserId>,
    /// A chat line of the room (its seq, of the current epoch) as the evidence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seq: Option<Seq>,
    /// The app's reason code (e.g. `spam`, `harassment`): 1..=32 of A-Z a-z 0-9 `_ . : -`.
    pub reason: String,
    /// The reporter's words, up to 500 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl ReportSend {
    /// Checks what can be checked without the room: the reason code and the text.
    ///
    /// # Errors
    /// The rule broken, as a message for `BAD_REQUEST`.
    pub fn check(&self) -> Result<(), &'static str> {
        if !is_app_name(&self.reason) {
            return Err("reason must be 1..=32 characters of A-Z a-z 0-9 _ . : -");
        }
        if let Some(t) = &self.text {
            check_words(t).map_err(|w| match w {
                Words::TooLong => "text must be at most 500 characters",
                Words::Unclean => {
                    "text may not hold control or bidi characters (newline and tab are fine)"
                }
            })?;
        }
        Ok(())
    }
}

/// What is wrong with a person's words ([`check_words`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Words {
    /// Past [`MAX_REPORT_TEXT_CHARS`].
    TooLong,
    /// A control or bidi character (newline and tab are fine).
    Unclean,
}

/// The rule for a reporter's words, and for a moderator's note on a report: at most
/// [`MAX_REPORT_TEXT_CHARS`] characters, several lines, no control or bidi characters.
///
/// # Errors
/// The rule broken.
pub fn check_words(t: &str) -> Result<(), Words> {
    if t.chars().count() > MAX_REPORT_TEXT_CHARS {
        return Err(Words::TooLong);
    }
    if !crate::text::is_clean(t, true) {
        return Err(Words::Unclean);
    }
    Ok(())
}

/// The `ok` of `report.send`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportFiled {
    /// The reporter filed this same report (target, line and reason) within the last ten
    /// minutes: it is not sent again.
    #[serde(default, skip_serializing_if = "Not::not")]
    pub duplicate: bool,
    /// The report's id in the app's moderation queue, once stored there (absent for a
    /// duplicate, and when the queue could not be written).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(reason: &str, text: Option<&str>) -> ReportSend {
        ReportSend {
            room: RoomId::from("r1"),
            user: None,
            seq: None,
            reason: reason.into(),
            text: text.map(str::to_owned),
        }
    }

    #[test]
    fn the_reason_and_text_are_checked() {
        assert!(report("spam", None).check().is_ok());
        assert!(
            report("abuse.voice", Some("line one\nline two"))
                .check()
                .is_ok()
        );
        assert!(report("", None).check().is_err());
        assert!(report("no spaces", None).check().is_err());
        assert!(report(&"x".repeat(33), None).check().is_err());
        assert!(report("spam", Some(&"é".repeat(500))).check().is_ok());
        assert!(report("spam", Some(&"é".repeat(501))).check().is_err());
        assert!(report("spam", Some("bell\u{7}")).check().is_err());
        assert!(report("spam", Some("rtl\u{202e}")).check().is_err());
    }

    #[test]
    fn a_fresh_reports_ok_is_empty() {
        assert_eq!(
            serde_json::to_string(&ReportFiled::default()).unwrap(),
            "{}"
        );
        let dup = ReportFiled {
            duplicate: true,
            id: None,
        };
        assert_eq!(
            serde_json::to_string(&dup).unwrap(),
            r#"{"duplicate":true}"#
        );
        let stored = ReportFiled {
            duplicate: false,
            id: Some(12),
        };
        assert_eq!(serde_json::to_string(&stored).unwrap(), r#"{"id":12}"#);
    }
}
