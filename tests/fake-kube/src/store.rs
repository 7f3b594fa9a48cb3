//! The object store: every object as JSON, one global resourceVersion, and the change history
//! that watches replay. Tests reach it through [`Store`] to inspect or change objects.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard};

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::resources::{self, ResourceType};
use crate::util::{Rng, meta_mut, meta_str, now_rfc3339};

/// How many changes are kept for watches that resume from a resourceVersion.
const HISTORY: usize = 20_000;

/// (group, plural, namespace or "", name)
pub(crate) type ObjKey = (String, String, String, String);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// One committed write, as watches see it.
#[derive(Debug)]
pub(crate) struct Change {
    pub rv: u64,
    pub group: String,
    pub plural: String,
    pub kind: ChangeKind,
    pub object: Value,
    pub previous: Option<Value>,
}

/// Why [`Store::put`] refused an object.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the fake serves no resource {0}; create its CRD first")]
    UnknownResource(String),
    #[error("the object has no metadata.name")]
    MissingName,
}

pub(crate) struct State {
    objects: BTreeMap<ObjKey, Value>,
    rv: u64,
    history: VecDeque<Arc<Change>>,
    builtin_types: Vec<ResourceType>,
    types: Vec<ResourceType>,
    events: broadcast::Sender<Arc<Change>>,
    pub rng: Rng,
    /// A namespace's content is being swept ([`State::sweep_namespace`]): removals do not
    /// start another sweep.
    sweeping: bool,
}

impl State {
    pub fn types(&self) -> &[ResourceType] {
        &self.types
    }

    pub fn find_type(&self, group: &str, version: &str, plural: &str) -> Option<ResourceType> {
        self.types.iter().find(|t| t.group == group && t.version == version && t.plural == plural).cloned()
    }

    fn find_type_any_version(&self, group: &str, plural: &str) -> Option<ResourceType> {
        self.types.iter().find(|t| t.group == group && t.plural == plural).cloned()
    }

    pub fn resource_version(&self) -> u64 {
        self.rv
    }

    pub fn subscribe(&self) -> broadcast::Receiver<Arc<Change>> {
        self.events.subscribe()
    }

    pub fn get(&self, group: &str, plural: &str, ns: &str, name: &str) -> Option<&Value> {
        self.objects.get(&(group.into(), plural.into(), ns.into(), name.into()))
    }

    /// Objects of one resource in one namespace (`Some`) or everywhere (`None`), sorted by key.
    pub fn list<'a>(
        &'a self,
        group: &'a str,
        plural: &'a str,
        ns: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a ObjKey, &'a Value)> + 'a {
        let start = (group.to_string(), plural.to_string(), String::new(), String::new());
        self.objects
            .range(start..)
            .take_while(move |(k, _)| k.0 == group && k.1 == plural)
            .filter(move |(k, _)| ns.is_none_or(|ns| k.2 == ns))
    }

    /// Changes after `rv`, or `None` if the history no longer reaches back that far.
    pub fn changes_since(&self, rv: u64) -> Option<Vec<Arc<Change>>> {
        if rv >= self.rv {
            return Some(Vec::new());
        }
        match self.history.front() {
            Some(first) if first.rv <= rv + 1 => {}
            _ => return None,
        }
        Some(self.history.iter().filter(|c| c.rv > rv).cloned().collect())
    }

    pub fn new_uid(&mut self) -> String {
        self.rng.uuid()
    }

