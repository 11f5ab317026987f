//! What other parts of the repository say about the code must stay true: the tests the
//! documents name as `path.rs::test_name` (docs/ARCHITECTURE.md's invariant table, the README,
//! the benchmark pages) must still be functions in those files, and the TypeScript client must
//! know every error code the server sends.

use std::path::{Path, PathBuf};

/// The workspace root (this crate lives one level below it).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the crate has a parent directory")
        .to_path_buf()
}

/// Every Markdown file of the repository, outside build output, dependencies and VCS data.
fn markdown_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if path.is_dir() {
            if !matches!(name.as_ref(), "target" | "node_modules" | ".git" | "dist") {
                markdown_files(&path, out);
            }
        } else if name.ends_with(".md") {
            out.push(path);
        }
    }
}

/// The `path.rs::name` references inside backticks in `text`.
fn test_refs(text: &str) -> Vec<(String, String)> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter_map(|span| {
            let (file, name) = span.split_once(".rs::")?;
            let file_ok = !file.is_empty()
                && file
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "_/".contains(c));
            let name_ok = !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
            (file_ok && name_ok).then(|| (format!("{file}.rs"), name.to_owned()))
        })
        .collect()
}

#[test]
fn every_test_a_document_names_exists() {
    let root = root();
    let mut docs = Vec::new();
    markdown_files(&root, &mut docs);
    let mut checked = 0;
    let mut missing = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        for (file, name) in test_refs(&text) {
            checked += 1;
            let source = std::fs::read_to_string(root.join(&file)).unwrap_or_default();
            let defines = source.match_indices(&format!("fn {name}")).any(|(at, m)| {
                source[at + m.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c == '(' || c == '<')
            });
            if !defines {
                let doc = doc.strip_prefix(&root).unwrap_or(doc).display().to_string();
                missing.push(format!("{doc}: {file}::{name}"));
            }
        }
    }
    // The invariant table alone names dozens; finding none means the scan is broken.
    assert!(checked > 50, "only {checked} references found");
    assert!(
        missing.is_empty(),
        "named but not found:\n{}",
        missing.join("\n")
    );
}

#[test]
fn references_are_found_inside_backticks_only() {
    let refs = test_refs("see `a/b.rs::c_d` and a/x.rs::y and `crate::z` and `e.rs::F`");
    assert_eq!(refs, [("a/b.rs".to_owned(), "c_d".to_owned())]);
}

/// The quoted codes in `text` between `start` and the next `end`.
fn quoted_between<'a>(text: &'a str, start: &str, end: &str) -> Vec<&'a str> {
    let Some(from) = text.find(start) else {
        return Vec::new();
    };
    let rest = &text[from + start.len()..];
    let body = &rest[..rest.find(end).unwrap_or(rest.len())];
    body.split('"').skip(1).step_by(2).collect()
}

#[test]
fn the_ts_client_types_every_error_code() {
    let root = root();
    let rust = std::fs::read_to_string(root.join("protocol/src/error.rs")).unwrap();
    let ts = std::fs::read_to_string(root.join("clients/ts/src/types.ts")).unwrap();
    // `ErrorCode::as_str`, the one place that names each code on the wire.
    let mut server = quoted_between(&rust, "pub fn as_str(self) -> &'static str {", "\n    }\n");
    let mut client = quoted_between(&ts, "export type ErrorCode =", ";");
    assert!(server.len() >= 30, "{server:?}");
    server.sort_unstable();
    client.sort_unstable();
    assert_eq!(
        client, server,
        "clients/ts/src/types.ts `ErrorCode` against protocol/src/error.rs"
    );
}

/// The `.rs` files under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every metric a server crate records (each a `"chorus_…"` string literal in its sources)
/// is in the README's metrics table, so an operator can look up what it counts.
#[test]
fn every_metric_is_in_the_readme() {
    // Not metrics: the Scylla keyspace's default name.
    const NOT_METRICS: [&str; 1] = ["chorus_ledger"];
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let table = readme
        .split("### Metrics")
        .nth(1)
        .expect("README has a metrics section");
    let mut files = Vec::new();
    for krate in ["gateway/src", "shard/src", "storage/src"] {
        rust_files(&root.join(krate), &mut files);
    }
    let mut names: Vec<String> = Vec::new();
    for file in &files {
        let source = std::fs::read_to_string(file).unwrap();
        for (at, _) in source.match_indices("\"chorus_") {
            let name: String = source[at + 1..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            if source[at + 1 + name.len()..].starts_with('"') && !NOT_METRICS.contains(&&*name) {
                names.push(name);
            }
        }
    }
    names.sort();
    names.dedup();
    assert!(names.len() > 40, "only {} metric names found", names.len());
    let missing: Vec<&String> = names
        .iter()
        .filter(|n| !table.contains(&format!("| `{n}` |")))
        .collect();
    assert!(
        missing.is_empty(),
        "metrics missing from README's table: {missing:?}"
    );
}
