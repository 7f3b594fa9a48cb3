//! `GET /api/v1/events`: server-sent events that tell the console what changed, so each page
//! refreshes when its own data changed instead of polling every few seconds.
//!
//! One event kind per [`Topic`] (`clusters`, `sessions`, `offerings`, `inventory`, `overview`,
//! `audit`), data `{"generation": N}`: sent after a commit that wrote one of the topic's tables,
//! at most one burst per [`MIN_GAP`] (a burst of operator reports is one event per topic); `hello`
//! first, with the generation the client starts from and the topics it may hear. The topic is
//! derived where the write happens: the store notes each table a transaction writes and keeps
//! the generation of the last commit per table (`Store::table_generation`), so a commit costs
//! a few map entries and nothing is diffed. Comments keep idle connections open through proxies.
//!
//! `notifications` is heard by everyone, each only for their own (`notifications::user_key`).
//! A member hears only what is about them: `sessions` when a commit wrote one of *their*
//! sessions (never another's: that would tell other users' activity and its timing), and
//! `offerings`. Each session write notes its owner's key besides the tables
//! (`sessions::model::owner_sessions_key`), so a member's check is one map lookup however
//! many sessions and users there are. Its `generation`s are the stream's own count (`hello` 0,
//! then 1, 2, …), not the store's commit generations, which grow with the whole fleet's activity.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use crate::http::api_router::{Docs, routes};
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use utoipa_axum::router::OpenApiRouter;

use crate::App;
use crate::auth::guard::SignedIn;
use crate::clusters::model::CLUSTERS;
use crate::http::error::ErrorBody;
use crate::inventory::gpu_booking::ALLOCATIONS;
use crate::inventory::model::{CLUSTER_COUNTS, DRIFT, GPUS, HEALTH_EVENTS, NODES, POOLS, SESSION_DISKS};
use crate::operator::model::{ATTACH_RESULTS, ATTACHMENTS};
use crate::sessions::model::{LIVE_SESSIONS, OFFERINGS, SESSIONS, owner_sessions_key};
use crate::store::Store;
use crate::volumes::model::{ORPHANS, VOLUMES};

/// Fewest milliseconds between two bursts of events on one connection.
pub const MIN_GAP: Duration = Duration::from_millis(500);
/// A stream ends after this long and the browser reconnects (EventSource does by itself): an
/// open console tab then never holds a graceful shutdown for longer than this or the grace.
pub const MAX_STREAM: Duration = Duration::from_secs(300);
/// How often an idle stream looks at its caller's account: a disabled, removed or re-roled
/// account's stream ends within this (its own commit usually wakes the stream sooner).
pub const STANDING_CHECK: Duration = Duration::from_secs(5);

/// What a console page watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Topic {
    /// The cluster list and detail: registry, nodes and cards (counts), the operator's state.
    Clusters,
    /// Sessions and their bookings.
    Sessions,
    Offerings,
    /// Nodes, cards, drift, health events, volumes.
    Inventory,
    /// The fleet picture: clusters, nodes, cards, sessions, bookings.
    Overview,
    Audit,
    /// The caller's own notifications (never another user's).
    Notifications,
}

