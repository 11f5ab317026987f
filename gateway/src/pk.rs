//! PKs between two rooms, as the gateway runs them: starting a match in both rooms (the app's
//! backend's `POST /admin/pk`, and an accepted invitation), and the steps of an invitation
//! (`pk.invite`, `pk.accept`, `pk.decline`). The two rooms may be owned by different shards,
//! which have no channel to each other, so the gateway that took the call carries each step to
//! the room it concerns and waits for its answer; the rooms only check and keep (the shard's
//! `state/pk_invite.rs` and `state/pk_link.rs`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use protocol::client::{
    self, BackendManage, PK_INVITE_TTL_MS, PkCmd, PkDeclined, PkInviteSent, PkInvited, PkLink,
    PkReply, PkStarted, RoomOp,
};
use protocol::link::{ReplyError, RoomCmd};
use protocol::{ErrorCode, RoomId, SessionId, UserId};

use crate::hub::text;
use crate::outbox::unix_ms;
use crate::shared::Core;

/// The user the app backend's commands carry (rooms do not read it: the link is trusted).
pub(crate) const SYSTEM_USER: &str = "@admin";
/// How much longer than the routing retry budget a step waits for its room.
const ANSWER_SLACK: Duration = Duration::from_secs(1);

/// A match started in both rooms: when it ends, and each room's answer (`pk`, `seq`).
#[derive(Debug)]
pub(crate) struct Matched {
    pub(crate) ends_at: u64,
    pub(crate) a: Bytes,
    pub(crate) z: Bytes,
}

/// A made-up match id, when the app gives none.
pub(crate) fn new_link() -> String {
    format!("pk-{:x}-{:08x}", unix_ms(), rand::random::<u32>())
}

/// How long a step waits for its room.
fn wait(core: &Core) -> Duration {
    core.config.route_retry_budget + ANSWER_SLACK
}

/// Starts match `link` of `seconds` between rooms `a` and `z`, both at once. When one room
/// refuses, the other's side, if it started, is stopped again (it ends as stopped once its
/// grace passes, the other side never having written) and the refusal is the answer, with the
/// room that refused (the first room's when both refused).
pub(crate) async fn start_match(
    core: &Core,
    a: &RoomId,
    z: &RoomId,
    seconds: u32,
    link: &str,
) -> Result<Matched, (RoomId, ReplyError)> {
    let ends_at = unix_ms() + u64::from(seconds) * 1000;
    let system = UserId::from(SYSTEM_USER);
    let start = |room: &RoomId, vs: &RoomId| {
        let side = PkLink {
            link: link.to_owned(),
            vs: vs.clone(),
            ends_at,
        };
        let cmd = RoomCmd::Manage(BackendManage::PkLink(side));
        core.command_reply(&system, room.clone(), cmd, wait(core))
    };
    let (ok_a, ok_z) = tokio::join!(start(a, z), start(z, a));
    let (refused, why, started) = match (ok_a, ok_z) {
        (Ok(a), Ok(z)) => return Ok(Matched { ends_at, a, z }),
        (Err(e), Err(_)) => return Err((a.clone(), e)),
        (Err(e), Ok(_)) => (a, e, z),
        (Ok(_), Err(e)) => (z, e, a),
    };
    let stop = RoomCmd::Manage(BackendManage::PkStop);
    let _ = core
        .command_reply(&system, started.clone(), stop, wait(core))
        .await;
    Err((refused.clone(), why))
}

