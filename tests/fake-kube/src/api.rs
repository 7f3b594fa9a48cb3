//! The HTTP surface: authentication and knobs at the gate, discovery, OpenAPI, and the verbs on
//! resources (get, list, watch, create, update, patch, apply, delete).

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine;
use serde_json::{Value, json};

use crate::discovery;
use crate::fields;
use crate::knobs::Knobs;
use crate::patch::strategic_merge;
use crate::rbac;
use crate::resources::{self, ResourceType};
use crate::select::{FieldSelector, LabelSelector};
use crate::status::{ApiError, json_response};
use crate::store::{State as StoreState, Store};
use crate::table;
use crate::util::{meta_mut, meta_str, now_rfc3339};
use crate::watch;

/// The real server's request body limit.
pub(crate) const MAX_BODY: usize = 3 * 1024 * 1024;

/// What the TLS layer learnt about a connection.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConnInfo {
    pub client_cert: bool,
}

pub(crate) struct App {
    pub store: Store,
    pub knobs: Knobs,
    pub server_address: String,
    pub user: String,
    pub ca_pem: Option<String>,
    pub plain_http: bool,
}

pub(crate) fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/version", get(version))
        .route("/healthz", get(ok))
        .route("/livez", get(ok))
        .route("/readyz", get(ok))
        .route("/api", get(api))
        .route("/apis", get(apis))
        .route("/openapi/v3", get(openapi_index))
        .route("/openapi/v3/{*path}", get(openapi_doc))
        .fallback(dispatch)
        .layer(middleware::from_fn_with_state(app.clone(), gate))
        .with_state(app)
}

fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = v.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Authentication (client certificate from our CA, or a known bearer token), then the delay knob.
async fn gate(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let cert = req.extensions().get::<ConnInfo>().is_some_and(|c| c.client_cert);
    let token = bearer(req.headers());
    let token_ok = token.is_some_and(|t| app.knobs.token_valid(t));
    // Plain HTTP plays `kubectl proxy` (or the old insecure port): no credentials needed, and
    // kubectl sends none there; a wrong token is still refused.
    let anonymous_ok = app.plain_http && token.is_none();
    if !cert && !token_ok && !anonymous_ok {
        return ApiError::unauthorized().into_response();
    }
    app.knobs.count_request();
    if let Some(d) = app.knobs.delay() {
        tokio::time::sleep(d).await;
    }
    next.run(req).await
}

async fn version() -> Response {
    json_response(StatusCode::OK, &discovery::version())
}

async fn ok() -> &'static str {
    "ok"
}

async fn api(State(app): State<Arc<App>>) -> Response {
    json_response(StatusCode::OK, &discovery::api_versions(&app.server_address))
}

async fn apis(State(app): State<Arc<App>>) -> Response {
    let types = app.store.resource_types();
    json_response(StatusCode::OK, &discovery::api_group_list(&types))
}

fn crds(store: &Store) -> Vec<Value> {
    store.list("apiextensions.k8s.io", "v1", "customresourcedefinitions", None)
}

async fn openapi_index(State(app): State<Arc<App>>) -> Response {
    let types = app.store.resource_types();
    json_response(StatusCode::OK, &discovery::openapi_index(&types, &crds(&app.store)))
}

async fn openapi_doc(State(app): State<Arc<App>>, axum::extract::Path(path): axum::extract::Path<String>) -> Response {
    let types = app.store.resource_types();
    let parts: Vec<&str> = path.split('/').collect();
    let (group, version) = match parts.as_slice() {
        ["api", v] => ("", *v),
        ["apis", g, v] => (*g, *v),
        _ => return ApiError::unknown_resource().into_response(),
    };
    match discovery::openapi_doc(&types, group, version, &crds(&app.store)) {
        Some(doc) => json_response(StatusCode::OK, &doc),
        None => ApiError::unknown_resource().into_response(),
    }
}