impl Topic {
    pub const ALL: [Topic; 7] = [
        Topic::Clusters,
        Topic::Sessions,
        Topic::Offerings,
        Topic::Inventory,
        Topic::Overview,
        Topic::Audit,
        Topic::Notifications,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Clusters => "clusters",
            Self::Sessions => "sessions",
            Self::Offerings => "offerings",
            Self::Inventory => "inventory",
            Self::Overview => "overview",
            Self::Audit => "audit",
            Self::Notifications => "notifications",
        }
    }

    /// The tables whose commits this topic announces.
    pub fn tables(self) -> &'static [&'static str] {
        const CLUSTERS_T: &[&str] = &[
            CLUSTERS.name(),
            CLUSTER_COUNTS.name(),
            NODES.name(),
            GPUS.name(),
            ATTACHMENTS.name(),
            ATTACH_RESULTS.name(),
        ];
        const SESSIONS_T: &[&str] = &[SESSIONS.name(), LIVE_SESSIONS.name(), ALLOCATIONS.name()];
        const OFFERINGS_T: &[&str] = &[OFFERINGS.name()];
        const INVENTORY_T: &[&str] = &[
            NODES.name(),
            GPUS.name(),
            POOLS.name(),
            DRIFT.name(),
            HEALTH_EVENTS.name(),
            VOLUMES.name(),
            ORPHANS.name(),
            SESSION_DISKS.name(),
        ];
        const OVERVIEW_T: &[&str] = &[
            CLUSTERS.name(),
            CLUSTER_COUNTS.name(),
            NODES.name(),
            GPUS.name(),
            SESSIONS.name(),
            LIVE_SESSIONS.name(),
            ALLOCATIONS.name(),
        ];
        const AUDIT_T: &[&str] = &[crate::audit::TABLE_NAME];
        // Read per caller ([`Source::Owner`] of `notifications::user_key`), never as a table.
        const NOTIFICATIONS_T: &[&str] = &[crate::notifications::NOTIFICATIONS.name()];
        match self {
            Self::Clusters => CLUSTERS_T,
            Self::Sessions => SESSIONS_T,
            Self::Offerings => OFFERINGS_T,
            Self::Inventory => INVENTORY_T,
            Self::Overview => OVERVIEW_T,
            Self::Audit => AUDIT_T,
            Self::Notifications => NOTIFICATIONS_T,
        }
    }
}

pub fn routes<D: Docs>() -> OpenApiRouter<Arc<App>> {
    OpenApiRouter::new().routes(routes!(D: events))
}

fn event(kind: &str, generation: u64) -> Event {
    Event::default().event(kind).data(format!("{{\"generation\":{generation}}}"))
}

/// What one topic's generation is read from on a connection.
enum Source {
    /// The last commit that wrote any of these tables (an admin's topics).
    Tables(&'static [&'static str]),
    /// The last commit that wrote one of this owner's sessions (a member's `sessions`).
    Owner(String),
}

impl Source {
    fn generation(&self, store: &Store) -> u64 {
        match self {
            Self::Tables(t) => store.table_generation(t),
            Self::Owner(key) => store.table_generation(&[key.as_str()]),
        }
    }
}

/// The topics a caller hears and where each is read: an admin every topic from its tables; a
/// member `sessions` from their own sessions' key and `offerings`. Everyone hears
/// `notifications` from their own key only (an admin's too: never another user's).
fn watches(caller: &SignedIn) -> Vec<(Topic, Source)> {
    let own = (Topic::Notifications, Source::Owner(crate::notifications::user_key(&caller.username)));
    if caller.is_admin() {
        let mut all: Vec<(Topic, Source)> = Topic::ALL
            .iter()
            .filter(|t| **t != Topic::Notifications)
            .map(|t| (*t, Source::Tables(t.tables())))
            .collect();
        all.push(own);
        return all;
    }
    // A burst's events go out in this order: `offerings` last, so a client that reads up to an
    // `offerings` event has read every event of its burst about the member's own data.
    vec![
        (Topic::Sessions, Source::Owner(owner_sessions_key(&caller.username))),
        own,
        (Topic::Offerings, Source::Tables(Topic::Offerings.tables())),
    ]
}

/// What one connection has announced so far: per watched topic, the last generation sent.
struct Seen {
    store: Store,
    generation: u64,
    watches: Vec<(Topic, Source, u64)>,
    /// A member's stream numbers its events itself (`hello` 0, then 1, 2, …): the store's
    /// commit generations would tell them how busy the whole fleet is.
    own_counter: Option<u64>,
}

impl Seen {
    /// The generation an event shows: the commit's for an admin, the stream's own count for a member.
    fn shown(&mut self, g: u64) -> u64 {
        match &mut self.own_counter {
            Some(n) => {
                *n += 1;
                *n
            }
            None => g,
        }
    }

    fn hello_generation(&self) -> u64 {
        if self.own_counter.is_some() { 0 } else { self.generation }
    }

    fn new(store: Store, watches: Vec<(Topic, Source)>, member: bool) -> Self {
        let generation = store.generation();
        let watches = watches
            .into_iter()
            .map(|(t, src)| {
                let g = src.generation(&store);
                (t, src, g)
            })
            .collect();
        Self { store, generation, watches, own_counter: member.then_some(0) }
    }

