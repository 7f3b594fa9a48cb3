//! Shared by the benches: one wrk run, summarised on one line; seeded records (`seed`).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod seed;

/// The allocator the `gshare` binary ships with (src/main.rs), so that in-process servers measure
/// what runs in production.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Is wrk installed (apt-get install wrk)?
pub fn have_wrk() -> bool {
    std::process::Command::new("wrk").arg("--version").output().is_ok()
}

/// What one wrk run measured.
#[derive(Debug, Clone, Copy, Default)]
pub struct WrkRun {
    pub rps: f64,
    /// Median latency, milliseconds.
    pub p50_ms: f64,
    pub p99_ms: f64,
}

/// wrk's latency text (`812.00us`, `1.20ms`, `2.01s`) in milliseconds.
fn ms(text: &str) -> f64 {
    let (num, unit) = text.split_at(text.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(text.len()));
    let n: f64 = num.parse().unwrap_or(f64::NAN);
    match unit {
        "us" => n / 1000.0,
        "ms" => n,
        "s" => n * 1000.0,
        "m" => n * 60_000.0,
        _ => f64::NAN,
    }
}

/// `wrk -t2 -c16 -d10s --latency` against `url` with extra headers (`BENCH_SECONDS` overrides the
/// 10 s); prints p50, p99, req/s and any non-2xx count after `label`, and returns them.
pub async fn wrk(label: &str, url: &str, headers: &[String]) -> WrkRun {
    let secs = std::env::var("BENCH_SECONDS").ok().and_then(|s| s.parse::<u32>().ok()).unwrap_or(10);
    wrk_for(secs, label, url, headers).await
}

/// [`wrk`] for `secs` seconds.
pub async fn wrk_for(secs: u32, label: &str, url: &str, headers: &[String]) -> WrkRun {
    let mut cmd = tokio::process::Command::new("wrk");
    cmd.args(["-t2", "-c16", &format!("-d{secs}s"), "--latency"]);
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd.arg(url).output().await.expect("wrk (apt-get install wrk)");
    let text = String::from_utf8_lossy(&out.stdout);
    let pick = |prefix: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or("?")
            .to_string()
    };
    let rps = text.lines().find(|l| l.starts_with("Requests/sec")).and_then(|l| l.split_whitespace().nth(1));
    let non2xx = text.lines().find(|l| l.contains("Non-2xx")).unwrap_or("").trim().to_string();
    let (p50, p99) = (pick("50%"), pick("99%"));
    println!("  {label:<44} p50 {p50:>8}  p99 {p99:>8}  {:>9} req/s {non2xx}", rps.unwrap_or("?"));
    WrkRun { rps: rps.and_then(|r| r.parse().ok()).unwrap_or(f64::NAN), p50_ms: ms(&p50), p99_ms: ms(&p99) }
}
