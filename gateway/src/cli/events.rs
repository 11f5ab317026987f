//! The event webhook's settings: `CHORUS_EVENTS_WEBHOOK_URL`, `CHORUS_EVENTS_WEBHOOK_SECRET`
//! and `CHORUS_EVENTS_WEBHOOK_KINDS` (comma-separated), each over its file key.

use shard::events::EventsConfig;

use super::{FileConfig, env_or_file};

/// The event webhook of a node (standalone and shards send their rooms' events; every node
/// sends the moderation decisions its admin API takes): none without a URL; a URL needs the
/// secret.
///
/// # Errors
/// A URL without a secret, or a bad URL, secret or kind.
pub fn events_settings(f: &FileConfig) -> anyhow::Result<Option<EventsConfig>> {
    let url = env_or_file("CHORUS_EVENTS_WEBHOOK_URL", f.events_webhook_url.as_ref());
    let secret = env_or_file(
        "CHORUS_EVENTS_WEBHOOK_SECRET",
        f.events_webhook_secret.as_ref(),
    );
    let Some(url) = url else {
        anyhow::ensure!(
            secret.is_none(),
            "CHORUS_EVENTS_WEBHOOK_SECRET is set without CHORUS_EVENTS_WEBHOOK_URL"
        );
        return Ok(None);
    };
    let Some(secret) = secret else {
        anyhow::bail!(
            "the event webhook needs CHORUS_EVENTS_WEBHOOK_SECRET (or events_webhook_secret): \
             its batches are signed"
        );
    };
    let kinds: Option<Vec<String>> = match std::env::var("CHORUS_EVENTS_WEBHOOK_KINDS") {
        Ok(v) if !v.trim().is_empty() => Some(
            v.split(',')
                .map(|k| k.trim().to_owned())
                .filter(|k| !k.is_empty())
                .collect(),
        ),
        _ => f.events_webhook_kinds.clone(),
    };
    EventsConfig::new(&url, &secret, kinds.as_deref())
        .map(Some)
        .map_err(anyhow::Error::msg)
}
