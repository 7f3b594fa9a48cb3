//! Renders the OpenAPI document as one static HTML page, so the reference needs no JavaScript,
//! no CDN and nothing outside the binary.

use serde_json::Value;
use std::fmt::Write;

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
