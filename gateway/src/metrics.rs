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
/// Connections closed by the server (counter; label `code`).
pub const CLOSES: &str = "chorus_gateway_closes_total";

/// Registers descriptions for every gateway metric.
pub fn describe() {
    use metrics::{describe_counter, describe_gauge};
    describe_gauge!(CONNECTIONS, "Open WebSocket connections.");
    describe_counter!(UPGRADES_REFUSED, "WebSocket upgrades refused, by reason.");
    describe_counter!(REQUESTS, "Client requests received.");
    describe_counter!(ERRORS, "Error replies sent, by code.");
    describe_counter!(FRAMES_OUT, "Frames written to sockets.");
    describe_counter!(CLOSES, "Connections closed by the server, by close code.");
}
