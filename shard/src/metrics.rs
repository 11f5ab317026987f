//! Metric names of the shard, and their descriptions.

/// Rooms running on this node (gauge).
pub const ROOMS_RUNNING: &str = "chorus_shard_rooms_running";
/// Counter: accepts that failed for want of a resource (label `listener`), each followed by a
/// pause.
pub const ACCEPT_ERRORS: &str = "chorus_accept_errors_total";
/// Gauge: rooms whose robots run on this node.
pub const ROBOT_ROOMS_RUNNING: &str = "chorus_robot_rooms_running";
/// Counter: robot actions applied, by `kind` (join, leave, chat, seat_take, seat_leave, gift,
/// refused).
pub const ROBOT_ACTIONS: &str = "chorus_robot_actions_total";
/// Counter: coins robots spent on gifts (ordered; the ledger decides).
pub const ROBOT_GIFT_COINS: &str = "chorus_robot_gift_coins_total";
/// Counter: robot runtimes started on this node (each follows a claim of the room's lease:
/// on a healthy cluster, one per robot room and per change of owner).
pub const ROBOT_STARTS: &str = "chorus_robot_runtime_starts_total";
/// Counter: members whose connection dropped, by `outcome`: `returned` within the grace
/// window (no presence shown) or `expired` (`member.leave` `disconnected`).
pub const PRESENCE_GRACE: &str = "chorus_presence_grace_total";
/// Counter: reports members filed (`report.send`), duplicates not counted.
pub const REPORTS_FILED: &str = "chorus_reports_filed_total";
/// Counter: reports the moderation queue could not store after its tries.
pub const REPORTS_UNSTORED: &str = "chorus_reports_unstored_total";
/// Commands applied by rooms (counter).
pub const ROOM_COMMANDS: &str = "chorus_shard_room_commands_total";
/// Commands refused because a room's inbox was full (counter).
pub const ROOM_INBOX_FULL: &str = "chorus_shard_room_inbox_full_total";
/// Sequenced events published (counter; one per event, not per member).
pub const EVENTS_SEQUENCED: &str = "chorus_shard_events_sequenced_total";
/// History writes that failed other than by fencing (counter): the runtime publishes nothing
/// of that change, answers `UNAVAILABLE` and stops.
pub const HISTORY_WRITE_FAILURES: &str = "chorus_shard_history_write_failures_total";
/// Snapshot writes that failed (counter).
pub const SNAPSHOT_WRITE_FAILURES: &str = "chorus_shard_snapshot_write_failures_total";
/// Room stops that wrote no final snapshot: the state was already stored (counter).
pub const SNAPSHOT_WRITES_SKIPPED: &str = "chorus_shard_snapshot_writes_skipped_total";
/// Leases acquired (counter).
pub const LEASES_ACQUIRED: &str = "chorus_lease_acquired_total";
/// Gateway links refused at the hello for their proof of the cluster secret.
pub const LINKS_REFUSED: &str = "chorus_link_refused_total";
/// Leases renewed (counter; one per lease per tick).
pub const LEASES_RENEWED: &str = "chorus_lease_renewed_total";
/// Leases lost: renewal refused, or not proven before the local deadline (counter).
pub const LEASES_LOST: &str = "chorus_lease_lost_total";
/// Renewal round trips (counter; one per tick for all of a node's leases).
pub const LEASE_RENEW_ROUND_TRIPS: &str = "chorus_lease_renew_round_trips_total";

/// Messages waiting in a gateway link's outbox, sampled when the writer wakes (gauge).
pub const LINK_QUEUE_DEPTH: &str = "chorus_shard_link_queue_depth";
/// Room state writes rejected because the fence was not the live lease's (counter).
pub const FENCED_WRITES_REJECTED: &str = "chorus_fenced_writes_rejected_total";
/// Broadcasts a room runtime withheld because its lease deadline passed while it wrote the
/// events (counter): the events are in the fenced history, and a new owner replays them.
pub const BROADCASTS_WITHHELD: &str = "chorus_shard_broadcasts_withheld_total";

