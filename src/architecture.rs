//! ARCHITECTURE.md's layering, checked: every `crate::…` path a source file names must belong to
//! its own layer or one below. A new upward reference fails this test with the file and the path;
//! either the code moves to the right room or the map changes (and ARCHITECTURE.md with it).

use std::path::{Path, PathBuf};

/// The composition root and the files that assemble routes from every domain: they may name
/// anything.
const TOP: usize = usize::MAX;

/// The layer of a source file (relative to `src/`), or of a crate path's first segments.
fn layer(path: &str) -> usize {
    let p = path.trim_end_matches(".rs");
    match p {
        "lib" | "main" | "http/mod" | "http/system" | "console" | "events" | "fuzzing" | "architecture" => TOP,
        _ if p == "auth/keys" || p.starts_with("auth/keys/") => 0,
        _ => match p.split('/').next().unwrap_or(p) {
            "config" | "clock" | "cluster_id" | "store" | "logging" | "locks" | "background" => 0,
            "http" => 1,
            "auth" | "audit" => 2,
            "clusters" => 3,
            "inventory" => 4,
            "sessions" => 5,
            "operator" => 6,
            // Whole-state tools: they read every domain's tables and open stores with the
            // composition root's migration list.
            "snapshot" => 7,
            _ => TOP,
        },
    }
}

/// The layer a `crate::a::b…` reference lands in. `crate::App` (the router state every handler
/// takes) is the one name of the root that any layer may use.
fn target_layer(segments: &[&str]) -> Option<usize> {
    match segments {
        [] => None,
        ["App", ..] => None,
        ["MIGRATIONS", ..] => Some(7),
        ["http", "system", ..] => Some(TOP),
        [first, second, ..] if *first == "auth" && *second == "keys" => Some(0),
        ["http", ..] => Some(1),
        [first, ..] if first.chars().next().is_some_and(|c| c.is_ascii_uppercase()) => Some(TOP),
        [first, ..] => Some(layer(first)),
    }
}

/// Every `crate::` path in a file's code (comments, doc comments and the `#[cfg(test)]` part
/// skipped), as its segments.
fn crate_paths(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    for (n, line) in lines.iter().enumerate() {
        // A `#[cfg(test)] mod …` (the unit tests, at the end of a file by habit here) may reach
        // anything; a test-only item elsewhere is still checked.
        if line.trim_start().starts_with("#[cfg(test)]")
            && lines[n + 1..]
                .iter()
                .map(|l| l.trim_start())
                .find(|l| !l.starts_with("#["))
                .is_some_and(|l| l.starts_with("mod "))
        {
            break;
        }
        let code = line.split("//").next().unwrap_or("");
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let before = rest[..i].chars().last();
            rest = &rest[i + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // `some_crate::`, not `crate::`
            }
            let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(rest.len());
            let segs: Vec<String> = rest[..end].split("::").filter(|s| !s.is_empty()).map(str::to_string).collect();
            out.push((n + 1, segs));
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for e in entries.flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// Upward references that are known and owed a fix; each entry is `file -> first crate segment`.
/// Empty is the goal: remove an entry when its reference goes.
const OWED: &[(&str, &str)] = &[];

#[test]
fn no_layer_names_a_higher_one() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    assert!(files.len() > 40, "found only {} source files under {}", files.len(), src.display());
    let mut bad = Vec::new();
    let mut owed_seen = Vec::new();
    for f in &files {
        let rel = f.strip_prefix(&src).unwrap_or(f).to_string_lossy().replace('\\', "/");
        let own = layer(&rel);
        let text = std::fs::read_to_string(f).unwrap_or_default();
        for (line, segs) in crate_paths(&text) {
            let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
            let Some(target) = target_layer(&segs) else { continue };
            if target <= own {
                continue;
            }
            if OWED.iter().any(|(file, first)| *file == rel && segs.first() == Some(first)) {
                owed_seen.push(rel.clone());
                continue;
            }
            bad.push(format!("src/{rel}:{line} (layer {own}) names crate::{} (layer {target})", segs.join("::")));
        }
    }
    assert!(bad.is_empty(), "upward references (see ARCHITECTURE.md):\n{}", bad.join("\n"));
    for (file, _) in OWED {
        assert!(owed_seen.iter().any(|f| f == file), "{file} no longer names a higher layer: remove it from OWED");
    }
}

#[test]
fn the_checker_sees_an_upward_reference() {
    // The checker itself: a store file naming sessions is caught, a comment is not.
    let text = "use crate::store::Store;\n// crate::sessions in a comment\nlet x = crate::sessions::SESSIONS;\n\
                #[cfg(test)]\n#[allow(dead_code)]\nmod tests {\nuse crate::operator::X;\n}\n";
    let paths = crate_paths(text);
    assert_eq!(paths.len(), 2, "{paths:?}");
    let (line, segs) = &paths[1];
    assert_eq!(*line, 3);
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    assert!(target_layer(&segs).is_some_and(|t| t > layer("store/mod.rs")));
    assert_eq!(target_layer(&["auth", "keys", "SigningKey"]), Some(0));
    assert_eq!(target_layer(&["App"]), None);
    assert_eq!(layer("http/error.rs"), 1);
    assert_eq!(layer("http/mod.rs"), TOP);
}
