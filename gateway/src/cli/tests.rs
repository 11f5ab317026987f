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

#[test]
fn the_session_expiring_time_comes_from_the_file_with_a_minute_by_default() {
    let f: FileConfig = toml::from_str("session_expiring_s = 120\n").unwrap();
    let g = gateway_settings(&no_flags(), &f).unwrap();
    assert_eq!(g.expiry_warning, Duration::from_secs(120));
    let d = gateway_settings(&no_flags(), &FileConfig::default()).unwrap();
    assert_eq!(d.expiry_warning, Duration::from_secs(60));
}

#[test]
fn admin_users_calls_send_only_the_fields_given() {
    let set = AdminVerb::Users {
        verb: UsersVerb::Set {
            id: "ann".into(),
            name: Some("Ann".into()),
            avatar: None,
            region: Some(String::new()),
        },
    };
    let (method, path, body) = set.request().unwrap();
    assert_eq!((method, path.as_str()), ("PUT", "/admin/users/ann/profile"));
    assert_eq!(body, Some(serde_json::json!({"name": "Ann", "region": ""})));
    let get = AdminVerb::Users {
        verb: UsersVerb::Get { id: "ann".into() },
    };
    let (method, path, body) = get.request().unwrap();
    assert_eq!(
        (method, path.as_str(), body),
        ("GET", "/admin/users/ann/profile", None)
    );
}
