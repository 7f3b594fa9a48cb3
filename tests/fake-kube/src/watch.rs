//! `watch=true`: newline-delimited watch events, resuming from a resourceVersion out of the
//! store's history, or starting with the current state as ADDED events.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::Response;
use futures::StreamExt;
use futures::stream::{self, BoxStream};
use serde_json::{Value, json};
use tokio::sync::broadcast::{self, error::RecvError};

use crate::api::{App, Call, selectors};
use crate::resources::ResourceType;
use crate::select::{FieldSelector, LabelSelector};
use crate::status::ApiError;
use crate::store::{Change, ChangeKind};
use crate::table;

struct Filter {
    rt: ResourceType,
    ns: Option<String>,
    name: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn matches(&self, obj: &Value) -> bool {
        let meta = &obj["metadata"];
        self.ns.as_deref().is_none_or(|ns| meta["namespace"].as_str() == Some(ns))
            && self.name.as_deref().is_none_or(|n| meta["name"].as_str() == Some(n))
            && self.labels.matches(obj)
            && self.fields.matches(obj)
    }

    fn typed(&self, obj: &Value) -> Value {
        let mut o = obj.clone();
        if let Value::Object(m) = &mut o {
            m.insert("apiVersion".into(), json!(self.rt.api_version()));
            m.insert("kind".into(), json!(self.rt.kind));
        }
        o
    }

    /// What a watcher of this filter sees of a change, if anything.
    fn event(&self, c: &Change) -> Option<(&'static str, Value)> {
        if c.group != self.rt.group || c.plural != self.rt.plural {
            return None;
        }
        let obj = self.typed(&c.object);
        let now = self.matches(&obj);
        let before = c.previous.as_ref().is_some_and(|p| self.matches(&self.typed(p)));
        let ty = match c.kind {
            ChangeKind::Added if now => "ADDED",
            ChangeKind::Modified if now && before => "MODIFIED",
            ChangeKind::Modified if now => "ADDED",
            ChangeKind::Modified if before => "DELETED",
            ChangeKind::Deleted if now => "DELETED",
            _ => return None,
        };
        Some((ty, obj))
    }
}

struct Encoder {
    rt: ResourceType,
    as_table: bool,
    columns_sent: bool,
}

impl Encoder {
    fn line(&mut self, ty: &str, obj: &Value) -> Bytes {
        let object = if self.as_table && ty != "ERROR" && ty != "BOOKMARK" {
            let meta = json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
            let t = table::table(&self.rt, &[obj], meta, !self.columns_sent);
            self.columns_sent = true;
            t
        } else {
            obj.clone()
        };
        let mut s = json!({"type": ty, "object": object}).to_string();
        s.push('\n');
        Bytes::from(s)
    }
}

struct Live {
    rx: broadcast::Receiver<Arc<Change>>,
    filter: Filter,
    encoder: Encoder,
    last_rv: u64,
    done: bool,
}

fn expired(rv: &str) -> Value {
    ApiError::gone(format!("too old resource version: {rv}")).to_status()
}

pub(crate) fn respond(app: &App, call: &Call) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(call)?;
    let filter = Filter { rt: call.rt.clone(), ns: call.ns.clone(), name: call.name.clone(), labels, fields };
    let mut encoder = Encoder {
        rt: call.rt.clone(),
        as_table: table::wants_table(call.headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("")),
        columns_sent: false,
    };
    let timeout =
        call.q.get("timeoutSeconds").and_then(|t| t.parse::<u64>().ok()).filter(|t| *t > 0).map(Duration::from_secs);
    let send_initial = call.q.get("sendInitialEvents").is_some_and(|v| v == "true");
    let rv_param = call.q.get("resourceVersion").filter(|v| !v.is_empty()).cloned();

    let st = app.store.lock();
    let rx = st.subscribe();
    let current = st.resource_version();
    let mut initial: Vec<Bytes> = Vec::new();
    let mut ended = false;
    match rv_param.as_deref() {
        _ if send_initial => {
            for (_, o) in st.list(&call.rt.group, &call.rt.plural, call.ns.as_deref()) {
                let o = filter.typed(o);
                if filter.matches(&o) {
                    initial.push(encoder.line("ADDED", &o));
                }
            }
            let bookmark = json!({
                "kind": call.rt.kind, "apiVersion": call.rt.api_version(),
                "metadata": {"resourceVersion": current.to_string(),
                             "annotations": {"k8s.io/initial-events-end": "true"}},
            });
            initial.push(encoder.line("BOOKMARK", &bookmark));
        }
        None | Some("0") => {
            for (_, o) in st.list(&call.rt.group, &call.rt.plural, call.ns.as_deref()) {
                let o = filter.typed(o);
                if filter.matches(&o) {
                    initial.push(encoder.line("ADDED", &o));
                }
            }
        }
        Some(rv) => {
            let n: u64 = rv.parse().map_err(|_| ApiError::bad_request(format!("invalid resource version: {rv}")))?;
            match st.changes_since(n) {
                Some(changes) => {
                    for c in changes {
                        if let Some((ty, o)) = filter.event(&c) {
                            initial.push(encoder.line(ty, &o));
                        }
                    }
                }
                None => {
                    initial.push(encoder.line("ERROR", &expired(rv)));
                    ended = true;
                }
            }
        }
    }
    drop(st);

    let head = stream::iter(initial.into_iter().map(Ok::<Bytes, Infallible>));
    let body: BoxStream<'static, Result<Bytes, Infallible>> = if ended {
        head.boxed()
    } else {
        let live = Live { rx, filter, encoder, last_rv: current, done: false };
        let tail = stream::unfold(live, |mut s| async move {
            if s.done {
                return None;
            }
            loop {
                match s.rx.recv().await {
                    Ok(c) if c.rv <= s.last_rv => continue,
                    Ok(c) => {
                        s.last_rv = c.rv;
                        if let Some((ty, o)) = s.filter.event(&c) {
                            let line = s.encoder.line(ty, &o);
                            return Some((Ok(line), s));
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        s.done = true;
                        let line = s.encoder.line("ERROR", &expired(&s.last_rv.to_string()));
                        return Some((Ok(line), s));
                    }
                    Err(RecvError::Closed) => return None,
                }
            }
        });
        let all = head.chain(tail);
        match timeout {
            Some(d) => all.take_until(tokio::time::sleep(d)).boxed(),
            None => all.boxed(),
        }
    };
    Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from_stream(body))
        .map_err(|e| ApiError::bad_request(format!("watch: {e}")))
}