async fn dispatch(State(app): State<Arc<App>>, req: Request) -> Response {
    match handle(&app, req).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// One request on a resource, parsed.
pub(crate) struct Call {
    pub rt: ResourceType,
    pub ns: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
    pub q: HashMap<String, String>,
    pub headers: HeaderMap,
}

impl Call {
    fn ns_key(&self) -> &str {
        if self.rt.namespaced { self.ns.as_deref().unwrap_or("") } else { "" }
    }

    fn flag(&self, key: &str) -> bool {
        self.q.get(key).is_some_and(|v| v == "true" || v == "1")
    }

    fn dry_run(&self) -> bool {
        self.q.get("dryRun").is_some_and(|v| v == "All")
    }

    fn content_type(&self) -> String {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase()
    }

    fn accept(&self) -> &str {
        self.headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    /// The field manager: `fieldManager`, else the user agent's program name, like the real server.
    fn manager(&self) -> String {
        if let Some(m) = self.q.get("fieldManager") {
            return m.clone();
        }
        self.headers
            .get(header::USER_AGENT)
            .and_then(|v| v.to_str().ok())
            .and_then(|ua| ua.split('/').next())
            .filter(|s| !s.is_empty())
            .unwrap_or("unknown")
            .to_string()
    }
}

async fn handle(app: &App, req: Request) -> Result<Response, ApiError> {
    let (parts, body) = req.into_parts();
    let q: HashMap<String, String> = Query::try_from_uri(&parts.uri).map(|Query(q)| q).unwrap_or_default();
    let segs: Vec<&str> = parts.uri.path().split('/').filter(|s| !s.is_empty()).collect();
    let (group, version, rest): (&str, &str, &[&str]) = match segs.as_slice() {
        ["api", "v1", rest @ ..] => ("", "v1", rest),
        ["apis", g] if parts.method == Method::GET => {
            let types = app.store.resource_types();
            return discovery::api_group(&types, g)
                .map(|g| json_response(StatusCode::OK, &g))
                .ok_or_else(ApiError::unknown_resource);
        }
        ["apis", g, v, rest @ ..] => (g, v, rest),
        _ => return Err(ApiError::unknown_resource()),
    };
    if rest.is_empty() {
        if parts.method != Method::GET {
            return Err(ApiError::method_not_allowed(parts.method.as_str()));
        }
        let types = app.store.resource_types();
        return discovery::resource_list(&types, group, version)
            .map(|l| json_response(StatusCode::OK, &l))
            .ok_or_else(ApiError::unknown_resource);
    }
    let namespace_sub = group.is_empty() && matches!(rest, ["namespaces", _, "status" | "finalize"]);
    let (ns, rest) = match rest {
        ["namespaces", ns, r @ ..] if !r.is_empty() && !namespace_sub => (Some(*ns), r),
        r => (None, r),
    };
    let (plural, name, sub) = match rest {
        [p] => (*p, None, None),
        [p, n] => (*p, Some(*n), None),
        [p, n, s] => (*p, Some(*n), Some(*s)),
        _ => return Err(ApiError::unknown_resource()),
    };
    let rt = app.store.lock().find_type(group, version, plural).ok_or_else(ApiError::unknown_resource)?;
    if ns.is_some() && !rt.namespaced {
        return Err(ApiError::unknown_resource());
    }
    if let Some(s) = sub {
        let known = (s == "status" && rt.status_subresource)
            || (s == "finalize" && group.is_empty() && plural == "namespaces")
            || (s == "log" && group.is_empty() && plural == "pods");
        if !known {
            return Err(ApiError::unknown_resource());
        }
    }
    let call = Call {
        rt,
        ns: ns.map(str::to_string),
        name: name.map(str::to_string),
        sub: sub.map(|s| if s == "finalize" { "status" } else { s }.to_string()),
        q,
        headers: parts.headers,
    };
    let verb = match (&parts.method, call.name.is_some()) {
        (&Method::GET, _) if call.flag("watch") => "watch",
        (&Method::GET, true) => "get",
        (&Method::GET, false) => "list",
        (&Method::POST, false) => "create",
        (&Method::PUT, true) => "update",
        (&Method::PATCH, true) => "patch",
        (&Method::DELETE, true) => "delete",
        (&Method::DELETE, false) => "deletecollection",
        (m, _) => return Err(ApiError::method_not_allowed(m.as_str())),
    };
    let rights = app.knobs.rights();
    if call.sub.as_deref() == Some("log") {
        if verb != "get" {
            return Err(ApiError::method_not_allowed(parts.method.as_str()));
        }
        let name = call.name.as_deref().unwrap_or_default();
        if app.knobs.is_forbidden("pods/log")
            || app.knobs.is_forbidden("pods")
            || !rbac::allows(rights.as_deref(), "", "pods/log", "get", call.ns.as_deref())
        {
            return Err(ApiError::forbidden_sub(&app.user, "get", &call.rt, name, "log", call.ns.as_deref()));
        }
        return pod_log(app, &call);
    }
    let resource = match call.sub.as_deref() {
        Some(sub) => format!("{}/{sub}", call.rt.plural),
        None => call.rt.plural.clone(),
    };
    // Access reviews are every authenticated user's (system:basic-user).
    if app.knobs.is_forbidden(&call.rt.plural)
        || (!call.rt.create_only
            && !rbac::allows(rights.as_deref(), &call.rt.group, &resource, verb, call.ns.as_deref()))
    {
        return Err(ApiError::forbidden(&app.user, verb, &call.rt, call.ns.as_deref()));
    }
    let write = matches!(verb, "create" | "update" | "patch" | "delete" | "deletecollection");
    if write
        && !call.rt.create_only
        && let Some(d) = app.knobs.write_delay()
    {
        tokio::time::sleep(d).await;
    }
    if write && !call.rt.create_only && !app.knobs.take_write() {
        // Gone mid-change: the connection is cut (see `Knobs::unreachable_after_writes`), never answered.
        std::future::pending::<()>().await;
    }
    if call.rt.create_only && verb != "create" {
        return Err(ApiError::method_not_allowed(verb));
    }
    if call.rt.namespaced && call.ns.is_none() && !matches!(verb, "list" | "watch") {
        return Err(ApiError::unknown_resource());
    }
    let body = read_body(&call.headers, body).await?;
    match verb {
        "watch" => watch::respond(app, &call),
        "get" => get_one(app, &call),
        "list" => list(app, &call),
        "create" => create(app, &call, &body),
        "update" => update(app, &call, &body),
        "patch" => patch(app, &call, &body),
        "delete" => delete(app, &call, &body),
        _ => delete_collection(app, &call),
    }
}

/// `GET pods/{name}/log`: the real server's parameters (`container`, `previous`, `tailLines`,
/// `limitBytes`: the tail first, then the byte limit from its start) and refusals, as text/plain.
fn pod_log(app: &App, call: &Call) -> Result<Response, ApiError> {
    let name = call.name.as_deref().unwrap_or_default();
    let ns = call.ns_key().to_string();
    let pod =
        app.store.lock().get("", "pods", &ns, name).cloned().ok_or_else(|| ApiError::not_found(&call.rt, name))?;
    let containers: Vec<String> = pod["spec"]["containers"]
        .as_array()
        .map(|cs| cs.iter().filter_map(|c| c["name"].as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    let container = match call.q.get("container").filter(|c| !c.is_empty()) {
        Some(c) if containers.contains(c) => c.clone(),
        Some(c) => {
            return Err(ApiError::bad_request(format!("container {c} is not valid for pod {name}")));
        }
        None if containers.len() == 1 => containers[0].clone(),
        None => {
            return Err(ApiError::bad_request(format!(
                "a container name must be specified for pod {name}, choose one of: [{}]",
                containers.join(" ")
            )));
        }
    };
    let previous = call.flag("previous");
    let log = match app.knobs.pod_log(&ns, name, &container, previous) {
        Some(l) => l,
        None if previous => {
            return Err(ApiError::bad_request(format!(
                "previous terminated container \"{container}\" in pod \"{name}\" not found"
            )));
        }
        None => Vec::new(),
    };
    let mut out: &[u8] = &log;
    if let Some(n) = call.q.get("tailLines").and_then(|t| t.parse::<usize>().ok()) {
        // The last n lines (a final newline ends the last line, it does not start another).
        let body = out.strip_suffix(b"\n").unwrap_or(out);
        let mut starts = body.iter().enumerate().filter(|(_, b)| **b == b'\n').map(|(i, _)| i + 1).collect::<Vec<_>>();
        starts.insert(0, 0);
        let from = if n == 0 { out.len() } else { starts[starts.len().saturating_sub(n)] };
        out = &out[from..];
    }
    if let Some(n) = call.q.get("limitBytes").and_then(|t| t.parse::<usize>().ok()).filter(|n| *n > 0) {
        out = &out[..out.len().min(n)];
    }
    Ok(Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, "text/plain")
        .body(Body::from(out.to_vec()))
        .unwrap_or_else(|_| StatusCode::INTERNAL_SERVER_ERROR.into_response()))
}

async fn read_body(headers: &HeaderMap, body: Body) -> Result<Bytes, ApiError> {
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > MAX_BODY) {
        return Err(ApiError::too_large(MAX_BODY));
    }
    let bytes = axum::body::to_bytes(body, MAX_BODY + 1).await.map_err(|_| ApiError::too_large(MAX_BODY))?;
    if bytes.len() > MAX_BODY {
        return Err(ApiError::too_large(MAX_BODY));
    }
    Ok(bytes)
}

/// Decodes a request body as JSON or YAML, per its Content-Type.
fn decode_body(content_type: &str, body: &[u8]) -> Result<Value, ApiError> {
    match content_type {
        "" | "application/json" | "*/*" => serde_json::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))),
        "application/yaml" | "application/apply-patch+yaml" => serde_yaml::from_slice::<Value>(body)
            .map_err(|e| ApiError::bad_request(format!("error converting YAML to JSON: yaml: {e}"))),
        crate::proto::CONTENT_TYPE => crate::proto::decode(body).map_err(|e| {
            ApiError::unsupported_media(format!(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json, application/yaml ({e})"
            ))
        }),
        other => Err(ApiError::unsupported_media(format!(
            "the body of the request was in an unknown format - accepted media types include: \
             application/json, application/yaml (got {other})"
        ))),
    }
}

