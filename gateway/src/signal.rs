//! SIGTERM / SIGINT cancel the root token.

use tokio_util::sync::CancellationToken;
use tracing::info;

/// Waits for SIGINT or SIGTERM, then cancels `root`.
pub async fn cancel_on_signal(root: CancellationToken) {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => info!("SIGINT received; shutting down."),
        () = term => info!("SIGTERM received; shutting down."),
        () = root.cancelled() => return,
    }
    root.cancel();
}