    /// Writes (`Some`) or removes (`None`) one object, bumping the resourceVersion and telling
    /// watchers. Returns the stored object (for a removal: the last state, with the new rv).
    pub fn commit(&mut self, group: &str, plural: &str, ns: &str, name: &str, new: Option<Value>) -> Option<Value> {
        let key: ObjKey = (group.into(), plural.into(), ns.into(), name.into());
        let is_crd = group == "apiextensions.k8s.io" && plural == "customresourcedefinitions";
        let result = match new {
            Some(mut obj) => {
                self.rv += 1;
                meta_mut(&mut obj).insert("resourceVersion".into(), json!(self.rv.to_string()));
                let previous = self.objects.insert(key, obj.clone());
                let kind = if previous.is_some() { ChangeKind::Modified } else { ChangeKind::Added };
                self.record(group, plural, kind, obj.clone(), previous);
                Some(obj)
            }
            None => {
                let mut old = self.objects.remove(&key)?;
                self.rv += 1;
                meta_mut(&mut old).insert("resourceVersion".into(), json!(self.rv.to_string()));
                self.record(group, plural, ChangeKind::Deleted, old.clone(), None);
                if is_crd {
                    self.drop_custom_objects(&old);
                }
                if group.is_empty() && plural == "namespaces" {
                    self.drop_namespace_content(name);
                } else if !ns.is_empty() && !self.sweeping && self.is_terminating(ns) {
                    // The last finalizer-held object of a Terminating namespace may just have
                    // gone: the namespace controller looks again.
                    self.sweep_namespace(ns);
                }
                Some(old)
            }
        };
        if is_crd {
            self.refresh_types();
        }
        result
    }

    fn record(&mut self, group: &str, plural: &str, kind: ChangeKind, object: Value, previous: Option<Value>) {
        let change =
            Arc::new(Change { rv: self.rv, group: group.into(), plural: plural.into(), kind, object, previous });
        self.history.push_back(change.clone());
        while self.history.len() > HISTORY {
            self.history.pop_front();
        }
        // No receivers is fine: nobody watches.
        let _ = self.events.send(change);
    }

    fn drop_custom_objects(&mut self, crd: &Value) {
        let (Some(group), Some(plural)) = (crd["spec"]["group"].as_str(), crd["spec"]["names"]["plural"].as_str())
        else {
            return;
        };
        let keys: Vec<ObjKey> = self.list(group, plural, None).map(|(k, _)| k.clone()).collect();
        for k in keys {
            self.commit(&k.0, &k.1, &k.2, &k.3, None);
        }
    }

    fn drop_namespace_content(&mut self, ns: &str) {
        let keys: Vec<ObjKey> = self.objects.keys().filter(|k| k.2 == ns).cloned().collect();
        for k in keys {
            self.commit(&k.0, &k.1, &k.2, &k.3, None);
        }
    }

    /// The namespace exists and is being deleted.
    pub fn is_terminating(&self, ns: &str) -> bool {
        self.get("", "namespaces", "", ns).is_some_and(|n| n["metadata"]["deletionTimestamp"].is_string())
    }

