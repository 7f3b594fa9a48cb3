//! The `kube` crate against the fake, with a client built from the fake's kubeconfig.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use gshare_fake_kube::ClusterSpec;
use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::node::v1::RuntimeClass;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::json;

use super::{CRD_YAML, Harness};

fn sessions(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("gshare.io", "v1", "GShareSession");
    let ar = ApiResource::from_gvk_with_plural(&gvk, "gsharesessions");
    Api::namespaced_with(client.clone(), "gshare-sessions", &ar)
}

fn session(name: &str, user: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "gshare.io/v1", "kind": "GShareSession",
        "metadata": {"name": name, "namespace": "gshare-sessions"},
        "spec": {"user": user},
    }))
    .expect("session object")
}

/// Creates the GShareSession CRD and the gshare-sessions namespace through the kube client.
async fn install_crd(client: &kube::Client) {
    let crd: CustomResourceDefinition = serde_yaml::from_str(CRD_YAML).expect("CRD parses");
    Api::<CustomResourceDefinition>::all(client.clone())
        .create(&PostParams::default(), &crd)
        .await
        .expect("CRD created");
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "gshare-sessions"}})).expect("ns");
    Api::<Namespace>::all(client.clone()).create(&PostParams::default(), &ns).await.expect("namespace created");
}

#[tokio::test]
async fn typed_get_and_list_with_selectors_and_pages() {
    let h = Harness::start(ClusterSpec { nodes: 5, ..ClusterSpec::default() }).await;
    let client = h.kube_client().await;
    let version = client.apiserver_version().await.expect("version");
    assert_eq!(version.git_version, "v1.32.4");

    let ns = Api::<Namespace>::all(client.clone()).get("kube-system").await.expect("kube-system");
    assert_eq!(ns.metadata.uid.as_deref(), Some(h.cluster.kube_system_uid().as_str()));

    let nodes = Api::<Node>::all(client.clone());
    let all = nodes.list(&ListParams::default()).await.expect("list");
    assert_eq!(all.items.len(), 5);
    let gpu = all.items[0].status.as_ref().and_then(|s| s.capacity.as_ref()).expect("capacity");
    assert_eq!(gpu["nvidia.com/gpu"].0, "4");

    let one = nodes.list(&ListParams::default().labels("kubernetes.io/hostname=gpu-node-3")).await.expect("selected");
    assert_eq!(one.items.len(), 1);
    let none = nodes.list(&ListParams::default().labels("gshare.io/gpu!=true")).await.expect("none");
    assert!(none.items.is_empty());

    let page1 = nodes.list(&ListParams::default().limit(2)).await.expect("page 1");
    assert_eq!(page1.items.len(), 2);
    assert_eq!(page1.metadata.remaining_item_count, Some(3));
    let token = page1.metadata.continue_.clone().expect("continue token");
    let page2 = nodes.list(&ListParams::default().limit(10).continue_token(&token)).await.expect("page 2");
    assert_eq!(page2.items.len(), 3);
    assert_eq!(page2.items[0].metadata.name.as_deref(), Some("gpu-node-2"));

    let rc = Api::<RuntimeClass>::all(client.clone()).get("nvidia").await.expect("runtime class");
    assert_eq!(rc.handler, "nvidia");
}

#[tokio::test]
async fn create_patch_apply_on_a_custom_resource() {
    let h = Harness::default().await;
    let client = h.kube_client().await;
    install_crd(&client).await;
    let api = sessions(&client);

    let created = api.create(&PostParams::default(), &session("a", "alice")).await.expect("created");
    assert_eq!(created.metadata.generation, Some(1));
    let uid = created.metadata.uid.clone().expect("uid");

    let merged = api
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"spec": {"gpus": 2}})))
        .await
        .expect("merge patch");
    assert_eq!(merged.data["spec"]["gpus"], 2);
    assert_eq!(merged.data["spec"]["user"], "alice");
    assert_eq!(merged.metadata.generation, Some(2));

    // The element type is kube's re-use of json_patch::Patch, inferred from Patch::Json.
    let patch = serde_json::from_value(json!([
        {"op": "replace", "path": "/spec/user", "value": "bob"},
        {"op": "add", "path": "/metadata/labels", "value": {"team": "x"}},
    ]))
    .expect("json patch");
    let patched = api.patch("a", &PatchParams::default(), &Patch::Json::<()>(patch)).await.expect("json patch applied");
    assert_eq!(patched.data["spec"]["user"], "bob");
    assert_eq!(patched.metadata.labels.as_ref().expect("labels")["team"], "x");

    // Status goes through the subresource only and leaves the generation alone.
    let status = api
        .patch_status("a", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Running"}})))
        .await
        .expect("status patch");
    assert_eq!(status.data["status"]["phase"], "Running");
    assert_eq!(status.metadata.generation, Some(3));
    let ignored = api
        .patch("a", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Bogus"}})))
        .await
        .expect("main-resource patch");
    assert_eq!(ignored.data["status"]["phase"], "Running");

    let applied = api
        .patch("b", &PatchParams::apply("gshare"), &Patch::Apply(session("b", "carol")))
        .await
        .expect("apply creates");
    let rv = applied.metadata.resource_version.clone();
    let again =
        api.patch("b", &PatchParams::apply("gshare"), &Patch::Apply(session("b", "carol"))).await.expect("apply again");
    assert_eq!(again.metadata.resource_version, rv, "an identical apply is a no-op");
    let err = api
        .patch("b", &PatchParams::apply("intruder"), &Patch::Apply(session("b", "mallory")))
        .await
        .expect_err("conflict");
    match err {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 409);
            assert_eq!(s.reason, "Conflict");
            assert!(s.message.contains("conflict with \"gshare\": .spec.user"), "{}", s.message);
        }
        other => panic!("expected a 409, got {other:?}"),
    }
    let forced = api
        .patch("b", &PatchParams::apply("intruder").force(), &Patch::Apply(session("b", "mallory")))
        .await
        .expect("forced apply");
    assert_eq!(forced.data["spec"]["user"], "mallory");

    let got = api.get("a").await.expect("get");
    assert_eq!(got.metadata.uid.as_deref(), Some(uid.as_str()));
    api.delete("a", &Default::default()).await.expect("deleted");
    assert!(api.get_opt("a").await.expect("get_opt").is_none());
}

