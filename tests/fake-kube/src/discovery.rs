//! Discovery (`/api`, `/apis`, resource lists), `/version`, and the OpenAPI v3 documents
//! kubectl reads before it writes (to learn that the server validates fields itself).

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::resources::ResourceType;
use crate::util::fnv_hex;

pub(crate) const KUBE_VERSION: &str = "v1.32.4";

pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "32",
        "gitVersion": KUBE_VERSION,
        "gitCommit": "59526cd4867447956156ae3a602fcbac10a2c335",
        "gitTreeState": "clean",
        "buildDate": "2025-04-22T16:02:27Z",
        "goVersion": "go1.23.6",
        "compiler": "gc",
        "platform": "linux/amd64",
        "emulationMajor": "1",
        "emulationMinor": "32",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "31"
    })
}

pub(crate) fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]
    })
}

/// Group name -> versions, in the order types were registered.
fn groups(types: &[ResourceType]) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for t in types.iter().filter(|t| !t.group.is_empty()) {
        let vs = out.entry(t.group.clone()).or_default();
        if !vs.contains(&t.version) {
            vs.push(t.version.clone());
        }
    }
    out
}

fn group_json(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> =
        versions.iter().map(|v| json!({"groupVersion": format!("{name}/{v}"), "version": v})).collect();
    json!({"name": name, "versions": vs, "preferredVersion": vs.first().cloned().unwrap_or(Value::Null)})
}

