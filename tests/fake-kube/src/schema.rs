//! A custom resource checked against its CRD's `openAPIV3Schema`, as the real API server's
//! structural-schema validation does on create, update, patch and apply: `type`, `enum`,
//! `required`, `minimum`/`maximum`, `properties`, `items`, `additionalProperties`. A `null` for a
//! field that is not `nullable` counts as absent (the real server prunes it). Unknown fields are
//! not pruned here (the real server drops them silently; nothing a client sends depends on it).
//! Causes are worded as the real server words them.

use serde_json::Value;

use crate::status::ApiError;

/// The CRD's schema for `group`/`plural` at `version`, if that CRD is installed.
pub(crate) fn crd_schema<'a>(
    crds: impl Iterator<Item = &'a Value>,
    group: &str,
    plural: &str,
    version: &str,
) -> Option<&'a Value> {
    crds.filter(|c| c["spec"]["group"] == group && c["spec"]["names"]["plural"] == plural)
        .find_map(|c| c["spec"]["versions"].as_array()?.iter().find(|v| v["name"] == version))
        .map(|v| &v["schema"]["openAPIV3Schema"])
        .filter(|s| s.is_object())
}

/// Checks `obj`'s `spec` (and anything else the schema describes but metadata) against `schema`.
pub(crate) fn check(schema: &Value, obj: &Value, kind: &str, group: &str, name: &str) -> Result<(), ApiError> {
    let mut causes = Vec::new();
    if let Some(props) = schema["properties"].as_object() {
        for (key, sub) in props {
            if matches!(key.as_str(), "metadata" | "apiVersion" | "kind" | "status") {
                continue;
            }
            walk(sub, &obj[key.as_str()], key, &mut causes);
        }
    }
    if causes.is_empty() {
        return Ok(());
    }
    let borrowed: Vec<(&str, &str, String)> = causes.iter().map(|(f, r, m)| (f.as_str(), *r, m.clone())).collect();
    Err(ApiError::invalid(kind, group, name, &borrowed))
}

/// Go's `%v` of a JSON value in a cause: strings quoted, the rest as JSON.
fn shown(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        other => other.to_string(),
    }
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn walk(schema: &Value, v: &Value, path: &str, causes: &mut Vec<(String, &'static str, String)>) {
    if v.is_null() && schema["nullable"] != true {
        return;
    }
    if let Some(want) = schema["type"].as_str() {
        let got = type_name(v);
        let fits = got == want || (want == "number" && got == "integer");
        if !fits && !v.is_null() {
            causes.push((
                path.to_string(),
                "FieldValueTypeInvalid",
                format!("Invalid value: \"{got}\": {path} in body must be of type {want}: \"{got}\""),
            ));
            return;
        }
    }
    if let Some(allowed) = schema["enum"].as_array()
        && !allowed.contains(v)
    {
        let list: Vec<String> = allowed.iter().map(shown).collect();
        causes.push((
            path.to_string(),
            "FieldValueNotSupported",
            format!("Unsupported value: {}: supported values: {}", shown(v), list.join(", ")),
        ));
    }
    if let Some(n) = v.as_f64() {
        if let Some(min) = schema["minimum"].as_f64()
            && n < min
        {
            causes.push((
                path.to_string(),
                "FieldValueInvalid",
                format!("Invalid value: {}: {path} in body should be greater than or equal to {min}", shown(v)),
            ));
        }
        if let Some(max) = schema["maximum"].as_f64()
            && n > max
        {
            causes.push((
                path.to_string(),
                "FieldValueInvalid",
                format!("Invalid value: {}: {path} in body should be less than or equal to {max}", shown(v)),
            ));
        }
    }
    match v {
        Value::Object(m) => {
            for req in schema["required"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                if m.get(req).is_none_or(Value::is_null) {
                    causes.push((format!("{path}.{req}"), "FieldValueRequired", "Required value".to_string()));
                }
            }
            let props = schema["properties"].as_object();
            for (key, sub_v) in m {
                let sub_path = format!("{path}.{key}");
                match props.and_then(|p| p.get(key)) {
                    Some(sub) => walk(sub, sub_v, &sub_path, causes),
                    None if schema["additionalProperties"].is_object() => {
                        walk(&schema["additionalProperties"], sub_v, &sub_path, causes)
                    }
                    None => {}
                }
            }
        }
        Value::Array(items) if schema["items"].is_object() => {
            for (i, item) in items.iter().enumerate() {
                walk(&schema["items"], item, &format!("{path}[{i}]"), causes);
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn volumes_schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "volumes": {"type": "array", "items": {"type": "object", "required": ["mode", "mountPath", "name"],
                "properties": {
                    "mode": {"type": "string", "enum": ["ReadWriteOnce", "ReadWriteMany", "ReadOnlyMany"]},
                    "mountPath": {"type": "string"}, "name": {"type": "string"},
                    "readOnly": {"type": "boolean"}, "sizeGb": {"type": "integer", "minimum": 0}}}}}}}})
    }

    #[test]
    fn volumes_are_checked_as_the_api_server_checks_them() {
        let s = volumes_schema();
        let good = json!({"spec": {"volumes": [{"name": "vol_1", "mountPath": "/workspace", "mode": "ReadWriteOnce", "readOnly": false, "sizeGb": 10}]}});
        assert!(check(&s, &good, "GShareSession", "gshare.io", "x").is_ok());
        assert!(check(&s, &json!({"spec": {"volumes": null}}), "GShareSession", "gshare.io", "x").is_ok());
        let bad = json!({"spec": {"volumes": [{"name": "vol_1", "mode": "RWO", "sizeGb": -1}, {"name": "v", "mountPath": "/w", "mode": "ReadOnlyMany", "sizeGb": "10"}]}});
        let e = check(&s, &bad, "GShareSession", "gshare.io", "x").unwrap_err();
        assert_eq!((e.code, e.reason), (422, "Invalid"));
        let details = e.details.unwrap();
        let causes: Vec<String> = details["causes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| format!("{}: {}", c["field"].as_str().unwrap(), c["message"].as_str().unwrap()))
            .collect();
        assert_eq!(
            causes,
            [
                "spec.volumes[0].mountPath: Required value",
                "spec.volumes[0].mode: Unsupported value: \"RWO\": supported values: \"ReadWriteOnce\", \"ReadWriteMany\", \"ReadOnlyMany\"",
                "spec.volumes[0].sizeGb: Invalid value: -1: spec.volumes[0].sizeGb in body should be greater than or equal to 0",
                "spec.volumes[1].sizeGb: Invalid value: \"string\": spec.volumes[1].sizeGb in body must be of type integer: \"string\"",
            ]
        );
    }
}
