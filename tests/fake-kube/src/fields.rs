//! managedFields: field sets as `fieldsV1`, ownership on updates, and server-side apply with
//! conflict detection. Lists are atomic (as for CRDs that preserve unknown fields).

use std::collections::BTreeSet;

use serde_json::{Map, Value, json};

use crate::resources::ResourceType;

type Path = Vec<String>;
pub(crate) type FieldSet = BTreeSet<Path>;

/// metadata fields the server owns; never part of a manager's set.
const SYSTEM_META: &[&str] = &[
    "name",
    "namespace",
    "generateName",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "managedFields",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

pub(crate) fn field_set(obj: &Value) -> FieldSet {
    let mut out = FieldSet::new();
    let Some(root) = obj.as_object() else {
        return out;
    };
    for (k, v) in root {
        match k.as_str() {
            "apiVersion" | "kind" => {}
            "metadata" => {
                if let Some(meta) = v.as_object() {
                    for (mk, mv) in meta {
                        if !SYSTEM_META.contains(&mk.as_str()) && !mv.is_null() {
                            let p = vec!["metadata".to_string(), mk.clone()];
                            collect(mv, p, &mut out);
                        }
                    }
                }
            }
            _ if v.is_null() => {}
            _ => collect(v, vec![k.clone()], &mut out),
        }
    }
    out
}

fn collect(v: &Value, path: Path, out: &mut FieldSet) {
    if let Value::Object(m) = v {
        for (k, child) in m {
            if child.is_null() {
                continue;
            }
            let mut p = path.clone();
            p.push(k.clone());
            collect(child, p, out);
        }
    }
    out.insert(path);
}

pub(crate) fn encode(set: &FieldSet) -> Value {
    let mut root = Map::new();
    for path in set {
        let mut node = &mut root;
        for part in path {
            let entry = node.entry(format!("f:{part}")).or_insert_with(|| Value::Object(Map::new()));
            if !entry.is_object() {
                *entry = Value::Object(Map::new());
            }
            let Value::Object(next) = entry else { unreachable!("made an object above") };
            node = next;
        }
        let has_children = set.range(path.clone()..).nth(1).is_some_and(|next| next.starts_with(path));
        if has_children {
            node.insert(".".into(), json!({}));
        }
    }
    Value::Object(root)
}

pub(crate) fn decode(v: &Value) -> FieldSet {
    fn rec(node: &Value, prefix: &Path, out: &mut FieldSet) {
        let Some(m) = node.as_object() else { return };
        for (k, child) in m {
            if k == "." {
                continue;
            }
            if let Some(name) = k.strip_prefix("f:") {
                let mut p = prefix.clone();
                p.push(name.to_string());
                let leaf = child.as_object().is_none_or(|c| c.is_empty() || c.contains_key("."));
                if leaf && !(p.len() == 1 && p[0] == "metadata") {
                    out.insert(p.clone());
                }
                rec(child, &p, out);
            } else if !prefix.is_empty() {
                // k:/v:/i: list members: owning one owns the (atomic) list.
                out.insert(prefix.clone());
            }
        }
    }
    let mut out = FieldSet::new();
    rec(v, &Vec::new(), &mut out);
    out
}

pub(crate) fn value_at<'a>(obj: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(obj, |cur, p| cur.get(p))
}

fn remove_at(obj: &mut Value, path: &[String]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut cur = obj;
    for p in parents {
        match cur.get_mut(p) {
            Some(next) => cur = next,
            None => return,
        }
    }
    if let Value::Object(m) = cur {
        m.remove(last);
    }
}

fn path_string(path: &[String]) -> String {
    path.iter().map(|p| format!(".{p}")).collect()
}

#[derive(Debug, Clone)]
struct Entry {
    manager: String,
    operation: String,
    api_version: String,
    time: String,
    subresource: Option<String>,
    fields: FieldSet,
}

fn read_entries(obj: &Value) -> Vec<Entry> {
    obj["metadata"]["managedFields"]
        .as_array()
        .map(|a| a.as_slice())
        .unwrap_or_default()
        .iter()
        .map(|e| Entry {
            manager: e["manager"].as_str().unwrap_or_default().to_string(),
            operation: e["operation"].as_str().unwrap_or("Update").to_string(),
            api_version: e["apiVersion"].as_str().unwrap_or_default().to_string(),
            time: e["time"].as_str().unwrap_or_default().to_string(),
            subresource: e["subresource"].as_str().map(str::to_string),
            fields: decode(&e["fieldsV1"]),
        })
        .collect()
}

