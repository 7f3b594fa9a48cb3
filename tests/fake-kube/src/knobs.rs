//! Failure knobs: runtime switches a test flips to make the cluster misbehave.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;
use tokio::sync::watch;

use crate::store::Store;
use crate::util::now_rfc3339;

/// (namespace, pod, container, previous) -> the log's bytes.
type Logs = std::collections::BTreeMap<(String, String, String, bool), Vec<u8>>;

struct KnobState {
    unreachable: watch::Sender<bool>,
    delay: Mutex<Option<Duration>>,
    write_delay: Mutex<Option<Duration>>,
    requests: watch::Sender<u64>,
    forbidden: Mutex<BTreeSet<String>>,
    tokens: Mutex<BTreeSet<String>>,
    /// Writes still allowed before the cluster goes away (`None`: no limit).
    writes_left: Mutex<Option<usize>>,
    /// What the user may do (`None`: cluster-admin).
    rights: Mutex<Option<Vec<crate::rbac::Right>>>,
    /// Container logs: (namespace, pod, container, previous) -> bytes.
    logs: Mutex<Logs>,
}

/// Failure knobs of one fake cluster; cheap to clone, every switch takes effect at once.
#[derive(Clone)]
pub struct Knobs {
    state: Arc<KnobState>,
    store: Store,
}

