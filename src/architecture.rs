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
        "lib" | "main" | "http/mod" | "http/system" | "console" | "events" | "fuzzing" | "architecture" | "views" => {
            TOP
        }
        _ if p == "auth/keys" || p.starts_with("auth/keys/") => 0,
        // The operator's wire types and body readers: pure, below every domain that applies them.
        "callbacks/wire" | "callbacks/intake" => 2,
        _ => match p.split('/').next().unwrap_or(p) {
            "config" | "clock" | "cluster_id" | "store" | "logging" | "locks" | "background" => 0,
            "http" => 1,
            // Fair sharing: groups and policies read accounts; sessions and the account view ask it.
            "auth" | "audit" | "policy" => 3,
            // Notifications: any room pushes one inside its own write transaction.
            "notifications" => 3,
            "clusters" => 4,
            "inventory" => 5,
            "sessions" => 6,
            // Volumes: beside sessions (it reads which live sessions mount a volume; sessions
            // reach it only through the hook the composition root fills).
            "volumes" => 6,
            // The `/internal/*` handlers: they hand each report to inventory or sessions.
            "callbacks" => 7,
            "operator" => 8,
            // Whole-state tools: they read every domain's tables and open stores with the
            // composition root's migration list.
            "snapshot" => 9,
            _ => TOP,
        },
    }
}

/// The layer a `crate::a::b…` reference lands in. A name of the root itself (`crate::App`, the
/// router state) is the top's: handlers take their room's state instead (`FromRef`).
fn target_layer(segments: &[&str]) -> Option<usize> {
    match segments {
        [] => None,
        ["MIGRATIONS", ..] => Some(9),
        ["callbacks", "wire" | "intake", ..] => Some(2),
        ["http", "system", ..] => Some(TOP),
        [first, second, ..] if *first == "auth" && *second == "keys" => Some(0),
        ["http", ..] => Some(1),
        [first, ..] if first.chars().next().is_some_and(|c| c.is_ascii_uppercase()) => Some(TOP),
        [first, ..] => Some(layer(first)),
    }
}

/// A layer as ARCHITECTURE.md writes it.
fn shown(layer: usize) -> String {
    if layer == TOP { "top".to_string() } else { layer.to_string() }
}

/// What [`crate_paths`] reports for a grouped `use crate::{…}`: a group hides the layers it
/// names from this check, so layered files write one `use` per path.
const GROUPED: &str = "{";

/// Every `crate::` path in a file's code (comments, doc comments and the `#[cfg(test)]` part
/// skipped), as its segments.
fn crate_paths(text: &str) -> Vec<(usize, Vec<String>)> {
    let mut out = Vec::new();
    for (n, code) in code_lines(text) {
        let mut rest = code.as_str();
        while let Some(i) = rest.find("crate::") {
            let before = rest[..i].chars().last();
            rest = &rest[i + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue; // `some_crate::`, not `crate::`
            }
            if rest.starts_with('{') {
                // `crate::{a, b}`: reported as a group (see `GROUPED`), whatever it holds.
                out.push((n, vec![GROUPED.to_string()]));
                continue;
            }
            let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':')).unwrap_or(rest.len());
            let segs: Vec<String> = rest[..end].split("::").filter(|s| !s.is_empty()).map(str::to_string).collect();
            out.push((n, segs));
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
            if segs == [GROUPED] {
                if own != TOP {
                    bad.push(format!(
                        "src/{rel}:{line} groups crate imports (`use crate::{{…}}`): write one `use` per path"
                    ));
                }
                continue;
            }
            let Some(target) = target_layer(&segs) else { continue };
            if target <= own {
                continue;
            }
            if OWED.iter().any(|(file, first)| *file == rel && segs.first() == Some(first)) {
                owed_seen.push(rel.clone());
                continue;
            }
            bad.push(format!(
                "src/{rel}:{line} (layer {}) names crate::{} (layer {})",
                shown(own),
                segs.join("::"),
                shown(target)
            ));
        }
    }
    assert!(bad.is_empty(), "upward references (see ARCHITECTURE.md):\n{}", bad.join("\n"));
    for (file, _) in OWED {
        assert!(owed_seen.iter().any(|f| f == file), "{file} no longer names a higher layer: remove it from OWED");
    }
}

