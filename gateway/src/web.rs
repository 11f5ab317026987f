//! The browser pages the node serves, built into the binary: the demo room on the client port
//! (`/`, with `/demo/token` minting demo tokens when the demo flag is on) and the operator
//! dashboard on the admin port (`/dashboard`). Their sources are the TypeScript client's
//! `clients/ts/web/`; the built files under `gateway/web/` are committed (CI rebuilds them
//! and fails when they differ), so running the node needs no JavaScript tooling.

/// One embedded file.
pub(crate) struct Asset {
    pub(crate) body: &'static [u8],
    pub(crate) content_type: &'static str,
}

const HTML: &str = "text/html; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";
const CSS: &str = "text/css; charset=utf-8";

/// The demo room's files, by path on the client port.
pub(crate) fn demo_asset(path: &str) -> Option<Asset> {
    Some(match path {
        "/" | "/demo" | "/demo.html" => Asset {
            body: include_bytes!("../web/demo.html"),
            content_type: HTML,
        },
        "/demo.js" => Asset {
            body: include_bytes!("../web/demo.js"),
            content_type: JS,
        },
        "/chorus.css" => Asset {
            body: include_bytes!("../web/chorus.css"),
            content_type: CSS,
        },
        _ => return None,
    })
}

/// The dashboard's files, by path on the admin port (served without the admin token: the
/// page asks for it and sends it with each `/admin/*` call).
pub(crate) fn dashboard_asset(path: &str) -> Option<Asset> {
    Some(match path {
        "/dashboard" | "/dashboard.html" => Asset {
            body: include_bytes!("../web/dashboard.html"),
            content_type: HTML,
        },
        "/dashboard.js" => Asset {
            body: include_bytes!("../web/dashboard.js"),
            content_type: JS,
        },
        "/chorus.css" => Asset {
            body: include_bytes!("../web/chorus.css"),
            content_type: CSS,
        },
        _ => return None,
    })
}

/// Headers every page answer carries: no caching across upgrades of the node, no sniffing,
/// and a policy that lets the page load only its own files and talk to its own node.
pub(crate) const PAGE_HEADERS: &[(&str, &str)] = &[
    ("Cache-Control", "no-cache"),
    ("X-Content-Type-Options", "nosniff"),
    (
        "Content-Security-Policy",
        "default-src 'self'; connect-src 'self' ws: wss:; img-src 'self' data:; frame-ancestors 'none'",
    ),
];

/// Whether the client port answers `path` (the query cut off) with a page or a demo token
/// rather than `426`.
pub(crate) fn is_client_port_page(path: &str) -> bool {
    let path = path.split('?').next().unwrap_or_default();
    path == DEMO_TOKEN_PATH || demo_asset(path).is_some()
}

/// Where the demo page asks for a token (`?user=<id>`).
pub(crate) const DEMO_TOKEN_PATH: &str = "/demo/token";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pages_are_embedded_and_found_by_path() {
        for p in ["/", "/demo.js", "/chorus.css"] {
            assert!(demo_asset(p).is_some_and(|a| !a.body.is_empty()), "{p}");
            assert!(is_client_port_page(p), "{p}");
        }
        for p in ["/dashboard", "/dashboard.js", "/chorus.css"] {
            assert!(
                dashboard_asset(p).is_some_and(|a| !a.body.is_empty()),
                "{p}"
            );
        }
        assert!(is_client_port_page("/demo/token?user=a"));
        assert!(!is_client_port_page("/ws"));
        assert!(!is_client_port_page("/dashboard"));
        assert!(demo_asset("/../Cargo.toml").is_none());
    }
}
