//! `Idempotency-Key` with Stripe's semantics for POSTs that create things: the same key and body
//! within 24 h replays the stored answer (`Idempotent-Replayed: true`); the same key with another
//! body is 422 `idempotency_key_reused`; the same key while the first request still runs is 409.
//! Only successful answers are stored, so a failed attempt can be retried with the same key.

use std::collections::HashSet;
use std::future::Future;
use std::sync::Mutex;

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::error::{ApiError, ErrorCode};
use crate::clock::Clock;
use crate::locks::lock;
use crate::store::{JsonTable, Store};

pub const HEADER: &str = "idempotency-key";
pub const TTL_MS: i64 = 24 * 3600 * 1000;
pub const MAX_KEY_LEN: usize = 255;

/// `<scope>\u{1f}<key>` -> stored answer.
const IDEMPOTENCY: JsonTable<Stored> = JsonTable::new("idempotency");

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Stored {
    body_hash: String,
    status: u16,
    response: serde_json::Value,
    created_at: i64,
}

/// Keys whose first request is still running (in memory: a restart ends them anyway).
#[derive(Debug, Default)]
pub struct InFlight(Mutex<HashSet<String>>);

struct Guard<'a> {
    set: &'a InFlight,
    key: String,
}

impl Drop for Guard<'_> {
    fn drop(&mut self) {
        lock(&self.set.0).remove(&self.key);
    }
}

/// The validated `Idempotency-Key` header, if any.
pub fn key_from(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(HEADER) else { return Ok(None) };
    let key = v.to_str().map_err(|_| ApiError::bad_request("Idempotency-Key must be printable ASCII"))?.trim();
    if key.is_empty() || key.len() > MAX_KEY_LEN || key.chars().any(|c| c.is_ascii_control()) {
        return Err(ApiError::bad_request(format!("Idempotency-Key must be 1-{MAX_KEY_LEN} printable characters")));
    }
    Ok(Some(key.to_string()))
}

/// Runs `work` at most once per (scope, key) and body; replays its stored success otherwise.
pub async fn run<F, Fut>(
    store: &Store,
    clock: &Clock,
    in_flight: &InFlight,
    scope: &str,
    key: Option<String>,
    body: &serde_json::Value,
    work: F,
) -> Result<Response, ApiError>
where
    F: FnOnce() -> Fut,
    Fut: Future<Output = Result<(StatusCode, serde_json::Value), ApiError>>,
{
    let Some(key) = key else {
        let (status, value) = work().await?;
        return Ok(json_response(status, &value, false));
    };
    let id = format!("{scope}\u{1f}{key}");
    let body_hash = hex::encode(Sha256::digest(serde_json::to_vec(body).unwrap_or_default()));
    let now = clock.now_ms();

    let guard = {
        let mut set = lock(&in_flight.0);
        if !set.insert(id.clone()) {
            return Err(ApiError::conflict("a request with this Idempotency-Key is still in progress; retry shortly")
                .with_details(serde_json::json!({ "idempotency_key": key })));
        }
        Guard { set: in_flight, key: id.clone() }
    };
    let lookup_id = id.clone();
    let stored = store.read(move |txn| IDEMPOTENCY.get(txn, &lookup_id)).await?;
    if let Some(s) = stored.filter(|s| now - s.created_at < TTL_MS) {
        drop(guard);
        if s.body_hash != body_hash {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                ErrorCode::IdempotencyKeyReused,
                "this Idempotency-Key was used with a different request body; use a new key",
            )
            .with_details(serde_json::json!({ "idempotency_key": key })));
        }
        let status = StatusCode::from_u16(s.status).unwrap_or(StatusCode::OK);
        return Ok(json_response(status, &s.response, true));
    }
    let (status, value) = work().await?;
    let record = Stored { body_hash, status: status.as_u16(), response: value.clone(), created_at: now };
    store.write(move |txn| IDEMPOTENCY.put(txn, &id, &record)).await?;
    drop(guard);
    Ok(json_response(status, &value, false))
}

/// Drops keys older than 24 h; returns how many.
pub async fn sweep(store: &Store, clock: &Clock) -> Result<usize, crate::store::StoreError> {
    let cutoff = clock.now_ms() - TTL_MS;
    store
        .write(move |txn| {
            let expired: Vec<String> = IDEMPOTENCY
                .list_in_write(txn)?
                .into_iter()
                .filter(|(_, s)| s.created_at < cutoff)
                .map(|(k, _)| k)
                .collect();
            for k in &expired {
                IDEMPOTENCY.delete(txn, k)?;
            }
            Ok(expired.len())
        })
        .await
}

fn json_response(status: StatusCode, value: &serde_json::Value, replayed: bool) -> Response {
    let mut res = (status, [(header::CONTENT_TYPE, HeaderValue::from_static("application/json"))], value.to_string())
        .into_response();
    if replayed {
        res.headers_mut().insert("idempotent-replayed", HeaderValue::from_static("true"));
    }
    res
}
