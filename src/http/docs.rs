//! Renders the OpenAPI document as one static HTML page, so the reference needs no JavaScript,
//! no CDN and nothing outside the binary.

use serde_json::Value;
use std::fmt::Write;
use std::sync::{Arc, OnceLock};

use axum::body::Bytes;

use super::error::ApiError;

/// `/api/openapi.json` and `/api/docs`, made on the first request for either and kept.
///
/// Not at start-up: making them unpacks the embedded document (0.4 MiB), parses it into a
/// `serde_json::Value` tree and renders the page from it — short-lived allocations that jemalloc
/// keeps (dirty) for seconds after start (issue "Edge footprint"), for pages most servers never
/// serve.
#[derive(Debug, Default)]
pub struct ApiDocs(OnceLock<Result<Rendered, String>>);

/// The document (pretty JSON) and its reference page; `Bytes`, so each answer shares them.
#[derive(Debug, Clone)]
pub struct Rendered {
    pub json: Bytes,
    pub html: Bytes,
}

impl ApiDocs {
    /// The rendered pair, making it on a blocking thread the first time (tens of milliseconds).
    pub async fn get(self: &Arc<Self>) -> Result<Rendered, ApiError> {
        let made = match self.0.get() {
            Some(made) => made.clone(),
            None => {
                let docs = self.clone();
                tokio::task::spawn_blocking(move || docs.0.get_or_init(render).clone())
                    .await
                    .map_err(|e| ApiError::internal(format!("rendering the API document failed: {e}")))?
            }
        };
        made.map_err(|e| ApiError::internal(format!("cannot render the API document: {e}")))
    }
}

/// The committed document (`web/src/api/openapi.json`, gzipped by build.rs): what the server
/// serves. `tests/it/schema.rs` holds it equal to [`generated`].
static SNAPSHOT_GZ: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/openapi.json.gz"));

fn render() -> Result<Rendered, String> {
    let mut json = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(SNAPSHOT_GZ), &mut json)
        .map_err(|e| format!("the embedded document does not decompress: {e}"))?;
    let doc: Value = serde_json::from_slice(&json).map_err(|e| format!("the embedded document is not JSON: {e}"))?;
    let html = reference_html(&doc);
    Ok(Rendered { json: json.into(), html: html.into() })
}

/// The document the handlers describe, with the shared answers: what `web/src/api/openapi.json`
/// must hold (pretty JSON and a newline). Not used by the server (see `http::api_router`).
pub fn generated() -> Value {
    let mut doc = serde_json::to_value(super::api_document()).unwrap_or_default();
    add_shared_answers(&mut doc);
    doc
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Resolves a local `$ref` such as `#/components/schemas/ErrorBody`.
fn resolve<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix("#/")) {
        Some(path) => path.split('/').fold(doc, |node, part| node.get(part).unwrap_or(&Value::Null)),
        None => v,
    }
}

fn schema_block(doc: &Value, schema: &Value) -> String {
    let name = schema.get("$ref").and_then(Value::as_str).map(|r| r.rsplit('/').next().unwrap_or(r).to_string());
    let body = serde_json::to_string_pretty(resolve(doc, schema)).unwrap_or_default();
    match name {
        Some(n) => format!("<details><summary><code>{}</code></summary><pre>{}</pre></details>", esc(&n), esc(&body)),
        None => format!("<pre>{}</pre>", esc(&body)),
    }
}

