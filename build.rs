//! Builds the console SPA (web/) and stages it for embedding: `$OUT_DIR/console` gets every file of
//! the Vite output plus `.gz` and `.br` siblings, which `src/console.rs` embeds with rust-embed.
//!
//! Also gzips the committed OpenAPI document (`web/src/api/openapi.json`) into `$OUT_DIR`.
//!
//! - `GSHARE_WEB_DIST=/path/to/dist`: use a prebuilt `dist/` (packagers); npm is never run.
//! - otherwise: `npm ci` when `web/node_modules` is missing, then `npm run build:embed` into
//!   `$OUT_DIR/web-dist`; cargo reruns this only when the web sources or package files change.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;

const WEB_INPUTS: &[&str] =
    &["src", "public", "index.html", "package.json", "package-lock.json", "vite.config.ts", "tsconfig.json"];

/// Files smaller than this are served as they are.
const MIN_COMPRESS_BYTES: u64 = 512;

fn main() {
    if let Err(message) = run() {
        // A build script's panic message is what cargo shows; make it the whole story.
        eprintln!("\n{message}\n");
        panic!("{message}");
    }
}

fn run() -> Result<(), String> {
    let manifest = PathBuf::from(env("CARGO_MANIFEST_DIR")?);
    let out = PathBuf::from(env("OUT_DIR")?);
    println!("cargo:rerun-if-env-changed=GSHARE_WEB_DIST");
    println!("cargo:rerun-if-env-changed=GSHARE_NPM");

    let dist = match std::env::var_os("GSHARE_WEB_DIST").filter(|v| !v.is_empty()) {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            println!("cargo:rerun-if-changed={}", dir.display());
            if !dir.join("index.html").is_file() {
                return Err(format!(
                    "GSHARE_WEB_DIST={} has no index.html: point it at the output of `npm ci && npm run build` in web/ (web/dist)",
                    dir.display()
                ));
            }
            dir
        }
        None => {
            let web = manifest.join("web");
            for input in WEB_INPUTS {
                println!("cargo:rerun-if-changed=web/{input}");
            }
            let dist = out.join("web-dist");
            npm_build(&web, &dist)?;
            dist
        }
    };

    let staged = out.join("console");
    if staged.exists() {
        fs::remove_dir_all(&staged).map_err(|e| format!("cannot clear {}: {e}", staged.display()))?;
    }
    stage(&dist, &staged)?;
    stage_api_document(&manifest, &out)
}

/// The OpenAPI document the server serves is the committed snapshot (tests hold it equal to the
/// handlers'), embedded gzipped: `$OUT_DIR/openapi.json.gz`.
fn stage_api_document(manifest: &Path, out: &Path) -> Result<(), String> {
    println!("cargo:rerun-if-changed=web/src/api/openapi.json");
    let snapshot = manifest.join("web/src/api/openapi.json");
    let bytes = fs::read(&snapshot).map_err(|e| format!("cannot read {}: {e}", snapshot.display()))?;
    let target = out.join("openapi.json.gz");
    fs::write(&target, gzip(&bytes)?).map_err(|e| format!("cannot write {}: {e}", target.display()))
}

fn env(name: &str) -> Result<String, String> {
    std::env::var(name).map_err(|_| format!("{name} is not set (this build script runs under cargo)"))
}

fn npm_build(web: &Path, dist: &Path) -> Result<(), String> {
    let npm = std::env::var("GSHARE_NPM").unwrap_or_else(|_| "npm".to_string());
    let version = Command::new(&npm).arg("--version").output();
    if !matches!(&version, Ok(o) if o.status.success()) {
        return Err(format!(
            "building the console needs npm with Node.js 20.19 or newer, and `{npm} --version` did not run.\n\
             Install them (nodejs.org or NodeSource; Debian 12's nodejs is too old), or build web/ elsewhere with\n\
             `npm ci && npm run build` and point GSHARE_WEB_DIST at the resulting web/dist directory."
        ));
    }
    if !web.join("node_modules").is_dir() {
        run_npm(&npm, web, &["ci", "--no-audit", "--no-fund"], "npm ci (installing the console's build tools)")?;
    }
    let out_dir = dist.to_str().ok_or_else(|| format!("OUT_DIR {} is not UTF-8", dist.display()))?;
    run_npm(&npm, web, &["run", "build:embed", "--", "--outDir", out_dir, "--emptyOutDir"], "npm run build:embed")?;
    if !dist.join("index.html").is_file() {
        return Err(format!("the console build wrote no index.html into {}", dist.display()));
    }
    Ok(())
}

fn run_npm(npm: &str, web: &Path, args: &[&str], what: &str) -> Result<(), String> {
    let output = Command::new(npm)
        .args(args)
        .current_dir(web)
        .output()
        .map_err(|e| format!("{what} in {}: cannot start {npm}: {e}", web.display()))?;
    if !output.status.success() {
        return Err(format!(
            "{what} failed in {} ({}):\n{}\n{}\nFix the console build (cd web && {npm} {}), or set GSHARE_WEB_DIST to a prebuilt dist/.",
            web.display(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr),
            args.join(" "),
        ));
    }
    Ok(())
}

/// Copies `from` to `to`, adding `.gz` and `.br` beside each compressible file where they are smaller.
fn stage(from: &Path, to: &Path) -> Result<(), String> {
    fs::create_dir_all(to).map_err(|e| format!("cannot create {}: {e}", to.display()))?;
    let entries = fs::read_dir(from).map_err(|e| format!("cannot read {}: {e}", from.display()))?;
    for entry in entries {
        let entry = entry.map_err(|e| format!("cannot read {}: {e}", from.display()))?;
        let path = entry.path();
        let target = to.join(entry.file_name());
        let kind = entry.file_type().map_err(|e| format!("{}: {e}", path.display()))?;
        if kind.is_dir() {
            stage(&path, &target)?;
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".gz") || name.ends_with(".br") {
            continue; // precompressed by someone else; ours are made from the originals
        }
        let bytes = fs::read(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        fs::write(&target, &bytes).map_err(|e| format!("cannot write {}: {e}", target.display()))?;
        if bytes.len() as u64 >= MIN_COMPRESS_BYTES && compressible(&name) {
            let gz = gzip(&bytes)?;
            if gz.len() < bytes.len() {
                write_sibling(&target, "gz", &gz)?;
            }
            let br = brotli_compress(&bytes)?;
            if br.len() < bytes.len() {
                write_sibling(&target, "br", &br)?;
            }
        }
    }
    Ok(())
}

fn compressible(name: &str) -> bool {
    let ext = name.rsplit('.').next().unwrap_or_default().to_ascii_lowercase();
    matches!(
        ext.as_str(),
        "html" | "js" | "mjs" | "css" | "svg" | "json" | "txt" | "map" | "xml" | "webmanifest" | "ico"
    )
}

fn write_sibling(target: &Path, ext: &str, bytes: &[u8]) -> Result<(), String> {
    let mut name = target.as_os_str().to_owned();
    name.push(".");
    name.push(ext);
    fs::write(&name, bytes).map_err(|e| format!("cannot write {}: {e}", PathBuf::from(&name).display()))
}

fn gzip(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    enc.write_all(bytes).map_err(|e| format!("gzip: {e}"))?;
    enc.finish().map_err(|e| format!("gzip: {e}"))
}

fn brotli_compress(bytes: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    let params = brotli::enc::BrotliEncoderParams { quality: 11, lgwin: 22, ..Default::default() };
    brotli::BrotliCompress(&mut &bytes[..], &mut out, &params).map_err(|e| format!("brotli: {e}"))?;
    Ok(out)
}