impl Core {
    /// Runs a client's `pk.invite`, `pk.accept` or `pk.decline` (any other op is not one) and
    /// answers it on `session`.
    pub(crate) fn pk_request(
        self: &Arc<Self>,
        session: SessionId,
        user: &UserId,
        id: u64,
        op: RoomOp,
    ) {
        let core = self.clone();
        let user = user.clone();
        self.tracker.spawn(async move {
            let answer = match op {
                RoomOp::PkInvite(args) => invite(&core, &user, args).await,
                RoomOp::PkAccept(reply) => accept(&core, &user, reply).await,
                RoomOp::PkDecline(reply) => decline(&core, &user, reply).await,
                _ => Err(ReplyError::new(
                    ErrorCode::Internal,
                    "not a PK invitation step",
                )),
            };
            let frame = match answer {
                Ok(ok) => client::encode_ok_raw(id, &ok),
                Err(e) => {
                    ::metrics::counter!(crate::metrics::ERRORS, "code" => e.code.as_str())
                        .increment(1);
                    client::encode_err(Some(id), e.code, &e.msg)
                }
            };
            if let Some(t) = text(frame) {
                core.hub.send_to(session, t);
            }
        });
    }
}

/// `pk.invite`: the inviting room checks the caller, then the invited room keeps the
/// invitation and tells its staff. Answers `{link, expires_at}`.
async fn invite(core: &Core, user: &UserId, args: client::PkInvite) -> Result<Bytes, ReplyError> {
    let seconds = args
        .checked_seconds()
        .map_err(|m| ReplyError::new(ErrorCode::BadRequest, m))?;
    let (from, vs) = (args.room.clone(), args.vs.clone());
    if !protocol::ids::is_valid_id(vs.as_str()) {
        return Err(ReplyError::new(ErrorCode::BadRequest, "vs: not a room id"));
    }
    let check = RoomCmd::Pk(PkCmd::Invite(args));
    core.command_reply(user, from.clone(), check, wait(core))
        .await?;
    let invited = PkInvited {
        link: new_link(),
        from,
        by: user.clone(),
        seconds,
        expires_at: unix_ms() + PK_INVITE_TTL_MS,
    };
    let sent = PkInviteSent {
        link: invited.link.clone(),
        expires_at: invited.expires_at,
    };
    let keep = RoomCmd::Pk(PkCmd::Invited(invited));
    core.command_reply(user, vs, keep, wait(core)).await?;
    Ok(client::to_json(&sent).into())
}

/// The invited room checks the caller and gives up the invitation `reply` answers (`accept`:
/// accepting it, else declining): the room and the invitation.
async fn answer(
    core: &Core,
    user: &UserId,
    reply: PkReply,
    accept: bool,
) -> Result<(RoomId, PkInvited), ReplyError> {
    let room = reply.room.clone();
    let step = RoomCmd::Pk(if accept {
        PkCmd::Accept(reply)
    } else {
        PkCmd::Decline(reply)
    });
    let ok = core
        .command_reply(user, room.clone(), step, wait(core))
        .await?;
    let inv = serde_json::from_slice(&ok).map_err(|_| {
        ReplyError::new(
            ErrorCode::Internal,
            "the room's answer was not an invitation",
        )
    })?;
    Ok((room, inv))
}

/// `pk.accept`: the match starts in both rooms. Answers this room's `{pk, ends_at}`.
async fn accept(core: &Core, user: &UserId, reply: PkReply) -> Result<Bytes, ReplyError> {
    let (room, inv) = answer(core, user, reply, true).await?;
    let matched = start_match(core, &inv.from, &room, inv.seconds, &inv.link)
        .await
        .map_err(|(_, e)| e)?;
    let mine: serde_json::Value = serde_json::from_slice(&matched.z).unwrap_or_default();
    let started = PkStarted {
        pk: mine["pk"].as_u64().unwrap_or_default(),
        ends_at: matched.ends_at,
    };
    Ok(client::to_json(&started).into())
}

/// `pk.decline`: the inviting room's staff are told (if that fails, the invitation lapses
/// there unanswered). Answers `{}`.
async fn decline(core: &Core, user: &UserId, reply: PkReply) -> Result<Bytes, ReplyError> {
    let (room, inv) = answer(core, user, reply, false).await?;
    let told = PkDeclined {
        link: inv.link,
        vs: room,
        by: user.clone(),
    };
    let _ = core
        .command_reply(
            user,
            inv.from,
            RoomCmd::Pk(PkCmd::Declined(told)),
            wait(core),
        )
        .await;
    Ok(Bytes::from_static(b"{}"))
}