pub fn reference_html(doc: &Value) -> String {
    let title = doc.pointer("/info/title").and_then(Value::as_str).unwrap_or("API");
    let version = doc.pointer("/info/version").and_then(Value::as_str).unwrap_or("");
    let mut out = String::new();
    let _ = write!(
        out,
        "<!doctype html><html lang=en><meta charset=utf-8><meta name=viewport content='width=device-width'>\
<title>{t} reference</title><style>body{{font:15px/1.5 system-ui,sans-serif;max-width:60rem;margin:2rem auto;padding:0 1rem;color:#1b1f24}}\
h2{{margin-top:2.5rem;border-bottom:1px solid #ddd}}.op{{margin:1.2rem 0;padding:.6rem 1rem;border-left:4px solid #8a9}}\
.m{{font-weight:700;text-transform:uppercase;margin-right:.5rem}}pre{{background:#f5f6f8;padding:.6rem;overflow:auto;font-size:13px}}\
code{{background:#f5f6f8;padding:0 .2rem}}table{{border-collapse:collapse}}td,th{{padding:.2rem .6rem;border-bottom:1px solid #eee;text-align:left}}</style>\
<h1>{t} <small>{v}</small></h1><p>Machine-readable: <a href=/api/openapi.json>/api/openapi.json</a>. Errors always have the body \
<code>{{\"error\":{{\"code\",\"message\",\"details\",\"request_id\"}}}}</code>.</p>",
        t = esc(title),
        v = esc(version)
    );
    if let Some(codes) = doc.pointer("/components/schemas/ErrorCode/enum").and_then(Value::as_array) {
        let codes: Vec<String> =
            codes.iter().filter_map(Value::as_str).map(|c| format!("<code>{}</code>", esc(c))).collect();
        let _ = write!(out, "<p>Error codes (<code>error.code</code>): {}.</p>", codes.join(", "));
    }
    let empty = serde_json::Map::new();
    let paths = doc.get("paths").and_then(Value::as_object).unwrap_or(&empty);
    let mut by_tag: std::collections::BTreeMap<String, Vec<(String, String, &Value)>> = Default::default();
    for (path, item) in paths {
        for (method, op) in item.as_object().unwrap_or(&empty) {
            let tag = op.pointer("/tags/0").and_then(Value::as_str).unwrap_or("other").to_string();
            by_tag.entry(tag).or_default().push((method.clone(), path.clone(), op));
        }
    }
    for (tag, ops) in by_tag {
        let _ = write!(out, "<h2>{}</h2>", esc(&tag));
        for (method, path, op) in ops {
            let summary = op.get("summary").and_then(Value::as_str).unwrap_or("");
            let _ = write!(
                out,
                "<div class=op><p><span class=m>{}</span><code>{}</code> — {}</p>",
                esc(&method),
                esc(&path),
                esc(summary)
            );
            if let Some(d) = op.get("description").and_then(Value::as_str) {
                let _ = write!(out, "<p>{}</p>", esc(d));
            }
            if let Some(params) = op.get("parameters").and_then(Value::as_array) {
                out.push_str("<table><tr><th>parameter</th><th>in</th><th>required</th><th>description</th></tr>");
                for p in params {
                    let _ = write!(
                        out,
                        "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
                        esc(p.get("name").and_then(Value::as_str).unwrap_or("")),
                        esc(p.get("in").and_then(Value::as_str).unwrap_or("")),
                        p.get("required").and_then(Value::as_bool).unwrap_or(false),
                        esc(p.get("description").and_then(Value::as_str).unwrap_or(""))
                    );
                }
                out.push_str("</table>");
            }
            if let Some(schema) = op.pointer("/requestBody/content/application~1json/schema") {
                let _ = write!(out, "<p>Request body:</p>{}", schema_block(doc, schema));
            }
            for (status, resp) in op.get("responses").and_then(Value::as_object).unwrap_or(&empty) {
                let desc = resp.get("description").and_then(Value::as_str).unwrap_or("");
                let _ = write!(out, "<p><b>{}</b> {}</p>", esc(status), esc(desc));
                if let Some(schema) = resp.pointer("/content/application~1json/schema") {
                    out.push_str(&schema_block(doc, schema));
                }
            }
            out.push_str("</div>");
        }
    }
    out.push_str("</html>");
    out
}