/// Counter: events the event webhook delivered (a 2xx answer).
pub const EVENTS_WEBHOOK_SENT: &str = "chorus_events_webhook_sent_total";
/// Counter: event webhook POSTs that failed (an error, a time-out or a non-2xx answer); each
/// is retried until its batch's attempts run out.
pub const EVENTS_WEBHOOK_FAILURES: &str = "chorus_events_webhook_failures_total";
/// Counter: events never delivered, by `why`: `queue_full` (the app is slower than the
/// rooms) or `undelivered` (their batch's retries ran out).
pub const EVENTS_WEBHOOK_DROPPED: &str = "chorus_events_webhook_dropped_total";

/// Gift sagas settled by the room that took them (counter).
pub const GIFTS_SETTLED: &str = "chorus_gifts_settled_total";
/// Unfinished sagas resolved by the owner's recovery (counter; label `outcome`).
pub const SAGAS_RECOVERED: &str = "chorus_sagas_recovered_total";
/// Rooms loaded by the orphan sweep to recover their unfinished sagas (counter).
pub const ORPHAN_ROOMS_LOADED: &str = "chorus_saga_orphan_rooms_loaded_total";
/// Counter: rooms removed from durable storage by retention (nobody joined them for
/// `room_retention`).
pub const ROOMS_EXPIRED: &str = "chorus_rooms_expired_total";
/// Counter: room creations refused by a per-user quota, by `reason` (`rate`, `owned`).
pub const ROOM_QUOTA_REFUSED: &str = "chorus_room_quota_refused_total";
/// Rocket launches announced (counter).
pub const ROCKET_LAUNCHES: &str = "chorus_rocket_launches_total";
/// Counter: exchanges of a PK between two rooms with the scoreboard, by `outcome` (`ok`,
/// `failed`: the scores shown wait for the next).
pub const PK_EXCHANGES: &str = "chorus_pk_exchanges_total";
/// From a launch's decision to the last reward booked, seconds (histogram).
pub const ROCKET_PAYOUT_SECONDS: &str = "chorus_rocket_payout_seconds";
/// Gift orders carried by merged (storm) gift events (counter).
pub const GIFT_EVENTS_MERGED: &str = "chorus_gift_orders_merged_total";
/// Settled gifts whose event the room could not publish, recorded in the ledger for the
/// room's next owner to publish (counter).
pub const GIFT_EVENTS_OWED: &str = "chorus_gift_events_owed_total";
/// Settled gifts whose event a runtime could not publish and left open in the fenced store,
/// for the room's next runtime (counter).
pub const GIFT_EVENTS_LEFT_OPEN: &str = "chorus_gift_events_left_open_total";
/// Gift events a room's new runtime published from gifts a previous one left open (counter).
pub const GIFT_EVENTS_FOUND_OPEN: &str = "chorus_gift_events_found_open_total";
/// Owed gift events a room's owner took from the ledger to publish (counter).
pub const GIFT_EVENTS_TAKEN: &str = "chorus_gift_events_owed_taken_total";
/// Settled gifts whose event was neither published nor recorded: the ledger refused the
/// record too (counter). Members never see these gifts; the money moved all the same.
pub const GIFT_EVENTS_LOST: &str = "chorus_gift_events_lost_total";
/// Room loads that skipped the saga sweep: the room's first owner in the ledger (counter).
pub const RECOVERY_SKIPPED: &str = "chorus_saga_sweeps_skipped_total";

/// Time a planned handoff kept a room stopped on the old owner (histogram, seconds).
pub const HANDOFF_SECONDS: &str = "chorus_shard_handoff_seconds";
/// Handoffs by state (gauge; label `state`: planned, in_flight, done, failed).
pub const HANDOFFS: &str = "chorus_shard_handoffs";