fn respond_object(code: StatusCode, call: &Call, obj: &Value) -> Response {
    if table::wants_table(call.accept()) {
        let meta = json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
        return json_response(code, &table::table(&call.rt, &[obj], meta, true));
    }
    json_response(code, obj)
}

fn with_type(rt: &ResourceType, mut obj: Value) -> Value {
    if let Value::Object(m) = &mut obj {
        m.insert("apiVersion".into(), json!(rt.api_version()));
        m.insert("kind".into(), json!(rt.kind));
    }
    obj
}

fn get_one(app: &App, call: &Call) -> Result<Response, ApiError> {
    let name = call.name.as_deref().unwrap_or_default();
    let st = app.store.lock();
    let obj = st
        .get(&call.rt.group, &call.rt.plural, call.ns_key(), name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(&call.rt, name))?;
    Ok(respond_object(StatusCode::OK, call, &with_type(&call.rt, obj)))
}

pub(crate) fn selectors(call: &Call) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels =
        LabelSelector::parse(call.q.get("labelSelector").map_or("", String::as_str)).map_err(ApiError::bad_request)?;
    let fields =
        FieldSelector::parse(call.q.get("fieldSelector").map_or("", String::as_str)).map_err(ApiError::bad_request)?;
    Ok((labels, fields))
}

fn list(app: &App, call: &Call) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(call)?;
    let limit = call.q.get("limit").and_then(|l| l.parse::<usize>().ok()).filter(|l| *l > 0);
    let after = match call.q.get("continue").filter(|c| !c.is_empty()) {
        Some(token) => Some(decode_continue(token)?),
        None => None,
    };
    let st = app.store.lock();
    let rv = st.resource_version();
    let matching: Vec<Value> = st
        .list(&call.rt.group, &call.rt.plural, call.ns.as_deref())
        .filter(|(k, _)| {
            after.as_ref().is_none_or(|(ns, name)| (k.2.as_str(), k.3.as_str()) > (ns.as_str(), name.as_str()))
        })
        .map(|(_, o)| with_type(&call.rt, o.clone()))
        .filter(|o| labels.matches(o) && fields.matches(o))
        .collect();
    drop(st);
    let total = matching.len();
    let items: Vec<Value> = match limit {
        Some(l) => matching.into_iter().take(l).collect(),
        None => matching,
    };
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if items.len() < total
        && let Some(last) = items.last()
    {
        let token = format!("{}/{}", meta_str(last, "namespace").unwrap_or(""), meta_str(last, "name").unwrap_or(""));
        meta["continue"] = json!(base64::engine::general_purpose::STANDARD.encode(token));
        // The real server counts what remains only for unfiltered lists.
        let filtered = ["labelSelector", "fieldSelector"].iter().any(|k| call.q.get(*k).is_some_and(|v| !v.is_empty()));
        if !filtered {
            meta["remainingItemCount"] = json!(total - items.len());
        }
    }
    if table::wants_table(call.accept()) {
        let refs: Vec<&Value> = items.iter().collect();
        return Ok(json_response(StatusCode::OK, &table::table(&call.rt, &refs, meta, true)));
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "kind": format!("{}List", call.rt.kind),
            "apiVersion": call.rt.api_version(),
            "metadata": meta,
            "items": items,
        }),
    ))
}