pub(crate) fn api_group_list(types: &[ResourceType]) -> Value {
    let groups: Vec<Value> = groups(types).iter().map(|(g, vs)| group_json(g, vs)).collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

pub(crate) fn api_group(types: &[ResourceType], group: &str) -> Option<Value> {
    let gs = groups(types);
    let vs = gs.get(group)?;
    let mut g = group_json(group, vs);
    g["kind"] = json!("APIGroup");
    g["apiVersion"] = json!("v1");
    Some(g)
}

pub(crate) fn resource_list(types: &[ResourceType], group: &str, version: &str) -> Option<Value> {
    let mut resources = Vec::new();
    for t in types.iter().filter(|t| t.group == group && t.version == version) {
        let mut r = json!({
            "name": t.plural,
            "singularName": t.singular,
            "namespaced": t.namespaced,
            "kind": t.kind,
            "verbs": t.verbs(),
        });
        if !t.short_names.is_empty() {
            r["shortNames"] = json!(t.short_names);
        }
        if !t.categories.is_empty() {
            r["categories"] = json!(t.categories);
        }
        resources.push(r);
        if t.status_subresource {
            resources.push(json!({
                "name": format!("{}/status", t.plural),
                "singularName": "",
                "namespaced": t.namespaced,
                "kind": t.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if resources.is_empty() {
        return None;
    }
    let gv = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}))
}

/// `api/v1` or `apis/<group>/<version>`: the keys of the OpenAPI v3 index.
fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() { format!("api/{version}") } else { format!("apis/{group}/{version}") }
}

fn schema_id(t: &ResourceType) -> String {
    if t.custom {
        let reversed: Vec<&str> = t.group.split('.').rev().collect();
        format!("{}.{}.{}", reversed.join("."), t.version, t.kind)
    } else {
        let g = if t.group.is_empty() { "core" } else { t.group.split('.').next().unwrap_or("core") };
        format!("io.k8s.api.{g}.{}.{}", t.version, t.kind)
    }
}

pub(crate) fn openapi_index(types: &[ResourceType], crds: &[Value]) -> Value {
    let mut paths = serde_json::Map::new();
    let mut gvs: Vec<(String, String)> = types.iter().map(|t| (t.group.clone(), t.version.clone())).collect();
    gvs.sort();
    gvs.dedup();
    for (g, v) in gvs {
        let doc = openapi_doc(types, &g, &v, crds).unwrap_or(Value::Null);
        let p = gv_path(&g, &v);
        let url = format!("/openapi/v3/{p}?hash={}", fnv_hex(&doc.to_string()));
        paths.insert(p, json!({"serverRelativeURL": url}));
    }
    json!({"paths": paths})
}

fn param(name: &str, ty: &str) -> Value {
    json!({"name": name, "in": "query", "description": name, "schema": {"type": ty, "uniqueItems": true}})
}

fn op(t: &ResourceType, action: &str, id: &str, params: Vec<Value>, body: Option<Vec<&str>>) -> Value {
    let schema_ref = json!({"$ref": format!("#/components/schemas/{}", schema_id(t))});
    let mut o = json!({
        "operationId": format!("{action}{}", t.kind),
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": t.group, "version": t.version, "kind": t.kind},
        "parameters": params,
        "responses": {"200": {"description": "OK", "content": {"application/json": {"schema": schema_ref}}}},
        "tags": [id],
    });
    if let Some(types) = body {
        let content: serde_json::Map<String, Value> = types
            .into_iter()
            .map(|ct| {
                let schema = if ct.contains("patch") {
                    json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"})
                } else {
                    schema_ref.clone()
                };
                (ct.to_string(), json!({"schema": schema}))
            })
            .collect();
        o["requestBody"] = json!({"content": content, "required": true});
    }
    o
}

/// The OpenAPI v3 document of one group-version. `crds` supplies CRD schemas.
pub(crate) fn openapi_doc(types: &[ResourceType], group: &str, version: &str, crds: &[Value]) -> Option<Value> {
    let here: Vec<&ResourceType> = types.iter().filter(|t| t.group == group && t.version == version).collect();
    if here.is_empty() {
        return None;
    }
    let prefix = format!("/{}", gv_path(group, version));
    let write_params =
        || vec![param("dryRun", "string"), param("fieldManager", "string"), param("fieldValidation", "string")];
    let mut patch_params = write_params();
    patch_params.push(param("force", "boolean"));
    // Strategic merge is left out on purpose: kubectl then builds its patch from its own types.
    let patch_types =
        vec!["application/json-patch+json", "application/merge-patch+json", "application/apply-patch+yaml"];
    let mut paths = serde_json::Map::new();
    let mut schemas = serde_json::Map::new();
    for t in &here {
        let base = if t.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", t.plural)
        } else {
            format!("{prefix}/{}", t.plural)
        };
        let id = t.plural.as_str();
        if t.create_only {
            paths.insert(
                base.clone(),
                json!({"post": op(t, "post", id, write_params(), Some(vec!["application/json"]))}),
            );
        } else {
            paths.insert(
                base.clone(),
                json!({
                    "get": op(t, "list", id, vec![param("labelSelector", "string"), param("limit", "integer")], None),
                    "post": op(t, "post", id, write_params(), Some(vec!["application/json"])),
                    "delete": op(t, "deletecollection", id, vec![], None),
                }),
            );
            let item = json!({
                "get": op(t, "get", id, vec![], None),
                "put": op(t, "put", id, write_params(), Some(vec!["application/json"])),
                "patch": op(t, "patch", id, patch_params.clone(), Some(patch_types.clone())),
                "delete": op(t, "delete", id, write_params(), None),
            });
            paths.insert(format!("{base}/{{name}}"), item.clone());
            if t.status_subresource {
                paths.insert(format!("{base}/{{name}}/status"), item);
            }
        }
        let crd_schema = crds
            .iter()
            .find(|c| c["spec"]["group"] == group && c["spec"]["names"]["plural"] == t.plural)
            .and_then(|c| {
                c["spec"]["versions"]
                    .as_array()?
                    .iter()
                    .find(|v| v["name"] == version)
                    .map(|v| v["schema"]["openAPIV3Schema"].clone())
            })
            .filter(Value::is_object);
        let mut schema = crd_schema.unwrap_or_else(|| {
            json!({
                "type": "object",
                "properties": {
                    "apiVersion": {"type": "string"},
                    "kind": {"type": "string"},
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                },
            })
        });
        schema["x-kubernetes-group-version-kind"] = json!([{"group": t.group, "version": t.version, "kind": t.kind}]);
        if let Some(props) = schema.get_mut("properties").and_then(Value::as_object_mut) {
            props.insert(
                "metadata".into(),
                json!({"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]}),
            );
        }
        schemas.insert(schema_id(t), schema);
    }
    schemas.insert(
        "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".into(),
        json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
    );
    schemas.insert("io.k8s.apimachinery.pkg.apis.meta.v1.Patch".into(), json!({"type": "object"}));
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": KUBE_VERSION},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}
