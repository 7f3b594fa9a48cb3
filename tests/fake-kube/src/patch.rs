//! Strategic merge patch for built-in types: JSON merge patch plus the `$patch`, `$retainKeys`
//! and `$deleteFromPrimitiveList` directives, and merging of the common keyed lists.

use serde_json::{Map, Value};

/// Lists merged by a key field, by field name (from the built-in types' patch tags).
const MERGE_KEYS: &[(&str, &str)] = &[
    ("containers", "name"),
    ("initContainers", "name"),
    ("ephemeralContainers", "name"),
    ("volumes", "name"),
    ("env", "name"),
    ("volumeMounts", "mountPath"),
    ("volumeDevices", "devicePath"),
    ("ports", "containerPort"),
    ("imagePullSecrets", "name"),
    ("conditions", "type"),
    ("ownerReferences", "uid"),
    ("addresses", "type"),
    ("hostAliases", "ip"),
    ("topologySpreadConstraints", "topologyKey"),
];

/// Lists of scalars merged as sets.
const PRIMITIVE_SETS: &[&str] = &["finalizers"];

fn directive(v: &Value) -> Option<&str> {
    v.get("$patch").and_then(Value::as_str)
}

/// Drops directive keys from a value that is inserted whole.
fn clean(v: &Value) -> Value {
    match v {
        Value::Object(m) => {
            Value::Object(m.iter().filter(|(k, _)| !k.starts_with('$')).map(|(k, v)| (k.clone(), clean(v))).collect())
        }
        Value::Array(a) => Value::Array(a.iter().filter(|i| directive(i).is_none()).map(clean).collect()),
        other => other.clone(),
    }
}

pub(crate) fn strategic_merge(target: &mut Value, patch: &Value) -> Result<(), String> {
    let Value::Object(p) = patch else {
        return Err("strategic merge patch must be a JSON object".into());
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(t) = target {
        merge_map(t, p)?;
    }
    Ok(())
}

fn merge_map(target: &mut Map<String, Value>, patch: &Map<String, Value>) -> Result<(), String> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            if let Value::Object(m) = clean(&Value::Object(patch.clone())) {
                *target = m;
            }
            return Ok(());
        }
        Some("delete") => {
            target.clear();
            return Ok(());
        }
        Some("merge") | None => {}
        Some(other) => return Err(format!("unknown patch directive {other:?}")),
    }
    for (k, pv) in patch {
        if let Some(field) = k.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(list)), Value::Array(gone)) = (target.get_mut(field), pv) {
                list.retain(|v| !gone.contains(v));
            }
            continue;
        }
        if k.starts_with('$') {
            continue;
        }
        match pv {
            Value::Null => {
                target.remove(k);
            }
            Value::Object(po) => {
                if directive(pv) == Some("delete") {
                    target.remove(k);
                } else if let Some(Value::Object(to)) = target.get_mut(k) {
                    merge_map(to, po)?;
                } else {
                    target.insert(k.clone(), clean(pv));
                }
            }
            Value::Array(pa) => {
                let replace = pa.iter().any(|i| directive(i) == Some("replace"));
                let key = MERGE_KEYS.iter().find(|(f, _)| f == k).map(|(_, key)| *key);
                match (target.get_mut(k), key) {
                    (Some(Value::Array(ta)), Some(key)) if !replace => merge_list(ta, pa, key)?,
                    (Some(Value::Array(ta)), None) if !replace && PRIMITIVE_SETS.contains(&k.as_str()) => {
                        for v in pa {
                            if !ta.contains(v) {
                                ta.push(v.clone());
                            }
                        }
                    }
                    _ => {
                        target.insert(k.clone(), clean(pv));
                    }
                }
            }
            other => {
                target.insert(k.clone(), other.clone());
            }
        }
    }
    if let Some(Value::Array(keep)) = patch.get("$retainKeys") {
        target.retain(|k, _| keep.iter().any(|v| v.as_str() == Some(k)));
    }
    Ok(())
}

fn merge_list(target: &mut Vec<Value>, patch: &[Value], key: &str) -> Result<(), String> {
    for item in patch {
        let Value::Object(po) = item else {
            target.push(item.clone());
            continue;
        };
        let Some(kv) = po.get(key) else {
            target.push(clean(item));
            continue;
        };
        let pos = target.iter().position(|t| t.get(key) == Some(kv));
        match (directive(item), pos) {
            (Some("delete"), Some(i)) => {
                target.remove(i);
            }
            (Some("delete"), None) => {}
            (_, Some(i)) => {
                if let Value::Object(to) = &mut target[i] {
                    merge_map(to, po)?;
                }
            }
            (_, None) => target.push(clean(item)),
        }
    }
    Ok(())
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merges_keyed_lists_and_directives() {
        let mut t = json!({"spec": {"containers": [{"name": "a", "image": "x"}, {"name": "b"}],
                                     "unschedulable": false},
                           "metadata": {"finalizers": ["f1"], "labels": {"x": "1"}}});
        let p = json!({"spec": {"containers": [{"name": "a", "image": "y"},
                                               {"name": "b", "$patch": "delete"}],
                                "unschedulable": true},
                       "metadata": {"finalizers": ["f2"], "labels": {"x": null}}});
        strategic_merge(&mut t, &p).expect("merges");
        assert_eq!(
            t,
            json!({"spec": {"containers": [{"name": "a", "image": "y"}], "unschedulable": true},
                   "metadata": {"finalizers": ["f1", "f2"], "labels": {}}})
        );
    }
}