fn write_entries(obj: &mut Value, entries: &[Entry]) {
    let list: Vec<Value> = entries
        .iter()
        .filter(|e| !e.fields.is_empty())
        .map(|e| {
            let mut v = json!({
                "manager": e.manager,
                "operation": e.operation,
                "apiVersion": e.api_version,
                "time": e.time,
                "fieldsType": "FieldsV1",
                "fieldsV1": encode(&e.fields),
            });
            if let Some(s) = &e.subresource {
                v["subresource"] = json!(s);
            }
            v
        })
        .collect();
    let meta = crate::util::meta_mut(obj);
    if list.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// Who wrote what: after a create, update or non-apply patch by `manager`.
/// `old` carries the managedFields that were stored; `new`'s own managedFields are replaced.
pub(crate) fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    subresource: Option<&str>,
    now: &str,
) {
    let empty = Value::Null;
    let old_obj = old.unwrap_or(&empty);
    let old_set = field_set(old_obj);
    let new_set = field_set(new);
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| match (value_at(old_obj, p), value_at(new, p)) {
            (Some(Value::Object(_)), Some(Value::Object(_))) => false,
            (a, b) => a != b,
        })
        .cloned()
        .collect();
    let removed: FieldSet = old_set.difference(&new_set).cloned().collect();
    let mut entries = read_entries(old_obj);
    let is_mine =
        |e: &Entry| e.manager == manager && e.operation == "Update" && e.subresource.as_deref() == subresource;
    for e in entries.iter_mut() {
        e.fields.retain(|p| !removed.contains(p));
        if !is_mine(e) {
            e.fields.retain(|p| !changed.contains(p));
        }
    }
    if !changed.is_empty() {
        match entries.iter_mut().find(|e| is_mine(e)) {
            Some(e) => {
                e.fields.extend(changed);
                e.time = now.to_string();
                e.api_version = api_version.to_string();
            }
            None => entries.push(Entry {
                manager: manager.to_string(),
                operation: "Update".into(),
                api_version: api_version.to_string(),
                time: now.to_string(),
                subresource: subresource.map(str::to_string),
                fields: changed,
            }),
        }
    }
    write_entries(new, &entries);
}

/// The applied configuration, reduced to what a manager may own on this endpoint.
fn applied_view(rt: &ResourceType, applied: &Value, subresource: Option<&str>) -> Value {
    let mut a = applied.clone();
    if let Value::Object(m) = &mut a {
        if rt.status_subresource {
            if subresource == Some("status") {
                m.retain(|k, _| matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"));
            } else {
                m.remove("status");
            }
        }
        if let Some(Value::Object(meta)) = m.get_mut("metadata") {
            meta.retain(|k, _| {
                matches!(k.as_str(), "name" | "namespace" | "labels" | "annotations" | "finalizers" | "ownerReferences")
            });
        }
    }
    a
}

fn deep_merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, pv) in p {
                if pv.is_null() {
                    continue;
                }
                match t.get_mut(k) {
                    Some(tv) if tv.is_object() && pv.is_object() => deep_merge(tv, pv),
                    _ => {
                        t.insert(k.clone(), pv.clone());
                    }
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

/// Conflicts of a server-side apply: (manager, field path) pairs.
pub(crate) type Conflicts = Vec<(String, String)>;

/// Server-side apply of `applied` by `manager` onto `live` (`None`: the object is new, and
/// `skeleton` is its starting point). Returns the new object or the conflicts.
pub(crate) fn apply(
    rt: &ResourceType,
    live: &Value,
    applied: &Value,
    manager: &str,
    force: bool,
    subresource: Option<&str>,
    now: &str,
) -> Result<Value, Conflicts> {
    let applied = applied_view(rt, applied, subresource);
    let new_set = field_set(&applied);
    let mut obj = live.clone();
    let mut entries = read_entries(live);
    let is_mine = |e: &Entry| e.manager == manager && e.operation == "Apply" && e.subresource.as_deref() == subresource;
    let mut conflicts: Conflicts = Vec::new();
    let mut stolen: Vec<(usize, Path)> = Vec::new();
    for (i, e) in entries.iter().enumerate() {
        if is_mine(e) || e.manager == manager {
            continue;
        }
        for p in new_set.intersection(&e.fields) {
            match (value_at(live, p), value_at(&applied, p)) {
                (Some(Value::Object(_)), Some(Value::Object(_))) => {}
                (a, b) if a == b => {}
                _ => {
                    conflicts.push((e.manager.clone(), path_string(p)));
                    stolen.push((i, p.clone()));
                }
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts);
    }
    for (i, p) in stolen {
        if let Some(e) = entries.get_mut(i) {
            e.fields.remove(&p);
        }
    }
    let old_set = entries.iter().find(|e| is_mine(e)).map(|e| e.fields.clone()).unwrap_or_default();
    let others: FieldSet = entries.iter().filter(|e| !is_mine(e)).flat_map(|e| e.fields.iter().cloned()).collect();
    // Fields this manager applied before and no longer does, and nobody else owns, go away.
    let mut dropped: Vec<&Path> = old_set.difference(&new_set).collect();
    dropped.sort_by_key(|p| std::cmp::Reverse(p.len()));
    for p in dropped {
        let kept_by_others = others.iter().any(|o| o.starts_with(p));
        let kept_by_me = new_set.iter().any(|o| o.starts_with(p));
        if !kept_by_others && !kept_by_me {
            remove_at(&mut obj, p);
        }
    }
    deep_merge(&mut obj, &applied);
    match entries.iter_mut().find(|e| is_mine(e)) {
        Some(e) => {
            if e.fields != new_set {
                e.fields = new_set;
                e.time = now.to_string();
            }
            e.api_version = rt.api_version();
        }
        None => entries.push(Entry {
            manager: manager.to_string(),
            operation: "Apply".into(),
            api_version: rt.api_version(),
            time: now.to_string(),
            subresource: subresource.map(str::to_string),
            fields: new_set,
        }),
    }
    write_entries(&mut obj, &entries);
    Ok(obj)
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn fields_v1_round_trip() {
        let obj = json!({"apiVersion": "v1", "kind": "X", "metadata": {"name": "a",
            "labels": {"app": "x"}}, "spec": {"a": 1, "b": {"c": [1, 2]}}});
        let set = field_set(&obj);
        let enc = encode(&set);
        assert_eq!(
            enc,
            json!({"f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                   "f:spec": {".": {}, "f:a": {}, "f:b": {".": {}, "f:c": {}}}})
        );
        assert_eq!(decode(&enc), set);
    }
}