fn decode_continue(token: &str) -> Result<(String, String), ApiError> {
    let bad = || {
        ApiError::bad_request(
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        )
    };
    let raw = base64::engine::general_purpose::STANDARD.decode(token).map_err(|_| bad())?;
    let s = String::from_utf8(raw).map_err(|_| bad())?;
    let (ns, name) = s.split_once('/').ok_or_else(bad)?;
    Ok((ns.to_string(), name.to_string()))
}

const DNS1123_SUBDOMAIN: &str = "a lowercase RFC 1123 subdomain must consist of lower case \
alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character \
(e.g. 'example.com', regex used for validation is \
'[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

const DNS1123_LABEL: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric \
characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or \
'123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')";

fn name_problem(rt: &ResourceType, name: &str) -> Option<String> {
    let label_only = rt.group.is_empty() && rt.plural == "namespaces";
    let max = if label_only { 63 } else { 253 };
    let ok_part = |p: &str| {
        !p.is_empty()
            && p.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !p.starts_with('-')
            && !p.ends_with('-')
    };
    let valid = name.len() <= max && if label_only { ok_part(name) } else { name.split('.').all(ok_part) };
    if valid {
        return None;
    }
    // RBAC and a few other kinds accept path-segment names such as `system:masters`.
    if rt.group == "rbac.authorization.k8s.io" && !name.is_empty() && !name.contains('/') {
        return None;
    }
    Some(format!("Invalid value: \"{name}\": {}", if label_only { DNS1123_LABEL } else { DNS1123_SUBDOMAIN }))
}

/// Checks apiVersion/kind and namespace of a body against the URL.
fn check_body(call: &Call, obj: &Value) -> Result<(), ApiError> {
    if !obj.is_object() {
        return Err(ApiError::bad_request("the body of the request must be a JSON or YAML object"));
    }
    if let Some(kind) = obj["kind"].as_str()
        && kind != call.rt.kind
    {
        return Err(ApiError::bad_request(format!(
            "the kind of the object ({kind}) does not match the kind on the URL ({})",
            call.rt.kind
        )));
    }
    if let Some(av) = obj["apiVersion"].as_str()
        && av != call.rt.api_version()
    {
        let same_group = av.split_once('/').map_or("", |(g, _)| g) == call.rt.group;
        if !same_group {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({av}) does not match the expected API version ({})",
                call.rt.api_version()
            )));
        }
    }
    if call.rt.namespaced
        && let (Some(body_ns), Some(url_ns)) = (meta_str(obj, "namespace"), call.ns.as_deref())
        && body_ns != url_ns
        && !body_ns.is_empty()
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the request",
        ));
    }
    if let (Some(body_name), Some(url_name)) = (meta_str(obj, "name"), call.name.as_deref())
        && body_name != url_name
    {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({url_name})"
        )));
    }
    Ok(())
}

/// A create needs its namespace to exist and not be Terminating (the NamespaceLifecycle
/// admission plugin's refusal, in its words).
fn require_namespace(st: &StoreState, call: &Call, name: &str) -> Result<(), ApiError> {
    if call.rt.namespaced {
        let ns = call.ns_key();
        if st.get("", "namespaces", "", ns).is_none() {
            return Err(ApiError::namespace_not_found(ns));
        }
        if st.is_terminating(ns) {
            return Err(ApiError::namespace_terminating(&call.rt, name, ns));
        }
    }
    Ok(())
}

/// Server-set fields of a new object (uid, timestamps, generation, reset status, kind specifics).
fn prepare_new(st: &mut StoreState, call: &Call, obj: &mut Value, now: &str) -> Result<(), ApiError> {
    let rt = &call.rt;
    normalize(rt, obj);
    let uid = st.new_uid();
    let name = meta_str(obj, "name").unwrap_or_default().to_string();
    *obj = with_type(rt, std::mem::take(obj));
    let meta = meta_mut(obj);
    for k in ["resourceVersion", "deletionTimestamp", "deletionGracePeriodSeconds", "selfLink"] {
        meta.remove(k);
    }
    meta.insert("uid".into(), json!(uid));
    meta.insert("creationTimestamp".into(), json!(now));
    if rt.namespaced {
        meta.insert("namespace".into(), json!(call.ns_key()));
    } else {
        meta.remove("namespace");
    }
    if rt.has_generation {
        meta.insert("generation".into(), json!(1));
    } else {
        meta.remove("generation");
    }
    let keeps_status = rt.group.is_empty() && rt.plural == "nodes";
    if rt.status_subresource
        && !keeps_status
        && let Value::Object(m) = obj
    {
        m.remove("status");
    }
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "namespaces") => {
            obj["spec"] = json!({"finalizers": ["kubernetes"]});
            obj["status"] = json!({"phase": "Active"});
            meta_mut(obj).entry("labels").or_insert_with(|| json!({}))["kubernetes.io/metadata.name"] = json!(name);
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            if resources::from_crd(obj).is_empty() {
                return Err(ApiError::invalid_object(
                    rt,
                    &name,
                    &[(
                        "spec",
                        "FieldValueInvalid",
                        "Invalid value: group, names.plural, names.kind and at least one served version are required"
                            .into(),
                    )],
                ));
            }
            let expected = format!(
                "{}.{}",
                obj["spec"]["names"]["plural"].as_str().unwrap_or_default(),
                obj["spec"]["group"].as_str().unwrap_or_default()
            );
            if name != expected {
                return Err(ApiError::invalid_object(
                    rt,
                    &name,
                    &[(
                        "metadata.name",
                        "FieldValueInvalid",
                        format!("Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"),
                    )],
                ));
            }
            obj["status"] = resources::crd_status(obj, now);
        }
        _ => {}
    }
    Ok(())
}