    /// What the namespace controller does for a Terminating namespace, at once: deletes its
    /// content (objects with finalizers are only marked, as a DELETE marks them), and once
    /// nothing is left removes the namespace (its `kubernetes` finalizer done); otherwise
    /// records what remains in the namespace's conditions, in the real controller's words.
    pub fn sweep_namespace(&mut self, ns: &str) {
        self.sweeping = true;
        let keys: Vec<ObjKey> = self.objects.keys().filter(|k| k.2 == ns).cloned().collect();
        let now = now_rfc3339();
        for k in keys {
            let Some(obj) = self.objects.get(&k).cloned() else { continue };
            let held = obj["metadata"]["finalizers"].as_array().is_some_and(|f| !f.is_empty());
            if !held {
                self.commit(&k.0, &k.1, &k.2, &k.3, None);
            } else if !obj["metadata"]["deletionTimestamp"].is_string() {
                let mut marked = obj;
                let m = meta_mut(&mut marked);
                m.insert("deletionTimestamp".into(), json!(now));
                m.insert("deletionGracePeriodSeconds".into(), json!(0));
                self.commit(&k.0, &k.1, &k.2, &k.3, Some(marked));
            }
        }
        self.sweeping = false;
        // What is left, by resource and by finalizer.
        let mut by_resource: BTreeMap<String, usize> = BTreeMap::new();
        let mut by_finalizer: BTreeMap<String, usize> = BTreeMap::new();
        for (k, o) in self.objects.iter().filter(|(k, _)| k.2 == ns) {
            let resource = if k.0.is_empty() { k.1.clone() } else { format!("{}.{}", k.1, k.0) };
            *by_resource.entry(resource).or_default() += 1;
            for f in o["metadata"]["finalizers"].as_array().into_iter().flatten().filter_map(Value::as_str) {
                *by_finalizer.entry(f.to_string()).or_default() += 1;
            }
        }
        let Some(mut namespace) = self.get("", "namespaces", "", ns).cloned() else { return };
        if by_resource.is_empty() {
            self.commit("", "namespaces", "", ns, None);
            return;
        }
        let list = |m: &BTreeMap<String, usize>, sep: &str| {
            m.iter().map(|(k, n)| format!("{k}{sep}{n} resource instances")).collect::<Vec<_>>().join(", ")
        };
        let condition = |kind: &str, status: &str, reason: &str, message: String| json!({"type": kind, "status": status, "lastTransitionTime": now, "reason": reason, "message": message});
        let mut conditions = vec![
            condition(
                "NamespaceDeletionDiscoveryFailure",
                "False",
                "ResourcesDiscovered",
                "All resources successfully discovered".into(),
            ),
            condition(
                "NamespaceDeletionGroupVersionParsingFailure",
                "False",
                "ParsedGroupVersions",
                "All legacy kube types successfully parsed".into(),
            ),
            condition(
                "NamespaceDeletionContentFailure",
                "False",
                "ContentDeleted",
                "All content successfully deleted, may be waiting on finalization".into(),
            ),
            condition(
                "NamespaceContentRemaining",
                "True",
                "SomeResourcesRemain",
                format!("Some resources are remaining: {}", list(&by_resource, " has ")),
            ),
        ];
        if !by_finalizer.is_empty() {
            conditions.push(condition(
                "NamespaceFinalizersRemaining",
                "True",
                "SomeFinalizersRemain",
                format!("Some content in the namespace has finalizers remaining: {}", list(&by_finalizer, " in ")),
            ));
        }
        namespace["status"] = json!({"phase": "Terminating", "conditions": conditions});
        let unchanged = self.get("", "namespaces", "", ns).is_some_and(|n| {
            let strip = |v: &Value| {
                let mut v = v["status"].clone();
                for c in v["conditions"].as_array_mut().into_iter().flatten() {
                    if let Value::Object(m) = c {
                        m.remove("lastTransitionTime");
                    }
                }
                v
            };
            strip(n) == strip(&namespace)
        });
        if !unchanged {
            self.commit("", "namespaces", "", ns, Some(namespace));
        }
    }

    fn refresh_types(&mut self) {
        let mut types = self.builtin_types.clone();
        for (_, crd) in self.list("apiextensions.k8s.io", "customresourcedefinitions", None) {
            for t in resources::from_crd(crd) {
                if !types.iter().any(|e| e.group == t.group && e.version == t.version && e.plural == t.plural) {
                    types.push(t);
                }
            }
        }
        self.types = types;
    }
}

