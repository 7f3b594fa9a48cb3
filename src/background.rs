//! The server's periodic background work: one loop shape for every "do this every N until the
//! server stops" task.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

/// Runs `f` every `period` until `stop` turns true; the first run is one period after the call.
/// A run that takes longer than `period` delays the next one (runs never overlap), and `stop`
/// is noticed between runs, never inside one. Returns once stopped, so the caller can do the
/// stop's own last piece of work after it.
pub async fn every<F, Fut>(period: Duration, stop: watch::Receiver<bool>, f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    run(period, stop, f, false).await
}

/// Like [`every`], with the first run at once (work the server wants done as soon as it starts,
/// then every `period`).
pub async fn now_and_every<F, Fut>(period: Duration, stop: watch::Receiver<bool>, f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    run(period, stop, f, true).await
}

async fn run<F, Fut>(period: Duration, mut stop: watch::Receiver<bool>, mut f: F, at_once: bool)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ()>,
{
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    if !at_once {
        tick.tick().await;
    }
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.wait_for(|v| *v) => return,
        }
        f().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[tokio::test]
    async fn runs_each_period_after_the_first_and_ends_on_stop() {
        let (stop, rx) = watch::channel(false);
        let (tx, mut ran) = tokio::sync::mpsc::unbounded_channel();
        let period = Duration::from_millis(20);
        let start = Instant::now();
        let task = tokio::spawn(every(period, rx, move || {
            let tx = tx.clone();
            async move {
                let _ = tx.send(Instant::now());
            }
        }));
        for n in 1..=3 {
            let at = ran.recv().await.unwrap();
            assert!(at - start >= period * n, "run {n} came {:?} after the start", at - start);
        }
        stop.send(true).unwrap();
        task.await.unwrap();
        while ran.recv().await.is_some() {}
    }

    #[tokio::test(start_paused = true)]
    async fn now_and_every_runs_at_once_then_each_period() {
        let (stop, rx) = watch::channel(false);
        let (tx, mut ran) = tokio::sync::mpsc::unbounded_channel();
        let period = Duration::from_secs(30);
        let start = Instant::now();
        let task = tokio::spawn(now_and_every(period, rx, move || {
            let tx = tx.clone();
            async move {
                let _ = tx.send(Instant::now());
            }
        }));
        let first = ran.recv().await.unwrap();
        assert!(first - start < period, "the first run waited {:?}", first - start);
        let second = ran.recv().await.unwrap();
        assert!(second - start >= period, "the second run came {:?} after the start", second - start);
        stop.send(true).unwrap();
        task.await.unwrap();
    }
}