/// Secrets: `stringData` folds into `data`, `type` defaults to Opaque.
fn normalize(rt: &ResourceType, obj: &mut Value) {
    if !(rt.group.is_empty() && rt.plural == "secrets") {
        return;
    }
    let Value::Object(m) = obj else { return };
    if let Some(Value::Object(sd)) = m.remove("stringData") {
        let data = m.entry("data").or_insert_with(|| json!({}));
        for (k, v) in sd {
            let enc = base64::engine::general_purpose::STANDARD.encode(v.as_str().unwrap_or(""));
            data[k] = json!(enc);
        }
    }
    if m.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
        m.insert("type".into(), json!("Opaque"));
    }
}

/// The token controller: a `kubernetes.io/service-account-token` secret gets a token (then
/// accepted as a bearer token), the CA and the namespace.
fn fill_service_account_token(app: &App, st: &mut StoreState, call: &Call, obj: &mut Value) {
    let is_sa_token = call.rt.group.is_empty()
        && call.rt.plural == "secrets"
        && obj["type"] == "kubernetes.io/service-account-token"
        && obj["data"]["token"].is_null();
    if !is_sa_token {
        return;
    }
    let token = st.rng.hex(32);
    app.knobs.allow_token(&token);
    let b64 = |s: &str| json!(base64::engine::general_purpose::STANDARD.encode(s));
    let data = &mut obj["data"];
    if !data.is_object() {
        *data = json!({});
    }
    data["token"] = b64(&token);
    data["namespace"] = b64(call.ns_key());
    if let Some(ca) = &app.ca_pem {
        data["ca.crt"] = b64(ca);
    }
}

/// Carries server-owned state from the stored object into a replacement.
fn carry_over(call: &Call, old: &Value, mut new: Value) -> Value {
    let rt = &call.rt;
    if call.sub.as_deref() == Some("status") {
        let mut out = old.clone();
        match new.get_mut("status").map(std::mem::take) {
            Some(s) => out["status"] = s,
            None => {
                if let Value::Object(m) = &mut out {
                    m.remove("status");
                }
            }
        }
        if rt.group.is_empty() && rt.plural == "namespaces" {
            // namespaces/finalize writes spec.finalizers.
            out["spec"] = new["spec"].clone();
        }
        return with_type(rt, out);
    }
    new = with_type(rt, new);
    normalize(rt, &mut new);
    let old_meta = old["metadata"].clone();
    let meta = meta_mut(&mut new);
    for k in [
        "uid",
        "creationTimestamp",
        "name",
        "namespace",
        "generation",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "managedFields",
    ] {
        match old_meta.get(k) {
            Some(v) => {
                meta.insert(k.into(), v.clone());
            }
            None => {
                meta.remove(k);
            }
        }
    }
    meta.remove("resourceVersion");
    if rt.status_subresource
        && let Value::Object(m) = &mut new
    {
        match old.get("status") {
            Some(s) => {
                m.insert("status".into(), s.clone());
            }
            None => {
                m.remove("status");
            }
        }
    }
    if rt.has_generation {
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Value::Object(m) = &mut v {
                m.remove("metadata");
                m.remove("status");
                m.remove("apiVersion");
                m.remove("kind");
            }
            v
        };
        if strip(old) != strip(&new) {
            let g = old["metadata"]["generation"].as_i64().unwrap_or(0) + 1;
            meta_mut(&mut new).insert("generation".into(), json!(g));
        }
    }
    new
}

fn same_object(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        meta_mut(&mut v).remove("resourceVersion");
        v
    };
    strip(a) == strip(b)
}

/// Stores a replacement unless nothing changed; finishes deletion once finalizers are gone.
fn write_back(st: &mut StoreState, call: &Call, old: &Value, new: Value) -> Value {
    let old = with_type(&call.rt, old.clone());
    if same_object(&old, &new) {
        return old;
    }
    let name = meta_str(&new, "name").unwrap_or_default().to_string();
    let finished = new["metadata"]["deletionTimestamp"].is_string()
        && new["metadata"]["finalizers"].as_array().is_none_or(|f| f.is_empty());
    if call.dry_run() {
        return new;
    }
    let stored = if finished {
        st.commit(&call.rt.group, &call.rt.plural, call.ns_key(), &name, None)
    } else {
        st.commit(&call.rt.group, &call.rt.plural, call.ns_key(), &name, Some(new.clone()))
    };
    with_type(&call.rt, stored.unwrap_or(new))
}

