use super::*;

fn no_flags() -> SocketArgs {
    SocketArgs {
        heartbeat_ms: None,
        rate_per_sec: None,
        rate_burst: None,
    }
}

#[test]
fn the_metrics_token_comes_from_the_file_and_is_off_by_default() {
    let f: FileConfig = toml::from_str("metrics_token = \"m1\"\n").unwrap();
    assert_eq!(
        gateway_settings(&no_flags(), &f)
            .unwrap()
            .metrics_token
            .as_deref(),
        Some("m1")
    );
    assert_eq!(metrics_token(&f).as_deref(), Some("m1"));
    let none = gateway_settings(&no_flags(), &FileConfig::default()).unwrap();
    assert_eq!(none.metrics_token, None);
    let empty = FileConfig {
        metrics_token: Some(String::new()),
        ..FileConfig::default()
    };
    assert_eq!(metrics_token(&empty), None);
}

#[test]
fn rtc_webhook_settings_come_from_the_file() {
    let f: FileConfig = toml::from_str(
        "rtc_webhook_secret = \"s1\"\nlivekit_api_key = \"APIkey\"\nlivekit_api_secret = \"s2\"\n",
    )
    .unwrap();
    let g = gateway_settings(&no_flags(), &f).unwrap();
    assert_eq!(g.rtc_webhook_secret.as_deref(), Some("s1"));
    assert_eq!(g.livekit_api_key.as_deref(), Some("APIkey"));
    assert_eq!(g.livekit_api_secret.as_deref(), Some("s2"));
    let none = gateway_settings(&no_flags(), &FileConfig::default()).unwrap();
    assert_eq!(none.rtc_webhook_secret, None);
    assert_eq!(none.livekit_api_key, None);
}

#[test]
fn an_empty_secret_is_unset_and_livekit_needs_key_and_secret() {
    let empty = FileConfig {
        rtc_webhook_secret: Some(String::new()),
        ..FileConfig::default()
    };
    assert_eq!(
        gateway_settings(&no_flags(), &empty)
            .unwrap()
            .rtc_webhook_secret,
        None
    );
    let key_only = FileConfig {
        livekit_api_key: Some("APIkey".into()),
        ..FileConfig::default()
    };
    assert!(gateway_settings(&no_flags(), &key_only).is_err());
    let secret_only = FileConfig {
        livekit_api_secret: Some("s".into()),
        ..FileConfig::default()
    };
    assert!(gateway_settings(&no_flags(), &secret_only).is_err());
}

#[test]
fn room_quotas_and_retention_come_from_the_file() {
    let toml = "max_rooms_per_user = 5\nroom_creates_per_min = 3\nroom_retention_s = 0\n";
    let s = shard_settings(None, None, &toml::from_str(toml).unwrap());
    assert_eq!((s.max_rooms_per_user, s.room_creates_per_min), (5, 3));
    assert!(s.room_retention.is_zero(), "0 keeps rooms forever");
}
