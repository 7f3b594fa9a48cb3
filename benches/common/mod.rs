//! Shared by the benches: one wrk run, summarised on one line; seeded records (`seed`).

#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod seed;

/// Is wrk installed (apt-get install wrk)?
pub fn have_wrk() -> bool {
    std::process::Command::new("wrk").arg("--version").output().is_ok()
}

/// `wrk -t2 -c16 -d10s --latency` against `url` with extra headers; prints p50, p99, req/s and
/// any non-2xx count after `label`.
pub async fn wrk(label: &str, url: &str, headers: &[String]) {
    let mut cmd = tokio::process::Command::new("wrk");
    cmd.args(["-t2", "-c16", "-d10s", "--latency"]);
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
    println!("  {label:<44} p50 {:>8}  p99 {:>8}  {:>9} req/s {non2xx}", pick("50%"), pick("99%"), rps.unwrap_or("?"));
}