#[tokio::test]
async fn watcher_sees_added_modified_deleted() {
    let h = Harness::default().await;
    let client = h.kube_client().await;
    install_crd(&client).await;
    let api = sessions(&client);
    api.create(&PostParams::default(), &session("old", "zed")).await.expect("created");

    let mut stream = watcher(api.clone(), watcher::Config::default()).boxed();
    let mut next = async || {
        tokio::time::timeout(Duration::from_secs(30), stream.try_next())
            .await
            .expect("watch event in time")
            .expect("watch ok")
            .expect("stream open")
    };
    assert!(matches!(next().await, watcher::Event::Init));
    match next().await {
        watcher::Event::InitApply(o) => assert_eq!(o.metadata.name.as_deref(), Some("old")),
        other => panic!("expected InitApply, got {other:?}"),
    }
    assert!(matches!(next().await, watcher::Event::InitDone));

    api.create(&PostParams::default(), &session("w", "alice")).await.expect("created");
    match next().await {
        watcher::Event::Apply(o) => assert_eq!(o.data["spec"]["user"], "alice"),
        other => panic!("expected Apply, got {other:?}"),
    }
    api.patch("w", &PatchParams::default(), &Patch::Merge(json!({"spec": {"user": "bob"}}))).await.expect("patched");
    match next().await {
        watcher::Event::Apply(o) => assert_eq!(o.data["spec"]["user"], "bob"),
        other => panic!("expected Apply, got {other:?}"),
    }
    api.delete("w", &Default::default()).await.expect("deleted");
    match next().await {
        watcher::Event::Delete(o) => assert_eq!(o.metadata.name.as_deref(), Some("w")),
        other => panic!("expected Delete, got {other:?}"),
    }
}

#[tokio::test]
async fn knobs_reach_the_kube_client() {
    let h = Harness::default().await;
    let client = h.kube_client().await;
    let nodes = Api::<Node>::all(client.clone());

    h.cluster.knobs().forbid("nodes", true);
    match nodes.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403);
            assert_eq!(s.reason, "Forbidden");
        }
        other => panic!("expected 403, got {other:?}"),
    }
    h.cluster.knobs().forbid("nodes", false);

    h.cluster.knobs().set_unreachable(true);
    match nodes.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => panic!("an unreachable cluster answered: {s:?}"),
        Err(_) => {}
        Ok(_) => panic!("an unreachable cluster answered"),
    }
    h.cluster.knobs().set_unreachable(false);
    nodes.list(&ListParams::default()).await.expect("reachable again");

    // Answers later than the client waits.
    let kc = kube::config::Kubeconfig::read_from(&h.kubeconfig).expect("kubeconfig");
    let mut config = kube::Config::from_custom_kubeconfig(kc, &Default::default()).await.expect("config");
    config.read_timeout = Some(Duration::from_millis(200));
    let impatient = Api::<Node>::all(kube::Client::try_from(config).expect("client"));
    h.cluster.knobs().set_delay(Some(Duration::from_secs(3)));
    assert!(impatient.list(&ListParams::default()).await.is_err());
    h.cluster.knobs().set_delay(None);

    let new_uid = "11111111-2222-4333-8444-555555555555";
    h.cluster.knobs().set_kube_system_uid(new_uid);
    let ns = Api::<Namespace>::all(client.clone()).get("kube-system").await.expect("ns");
    assert_eq!(ns.metadata.uid.as_deref(), Some(new_uid));
    assert_eq!(h.cluster.kube_system_uid(), new_uid);

    assert_eq!(h.cluster.knobs().strip_hami(), 2);
    let node = nodes.get("gpu-node-0").await.expect("node");
    let annotations = node.metadata.annotations.unwrap_or_default();
    assert!(!annotations.keys().any(|k| k.starts_with("hami.io/")));
}
