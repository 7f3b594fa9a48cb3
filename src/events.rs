//! `GET /api/v1/events`: server-sent events that tell the console when something changed, so the
//! clusters, sessions and overview pages refresh on change instead of polling every few seconds.
//!
//! One event kind, `change` (data: `{"generation": N}`), sent after any commit to the store,
//! at most one per [`MIN_GAP`] (a burst of operator reports is one event); `hello` first, with the
//! generation the client starts from. Comments keep idle connections open through proxies.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::Stream;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::App;
use crate::auth::guard::AdminCaller;
use crate::http::error::ErrorBody;

/// Fewest milliseconds between two `change` events on one connection.
pub const MIN_GAP: Duration = Duration::from_millis(500);
/// A stream ends after this long and the browser reconnects (EventSource does by itself): an
/// open console tab then never holds a graceful shutdown for longer than this or the grace.
pub const MAX_STREAM: Duration = Duration::from_secs(300);

pub fn routes() -> OpenApiRouter<Arc<App>> {
    OpenApiRouter::new().routes(routes!(events))
}

fn event(kind: &str, generation: u64) -> Event {
    Event::default().event(kind).data(format!("{{\"generation\":{generation}}}"))
}

/// Live updates for the console: `hello`, then `change` after commits (at most two a second).
#[utoipa::path(get, path = "/api/v1/events", tag = "system",
    responses(
        (status = 200, content_type = "text/event-stream", description = "`hello` then `change` events, data {\"generation\": N}"),
        (status = 401, body = ErrorBody)))]
async fn events(
    State(app): State<Arc<App>>,
    _caller: AdminCaller,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let store = app.store.clone();
    let start = store.generation();
    let until = tokio::time::Instant::now() + MAX_STREAM;
    let stream = futures::stream::unfold((store, start, true), move |(store, seen, first)| async move {
        if first {
            return Some((Ok(event("hello", seen).retry(Duration::from_secs(1))), (store, seen, false)));
        }
        let now = tokio::time::timeout_at(until, store.changed_since(seen)).await.ok()?;
        // Let a burst settle into one event; what changed during the gap is in the next fetch.
        tokio::time::sleep(MIN_GAP).await;
        let now = store.generation().max(now);
        Some((Ok(event("change", now)), (store, now, false)))
    });
    Sse::new(stream).keep_alive(KeepAlive::new().interval(Duration::from_secs(15)))
}