impl std::fmt::Debug for Knobs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Knobs")
            .field("unreachable", &self.is_unreachable())
            .field("delay", &self.delay())
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Knobs {
    pub(crate) fn new(store: Store, token: String) -> Self {
        let (unreachable, _) = watch::channel(false);
        Knobs {
            state: Arc::new(KnobState {
                unreachable,
                delay: Mutex::new(None),
                write_delay: Mutex::new(None),
                requests: watch::channel(0).0,
                forbidden: Mutex::new(BTreeSet::new()),
                tokens: Mutex::new(BTreeSet::from([token])),
                writes_left: Mutex::new(None),
                logs: Mutex::new(std::collections::BTreeMap::new()),
                rights: Mutex::new(None),
            }),
            store,
        }
    }

    /// `true`: new connections are accepted and closed at once, open ones (watches included)
    /// are cut. Clients see connection errors, as with a host that went away.
    pub fn set_unreachable(&self, unreachable: bool) {
        self.state.unreachable.send_replace(unreachable);
    }

    pub fn is_unreachable(&self) -> bool {
        *self.state.unreachable.borrow()
    }

    pub(crate) fn unreachable_rx(&self) -> watch::Receiver<bool> {
        self.state.unreachable.subscribe()
    }

    /// After `n` more writes (create, update, patch, delete) the cluster becomes unreachable: the
    /// next write's connection is cut before it is answered, as a host lost mid-change (`None`: off).
    pub fn unreachable_after_writes(&self, n: Option<usize>) {
        *lock(&self.state.writes_left) = n;
    }

    /// Counts one write; `false` when the budget is spent (the cluster is then unreachable).
    pub(crate) fn take_write(&self) -> bool {
        let mut left = lock(&self.state.writes_left);
        match left.as_mut() {
            None => true,
            Some(0) => {
                *left = None;
                drop(left);
                self.set_unreachable(true);
                false
            }
            Some(n) => {
                *n -= 1;
                true
            }
        }
    }

    /// Every request is answered this much later (`None`: at once).
    pub fn set_delay(&self, delay: Option<Duration>) {
        *lock(&self.state.delay) = delay;
    }

    pub fn delay(&self) -> Option<Duration> {
        *lock(&self.state.delay)
    }

    /// Every write (create, update, patch, delete) is answered this much later (`None`: at once);
    /// reads and access reviews are not slowed.
    pub fn set_write_delay(&self, delay: Option<Duration>) {
        *lock(&self.state.write_delay) = delay;
    }

    pub(crate) fn write_delay(&self) -> Option<Duration> {
        *lock(&self.state.write_delay)
    }

    /// Counts one authenticated request.
    pub(crate) fn count_request(&self) {
        self.state.requests.send_modify(|n| *n += 1);
    }

    /// Authenticated requests so far, as a channel a test can wait on (`wait_for(|n| *n > k)`).
    pub fn requests(&self) -> watch::Receiver<u64> {
        self.state.requests.subscribe()
    }

    /// Every request on this resource (plural, any group) answers 403 Forbidden while on.
    pub fn forbid(&self, resource: &str, forbidden: bool) {
        let mut set = lock(&self.state.forbidden);
        if forbidden {
            set.insert(resource.to_string());
        } else {
            set.remove(resource);
        }
    }

    pub fn is_forbidden(&self, resource: &str) -> bool {
        lock(&self.state.forbidden).contains(resource)
    }

    /// Restricts the user to these rights (`None`: cluster-admin again). Every request, access
    /// review and RBAC write is judged by them, as a real server's authorizer and RBAC storage do.
    pub fn set_rights(&self, rights: Option<Vec<crate::rbac::Right>>) {
        *lock(&self.state.rights) = rights;
    }

    pub(crate) fn rights(&self) -> Option<Vec<crate::rbac::Right>> {
        lock(&self.state.rights).clone()
    }

    /// What `pods/{pod}/log?container={container}` answers (`previous`: the run before the
    /// last restart). The pod must exist for the log to be served.
    pub fn set_pod_log(&self, ns: &str, pod: &str, container: &str, previous: bool, log: impl Into<Vec<u8>>) {
        lock(&self.state.logs).insert((ns.into(), pod.into(), container.into(), previous), log.into());
    }

    pub(crate) fn pod_log(&self, ns: &str, pod: &str, container: &str, previous: bool) -> Option<Vec<u8>> {
        lock(&self.state.logs).get(&(ns.to_string(), pod.to_string(), container.to_string(), previous)).cloned()
    }

    /// Accepts another bearer token (as if a service account token had been issued).
    pub fn allow_token(&self, token: &str) {
        lock(&self.state.tokens).insert(token.to_string());
    }

    /// Stops accepting a bearer token: requests with it get 401.
    pub fn revoke_token(&self, token: &str) {
        lock(&self.state.tokens).remove(token);
    }

    pub(crate) fn token_valid(&self, token: &str) -> bool {
        lock(&self.state.tokens).contains(token)
    }

    /// Gives namespace `kube-system` another uid: the cluster now looks like a different one.
    pub fn set_kube_system_uid(&self, uid: &str) {
        self.store.update("", "v1", "namespaces", None, "kube-system", |ns| {
            ns["metadata"]["uid"] = json!(uid);
        });
    }

    /// Deletes a RuntimeClass (e.g. `nvidia`); `false` if there was none.
    pub fn remove_runtime_class(&self, name: &str) -> bool {
        self.store.delete("node.k8s.io", "v1", "runtimeclasses", None, name).is_some()
    }

    /// Removes HAMi from every node (its annotations and the gpumem resource); returns how many nodes changed.
    pub fn strip_hami(&self) -> usize {
        let mut changed = 0;
        for node in self.store.list("", "v1", "nodes", None) {
            let Some(name) = node["metadata"]["name"].as_str() else {
                continue;
            };
            let has = node["metadata"]["annotations"]
                .as_object()
                .is_some_and(|a| a.keys().any(|k| k.starts_with("hami.io/")));
            if has {
                self.store.update("", "v1", "nodes", None, name, |n| {
                    if let Some(a) = n["metadata"]["annotations"].as_object_mut() {
                        a.retain(|k, _| !k.starts_with("hami.io/"));
                    }
                    // Without HAMi there is no gpumem extended resource either.
                    for field in ["capacity", "allocatable"] {
                        if let Some(r) = n["status"][field].as_object_mut() {
                            r.remove("nvidia.com/gpumem");
                        }
                    }
                });
                changed += 1;
            }
        }
        changed
    }

    /// Flips a node's Ready condition; `false` if there is no such node.
    pub fn set_node_ready(&self, node: &str, ready: bool) -> bool {
        let now = now_rfc3339();
        self.store
            .update("", "v1", "nodes", None, node, |n| {
                let Some(conds) = n["status"]["conditions"].as_array_mut() else {
                    return;
                };
                for c in conds.iter_mut().filter(|c| c["type"] == "Ready") {
                    let (status, reason, message) = if ready {
                        ("True", "KubeletReady", "kubelet is posting ready status")
                    } else {
                        ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status.")
                    };
                    if c["status"] != status {
                        c["lastTransitionTime"] = json!(now);
                    }
                    c["status"] = json!(status);
                    c["reason"] = json!(reason);
                    c["message"] = json!(message);
                    c["lastHeartbeatTime"] = json!(now);
                }
            })
            .is_some()
    }
}