fn create(app: &App, call: &Call, body: &[u8]) -> Result<Response, ApiError> {
    let mut obj = decode_body(&call.content_type(), body)?;
    check_body(call, &obj)?;
    let now = now_rfc3339();
    if call.rt.create_only {
        let rights = app.knobs.rights();
        obj = with_type(&call.rt, obj);
        if call.rt.plural == "selfsubjectrulesreviews" {
            let ns = obj["spec"]["namespace"].as_str().unwrap_or_default().to_string();
            obj["status"] = rbac::rules_review(rights.as_deref(), &ns);
            return Ok(json_response(StatusCode::CREATED, &obj));
        }
        let a = &obj["spec"]["resourceAttributes"];
        let resource = a["resource"].as_str().unwrap_or_default().to_string();
        let full = match a["subresource"].as_str().filter(|s| !s.is_empty()) {
            Some(sub) => format!("{resource}/{sub}"),
            None => resource.clone(),
        };
        let allowed = !app.knobs.is_forbidden(&resource)
            && rbac::allows(
                rights.as_deref(),
                a["group"].as_str().unwrap_or_default(),
                &full,
                a["verb"].as_str().unwrap_or_default(),
                a["namespace"].as_str().filter(|n| !n.is_empty()),
            );
        obj["status"] = json!({"allowed": allowed});
        return Ok(json_response(StatusCode::CREATED, &obj));
    }
    let mut st = app.store.lock();
    require_namespace(&st, call, meta_str(&obj, "name").unwrap_or_default())?;
    let name = match meta_str(&obj, "name").filter(|n| !n.is_empty()) {
        Some(n) => n.to_string(),
        None => match meta_str(&obj, "generateName").filter(|g| !g.is_empty()) {
            Some(prefix) => format!("{prefix}{}", st.rng.name_suffix()),
            None => {
                return Err(ApiError::invalid_object(
                    &call.rt,
                    "",
                    &[(
                        "metadata.name",
                        "FieldValueRequired",
                        "Required value: name or generateName is required".into(),
                    )],
                ));
            }
        },
    };
    if let Some(problem) = name_problem(&call.rt, &name) {
        return Err(ApiError::invalid_object(&call.rt, &name, &[("metadata.name", "FieldValueInvalid", problem)]));
    }
    if st.get(&call.rt.group, &call.rt.plural, call.ns_key(), &name).is_some() {
        return Err(ApiError::already_exists(&call.rt, &name));
    }
    meta_mut(&mut obj).insert("name".into(), json!(name));
    prepare_new(&mut st, call, &mut obj, &now)?;
    guard_write(app, &st, call, None, &obj)?;
    fill_service_account_token(app, &mut st, call, &mut obj);
    fields::record_update(None, &mut obj, &call.manager(), &call.rt.api_version(), None, &now);
    if call.dry_run() {
        return Ok(json_response(StatusCode::CREATED, &obj));
    }
    let stored = st.commit(&call.rt.group, &call.rt.plural, call.ns_key(), &name, Some(obj.clone())).unwrap_or(obj);
    if call.rt.group.is_empty() && call.rt.plural == "namespaces" {
        let mut sa = crate::seed::service_account(&name, "default");
        let uid = st.new_uid();
        let m = meta_mut(&mut sa);
        m.insert("uid".into(), json!(uid));
        m.insert("creationTimestamp".into(), json!(now));
        st.commit("", "serviceaccounts", &name, "default", Some(sa));
    }
    Ok(json_response(StatusCode::CREATED, &stored))
}

fn update(app: &App, call: &Call, body: &[u8]) -> Result<Response, ApiError> {
    let obj = decode_body(&call.content_type(), body)?;
    check_body(call, &obj)?;
    let name = call.name.as_deref().unwrap_or_default();
    let mut st = app.store.lock();
    let old = st
        .get(&call.rt.group, &call.rt.plural, call.ns_key(), name)
        .cloned()
        .ok_or_else(|| ApiError::not_found(&call.rt, name))?;
    match meta_str(&obj, "resourceVersion") {
        Some(rv) if Some(rv) != meta_str(&old, "resourceVersion") => {
            return Err(ApiError::modified(&call.rt, name));
        }
        None if call.rt.custom => {
            return Err(ApiError::invalid_object(
                &call.rt,
                name,
                &[(
                    "metadata.resourceVersion",
                    "FieldValueInvalid",
                    "Invalid value: 0x0: must be specified for an update".into(),
                )],
            ));
        }
        _ => {}
    }
    let mut new = carry_over(call, &old, obj);
    fields::record_update(
        Some(&old),
        &mut new,
        &call.manager(),
        &call.rt.api_version(),
        call.sub.as_deref(),
        &now_rfc3339(),
    );
    guard_write(app, &st, call, Some(&old), &new)?;
    let stored = write_back(&mut st, call, &old, new);
    Ok(json_response(StatusCode::OK, &stored))
}

fn patch(app: &App, call: &Call, body: &[u8]) -> Result<Response, ApiError> {
    let ct = call.content_type();
    if ct == "application/apply-patch+yaml" {
        return apply(app, call, body);
    }
    let name = call.name.as_deref().unwrap_or_default();
    let mut st = app.store.lock();
    let old = st
        .get(&call.rt.group, &call.rt.plural, call.ns_key(), name)
        .cloned()
        .map(|o| with_type(&call.rt, o))
        .ok_or_else(|| ApiError::not_found(&call.rt, name))?;
    let mut patched = old.clone();
    let rejected = |msg: String| ApiError::invalid_object(&call.rt, name, &[("", "FieldValueInvalid", msg)]);
    match ct.as_str() {
        "application/json-patch+json" => {
            let p: json_patch::Patch = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            json_patch::patch(&mut patched, &p).map_err(|e| {
                rejected(format!("the server rejected our request due to an error in our request: {e}"))
            })?;
        }
        "application/merge-patch+json" => {
            let p: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            json_patch::merge(&mut patched, &p);
        }
        "application/strategic-merge-patch+json" if !call.rt.custom => {
            let p: Value = serde_json::from_slice(body)
                .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
            strategic_merge(&mut patched, &p).map_err(rejected)?;
        }
        _ => {
            return Err(ApiError::unsupported_media(
                "the body of the request was in an unknown format - accepted media types include: \
                 application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
            ));
        }
    }
    if let Some(rv) = meta_str(&patched, "resourceVersion")
        && Some(rv) != meta_str(&old, "resourceVersion")
    {
        return Err(ApiError::modified(&call.rt, name));
    }
    let mut new = carry_over(call, &old, patched);
    fields::record_update(
        Some(&old),
        &mut new,
        &call.manager(),
        &call.rt.api_version(),
        call.sub.as_deref(),
        &now_rfc3339(),
    );
    guard_write(app, &st, call, Some(&old), &new)?;
    let stored = write_back(&mut st, call, &old, new);
    Ok(json_response(StatusCode::OK, &stored))
}