    /// The topics written since last asked, with their generations.
    fn changed(&mut self) -> Vec<(Topic, u64)> {
        let mut out = Vec::new();
        for (t, src, seen) in &mut self.watches {
            let g = src.generation(&self.store);
            if g > *seen {
                *seen = g;
                out.push((*t, g));
            }
        }
        out.into_iter().map(|(t, g)| (t, self.shown(g))).collect()
    }

    fn topic_names(&self) -> String {
        self.watches.iter().map(|(t, _, _)| format!("\"{}\"", t.as_str())).collect::<Vec<_>>().join(",")
    }
}

/// Live updates for the console: `hello`, then one event per changed topic (at most a burst
/// every 500 ms). Admins hear every topic; a member only `sessions` (their own) and `offerings`;
/// everyone `notifications`, their own only.
#[utoipa::path(get, path = "/api/v1/events", tag = "system",
    responses(
        (status = 200, content_type = "text/event-stream", description = "`hello` (data {\"generation\": N, \"topics\": [...]}), then events named by topic — `clusters`, `sessions`, `offerings`, `inventory`, `overview`, `audit`, `notifications` — with data {\"generation\": N}, sent when a commit wrote that topic's data. `notifications` is sent when one of the caller's own notifications was added or read (never another user's). A member hears only `sessions` (when one of their own sessions changed), `offerings` and `notifications`; `hello` lists the topics the caller hears. A member's stream numbers its own events (`hello` 0, then 1, 2, …) instead of the store's commit generations"),
        (status = 401, body = ErrorBody)))]
async fn events(State(app): State<Arc<App>>, caller: SignedIn) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let seen = Seen::new(app.store.clone(), watches(&caller), !caller.is_admin());
    let until = tokio::time::Instant::now() + MAX_STREAM;
    let topics = seen.topic_names();
    let hello = Event::default()
        .event("hello")
        .data(format!("{{\"generation\":{},\"topics\":[{topics}]}}", seen.hello_generation()))
        .retry(Duration::from_secs(1));
    // The stream serves the caller as their account stood when it opened: once that changes
    // (disabled, removed, another role) it ends, at the latest STANDING_CHECK later, and the
    // browser's reconnect meets the guard, which answers for the account as it is now.
    let standing = app.signin.standing(&caller.username);
    let changes = futures::stream::unfold(seen, move |mut seen| {
        let app = app.clone();
        let username = caller.username.clone();
        async move {
            let stands = || app.signin.standing(&username) == standing;
            loop {
                let deadline = (tokio::time::Instant::now() + STANDING_CHECK).min(until);
                let woke = tokio::time::timeout_at(deadline, seen.store.changed_since(seen.generation)).await;
                if !stands() {
                    return None;
                }
                let now = match woke {
                    Ok(now) => now,
                    Err(_) if deadline >= until => return None,
                    Err(_) => continue,
                };
                // Let a burst settle into one event per topic; what changed during the gap is in
                // the next fetch.
                tokio::time::sleep(MIN_GAP).await;
                if !stands() {
                    return None;
                }
                seen.generation = seen.store.generation().max(now);
                let changed = seen.changed();
                if !changed.is_empty() {
                    let events: Vec<Result<Event, Infallible>> =
                        changed.into_iter().map(|(t, g)| Ok(event(t.as_str(), g))).collect();
                    return Some((futures::stream::iter(events), seen));
                }
            }
        }
    })
    .flatten();
    let stream = futures::stream::once(async move { Ok::<_, Infallible>(hello) }).chain(changes);
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_topic_watches_tables_and_names_are_unique() {
        let names: std::collections::HashSet<_> = Topic::ALL.iter().map(|t| t.as_str()).collect();
        assert_eq!(names.len(), Topic::ALL.len());
        for t in Topic::ALL {
            assert!(!t.tables().is_empty(), "{t:?}");
        }
        assert!(!Topic::Clusters.tables().contains(&SESSIONS.name()));
        assert!(!Topic::Sessions.tables().contains(&CLUSTERS.name()));
    }
}
