//! `Status` bodies: every failure answers with one, shaped like the real server's.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::resources::ResourceType;

/// An API failure, turned into a `Status` object by its one `IntoResponse`.
#[derive(Debug, Clone)]
pub(crate) struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    fn new(code: u16, reason: &'static str, message: impl Into<String>) -> Self {
        ApiError { code, reason, message: message.into(), details: None }
    }

    fn with_details(mut self, details: Value) -> Self {
        self.details = Some(details);
        self
    }

    fn object_details(rt: &ResourceType, name: &str) -> Value {
        let mut d = json!({"name": name, "kind": rt.plural});
        if !rt.group.is_empty() {
            d["group"] = json!(rt.group);
        }
        d
    }

    pub fn not_found(rt: &ResourceType, name: &str) -> Self {
        Self::new(404, "NotFound", format!("{} \"{name}\" not found", rt.qualified()))
            .with_details(Self::object_details(rt, name))
    }

    pub fn namespace_not_found(ns: &str) -> Self {
        Self::new(404, "NotFound", format!("namespaces \"{ns}\" not found"))
            .with_details(json!({"name": ns, "kind": "namespaces"}))
    }

    pub fn unknown_resource() -> Self {
        Self::new(404, "NotFound", "the server could not find the requested resource").with_details(json!({}))
    }

    pub fn already_exists(rt: &ResourceType, name: &str) -> Self {
        Self::new(409, "AlreadyExists", format!("{} \"{name}\" already exists", rt.qualified()))
            .with_details(Self::object_details(rt, name))
    }

    pub fn modified(rt: &ResourceType, name: &str) -> Self {
        Self::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": the object has been modified; \
                 please apply your changes to the latest version and try again",
                rt.qualified()
            ),
        )
        .with_details(Self::object_details(rt, name))
    }

    pub fn precondition(rt: &ResourceType, name: &str, what: &str) -> Self {
        Self::new(409, "Conflict", format!("Operation cannot be fulfilled on {} \"{name}\": {what}", rt.qualified()))
            .with_details(Self::object_details(rt, name))
    }

    /// Server-side apply conflicts: `(manager, field)` pairs.
    pub fn apply_conflicts(rt: &ResourceType, name: &str, conflicts: &[(String, String)]) -> Self {
        let list: Vec<String> = conflicts.iter().map(|(m, f)| format!("conflict with \"{m}\": {f}")).collect();
        let message = if list.len() == 1 {
            format!("Apply failed with 1 conflict: {}", list[0])
        } else {
            format!("Apply failed with {} conflicts: {}", list.len(), list.join("\n"))
        };
        let causes: Vec<Value> = conflicts
            .iter()
            .map(|(m, f)| {
                json!({"reason": "FieldManagerConflict",
                       "message": format!("conflict with \"{m}\""), "field": f})
            })
            .collect();
        let mut d = Self::object_details(rt, name);
        d["causes"] = json!(causes);
        Self::new(409, "Conflict", message).with_details(d)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(400, "BadRequest", message)
    }

    /// 422 `Invalid` with field causes: `(field, reason, message)`, message like `Required value: ...`.
    pub fn invalid(kind: &str, group: &str, name: &str, causes: &[(&str, &str, String)]) -> Self {
        let qualified = if group.is_empty() { kind.to_string() } else { format!("{kind}.{group}") };
        let parts: Vec<String> = causes.iter().map(|(f, _, m)| format!("{f}: {m}")).collect();
        let joined = if parts.len() == 1 { parts[0].clone() } else { format!("[{}]", parts.join(", ")) };
        let causes: Vec<Value> =
            causes.iter().map(|(f, r, m)| json!({"reason": r, "message": m, "field": f})).collect();
        Self::new(422, "Invalid", format!("{qualified} \"{name}\" is invalid: {joined}"))
            .with_details(json!({"name": name, "group": group, "kind": kind, "causes": causes}))
    }

    pub fn invalid_object(rt: &ResourceType, name: &str, causes: &[(&str, &str, String)]) -> Self {
        Self::invalid(&rt.kind, &rt.group, name, causes)
    }

    pub fn unsupported_media(message: impl Into<String>) -> Self {
        Self::new(415, "UnsupportedMediaType", message)
    }

    pub fn too_large(limit: usize) -> Self {
        Self::new(413, "RequestEntityTooLarge", format!("Request entity too large: limit is {limit}"))
    }

    pub fn unauthorized() -> Self {
        Self::new(401, "Unauthorized", "Unauthorized")
    }

    /// A subresource refused on a named object, as the real server words it:
    /// `pods "x" is forbidden: User "u" cannot get resource "pods/log" in API group "" in the namespace "n"`.
    pub fn forbidden_sub(user: &str, verb: &str, rt: &ResourceType, name: &str, sub: &str, ns: Option<&str>) -> Self {
        let scope = match ns {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} \"{name}\" is forbidden: User \"{user}\" cannot {verb} resource \"{}/{sub}\" in API group \"{}\" {scope}",
                rt.qualified(),
                rt.plural,
                rt.group
            ),
        )
        .with_details(json!({"name": name, "group": rt.group, "kind": rt.plural}))
    }

    /// `<resource> "<name>" is forbidden: <why>` (RBAC storage refusals).
    pub fn forbidden_named(rt: &ResourceType, name: &str, why: &str) -> Self {
        Self::new(403, "Forbidden", format!("{} \"{name}\" is forbidden: {why}", rt.qualified()))
            .with_details(Self::object_details(rt, name))
    }

    /// NamespaceLifecycle: no new content in a Terminating namespace.
    pub fn namespace_terminating(rt: &ResourceType, name: &str, ns: &str) -> Self {
        let mut e = Self::forbidden_named(
            rt,
            name,
            &format!("unable to create new content in namespace {ns} because it is being terminated"),
        );
        if let Some(d) = e.details.as_mut() {
            d["causes"] = json!([{
                "reason": "NamespaceTerminating",
                "message": format!("namespace {ns} is being terminated"),
                "field": "metadata.namespace",
            }]);
        }
        e
    }

    pub fn forbidden(user: &str, verb: &str, rt: &ResourceType, ns: Option<&str>) -> Self {
        let scope = match ns {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        Self::new(
            403,
            "Forbidden",
            format!(
                "{} is forbidden: User \"{user}\" cannot {verb} resource \"{}\" in API group \"{}\" {scope}",
                rt.qualified(),
                rt.plural,
                rt.group
            ),
        )
        .with_details(json!({"group": rt.group, "kind": rt.plural}))
    }

    pub fn method_not_allowed(verb: &str) -> Self {
        Self::new(
            405,
            "MethodNotAllowed",
            format!("the server does not allow this method on the requested resource ({verb})"),
        )
        .with_details(json!({}))
    }

    pub fn gone(message: impl Into<String>) -> Self {
        Self::new(410, "Expired", message)
    }

    pub fn to_status(&self) -> Value {
        let mut s = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            s["details"] = d.clone();
        }
        s
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        json_response(code, &self.to_status())
    }
}

pub(crate) fn json_response(code: StatusCode, body: &Value) -> Response {
    let mut resp = (code, body.to_string()).into_response();
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}