fn apply(app: &App, call: &Call, body: &[u8]) -> Result<Response, ApiError> {
    let manager = call.q.get("fieldManager").cloned().unwrap_or_default();
    if manager.is_empty() {
        return Err(ApiError::invalid(
            "PatchOptions",
            "meta.k8s.io",
            "",
            &[("fieldManager", "FieldValueRequired", "Required value: is required for apply patch".into())],
        ));
    }
    let applied = decode_body("application/apply-patch+yaml", body)?;
    if !applied.is_object() {
        return Err(ApiError::bad_request("the body of the request must be a JSON or YAML object"));
    }
    if applied["kind"].as_str().is_none_or(str::is_empty) || applied["apiVersion"].as_str().is_none_or(str::is_empty) {
        return Err(ApiError::bad_request(
            "error decoding YAML: Object 'Kind' is missing in apply configuration (apiVersion and kind are required)",
        ));
    }
    check_body(call, &applied)?;
    let name = call.name.as_deref().unwrap_or_default();
    let force = call.flag("force");
    let now = now_rfc3339();
    let mut st = app.store.lock();
    let existing =
        st.get(&call.rt.group, &call.rt.plural, call.ns_key(), name).cloned().map(|o| with_type(&call.rt, o));
    let sub = call.sub.as_deref();
    match existing {
        Some(old) => {
            let merged = fields::apply(&call.rt, &old, &applied, &manager, force, sub, &now)
                .map_err(|c| ApiError::apply_conflicts(&call.rt, name, &c))?;
            let managed = merged["metadata"]["managedFields"].clone();
            let mut new = carry_over(call, &old, merged);
            if sub.is_none() {
                meta_mut(&mut new).insert("managedFields".into(), managed);
                if new["metadata"]["managedFields"].is_null() {
                    meta_mut(&mut new).remove("managedFields");
                }
            } else {
                new["metadata"]["managedFields"] = managed;
            }
            guard_write(app, &st, call, Some(&old), &new)?;
            let stored = write_back(&mut st, call, &old, new);
            Ok(json_response(StatusCode::OK, &stored))
        }
        None => {
            if sub.is_some() {
                return Err(ApiError::not_found(&call.rt, name));
            }
            require_namespace(&st, call, name)?;
            if let Some(problem) = name_problem(&call.rt, name) {
                return Err(ApiError::invalid_object(
                    &call.rt,
                    name,
                    &[("metadata.name", "FieldValueInvalid", problem)],
                ));
            }
            let mut skeleton = with_type(&call.rt, json!({"metadata": {"name": name}}));
            if call.rt.namespaced {
                skeleton["metadata"]["namespace"] = json!(call.ns_key());
            }
            let mut obj = fields::apply(&call.rt, &skeleton, &applied, &manager, force, None, &now)
                .map_err(|c| ApiError::apply_conflicts(&call.rt, name, &c))?;
            let managed = obj["metadata"]["managedFields"].clone();
            prepare_new(&mut st, call, &mut obj, &now)?;
            obj["metadata"]["managedFields"] = managed;
            guard_write(app, &st, call, None, &obj)?;
            if call.dry_run() {
                return Ok(json_response(StatusCode::CREATED, &obj));
            }
            let stored =
                st.commit(&call.rt.group, &call.rt.plural, call.ns_key(), name, Some(obj.clone())).unwrap_or(obj);
            Ok(json_response(StatusCode::CREATED, &stored))
        }
    }
}

/// Go's `%#v` of a `metav1.LabelSelector`, as validation messages print it.
fn go_label_selector(sel: &Value) -> String {
    let labels: Vec<String> = sel["matchLabels"]
        .as_object()
        .map(|m| {
            let mut kv: Vec<(&String, &Value)> = m.iter().collect();
            kv.sort_by(|a, b| a.0.cmp(b.0));
            kv.iter().map(|(k, v)| format!("{k:?}:{:?}", v.as_str().unwrap_or_default())).collect()
        })
        .unwrap_or_default();
    let labels = if sel["matchLabels"].is_object() {
        format!("map[string]string{{{}}}", labels.join(", "))
    } else {
        "map[string]string(nil)".to_string()
    };
    let exprs = match sel["matchExpressions"].as_array() {
        Some(a) if !a.is_empty() => {
            let items: Vec<String> = a
                .iter()
                .map(|e| {
                    let values: Vec<String> = e["values"]
                        .as_array()
                        .map(|v| v.iter().map(|x| format!("{:?}", x.as_str().unwrap_or_default())).collect())
                        .unwrap_or_default();
                    format!(
                        "v1.LabelSelectorRequirement{{Key:{:?}, Operator:{:?}, Values:[]string{{{}}}}}",
                        e["key"].as_str().unwrap_or_default(),
                        e["operator"].as_str().unwrap_or_default(),
                        values.join(", ")
                    )
                })
                .collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", items.join(", "))
        }
        _ => "[]v1.LabelSelectorRequirement(nil)".to_string(),
    };
    format!("v1.LabelSelector{{MatchLabels:{labels}, MatchExpressions:{exprs}}}")
}

