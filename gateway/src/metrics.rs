//! Metric names of the gateway, and their descriptions.

/// Open WebSocket connections (gauge).
pub const CONNECTIONS: &str = "chorus_gateway_connections";
/// Upgrades refused (counter; label `reason`: auth, path, admission).
pub const UPGRADES_REFUSED: &str = "chorus_gateway_upgrades_refused_total";
/// Requests received (counter).
pub const REQUESTS: &str = "chorus_gateway_requests_total";
/// Error replies sent (counter; label `code`).
pub const ERRORS: &str = "chorus_gateway_errors_total";
/// Frames written to sockets (counter).
pub const FRAMES_OUT: &str = "chorus_gateway_frames_out_total";
/// Batches of frames written to sockets (counter): frames out divided by this is how many
/// frames one socket write carries.
pub const WRITE_BATCHES: &str = "chorus_gateway_write_batches_total";
/// Connections closed by the server (counter; label `code`).
pub const CLOSES: &str = "chorus_gateway_closes_total";

/// Commands sent again because their room had no reachable owner (counter).
pub const ROUTING_RETRIES: &str = "chorus_gateway_routing_retries_total";
/// Sessions taken out of rooms because their shard link dropped or the ring moved the room.
pub const SESSIONS_EVICTED: &str = "chorus_gateway_sessions_evicted_total";
/// Direct messages accepted (`im.send`, retries not counted).
pub const IM_SENT: &str = "chorus_gateway_im_sent_total";

/// RTC provider webhooks answered on the admin port (counter; labels `format`: chorus,
/// livekit; `outcome`: accepted, ignored, unauthorized, bad_request).
pub const RTC_WEBHOOKS: &str = "chorus_rtc_webhooks_total";

/// Registers descriptions for every gateway metric.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge};
    describe_gauge!(CONNECTIONS, "Open WebSocket connections.");
    describe_counter!(UPGRADES_REFUSED, "WebSocket upgrades refused, by reason.");
    describe_counter!(REQUESTS, "Client requests received.");
    describe_counter!(IM_SENT, "Direct messages accepted (retries not counted).");
    describe_counter!(ERRORS, "Error replies sent, by code.");
    describe_counter!(FRAMES_OUT, "Frames written to sockets.");
    describe_counter!(
        WRITE_BATCHES,
        "Batches of frames written to sockets, each usually one system call."
    );
    describe_counter!(
        ROUTING_RETRIES,
        "Commands re-sent while a room's ownership moves."
    );
    describe_counter!(
        SESSIONS_EVICTED,
        "Sessions taken out of rooms by link loss or ring moves."
    );
    describe_counter!(CLOSES, "Connections closed by the server, by close code.");
    describe_counter!(
        RTC_WEBHOOKS,
        "RTC provider webhooks answered, by format and outcome."
    );
    describe_gauge!(
        crate::admin::REPORTS_OPEN,
        "Open reports in the moderation queue (queue-wide: every node reports the same)."
    );
}
