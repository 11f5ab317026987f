//! Reports (`report.send`): what a member may report, how often, and what the app is told.
//! The room keeps the reports of the last [`REPORT_WINDOW_MS`] in memory (`Recent`), to drop
//! a report filed twice and to hold each reporter to [`MAX_REPORTS_PER_WINDOW`]; the report
//! itself goes to the app (the actor sends it through the event webhook), not into the room's
//! state.

use std::borrow::Cow;

use protocol::client::{MAX_REPORTS_PER_WINDOW, REPORT_WINDOW_MS, ReportSend};
use protocol::{ErrorCode, Seq, UserId};

use super::{Rejected, RoomState, SessionRef, rejected};

/// A report the room remembers within the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Remembered {
    reporter: UserId,
    user: Option<UserId>,
    seq: Option<Seq>,
    reason: String,
    /// When it was filed (unix ms).
    at: u64,
}

/// A report the room accepted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filed {
    /// The user reported (a line's sender when a line is named); `None`: the room itself.
    pub user: Option<UserId>,
    /// The chat line reported, of this epoch.
    pub seq: Option<Seq>,
    /// The reporter filed the same report within the window: it is not sent again.
    pub duplicate: bool,
}

impl RoomState {
    /// A member reports a user, a chat line of this epoch (its sender is the user reported)
    /// or the room. The same report (target, line, reason) again within the window is a
    /// duplicate, answered without being sent again.
    ///
    /// # Errors
    /// `NOT_IN_ROOM`; `BAD_REQUEST` for a bad reason or text, oneself, or a `user` who did not
    /// send the line; `NO_SUCH_MESSAGE` for a line the room does not remember;
    /// `RATE_LIMITED` past the reporter's allowance (the message says when the next may go).
    pub fn report(
        &mut self,
        reporter: &UserId,
        at: &SessionRef,
        r: &ReportSend,
        now: u64,
    ) -> Result<Filed, Rejected> {
        self.check_member(reporter, at)?;
        r.check()
            .map_err(|why| rejected(ErrorCode::BadRequest, why))?;
        let user = match r.seq {
            Some(seq) => {
                let Some(from) = self.line_sender(seq) else {
                    return Err(rejected(
                        ErrorCode::NoSuchMessage,
                        "no such chat line in this room (only the last 64 of the current epoch)",
                    ));
                };
                if r.user.as_ref().is_some_and(|u| u != from) {
                    return Err(rejected(
                        ErrorCode::BadRequest,
                        "user is not the sender of that line",
                    ));
                }
                Some(from.clone())
            }
            None => r.user.clone(),
        };
        if user.as_ref() == Some(reporter) {
            return Err(rejected(
                ErrorCode::BadRequest,
                "a member cannot report themselves",
            ));
        }
        let seen = &mut self.recent.get_or_insert_with(Box::default).reports;
        seen.retain(|m| now < m.at.saturating_add(REPORT_WINDOW_MS));
        let same = |m: &&Remembered| {
            m.reporter == *reporter && m.user == user && m.seq == r.seq && m.reason == r.reason
        };
        if seen.iter().any(|m| same(&m)) {
            return Ok(Filed {
                user,
                seq: r.seq,
                duplicate: true,
            });
        }
        let mut own = seen.iter().filter(|m| m.reporter == *reporter);
        if let Some(oldest) = own.next()
            && own.count() + 1 >= MAX_REPORTS_PER_WINDOW
        {
            return Err(Rejected {
                code: ErrorCode::RateLimited,
                msg: Cow::Owned(format!(
                    "at most {MAX_REPORTS_PER_WINDOW} reports in a room in 10 minutes; the next at {} (unix ms)",
                    oldest.at + REPORT_WINDOW_MS
                )),
            });
        }
        seen.push_back(Remembered {
            reporter: reporter.clone(),
            user: user.clone(),
            seq: r.seq,
            reason: r.reason.clone(),
            at: now,
        });
        Ok(Filed {
            user,
            seq: r.seq,
            duplicate: false,
        })
    }
}