/// ARCHITECTURE.md's layer table as (layer, path) pairs: each backticked file or folder of a row
/// before its "(except …)"/"(but …)" part; `top` is [`TOP`].
fn documented_layers(md: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for row in md.lines().filter(|l| l.starts_with("| ")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (Some(level), Some(paths)) = (cells.get(1), cells.get(2)) else { continue };
        let level = match *level {
            "top" => TOP,
            n => match n.parse() {
                Ok(n) => n,
                Err(_) => continue, // the header and its rule
            },
        };
        let paths = paths.split(" (").next().unwrap_or(paths);
        for path in paths.split('`').skip(1).step_by(2) {
            out.push((level, path.to_string()));
        }
    }
    out
}

#[test]
fn the_documented_layers_are_the_checked_ones() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let md = std::fs::read_to_string(root.join("ARCHITECTURE.md")).unwrap();
    let documented = documented_layers(&md);
    assert!(documented.len() > 20, "found only {} paths in ARCHITECTURE.md's layer table", documented.len());
    for (level, path) in &documented {
        // A folder stands for any file in it that the row does not except.
        let file = if path.ends_with('/') { format!("{path}any_file.rs") } else { path.clone() };
        assert_eq!(
            layer(&file),
            *level,
            "ARCHITECTURE.md puts `{path}` in layer {level}; src/architecture.rs in {}",
            layer(&file)
        );
    }
    // Every file and folder of src/ is in the table (the checker itself aside).
    for e in std::fs::read_dir(root.join("src")).unwrap().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let name = if e.path().is_dir() { format!("{name}/") } else { name };
        if name == "architecture.rs" {
            continue;
        }
        assert!(documented.iter().any(|(_, p)| *p == name), "src/{name} is not in ARCHITECTURE.md's layer table");
    }
}

#[test]
fn the_checker_sees_a_grouped_import() {
    let paths = crate_paths("use crate::{clusters::X, sessions::Y};\nuse crate::store::Store;\n");
    assert_eq!(paths[0], (1, vec![GROUPED.to_string()]));
    assert_eq!(paths[1].1, vec!["store".to_string(), "Store".to_string()]);
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
    assert_eq!(target_layer(&["App"]), Some(TOP));
    assert_eq!(layer("http/error.rs"), 1);
    assert_eq!(layer("http/mod.rs"), TOP);
}

/// The folder that owns a source file's tables: its first path segment (`inventory/apply.rs` ->
/// `inventory`); a root file is its own owner.
fn room(rel: &str) -> &str {
    rel.split('/').next().unwrap_or(rel).trim_end_matches(".rs")
}

/// The code lines of a file, numbered from 1: up to its unit tests (`#[cfg(test)] mod …`, at the
/// end of a file by habit here, may reach anything; a test-only item elsewhere is still checked),
/// comments dropped.
fn code_lines(text: &str) -> Vec<(usize, String)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        if line.trim_start().starts_with("#[cfg(test)]")
            && lines[n + 1..]
                .iter()
                .map(|l| l.trim_start())
                .find(|l| !l.starts_with("#["))
                .is_some_and(|l| l.starts_with("mod "))
        {
            break;
        }
        out.push((n + 1, line.split("//").next().unwrap_or("").to_string()));
    }
    out
}

/// Tables the store holds for a domain: `pub const NAME: JsonTable<…>`, `KeySet` or a redb
/// `TableDefinition`, with the file that declares them.
fn declared_tables(files: &[(String, String)]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for (rel, text) in files {
        for (_, line) in code_lines(text) {
            let l = line.trim_start();
            let Some(rest) = l.strip_prefix("pub const ").or_else(|| l.strip_prefix("const ")) else { continue };
            let Some((name, ty)) = rest.split_once(':') else { continue };
            let ty = ty.trim_start();
            if ty.starts_with("JsonTable<") || ty.starts_with("KeySet") || ty.starts_with("TableDefinition<") {
                out.push((name.trim().to_string(), rel.clone()));
            }
        }
    }
    out
}