/// A handle on the fake cluster's objects; cheap to clone.
///
/// Objects are `serde_json::Value`s addressed by (group, version, resource plural, namespace,
/// name); the core group is `""`. Writes through it bump the resourceVersion and reach watchers,
/// exactly like writes through the API, but skip validation and managedFields.
#[derive(Clone)]
pub struct Store {
    state: Arc<Mutex<State>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    pub(crate) fn new(rng: Rng) -> Self {
        let (events, _) = broadcast::channel(4096);
        let builtin_types = resources::builtins();
        Store {
            state: Arc::new(Mutex::new(State {
                objects: BTreeMap::new(),
                rv: 1000,
                history: VecDeque::new(),
                types: builtin_types.clone(),
                builtin_types,
                events,
                rng,
                sweeping: false,
            })),
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent JSON behind; keep serving.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn with_api_version(mut obj: Value, group: &str, version: &str) -> Value {
        let av = if group.is_empty() { version.to_string() } else { format!("{group}/{version}") };
        if let Value::Object(m) = &mut obj {
            m.insert("apiVersion".into(), json!(av));
        }
        obj
    }

    /// Waits until `done` holds, re-checking after every committed write (no polling); `false`
    /// when `timeout` passes first.
    pub async fn wait_until(&self, timeout: std::time::Duration, done: impl Fn(&Store) -> bool) -> bool {
        let mut events = self.lock().events.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if done(self) {
                return true;
            }
            match tokio::time::timeout_at(deadline, events.recv()).await {
                Err(_) => return done(self),
                Ok(Err(broadcast::error::RecvError::Closed)) => return done(self),
                Ok(_) => {}
            }
        }
    }

    /// One object, or `None`. `namespace` is ignored for cluster-scoped resources.
    pub fn get(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let st = self.lock();
        let rt = st.find_type_any_version(group, resource)?;
        let ns = if rt.namespaced { namespace.unwrap_or("default") } else { "" };
        st.get(group, resource, ns, name).cloned().map(|o| Self::with_api_version(o, group, version))
    }

    /// All objects of a resource, in one namespace or (`None`) in all.
    pub fn list(&self, group: &str, version: &str, resource: &str, namespace: Option<&str>) -> Vec<Value> {
        let st = self.lock();
        st.list(group, resource, namespace).map(|(_, o)| Self::with_api_version(o.clone(), group, version)).collect()
    }

    /// Creates or replaces an object (namespace and name from its metadata; a namespaced object
    /// without a namespace goes to `default`). Fills uid and creationTimestamp when missing.
    pub fn put(&self, group: &str, version: &str, resource: &str, object: Value) -> Result<Value, StoreError> {
        let mut st = self.lock();
        let rt = st
            .find_type_any_version(group, resource)
            .ok_or_else(|| StoreError::UnknownResource(format!("{resource}.{group}/{version}")))?;
        let mut obj = Self::with_api_version(object, group, version);
        let name = meta_str(&obj, "name").ok_or(StoreError::MissingName)?.to_string();
        let ns =
            if rt.namespaced { meta_str(&obj, "namespace").unwrap_or("default").to_string() } else { String::new() };
        let existing_uid = st.get(group, resource, &ns, &name).and_then(|o| meta_str(o, "uid")).map(str::to_string);
        let uid = match existing_uid {
            Some(u) => u,
            None => st.new_uid(),
        };
        if let Value::Object(m) = &mut obj {
            m.insert("kind".into(), json!(rt.kind));
        }
        let meta = meta_mut(&mut obj);
        if rt.namespaced {
            meta.insert("namespace".into(), json!(ns));
        }
        meta.entry("uid").or_insert_with(|| json!(uid));
        meta.entry("creationTimestamp").or_insert_with(|| json!(now_rfc3339()));
        let stored = st.commit(group, resource, &ns, &name, Some(obj)).unwrap_or(Value::Null);
        Ok(stored)
    }

    /// Removes an object; returns its last state.
    pub fn delete(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<Value> {
        let mut st = self.lock();
        let rt = st.find_type_any_version(group, resource)?;
        let ns = if rt.namespaced { namespace.unwrap_or("default") } else { "" };
        st.commit(group, resource, ns, name, None).map(|o| Self::with_api_version(o, group, version))
    }

    /// Changes an object in place under the store's lock; returns the stored result.
    pub fn update(
        &self,
        group: &str,
        version: &str,
        resource: &str,
        namespace: Option<&str>,
        name: &str,
        change: impl FnOnce(&mut Value),
    ) -> Option<Value> {
        let mut st = self.lock();
        let rt = st.find_type_any_version(group, resource)?;
        let ns = if rt.namespaced { namespace.unwrap_or("default") } else { "" };
        let mut obj = st.get(group, resource, ns, name)?.clone();
        change(&mut obj);
        st.commit(group, resource, ns, name, Some(obj)).map(|o| Self::with_api_version(o, group, version))
    }

    /// The current (highest) resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().resource_version()
    }

    /// Every resource type served right now, CRD-defined ones included.
    pub fn resource_types(&self) -> Vec<ResourceType> {
        self.lock().types().to_vec()
    }
}
