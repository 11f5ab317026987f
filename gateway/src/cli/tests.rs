use super::*;

fn no_flags() -> SocketArgs {
    SocketArgs {
        heartbeat_ms: None,
        rate_per_sec: None,
        rate_burst: None,
        route_retry_ms: None,
    }
}

#[test]
fn the_route_retry_budget_comes_from_the_flag_or_the_file() {
    let f: FileConfig = toml::from_str("route_retry_ms = 2500\n").unwrap();
    let g = gateway_settings(&no_flags(), &f).unwrap();
    assert_eq!(g.route_retry_budget, Duration::from_millis(2500));
    let flags = SocketArgs {
        route_retry_ms: Some(700),
        ..no_flags()
    };
    let g = gateway_settings(&flags, &f).unwrap();
    assert_eq!(g.route_retry_budget, Duration::from_millis(700));
    let g = gateway_settings(&no_flags(), &FileConfig::default()).unwrap();
    assert_eq!(
        g.route_retry_budget,
        crate::config::DEFAULT_ROUTE_RETRY_BUDGET
    );
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

#[test]
fn admin_suspension_calls_send_whole_seconds_and_encode_the_user() {
    let suspend = AdminVerb::Users {
        verb: UsersVerb::Suspend {
            id: "auth0|x".into(),
            ttl: Some(Duration::from_secs(86_400)),
            reason: Some("spam".into()),
            by: None,
        },
    };
    let (method, path, body) = suspend.request().unwrap();
    assert_eq!(
        (method, path.as_str()),
        ("PUT", "/admin/users/auth0%7Cx/suspension")
    );
    assert_eq!(
        body,
        Some(serde_json::json!({"seconds": 86_400, "reason": "spam"}))
    );
    let forever = AdminVerb::Users {
        verb: UsersVerb::Suspend {
            id: "ann".into(),
            ttl: None,
            reason: None,
            by: None,
        },
    };
    assert_eq!(forever.request().unwrap().2, Some(serde_json::json!({})));
    let reinstate = AdminVerb::Users {
        verb: UsersVerb::Reinstate { id: "ann".into() },
    };
    assert_eq!(
        reinstate.request().unwrap(),
        ("DELETE", "/admin/users/ann/suspension".into(), None)
    );
}

#[test]
fn admin_user_message_sends_its_fields_to_the_encoded_user() {
    let msg = AdminVerb::Users {
        verb: UsersVerb::Message {
            id: "auth0|x".into(),
            from: "official".into(),
            text: "You won".into(),
            req_id: "reward-1".into(),
            kind: Some("reward".into()),
            data: Some(serde_json::json!({"coins": 10})),
        },
    };
    assert_eq!(
        msg.request().unwrap(),
        (
            "POST",
            "/admin/users/auth0%7Cx/messages".into(),
            Some(serde_json::json!({
                "from": "official", "text": "You won", "req_id": "reward-1",
                "type": "reward", "data": {"coins": 10}
            }))
        )
    );
}

#[test]
fn admin_user_messages_reads_a_page_with_its_filters() {
    let read = |with: Option<&str>, before, limit| AdminVerb::Users {
        verb: UsersVerb::Messages {
            id: "auth0|x".into(),
            with: with.map(Into::into),
            before,
            limit,
        },
    };
    assert_eq!(
        read(None, None, None).request().unwrap(),
        ("GET", "/admin/users/auth0%7Cx/messages".into(), None)
    );
    assert_eq!(
        read(Some("ann+1"), Some(77), Some(10)).request().unwrap().1,
        "/admin/users/auth0%7Cx/messages?with=ann%2B1&before=77&limit=10"
    );
}

#[test]
fn admin_reports_calls_name_their_filters_and_decision() {
    let list = AdminVerb::Reports {
        verb: ReportsVerb::List {
            status: ReportStatus::All,
            room: Some("party".into()),
            user: Some("auth0|a+b".into()),
            before: Some(40),
            limit: Some(10),
        },
    };
    let (method, path, body) = list.request().unwrap();
    assert_eq!(
        (method, path.as_str(), body),
        (
            "GET",
            "/admin/reports?status=all&room=party&user=auth0%7Ca%2Bb&before=40&limit=10",
            None
        )
    );
    let resolve = AdminVerb::Reports {
        verb: ReportsVerb::Resolve {
            id: 7,
            action: "warned".into(),
            note: None,
            by: Some("mod-anna".into()),
        },
    };
    let (method, path, body) = resolve.request().unwrap();
    assert_eq!(
        (method, path.as_str()),
        ("POST", "/admin/reports/7/resolve")
    );
    assert_eq!(
        body,
        Some(serde_json::json!({"action": "warned", "by": "mod-anna"}))
    );
}

#[test]
fn admin_calls_percent_encode_user_ids_in_their_paths() {
    let user = "auth0|5f7c+a@b".to_owned();
    let calls = [
        (
            AdminVerb::Wallet { user: user.clone() },
            "/admin/wallets/auth0%7C5f7c%2Ba%40b",
        ),
        (
            AdminVerb::Users {
                verb: UsersVerb::Get { id: user.clone() },
            },
            "/admin/users/auth0%7C5f7c%2Ba%40b/profile",
        ),
    ];
    for (verb, want) in calls {
        let (_, path, _) = verb.request().unwrap();
        assert_eq!(path, want);
    }
}

#[test]
fn economy_settings_come_from_the_file_and_a_rocket_paying_over_its_fuel_is_refused() {
    let f: FileConfig = toml::from_str(
        "combo_window_ms = 5000\ngift_events_per_sec = 20\nstorm_interval_ms = 250\n\
         rocket_daily_cap = 300\n\
         [[rocket_levels]]\nfuel = 1000\ntop = [300, 200]\npresent = 5\npresent_coins = 20\n",
    )
    .unwrap();
    let s = shard_settings(None, None, &f);
    assert_eq!(
        (
            s.gift_rules.combo_window_ms,
            s.gift_rules.events_per_sec,
            s.gift_rules.storm_interval_ms
        ),
        (5000, 20, 250)
    );
    let r = rocket(&f).unwrap();
    assert_eq!((r.levels.len(), r.daily_cap), (1, 300));
    assert!(rocket(&FileConfig::default()).unwrap().levels.is_empty());
    let over: FileConfig = toml::from_str(
        "[[rocket_levels]]\nfuel = 100\ntop = [80]\npresent = 3\npresent_coins = 10\n",
    )
    .unwrap();
    let e = rocket(&over).unwrap_err().to_string();
    assert!(e.contains("exceed the level's fuel"), "{e}");
}

#[test]
fn guard_plans_and_vip_levels_come_from_the_file_and_bad_ones_are_refused() {
    let f: FileConfig = toml::from_str(
        "[[guard_plans]]\nid = \"week\"\ndays = 7\nprice = 500\n\
         [[guard_plans]]\nid = \"test\"\ndays = 0.0001\nprice = 1\n\
         [vip]\nthresholds = [10, 20, 30]\nentrance_level = 1\nprotected_level = 3\n",
    )
    .unwrap();
    let plans = guard_plans(&f).unwrap();
    assert_eq!(
        plans
            .iter()
            .map(|p| (p.id.as_str(), p.duration_ms(), p.price))
            .collect::<Vec<_>>(),
        vec![("week", 7 * 86_400_000, 500), ("test", 8_640, 1)]
    );
    let g = gateway_settings(&no_flags(), &f).unwrap();
    assert_eq!(*g.guard_plans, plans);
    let v = vip(&f).unwrap();
    assert_eq!(
        (v.thresholds.len(), v.entrance_level, v.protected_level),
        (3, 1, 3)
    );
    // Defaults: three plans, five levels.
    let none = FileConfig::default();
    assert_eq!(guard_plans(&none).unwrap().len(), 3);
    assert_eq!(vip(&none).unwrap().thresholds.len(), 5);
    // Refused at start-up: thresholds not ascending, a perk above the last level, a bad plan,
    // an unknown key.
    for (text, want) in [
        ("[vip]\nthresholds = [20, 10]\n", "ascending"),
        (
            "[vip]\nthresholds = [10]\nentrance_level = 0\nprotected_level = 2\n",
            "protected_level",
        ),
    ] {
        let f: FileConfig = toml::from_str(text).unwrap();
        let e = vip(&f).unwrap_err().to_string();
        assert!(e.contains(want), "{text}: {e}");
    }
    let f: FileConfig =
        toml::from_str("[[guard_plans]]\nid = \"w\"\ndays = 0\nprice = 1\n").unwrap();
    assert!(guard_plans(&f).unwrap_err().to_string().contains("days"));
    assert!(gateway_settings(&no_flags(), &f).is_err());
    assert!(toml::from_str::<FileConfig>("[vip]\nlevels = [1]\n").is_err());
}

/// An empty secret in the config file counts as unset, like an empty environment variable:
/// an empty admin token would match a request without `Authorization`, an empty JWT secret
/// would sign with an empty key.
#[test]
fn an_empty_file_secret_is_unset() {
    let empty = String::new();
    let set = "s3".to_owned();
    let env = "CHORUS_TEST_UNSET_SECRET_FOR_CLI_TESTS";
    assert_eq!(env_or_file(env, Some(&empty)), None);
    assert_eq!(env_or_file(env, Some(&set)).as_deref(), Some("s3"));
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        secret(env, Some(&empty), dir.path(), "t", false).unwrap(),
        None
    );
    // With generation on, an empty one is replaced by a generated secret.
    let (made, fresh) = secret(env, Some(&empty), dir.path(), "t", true)
        .unwrap()
        .unwrap();
    assert!(fresh && !made.is_empty());
}

#[test]
fn secrets_lose_surrounding_whitespace_and_blank_counts_as_unset() {
    const UNSET: &str = "CHORUS_TEST_SURELY_UNSET_VARIABLE";
    assert_eq!(
        env_or_file(UNSET, Some(&"tok3n\n".to_owned())).as_deref(),
        Some("tok3n")
    );
    assert_eq!(env_or_file(UNSET, Some(&" \n".to_owned())), None);
    assert_eq!(env_or_file(UNSET, None), None);
}
