//! `meta.k8s.io/v1` Tables for `kubectl get`: the columns kubectl shows for the common kinds.

use serde_json::{Value, json};

use crate::resources::ResourceType;
use crate::util::{human_age, json_path};

/// True when the Accept header asks for `as=Table`.
pub(crate) fn wants_table(accept: &str) -> bool {
    accept.split(',').any(|part| part.split(';').any(|p| p.trim() == "as=Table"))
}

fn col(name: &str, ty: &str, format: &str, description: &str) -> Value {
    json!({"name": name, "type": ty, "format": format, "description": description, "priority": 0})
}

fn age_col() -> Value {
    col(
        "Age",
        "string",
        "",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
    )
}

pub(crate) fn columns(rt: &ResourceType) -> Vec<Value> {
    let name = col("Name", "string", "name", "Name must be unique within a namespace.");
    let mut cols = vec![name];
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "nodes") => cols.extend([
            col("Status", "string", "", "The status of the node"),
            col("Roles", "string", "", "The roles of the node"),
            age_col(),
            col("Version", "string", "", "Kubelet Version reported by the node."),
        ]),
        ("", "namespaces") => cols.extend([col("Status", "string", "", "The status of the namespace"), age_col()]),
        ("", "secrets") => cols.extend([
            col("Type", "string", "", "The type of the secret"),
            col("Data", "string", "", "The number of entries in the secret"),
            age_col(),
        ]),
        ("node.k8s.io", "runtimeclasses") => {
            cols.extend([col("Handler", "string", "", "The underlying runtime and configuration"), age_col()])
        }
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            cols.push(col("Created At", "date", "", "CreationTimestamp of the CustomResourceDefinition"))
        }
        ("apps", "deployments") => cols.extend([
            col("Ready", "string", "", "Number of the pod with ready state"),
            col(
                "Up-to-date",
                "string",
                "",
                "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
            ),
            col(
                "Available",
                "string",
                "",
                "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
            ),
            age_col(),
        ]),
        _ => {
            // A CRD's own columns replace the default Age column, as on a real server.
            for (n, ty, _, priority) in &rt.printer_columns {
                let mut c = col(n, ty, "", "");
                c["priority"] = json!(priority);
                cols.push(c);
            }
            if rt.printer_columns.is_empty() {
                cols.push(age_col());
            }
        }
    }
    cols
}

fn node_status(o: &Value) -> String {
    let ready = o["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
        .map(|c| c["status"] == "True");
    let mut s = match ready {
        Some(true) => "Ready".to_string(),
        Some(false) => "NotReady".to_string(),
        None => "Unknown".to_string(),
    };
    if o["spec"]["unschedulable"] == true {
        s.push_str(",SchedulingDisabled");
    }
    s
}

fn node_roles(o: &Value) -> String {
    let mut roles: Vec<&str> = o["metadata"]["labels"]
        .as_object()
        .map(|l| {
            l.keys().filter_map(|k| k.strip_prefix("node-role.kubernetes.io/")).filter(|r| !r.is_empty()).collect()
        })
        .unwrap_or_default();
    roles.sort_unstable();
    if roles.is_empty() { "<none>".into() } else { roles.join(",") }
}

fn cells(rt: &ResourceType, o: &Value) -> Vec<Value> {
    let name = o["metadata"]["name"].clone();
    let age = || json!(human_age(o["metadata"]["creationTimestamp"].as_str().unwrap_or("")));
    let num = |v: &Value| v.as_i64().unwrap_or(0);
    match (rt.group.as_str(), rt.plural.as_str()) {
        ("", "nodes") => vec![
            name,
            json!(node_status(o)),
            json!(node_roles(o)),
            age(),
            o["status"]["nodeInfo"]["kubeletVersion"].clone(),
        ],
        ("", "namespaces") => vec![name, o["status"]["phase"].clone(), age()],
        ("", "secrets") => {
            vec![name, o["type"].clone(), json!(o["data"].as_object().map(|d| d.len()).unwrap_or(0)), age()]
        }
        ("node.k8s.io", "runtimeclasses") => vec![name, o["handler"].clone(), age()],
        ("apiextensions.k8s.io", "customresourcedefinitions") => {
            vec![name, o["metadata"]["creationTimestamp"].clone()]
        }
        ("apps", "deployments") => vec![
            name,
            json!(format!("{}/{}", num(&o["status"]["readyReplicas"]), num(&o["spec"]["replicas"]))),
            json!(num(&o["status"]["updatedReplicas"])),
            json!(num(&o["status"]["availableReplicas"])),
            age(),
        ],
        _ => {
            let mut c = vec![name];
            for (_, ty, path, _) in &rt.printer_columns {
                let v = json_path(o, path).cloned().unwrap_or(Value::Null);
                // Date columns are shown as ages, like the real server's table convertor.
                c.push(match (ty.as_str(), v.as_str()) {
                    ("date", Some(t)) => json!(human_age(t)),
                    _ => v,
                });
            }
            if rt.printer_columns.is_empty() {
                c.push(age());
            }
            c
        }
    }
}

fn row(rt: &ResourceType, o: &Value) -> Value {
    json!({
        "cells": cells(rt, o),
        "object": {
            "kind": "PartialObjectMetadata",
            "apiVersion": "meta.k8s.io/v1",
            "metadata": o["metadata"],
        }
    })
}

/// A Table of `objects`; watch events after the first leave the column definitions out.
pub(crate) fn table(rt: &ResourceType, objects: &[&Value], meta: Value, with_columns: bool) -> Value {
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": meta,
        "columnDefinitions": if with_columns { columns(rt) } else { Vec::new() },
        "rows": objects.iter().map(|o| row(rt, o)).collect::<Vec<_>>(),
    })
}