/// What the real server refuses on a write whatever the body's syntax: a changed selector of a
/// workload (immutable in apps/v1), and Roles or bindings granting rights the user does not hold.
fn guard_write(app: &App, st: &StoreState, call: &Call, old: Option<&Value>, new: &Value) -> Result<(), ApiError> {
    let rt = &call.rt;
    let name = meta_str(new, "name").unwrap_or_default();
    if rt.custom && call.sub.is_none() {
        let crds = st.list("apiextensions.k8s.io", "customresourcedefinitions", None).map(|(_, c)| c);
        if let Some(schema) = crate::schema::crd_schema(crds, &rt.group, &rt.plural, &rt.version) {
            crate::schema::check(schema, new, &rt.kind, &rt.group, name)?;
        }
    }
    if let Some(old) = old
        && rt.group == "apps"
        && matches!(rt.plural.as_str(), "deployments" | "replicasets" | "daemonsets" | "statefulsets")
        && call.sub.is_none()
        && old["spec"]["selector"] != new["spec"]["selector"]
    {
        return Err(ApiError::invalid_object(
            rt,
            name,
            &[(
                "spec.selector",
                "FieldValueInvalid",
                format!("Invalid value: {}: field is immutable", go_label_selector(&new["spec"]["selector"])),
            )],
        ));
    }
    let rights = app.knobs.rights();
    if rights.is_none() || rt.group != "rbac.authorization.k8s.io" || call.dry_run() {
        return Ok(());
    }
    let ns = rt.namespaced.then(|| call.ns_key());
    let (rules, may_skip) = match rt.plural.as_str() {
        "roles" | "clusterroles" => {
            let rules = new["rules"].as_array().cloned().unwrap_or_default();
            (rules, rbac::allows(rights.as_deref(), &rt.group, &rt.plural, "escalate", ns))
        }
        "rolebindings" | "clusterrolebindings" => {
            let role_ref = &new["roleRef"];
            let role_name = role_ref["name"].as_str().unwrap_or_default();
            let (plural, role_ns) =
                if role_ref["kind"] == "ClusterRole" { ("clusterroles", "") } else { ("roles", call.ns_key()) };
            let role = st.get("rbac.authorization.k8s.io", plural, role_ns, role_name);
            let rules = role.and_then(|r| r["rules"].as_array().cloned()).unwrap_or_default();
            (rules, rbac::allows(rights.as_deref(), &rt.group, plural, "bind", ns))
        }
        _ => return Ok(()),
    };
    if may_skip {
        return Ok(());
    }
    let missing = rbac::missing(rights.as_deref(), &rules, ns);
    if missing.is_empty() {
        return Ok(());
    }
    Err(ApiError::forbidden_named(rt, name, &rbac::escalation_message(&app.user, &missing)))
}

fn success_status(rt: &ResourceType, obj: &Value) -> Value {
    let mut details = json!({
        "name": obj["metadata"]["name"],
        "kind": rt.plural,
        "uid": obj["metadata"]["uid"],
    });
    if !rt.group.is_empty() {
        details["group"] = json!(rt.group);
    }
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details})
}

fn delete(app: &App, call: &Call, body: &[u8]) -> Result<Response, ApiError> {
    let name = call.name.as_deref().unwrap_or_default();
    let options: Value =
        if body.iter().all(u8::is_ascii_whitespace) { Value::Null } else { decode_body(&call.content_type(), body)? };
    let mut st = app.store.lock();
    let old = st
        .get(&call.rt.group, &call.rt.plural, call.ns_key(), name)
        .cloned()
        .map(|o| with_type(&call.rt, o))
        .ok_or_else(|| ApiError::not_found(&call.rt, name))?;
    let pre = &options["preconditions"];
    if let Some(uid) = pre["uid"].as_str()
        && Some(uid) != meta_str(&old, "uid")
    {
        return Err(ApiError::precondition(
            &call.rt,
            name,
            &format!(
                "Precondition failed: UID in precondition: {uid}, UID in object meta: {}",
                meta_str(&old, "uid").unwrap_or_default()
            ),
        ));
    }
    if let Some(rv) = pre["resourceVersion"].as_str()
        && Some(rv) != meta_str(&old, "resourceVersion")
    {
        return Err(ApiError::modified(&call.rt, name));
    }
    if call.rt.group.is_empty() && call.rt.plural == "namespaces" {
        // Namespaces carry `spec.finalizers: [kubernetes]`: a DELETE marks the namespace
        // Terminating and the namespace controller empties it; a second DELETE meanwhile is
        // refused (the real registry's words, two spaces included).
        if old["metadata"]["deletionTimestamp"].is_string() {
            return Err(ApiError::precondition(
                &call.rt,
                name,
                "The system is ensuring all content is removed from this namespace.  Upon completion, this \
                 namespace will automatically be purged by the system.",
            ));
        }
        if call.dry_run() {
            return Ok(json_response(StatusCode::OK, &old));
        }
        let mut marked = old.clone();
        let meta = meta_mut(&mut marked);
        meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
        marked["status"]["phase"] = json!("Terminating");
        let stored = st.commit("", "namespaces", "", name, Some(marked.clone())).unwrap_or(marked);
        st.sweep_namespace(name);
        return Ok(json_response(StatusCode::OK, &with_type(&call.rt, stored)));
    }
    let has_finalizers = old["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty());
    if has_finalizers {
        if old["metadata"]["deletionTimestamp"].is_string() || call.dry_run() {
            return Ok(json_response(StatusCode::OK, &old));
        }
        let mut marked = old.clone();
        let meta = meta_mut(&mut marked);
        meta.insert("deletionTimestamp".into(), json!(now_rfc3339()));
        meta.insert("deletionGracePeriodSeconds".into(), json!(0));
        let stored =
            st.commit(&call.rt.group, &call.rt.plural, call.ns_key(), name, Some(marked.clone())).unwrap_or(marked);
        return Ok(json_response(StatusCode::OK, &with_type(&call.rt, stored)));
    }
    if !call.dry_run() {
        st.commit(&call.rt.group, &call.rt.plural, call.ns_key(), name, None);
    }
    Ok(json_response(StatusCode::OK, &success_status(&call.rt, &old)))
}

fn delete_collection(app: &App, call: &Call) -> Result<Response, ApiError> {
    let (labels, fields) = selectors(call)?;
    let mut st = app.store.lock();
    let doomed: Vec<(String, String, Value)> = st
        .list(&call.rt.group, &call.rt.plural, call.ns.as_deref())
        .map(|(k, o)| (k.2.clone(), k.3.clone(), with_type(&call.rt, o.clone())))
        .filter(|(_, _, o)| labels.matches(o) && fields.matches(o))
        .collect();
    let mut items = Vec::new();
    for (ns, name, obj) in doomed {
        if !call.dry_run() {
            st.commit(&call.rt.group, &call.rt.plural, &ns, &name, None);
        }
        items.push(obj);
    }
    Ok(json_response(
        StatusCode::OK,
        &json!({
            "kind": format!("{}List", call.rt.kind),
            "apiVersion": call.rt.api_version(),
            "metadata": {"resourceVersion": st.resource_version().to_string()},
            "items": items,
        }),
    ))
}
