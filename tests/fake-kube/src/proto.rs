//! Just enough Kubernetes protobuf to read what kubectl's typed clients send for simple kinds
//! (`kubectl create namespace|secret|configmap|serviceaccount`, `kubectl auth can-i`): the `k8s\0`
//! envelope (`runtime.Unknown`), ObjectMeta, and Namespace, Secret, ConfigMap, ServiceAccount,
//! SelfSubjectAccessReview and SelfSubjectRulesReview.

use base64::Engine;
use serde_json::{Map, Value, json};

pub(crate) const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
const MAGIC: &[u8] = b"k8s\x00";

enum Wire<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

fn varint(buf: &[u8], pos: &mut usize) -> Result<u64, String> {
    let mut out = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(*pos).ok_or("truncated varint")?;
        *pos += 1;
        out |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Ok(out);
        }
    }
    Err("varint too long".into())
}

fn fields(buf: &[u8]) -> Result<Vec<(u64, Wire<'_>)>, String> {
    let mut pos = 0;
    let mut out = Vec::new();
    while pos < buf.len() {
        let key = varint(buf, &mut pos)?;
        let (field, wire) = (key >> 3, key & 7);
        let value = match wire {
            0 => Wire::Varint(varint(buf, &mut pos)?),
            1 => {
                pos += 8;
                Wire::Fixed
            }
            2 => {
                let len = usize::try_from(varint(buf, &mut pos)?).map_err(|e| e.to_string())?;
                let end = pos.checked_add(len).filter(|e| *e <= buf.len()).ok_or("truncated field")?;
                let b = &buf[pos..end];
                pos = end;
                Wire::Bytes(b)
            }
            5 => {
                pos += 4;
                Wire::Fixed
            }
            w => return Err(format!("unsupported wire type {w}")),
        };
        out.push((field, value));
    }
    if pos > buf.len() {
        return Err("truncated message".into());
    }
    Ok(out)
}

fn string(b: &[u8]) -> Result<String, String> {
    String::from_utf8(b.to_vec()).map_err(|e| e.to_string())
}

/// A `map<string, string>` (or bytes, base64-encoded as in JSON) entry.
fn map_entry(b: &[u8], bytes_value: bool) -> Result<(String, Value), String> {
    let (mut k, mut v) = (String::new(), Value::String(String::new()));
    for (f, w) in fields(b)? {
        if let Wire::Bytes(x) = w {
            match f {
                1 => k = string(x)?,
                2 if bytes_value => v = json!(base64::engine::general_purpose::STANDARD.encode(x)),
                2 => v = json!(string(x)?),
                _ => {}
            }
        }
    }
    Ok((k, v))
}

fn insert_map(obj: &mut Map<String, Value>, key: &str, entry: (String, Value)) {
    if let Value::Object(m) = obj.entry(key).or_insert_with(|| json!({})) {
        m.insert(entry.0, entry.1);
    }
}

fn push(obj: &mut Map<String, Value>, key: &str, v: Value) {
    if let Value::Array(a) = obj.entry(key).or_insert_with(|| json!([])) {
        a.push(v);
    }
}

fn object_meta(b: &[u8]) -> Result<Value, String> {
    let mut m = Map::new();
    for (f, w) in fields(b)? {
        match (f, w) {
            (1, Wire::Bytes(x)) => drop(m.insert("name".into(), json!(string(x)?))),
            (2, Wire::Bytes(x)) => drop(m.insert("generateName".into(), json!(string(x)?))),
            (3, Wire::Bytes(x)) => drop(m.insert("namespace".into(), json!(string(x)?))),
            (6, Wire::Bytes(x)) => drop(m.insert("resourceVersion".into(), json!(string(x)?))),
            (11, Wire::Bytes(x)) => insert_map(&mut m, "labels", map_entry(x, false)?),
            (12, Wire::Bytes(x)) => insert_map(&mut m, "annotations", map_entry(x, false)?),
            (14, Wire::Bytes(x)) => push(&mut m, "finalizers", json!(string(x)?)),
            _ => {}
        }
    }
    Ok(Value::Object(m))
}

fn local_ref(b: &[u8]) -> Result<Value, String> {
    let mut name = String::new();
    for (f, w) in fields(b)? {
        if let (1, Wire::Bytes(x)) = (f, w) {
            name = string(x)?;
        }
    }
    Ok(json!({"name": name}))
}

