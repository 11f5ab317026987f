//! The admin API's contract, `gateway/admin-openapi.yaml`, against the node: the file is valid
//! OpenAPI 3.0 YAML, every `/admin/` call it describes is one the node serves (it never answers
//! "no such admin call"), and every call the node serves is in it (from the admin router's
//! `verb_of` tables, which name every route for the `chorus_admin_calls_total` metric).
#![allow(
    clippy::unwrap_used,
    clippy::panic,
    reason = "test code: a failed unwrap is a failed test"
)]

use std::collections::BTreeSet;
use std::time::Duration;

use gateway::GatewayConfig;
use kit::admin::call;
use serde_json::json;
use shard::ShardConfig;
use yaml_rust2::{Yaml, YamlLoader};

use crate::support::server;
use server::Server;

const ADMIN: &str = "openapi-admin";

fn repo_file(path: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    std::fs::read_to_string(root.join(path)).unwrap()
}

/// `(METHOD, /admin/path)` of every call the contract describes, path parameters as `{}`.
fn contract_calls() -> BTreeSet<(String, String)> {
    let docs = YamlLoader::load_from_str(&repo_file("gateway/admin-openapi.yaml")).unwrap();
    let doc = &docs[0];
    let version = doc["openapi"].as_str().unwrap_or_default();
    assert!(version.starts_with("3.0"), "openapi: {version:?}");
    let Yaml::Hash(paths) = &doc["paths"] else {
        panic!("no paths")
    };
    let mut calls = BTreeSet::new();
    for (path, item) in paths {
        let path = path.as_str().unwrap();
        if !path.starts_with("/admin/") {
            continue;
        }
        let Yaml::Hash(methods) = item else {
            panic!("{path}: not a map")
        };
        for method in methods.keys().filter_map(Yaml::as_str) {
            if ["get", "put", "post", "delete", "patch"].contains(&method) {
                calls.insert((method.to_uppercase(), templated(path)));
            }
        }
    }
    calls
}

/// `path` with every `{name}` written `{}`.
fn templated(path: &str) -> String {
    path.split('/')
        .map(|s| if s.starts_with('{') { "{}" } else { s })
        .collect::<Vec<_>>()
        .join("/")
}

/// `(METHOD, /admin/path)` of every arm of the `verb_of` table in `file` under `prefix`: lines
/// like `(&Method::GET, ["rooms", _, "pin"]) => "room_pin",`.
fn router_calls(file: &str, prefix: &str) -> BTreeSet<(String, String)> {
    let source = repo_file(file);
    let table = &source[source.find("fn verb_of").unwrap()..];
    let table = &table[..table.find("\n}\n").unwrap()];
    let mut calls = BTreeSet::new();
    for line in table.lines().map(str::trim) {
        let Some(rest) = line.strip_prefix("(&Method::") else {
            continue;
        };
        let (method, rest) = rest.split_once(", [").unwrap();
        let segments = &rest[..rest.find("])").unwrap()];
        let mut path = prefix.to_owned();
        for seg in segments.split(", ").filter(|s| !s.is_empty()) {
            path.push('/');
            path.push_str(if seg == "_" {
                "{}"
            } else {
                seg.trim_matches('"')
            });
        }
        calls.insert((method.to_owned(), path));
    }
    assert!(!calls.is_empty(), "{file}: no routes read");
    calls
}

#[test]
fn every_call_the_node_serves_is_in_the_contract() {
    let contract = contract_calls();
    let mut served = router_calls("gateway/src/admin.rs", "/admin");
    served.extend(router_calls("gateway/src/admin/robots.rs", "/admin/robots"));
    served.extend(router_calls("gateway/src/admin/users.rs", "/admin/users"));
    served.extend(router_calls(
        "gateway/src/admin/reports.rs",
        "/admin/reports",
    ));
    assert!(served.len() > 30, "{served:?}");
    let missing: Vec<_> = served.difference(&contract).collect();
    assert!(
        missing.is_empty(),
        "served but not in admin-openapi.yaml: {missing:?}"
    );
}

#[tokio::test]
async fn every_call_in_the_contract_is_served() {
    let s = Server::launch(
        b"openapi-secret",
        ADMIN,
        GatewayConfig {
            drain_window: Duration::from_millis(100),
            ..GatewayConfig::default()
        },
        ShardConfig::default(),
    )
    .await;
    let calls = contract_calls();
    assert!(calls.len() > 30, "{calls:?}");
    for (method, path) in &calls {
        // An id no room, user or node has: the call is routed and answered on its merits.
        let path = path.replace("{}", "openapi-x");
        let body = (method == "POST" || method == "PUT").then(|| json!({}));
        let r = call(s.admin, method, &path, Some(ADMIN), body)
            .await
            .unwrap();
        assert!(
            !r.body.contains("no such admin call"),
            "{method} {path}: {} {}",
            r.status,
            r.body
        );
    }
    s.stop().await;
}