/// Registers descriptions for every shard metric.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge, describe_histogram};
    describe_histogram!(
        HANDOFF_SECONDS,
        "Seconds a handed-off room was stopped on the old owner."
    );
    describe_gauge!(HANDOFFS, "Room handoffs by state.");
    describe_gauge!(ROOMS_RUNNING, "Rooms running on this node.");
    describe_counter!(EVENTS_WEBHOOK_SENT, "Events the event webhook delivered.");
    describe_counter!(
        EVENTS_WEBHOOK_FAILURES,
        "Event webhook POSTs that failed (retried)."
    );
    describe_counter!(
        EVENTS_WEBHOOK_DROPPED,
        "Events never delivered, by why (queue_full, undelivered)."
    );
    describe_gauge!(ROBOT_ROOMS_RUNNING, "Rooms whose robots run on this node.");
    describe_counter!(ROBOT_ACTIONS, "Robot actions, by kind.");
    describe_counter!(
        PRESENCE_GRACE,
        "Dropped members back within the grace window (returned) or past it (expired)."
    );
    describe_counter!(ROBOT_GIFT_COINS, "Coins robots spent on gifts.");
    describe_counter!(ROBOT_STARTS, "Robot runtimes started on this node.");
    describe_counter!(ROOM_COMMANDS, "Commands applied by rooms.");
    describe_counter!(
        REPORTS_FILED,
        "Reports members filed (duplicates not counted)."
    );
    describe_counter!(
        REPORTS_UNSTORED,
        "Reports the moderation queue could not store after its tries."
    );
    describe_counter!(
        ROOM_INBOX_FULL,
        "Commands refused because a room inbox was full."
    );
    describe_counter!(EVENTS_SEQUENCED, "Sequenced room events published.");
    describe_counter!(SAGAS_RECOVERED, "Unfinished sagas resolved by recovery.");
    describe_counter!(
        ROOMS_EXPIRED,
        "Rooms removed from durable storage because nobody joined them for the retention."
    );
    describe_counter!(
        ROOM_QUOTA_REFUSED,
        "Room creations refused by a per-user quota, by reason."
    );
    describe_counter!(
        ORPHAN_ROOMS_LOADED,
        "Rooms loaded by the orphan sweep to recover their unfinished sagas."
    );
    describe_counter!(ROCKET_LAUNCHES, "Room rocket launches announced.");
    describe_counter!(
        PK_EXCHANGES,
        "Exchanges of PKs between two rooms with the scoreboard, by outcome."
    );
    describe_histogram!(
        storage::snapshot::METRIC_HISTORY_BATCH_ROOMS,
        "Room changes written by each history write to Redis."
    );
    metrics::describe_histogram!(
        ROCKET_PAYOUT_SECONDS,
        metrics::Unit::Seconds,
        "From a rocket launch's payout start to its last reward booked."
    );
    describe_counter!(
        GIFT_EVENTS_MERGED,
        "Gift orders carried by merged gift events of a storm."
    );
    describe_counter!(
        GIFT_EVENTS_OWED,
        "Settled gifts whose event was recorded for the room's next owner to publish."
    );
    describe_counter!(
        GIFT_EVENTS_LEFT_OPEN,
        "Settled gifts whose event was left open in the fenced store for the next runtime."
    );
    describe_counter!(
        GIFT_EVENTS_FOUND_OPEN,
        "Gift events a new runtime published from gifts a previous one left open."
    );
    describe_counter!(
        GIFT_EVENTS_TAKEN,
        "Owed gift events a room's owner took from the ledger to publish."
    );
    describe_counter!(
        GIFT_EVENTS_LOST,
        "Settled gifts whose event was neither published nor recorded."
    );
    describe_counter!(
        RECOVERY_SKIPPED,
        "Room loads with no saga sweep: the room's first owner."
    );
    describe_counter!(SNAPSHOT_WRITE_FAILURES, "Room snapshot writes that failed.");
    describe_counter!(
        HISTORY_WRITE_FAILURES,
        "Room history writes that failed (not fenced); their events were not published."
    );
    describe_counter!(
        SNAPSHOT_WRITES_SKIPPED,
        "Room stops with no final snapshot write: the state was already stored."
    );
    describe_counter!(LEASES_ACQUIRED, "Room leases acquired.");
    describe_counter!(
        LINKS_REFUSED,
        "Gateway links refused at the hello (label reason: missing, bad, stale, replayed)."
    );
    describe_counter!(
        ACCEPT_ERRORS,
        "Accepts that failed for want of a resource, each followed by a pause."
    );
    describe_counter!(LEASES_RENEWED, "Room leases renewed.");
    describe_counter!(LEASES_LOST, "Room leases lost or not proven in time.");
    describe_counter!(
        LEASE_RENEW_ROUND_TRIPS,
        "Batched lease renewal round trips."
    );
}