fn body(kind: &str, raw: &[u8]) -> Result<Value, String> {
    let mut o = Map::new();
    for (f, w) in fields(raw)? {
        match (kind, f, w) {
            (_, 1, Wire::Bytes(x)) => drop(o.insert("metadata".into(), object_meta(x)?)),
            ("Namespace", 2, Wire::Bytes(x)) => {
                let mut fins = Vec::new();
                for (ff, ww) in fields(x)? {
                    if let (1, Wire::Bytes(s)) = (ff, ww) {
                        fins.push(json!(string(s)?));
                    }
                }
                o.insert("spec".into(), json!({"finalizers": fins}));
            }
            ("Secret", 2, Wire::Bytes(x)) => insert_map(&mut o, "data", map_entry(x, true)?),
            ("Secret", 3, Wire::Bytes(x)) => drop(o.insert("type".into(), json!(string(x)?))),
            ("Secret", 4, Wire::Bytes(x)) => insert_map(&mut o, "stringData", map_entry(x, false)?),
            ("Secret", 5, Wire::Varint(v)) => drop(o.insert("immutable".into(), json!(v != 0))),
            ("ConfigMap", 2, Wire::Bytes(x)) => insert_map(&mut o, "data", map_entry(x, false)?),
            ("ConfigMap", 3, Wire::Bytes(x)) => insert_map(&mut o, "binaryData", map_entry(x, true)?),
            ("ConfigMap", 4, Wire::Varint(v)) => drop(o.insert("immutable".into(), json!(v != 0))),
            ("SelfSubjectAccessReview", 2, Wire::Bytes(x)) => {
                let mut spec = Map::new();
                for (ff, ww) in fields(x)? {
                    if let (1, Wire::Bytes(ra)) = (ff, ww) {
                        let mut attrs = Map::new();
                        for (k, v) in fields(ra)? {
                            let name = match k {
                                1 => "namespace",
                                2 => "verb",
                                3 => "group",
                                4 => "version",
                                5 => "resource",
                                6 => "subresource",
                                7 => "name",
                                _ => continue,
                            };
                            if let Wire::Bytes(b) = v {
                                attrs.insert(name.into(), json!(string(b)?));
                            }
                        }
                        spec.insert("resourceAttributes".into(), Value::Object(attrs));
                    }
                }
                o.insert("spec".into(), Value::Object(spec));
            }
            ("SelfSubjectRulesReview", 2, Wire::Bytes(x)) => {
                let mut spec = Map::new();
                for (ff, ww) in fields(x)? {
                    if let (1, Wire::Bytes(ns)) = (ff, ww) {
                        spec.insert("namespace".into(), json!(string(ns)?));
                    }
                }
                o.insert("spec".into(), Value::Object(spec));
            }
            ("ServiceAccount", 3, Wire::Bytes(x)) => push(&mut o, "imagePullSecrets", local_ref(x)?),
            ("ServiceAccount", 4, Wire::Varint(v)) => {
                drop(o.insert("automountServiceAccountToken".into(), json!(v != 0)))
            }
            _ => {}
        }
    }
    Ok(Value::Object(o))
}

/// Decodes a protobuf request body into the JSON object it stands for.
pub(crate) fn decode(buf: &[u8]) -> Result<Value, String> {
    let inner = buf.strip_prefix(MAGIC).ok_or("protobuf body without the k8s envelope")?;
    let (mut api_version, mut kind, mut raw) = (String::new(), String::new(), &[][..]);
    for (f, w) in fields(inner)? {
        match (f, w) {
            (1, Wire::Bytes(tm)) => {
                for (ff, ww) in fields(tm)? {
                    match (ff, ww) {
                        (1, Wire::Bytes(x)) => api_version = string(x)?,
                        (2, Wire::Bytes(x)) => kind = string(x)?,
                        _ => {}
                    }
                }
            }
            (2, Wire::Bytes(x)) => raw = x,
            _ => {}
        }
    }
    if !matches!(
        kind.as_str(),
        "Namespace" | "Secret" | "ConfigMap" | "ServiceAccount" | "SelfSubjectAccessReview" | "SelfSubjectRulesReview"
    ) {
        return Err(format!(
            "the fake reads protobuf only for Namespace, Secret, ConfigMap, ServiceAccount and the self-subject \
             reviews, not {kind:?}"
        ));
    }
    let mut obj = body(&kind, raw)?;
    obj["apiVersion"] = json!(api_version);
    obj["kind"] = json!(kind);
    if kind == "Secret"
        && let Some(Value::Object(sd)) = obj.as_object_mut().and_then(|o| o.remove("stringData"))
    {
        // The real server folds stringData into data.
        for (k, v) in sd {
            let enc = base64::engine::general_purpose::STANDARD.encode(v.as_str().unwrap_or(""));
            obj["data"][k] = json!(enc);
        }
    }
    Ok(obj)
}