fn error_response(description: &str) -> Value {
    serde_json::json!({
        "description": description,
        "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ErrorBody" } } }
    })
}

/// Adds to every operation the answers that come from what it shares with others — the body
/// reader, the token guards, the `Idempotency-Key` header, the header-size limit — so that no
/// route's document can forget one. Route-specific answers (404, 409, 502…) stay on the routes.
pub fn add_shared_answers(doc: &mut Value) {
    let Some(paths) = doc.get_mut("paths").and_then(Value::as_object_mut) else { return };
    for (path, item) in paths.iter_mut() {
        let Some(item) = item.as_object_mut() else { continue };
        for (method, op) in item.iter_mut() {
            if !["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                continue;
            }
            let has_body = op.get("requestBody").is_some();
            for p in op.get_mut("parameters").and_then(Value::as_array_mut).into_iter().flatten() {
                if p.get("name").and_then(Value::as_str) == Some("Idempotency-Key")
                    && let Some(schema) = p.get_mut("schema").and_then(Value::as_object_mut)
                {
                    schema.insert("minLength".into(), 1.into());
                    schema.insert("maxLength".into(), crate::http::idempotency::MAX_KEY_LEN.into());
                }
            }
            let params: Vec<(String, String)> = op
                .get("parameters")
                .and_then(Value::as_array)
                .map(|ps| {
                    ps.iter()
                        .map(|p| {
                            let text = |k: &str| p.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
                            (text("name"), text("in"))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let Some(responses) = op.get_mut("responses").and_then(Value::as_object_mut) else { continue };
            let mut add = |code: &str, description: &str| {
                responses.entry(code.to_string()).or_insert_with(|| error_response(description));
            };
            add("431", "headers_too_large: the request's headers exceed 64 KiB");
            if has_body {
                add("400", "invalid_json: the body is not JSON");
                add("413", "payload_too_large: the body exceeds 1 MiB");
                add("422", "validation_failed: details.errors[{loc,msg,type}] names each field");
            }
            if params.iter().any(|(_, kind)| kind == "query") {
                add("400", "bad_request: the query string cannot be read (e.g. a parameter given twice)");
                add("422", "validation_failed: a query parameter is out of range (loc [\"query\", name])");
            }
            if params.iter().any(|(name, kind)| kind == "header" && name.eq_ignore_ascii_case("Idempotency-Key")) {
                add("400", "bad_request: the Idempotency-Key is not 1-255 printable characters");
                add("409", "a request with this Idempotency-Key is still in progress");
                add("422", "idempotency_key_reused: the key was used with another body");
            }
            if path.starts_with("/api/v1/") && path != "/api/v1/auth/login" {
                add("401", "unauthenticated: no admin token or console session, or an invalid or ended one");
                add("403", "forbidden: an operator token, or a console-cookie request without X-CSRF-Token");
            } else if path.starts_with("/internal/") && path != "/internal/connect/verify" {
                add("401", "unauthenticated: no operator token, or an invalid one");
                add("403", "forbidden: an admin token, or another cluster's data");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn made_on_first_use_then_shared() {
        let docs = Arc::new(ApiDocs::default());
        assert!(docs.0.get().is_none(), "nothing is rendered before a request asks");
        let first = docs.get().await.unwrap();
        let again = docs.get().await.unwrap();
        // The same bytes, not a second rendering or a copy.
        assert_eq!(first.json.as_ptr(), again.json.as_ptr());
        assert_eq!(first.html.as_ptr(), again.html.as_ptr());
        let doc: Value = serde_json::from_slice(&first.json).unwrap();
        assert!(doc.pointer("/paths/~1healthz/get").is_some(), "{}", doc["paths"]);
        assert!(doc.pointer("/components/schemas/ErrorBody").is_some());
        let html = std::str::from_utf8(&first.html).unwrap();
        assert!(html.contains("<code>/healthz</code>") && html.contains("<code>csrf_failed</code>"));
    }
}
