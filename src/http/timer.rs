//! Deadlines a connection sets over and over — hyper's request-head timeout before each request
//! and the relay's answer deadline on each relayed one — on one tokio timer it keeps.
//!
//! A new tokio timer per deadline costs a registration and a removal in the runtime's timer
//! wheel, both under the one lock every core shares. A connection's deadlines of one kind only
//! ever move later, so a [`Deadlines`] keeps its timer when a deadline is done with and lets it
//! run at the old deadline: when it fires before the deadline now wanted, the [`Deadline`]
//! waiting on it moves it on (one registration per timer period, not one per request). A deadline
//! wanted earlier than the kept timer's (a clock step, or two at once: HTTP/2) moves it back or
//! takes a timer of its own.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use tokio::time::Sleep;

use crate::locks::lock;

/// One connection's timer for one kind of deadline (see the module doc).
#[derive(Debug, Default)]
pub struct Deadlines {
    spare: Mutex<Option<Pin<Box<Sleep>>>>,
}

impl Deadlines {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// A future that is ready at `deadline`, on the kept timer when it is free.
    pub fn until(self: &Arc<Self>, deadline: Instant) -> Deadline {
        let at = tokio::time::Instant::from_std(deadline);
        let sleep = match lock(&self.spare).take() {
            Some(mut kept) => {
                if kept.deadline() > at {
                    kept.as_mut().reset(at);
                }
                kept
            }
            None => Box::pin(tokio::time::sleep_until(at)),
        };
        Deadline { at, sleep: Some(sleep), home: self.clone() }
    }
}

/// Ready at its deadline; gives its timer back to its connection when dropped.
#[derive(Debug)]
pub struct Deadline {
    at: tokio::time::Instant,
    sleep: Option<Pin<Box<Sleep>>>,
    home: Arc<Deadlines>,
}

impl Deadline {
    /// Moves the deadline (later: nothing else happens until the timer fires).
    fn reset(&mut self, deadline: Instant) {
        self.at = tokio::time::Instant::from_std(deadline);
        if let Some(sleep) = self.sleep.as_mut()
            && sleep.deadline() > self.at
        {
            sleep.as_mut().reset(self.at);
        }
    }
}

impl Future for Deadline {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let at = self.at;
        let Some(sleep) = self.sleep.as_mut() else { return Poll::Ready(()) };
        loop {
            ready!(sleep.as_mut().poll(cx));
            if sleep.deadline() >= at {
                return Poll::Ready(());
            }
            // It ran at an older deadline: on to this one.
            sleep.as_mut().reset(at);
        }
    }
}

impl Drop for Deadline {
    fn drop(&mut self) {
        if let Some(sleep) = self.sleep.take() {
            let mut spare = lock(&self.home.spare);
            if spare.is_none() {
                *spare = Some(sleep);
            }
        }
    }
}

/// hyper's timer for one HTTP/1 connection: its request-head timeouts on one kept timer.
#[derive(Debug, Clone, Default)]
pub struct ConnectionTimer(Arc<Deadlines>);

impl hyper::rt::Timer for ConnectionTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until(self.now() + duration)
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(HyperDeadline(self.0.until(deadline)))
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: Instant) {
        match sleep.as_mut().downcast_mut_pin::<HyperDeadline>() {
            Some(mine) => mine.get_mut().0.reset(new_deadline),
            None => *sleep = self.sleep_until(new_deadline),
        }
    }

    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }
}

/// A [`Deadline`] as hyper takes it.
struct HyperDeadline(Deadline);

impl Future for HyperDeadline {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.get_mut().0).poll(cx)
    }
}

impl hyper::rt::Sleep for HyperDeadline {}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    fn now() -> Instant {
        tokio::time::Instant::now().into_std()
    }

    async fn advance(d: Duration) {
        tokio::time::advance(d).await;
    }

    #[tokio::test(start_paused = true)]
    async fn a_kept_timer_waits_for_the_new_deadline_not_the_old_one() {
        let d = Deadlines::new();
        let first = d.until(now() + Duration::from_secs(10));
        drop(first);
        advance(Duration::from_secs(5)).await;
        // The kept timer still runs at t+10; this deadline is t+15.
        let mut second = d.until(now() + Duration::from_secs(10));
        assert!((&mut second).now_or_never().is_none());
        advance(Duration::from_secs(6)).await;
        assert!((&mut second).now_or_never().is_none(), "the old deadline (t+10) has passed, this one has not");
        advance(Duration::from_secs(3)).await;
        assert!((&mut second).now_or_never().is_none());
        advance(Duration::from_secs(1)).await;
        assert!(second.now_or_never().is_some(), "ready at t+15");
    }

    #[tokio::test(start_paused = true)]
    async fn an_earlier_deadline_is_kept_too() {
        let d = Deadlines::new();
        drop(d.until(now() + Duration::from_secs(60)));
        // Kept at t+60; wanted at t+10 (another kind of caller, or the clock).
        let mut early = d.until(now() + Duration::from_secs(10));
        advance(Duration::from_secs(9)).await;
        assert!((&mut early).now_or_never().is_none());
        advance(Duration::from_secs(1)).await;
        assert!(early.now_or_never().is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn two_at_once_each_fire_at_their_own() {
        let d = Deadlines::new();
        drop(d.until(now() + Duration::from_secs(1)));
        let mut a = d.until(now() + Duration::from_secs(10));
        let mut b = d.until(now() + Duration::from_secs(20));
        assert!(a.sleep.is_some() && b.sleep.is_some());
        advance(Duration::from_secs(10)).await;
        assert!((&mut a).now_or_never().is_some());
        assert!((&mut b).now_or_never().is_none());
        advance(Duration::from_secs(10)).await;
        assert!(b.now_or_never().is_some());
        // One timer is kept, the other dropped.
        assert!(lock(&d.spare).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn a_deadline_moved_by_hyper_fires_at_the_new_time() {
        use hyper::rt::Timer;
        let timer = ConnectionTimer::default();
        let mut sleep = timer.sleep(Duration::from_secs(10));
        assert!(sleep.as_mut().now_or_never().is_none());
        timer.reset(&mut sleep, now() + Duration::from_secs(30));
        advance(Duration::from_secs(20)).await;
        assert!(sleep.as_mut().now_or_never().is_none(), "moved later: not at the first deadline");
        timer.reset(&mut sleep, now() + Duration::from_secs(1));
        advance(Duration::from_secs(1)).await;
        assert!(sleep.as_mut().now_or_never().is_some(), "moved earlier: at the new one");
    }
}