/// Every place a table is written through its constant: `T.put(`, `T.delete(`, `T.delete_prefix(`,
/// `T.insert(`, `T.remove(`, `T.clear(`, a `Rows` write `put(T,`, or `open_table(T)` in a file that
/// then inserts or removes.
fn writes_of(name: &str, text: &str) -> Vec<usize> {
    let methods = ["put(", "delete(", "delete_prefix(", "insert(", "remove(", "clear("];
    let mut out = Vec::new();
    for (n, line) in code_lines(text) {
        let mut hit = false;
        let mut rest = line.as_str();
        while let Some(i) = rest.find(name) {
            let before = rest[..i].chars().last();
            let after = &rest[i + name.len()..];
            rest = after;
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            if let Some(call) = after.strip_prefix('.')
                && methods.iter().any(|m| call.starts_with(m))
            {
                hit = true;
            }
        }
        let direct =
            [format!("put({name},"), format!("open_table({name})?.insert("), format!("open_table({name})?.remove(")];
        if hit || direct.iter().any(|d| line.contains(d.as_str())) {
            out.push(n);
        }
        // `let mut t = txn.open_table(NAME)?;` then `t.insert(…)`: a writable handle.
        if line.contains("let mut") && line.contains(&format!("open_table({name})")) {
            out.push(n);
        }
    }
    out
}

/// Tables written from outside the room that declares them, owed a move (each `table -> file`).
/// Empty is the goal: remove an entry when its write goes.
const OWED_WRITES: &[(&str, &str)] = &[];

#[test]
fn each_table_is_written_only_by_its_room() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let files: Vec<(String, String)> = paths
        .iter()
        .map(|f| {
            let rel = f.strip_prefix(&src).unwrap_or(f).to_string_lossy().replace('\\', "/");
            (rel, std::fs::read_to_string(f).unwrap_or_default())
        })
        .collect();
    let tables = declared_tables(&files);
    assert!(tables.len() > 20, "found only {} tables", tables.len());
    for (name, _) in [("CLUSTERS", ""), ("NODES", ""), ("SESSIONS", "")] {
        assert!(tables.iter().any(|(t, _)| t == name), "{name} is not found declared");
    }
    let mut bad = Vec::new();
    let mut owed_seen = Vec::new();
    for (name, declared_in) in &tables {
        let owner = room(declared_in);
        for (rel, text) in &files {
            if room(rel) == owner || rel == "architecture.rs" {
                continue;
            }
            for line in writes_of(name, text) {
                if OWED_WRITES.iter().any(|(t, f)| t == name && f == rel) {
                    owed_seen.push((name.clone(), rel.clone()));
                    continue;
                }
                bad.push(format!("src/{rel}:{line} writes {name}, which {owner}/ owns (src/{declared_in})"));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "a table written outside its room (change it through a function its owner exposes):\n{}",
        bad.join("\n")
    );
    for (t, f) in OWED_WRITES {
        assert!(
            owed_seen.iter().any(|(a, b)| a == t && b == f),
            "{f} no longer writes {t}: remove it from OWED_WRITES"
        );
    }
}

#[test]
fn the_writer_check_sees_a_write() {
    let text = "fn a() {\n    NODES.put(txn, &k, &n)?;\n    // NODES.put(txn) in a comment\n    let x = NODES.get(txn, &k)?;\n    txn.put(NODES, &k, &n)?;\n    MY_NODES.put(txn)?;\n}\n";
    assert_eq!(writes_of("NODES", text), vec![2, 5]);
    let declared = declared_tables(&[(
        "inventory/model.rs".into(),
        "pub const NODES: JsonTable<NodeRecord> = JsonTable::new(\"nodes\");\n".into(),
    )]);
    assert_eq!(declared, vec![("NODES".to_string(), "inventory/model.rs".to_string())]);
}
