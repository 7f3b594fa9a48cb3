//! What the cluster knows about the operator's own pods: the Deployment, its pods' container
//! states (waiting reason, restarts, last termination), the last log lines and recent Events,
//! and from them the likely fix. Read when an attached operator is silent (in the background, at
//! most every [`REFRESH_EVERY`] per cluster) and on every connection test; never on a list request.
//!
//! Everything read is cluster-supplied text: each string is bounded and its control characters
//! escaped, the log is read through `limitBytes` and cut on our side too, and only a few pods and
//! events are kept however many match.

use std::time::Duration;

use crate::clusters::kinds::{ContainerStatus, Deployment, Event, Pod};
use futures::AsyncReadExt;
use kube::Api;
use kube::api::{ListParams, LogParams};
use serde::Serialize;
use utoipa::ToSchema;

use super::builds;
use super::manifests::{DEPLOYMENT, SYSTEM_NS};

/// At most one read per silent cluster in this period.
pub const REFRESH_EVERY: Duration = Duration::from_secs(30);
/// Label selector of the operator's pods (the Deployment's own).
pub const SELECTOR: &str = "app.kubernetes.io/name=gshare-operator";
/// Each call to the cluster gets this long.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);
const LOG_LINES: usize = 20;
/// Asked of the server (`limitBytes`) and enforced while reading.
const LOG_BYTES: usize = 16 * 1024;
const LINE_CHARS: usize = 400;
const MESSAGE_CHARS: usize = 1000;
const PODS_SHOWN: usize = 3;
/// One page of pods: with 10,000 matching we still read 50 and count the rest.
const PODS_LISTED: u32 = 50;
const EVENTS_SHOWN: usize = 10;
const EVENTS_LISTED: u32 = 200;

#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct OperatorPods {
    /// When this was read (RFC 3339).
    pub read_at: String,
    #[serde(skip)]
    pub read_at_ms: i64,
    /// The Deployment, or `None` when it is not there.
    pub deployment: Option<DeploymentState>,
    /// Newest first, at most 3.
    pub pods: Vec<PodState>,
    /// How many pods matching the selector were read (one page of 50).
    pub pods_matching: u64,
    /// More match than one page holds (the server's continue token).
    pub pods_more: bool,
    pub log: Option<LogTail>,
    /// Why there is no log (e.g. `pods/log` forbidden): said, never an error of the view.
    pub log_error: Option<String>,
    /// Recent Events about the Deployment, its ReplicaSets and pods, newest first.
    pub events: Vec<EventState>,
    pub events_error: Option<String>,
    /// The most likely cause and what to do about it.
    pub diagnosis: Option<Diagnosis>,
    /// Reading failed altogether (unreachable, forbidden).
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct DeploymentState {
    pub replicas: i32,
    pub ready: i32,
    pub available: i32,
    pub image: Option<String>,
    /// Conditions that are not True (`type: reason: message`).
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct PodState {
    pub name: String,
    pub phase: String,
    pub node: Option<String>,
    /// PodScheduled False: the scheduler's reason and message.
    pub unschedulable: Option<String>,
    pub containers: Vec<ContainerState>,
}

#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct ContainerState {
    pub name: String,
    pub image: String,
    pub ready: bool,
    pub restarts: i32,
    /// `waiting`, `running` or `terminated`.
    pub state: String,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub last_termination: Option<Termination>,
}

#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct Termination {
    pub exit_code: i32,
    pub reason: Option<String>,
    pub message: Option<String>,
    pub finished_at: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct LogTail {
    pub pod: String,
    pub container: String,
    /// The log of the run before the last restart (the one that crashed).
    pub previous: bool,
    pub lines: Vec<String>,
    /// More was there than was read.
    pub truncated: bool,
}

#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct EventState {
    #[serde(rename = "type")]
    pub kind: String,
    pub reason: String,
    pub object: String,
    pub message: String,
    pub count: i32,
    pub last_seen: Option<String>,
}

#[derive(Debug, Clone, Serialize, ToSchema, PartialEq)]
pub struct Diagnosis {
    pub cause: String,
    pub fix: String,
}

/// Bounded, printable: control characters escaped (`\u{1b}`), at most `max` characters.
pub fn clean(s: &str, max: usize) -> String {
    let mut out = String::new();
    let mut n = 0;
    for c in s.chars() {
        let escaped: Vec<char> = if c.is_control() && c != '\t' { c.escape_default().collect() } else { vec![c] };
        if n + escaped.len() > max {
            out.push('…');
            break;
        }
        n += escaped.len();
        out.extend(escaped);
    }
    out
}

fn opt(s: Option<&String>, max: usize) -> Option<String> {
    s.map(|s| clean(s, max)).filter(|s| !s.is_empty())
}

fn describe_error(what: &str, e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 403 => {
            format!("{what} forbidden (403): {}", clean(&s.message, MESSAGE_CHARS))
        }
        kube::Error::Api(s) => format!("{what}: {} {}: {}", s.code, s.reason, clean(&s.message, MESSAGE_CHARS)),
        other => format!("{what}: {}", clean(&other.to_string(), MESSAGE_CHARS)),
    }
}

async fn bounded<T>(fut: impl std::future::Future<Output = Result<T, kube::Error>>) -> Result<T, String> {
    match tokio::time::timeout(CALL_TIMEOUT, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(describe_error("", &e).trim_start_matches(": ").to_string()),
        Err(_) => Err(format!("no answer within {} s", CALL_TIMEOUT.as_secs())),
    }
}

fn container_state(s: &ContainerStatus) -> ContainerState {
    let st = s.state.as_ref();
    let (state, reason, message) = if let Some(w) = st.and_then(|x| x.waiting.as_ref()) {
        ("waiting", opt(w.reason.as_ref(), 200), opt(w.message.as_ref(), MESSAGE_CHARS))
    } else if let Some(t) = st.and_then(|x| x.terminated.as_ref()) {
        ("terminated", opt(t.reason.as_ref(), 200), opt(t.message.as_ref(), MESSAGE_CHARS))
    } else {
        ("running", None, None)
    };
    let last_termination = s.last_state.as_ref().and_then(|l| l.terminated.as_ref()).map(|t| Termination {
        exit_code: t.exit_code,
        reason: opt(t.reason.as_ref(), 200),
        message: opt(t.message.as_ref(), MESSAGE_CHARS),
        finished_at: t.finished_at.as_ref().map(|f| f.0.to_string()),
    });
    ContainerState {
        name: clean(&s.name, 100),
        image: clean(&s.image, 300),
        ready: s.ready,
        restarts: s.restart_count,
        state: state.into(),
        reason,
        message,
        last_termination,
    }
}

fn pod_state(p: &Pod) -> PodState {
    let status = p.status.as_ref();
    let unschedulable = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled" && c.status == "False"))
        .map(|c| {
            clean(
                &format!("{}: {}", c.reason.as_deref().unwrap_or("Unschedulable"), c.message.as_deref().unwrap_or("")),
                MESSAGE_CHARS,
            )
        });
    let mut containers: Vec<ContainerState> = status
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().take(4).map(container_state).collect())
        .unwrap_or_default();
    if let Some(init) = status.and_then(|s| s.init_container_statuses.as_ref()) {
        containers.extend(init.iter().take(2).map(container_state));
    }
    PodState {
        name: clean(p.metadata.name.as_deref().unwrap_or(""), 253),
        phase: clean(status.and_then(|s| s.phase.as_deref()).unwrap_or("Unknown"), 40),
        node: opt(p.spec.as_ref().and_then(|s| s.node_name.as_ref()), 253),
        unschedulable,
        containers,
    }
}

/// Reads at most [`LOG_BYTES`] of the log and keeps the last [`LOG_LINES`] lines, whatever the
/// server sends (a server that ignores `limitBytes` costs one read of 16 KiB, no more).
async fn read_log(api: &Api<Pod>, pod: &str, container: &str, previous: bool) -> Result<LogTail, String> {
    let params = LogParams {
        container: Some(container.to_string()),
        tail_lines: Some(LOG_LINES as i64),
        limit_bytes: Some(LOG_BYTES as i64),
        previous,
        ..LogParams::default()
    };
    let stream = api.log_stream(pod, &params).await.map_err(|e| describe_error("pods/log", &e))?;
    let mut buf = Vec::with_capacity(4096);
    let mut limited = stream.take(LOG_BYTES as u64 + 1);
    limited.read_to_end(&mut buf).await.map_err(|e| format!("pods/log: {}", clean(&e.to_string(), MESSAGE_CHARS)))?;
    let truncated = buf.len() > LOG_BYTES;
    buf.truncate(LOG_BYTES);
    let text = String::from_utf8_lossy(&buf);
    let all: Vec<&str> = text.lines().collect();
    let lines = all[all.len().saturating_sub(LOG_LINES)..]
        .iter()
        .map(|l| clean(l.trim_end_matches('\r'), LINE_CHARS))
        .collect();
    Ok(LogTail { pod: pod.into(), container: container.into(), previous, lines, truncated })
}

/// Reads the operator's Deployment, pods, log and Events from the cluster.
pub async fn read(client: &kube::Client, now_ms: i64) -> OperatorPods {
    let mut out = OperatorPods {
        read_at: crate::clock::rfc3339_ms(now_ms),
        read_at_ms: now_ms,
        deployment: None,
        pods: Vec::new(),
        pods_matching: 0,
        pods_more: false,
        log: None,
        log_error: None,
        events: Vec::new(),
        events_error: None,
        diagnosis: None,
        error: None,
    };
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), SYSTEM_NS);
    match bounded(deployments.get_opt(DEPLOYMENT)).await {
        Ok(Some(d)) => {
            let st = d.status.as_ref();
            out.deployment = Some(DeploymentState {
                replicas: d.spec.replicas.unwrap_or(1),
                ready: st.and_then(|s| s.ready_replicas).unwrap_or(0),
                available: st.and_then(|s| s.available_replicas).unwrap_or(0),
                image: d
                    .spec
                    .template
                    .spec
                    .as_ref()
                    .and_then(|s| s.containers.first())
                    .and_then(|c| c.image.as_ref())
                    .map(|i| clean(i, 300)),
                problems: st
                    .and_then(|s| s.conditions.as_ref())
                    .map(|cs| {
                        cs.iter()
                            .filter(|c| c.status.as_deref() != Some("True"))
                            .take(4)
                            .map(|c| {
                                clean(
                                    &format!(
                                        "{}: {}: {}",
                                        c.type_.as_deref().unwrap_or(""),
                                        c.reason.as_deref().unwrap_or(""),
                                        c.message.as_deref().unwrap_or("")
                                    ),
                                    MESSAGE_CHARS,
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default(),
            });
        }
        Ok(None) => {}
        Err(e) => {
            out.error = Some(format!("cannot read Deployment {SYSTEM_NS}/{DEPLOYMENT}: {e}"));
            out.diagnosis = diagnose(&out);
            return out;
        }
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), SYSTEM_NS);
    match bounded(pods.list(&ListParams::default().labels(SELECTOR).limit(PODS_LISTED))).await {
        Ok(list) => {
            out.pods_more = list.metadata.continue_.as_deref().is_some_and(|c| !c.is_empty());
            out.pods_matching = list.items.len() as u64 + list.metadata.remaining_item_count.unwrap_or(0).max(0) as u64;
            let mut items = list.items;
            items.sort_by(|a, b| b.metadata.creation_timestamp.cmp(&a.metadata.creation_timestamp));
            out.pods = items.iter().take(PODS_SHOWN).map(pod_state).collect();
        }
        Err(e) => out.error = Some(format!("cannot list the operator's pods: {e}")),
    }
    if let Some(p) = out.pods.first()
        && let Some(c) = p.containers.first()
        && p.phase != "Pending"
    {
        // A container waiting after restarts crashed: its previous run's log says why.
        let previous = c.restarts > 0 && c.state != "running";
        let (pod, container) = (p.name.clone(), c.name.clone());
        match tokio::time::timeout(CALL_TIMEOUT, read_log(&pods, &pod, &container, previous)).await {
            Ok(Ok(tail)) => out.log = Some(tail),
            Ok(Err(e)) => out.log_error = Some(e),
            Err(_) => out.log_error = Some(format!("pods/log: no answer within {} s", CALL_TIMEOUT.as_secs())),
        }
    }
    let events: Api<Event> = Api::namespaced(client.clone(), SYSTEM_NS);
    match bounded(events.list(&ListParams::default().limit(EVENTS_LISTED))).await {
        Ok(list) => {
            let mut mine: Vec<&Event> = list
                .items
                .iter()
                .filter(|e| e.involved_object.name.as_deref().is_some_and(|n| n.starts_with(DEPLOYMENT)))
                .collect();
            let when = |e: &Event| {
                e.last_timestamp
                    .as_ref()
                    .map(|t| t.0.to_string())
                    .or_else(|| e.event_time.as_ref().map(|t| t.0.to_string()))
                    .or_else(|| e.metadata.creation_timestamp.as_ref().map(|t| t.0.to_string()))
            };
            mine.sort_by_key(|e| std::cmp::Reverse(when(e)));
            out.events = mine
                .into_iter()
                .take(EVENTS_SHOWN)
                .map(|e| EventState {
                    kind: clean(e.type_.as_deref().unwrap_or("Normal"), 40),
                    reason: clean(e.reason.as_deref().unwrap_or(""), 200),
                    object: clean(
                        &format!(
                            "{}/{}",
                            e.involved_object.kind.as_deref().unwrap_or(""),
                            e.involved_object.name.as_deref().unwrap_or("")
                        ),
                        300,
                    ),
                    message: clean(e.message.as_deref().unwrap_or(""), MESSAGE_CHARS),
                    count: e.count.unwrap_or(1),
                    last_seen: when(e),
                })
                .collect();
        }
        Err(e) => out.events_error = Some(format!("events: {e}")),
    }
    out.diagnosis = diagnose(&out);
    out
}

/// The flag a Go `flag` refusal names: `flag provided but not defined: -volume-sync-interval`.
fn undefined_flag(text: &str) -> Option<String> {
    let rest = text.split("flag provided but not defined: ").nth(1)?;
    let flag: String =
        rest.trim_start_matches('-').chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '-').collect();
    (!flag.is_empty()).then(|| format!("--{flag}"))
}

/// The most likely cause and fix, from what was read.
pub fn diagnose(p: &OperatorPods) -> Option<Diagnosis> {
    let d = |cause: String, fix: &str| Some(Diagnosis { cause, fix: fix.to_string() });
    if let Some(e) = &p.error {
        return d(e.clone(), "check the cluster's kubeconfig may read Deployments, pods and Events in gshare-system");
    }
    let Some(dep) = &p.deployment else {
        return d(
            "Deployment gshare-system/gshare-operator is not on the cluster".into(),
            "attach again (POST /api/v1/clusters/{id}/attach) to recreate it",
        );
    };
    let mut texts: Vec<&str> = Vec::new();
    for pod in &p.pods {
        for c in &pod.containers {
            texts.extend(c.message.as_deref());
            if let Some(t) = &c.last_termination {
                texts.extend(t.message.as_deref());
            }
        }
    }
    if let Some(l) = &p.log {
        texts.extend(l.lines.iter().map(String::as_str));
    }
    if let Some(flag) = texts.iter().find_map(|t| undefined_flag(t)) {
        let lacking = builds::builds_lacking(&flag);
        return d(
            format!(
                "the operator exits at start: its build does not define {flag}{}",
                if lacking.is_empty() {
                    String::new()
                } else {
                    format!(" (known builds without it: {})", lacking.join(", "))
                }
            ),
            "attach again with this gShare (its Deployment passes only flags every known build defines, README \
             \"Operator compatibility\"), or set operator_image to a build that defines the flag",
        );
    }
    let forbidden_secrets = texts.iter().find(|t| {
        let l = t.to_ascii_lowercase();
        l.contains("forbidden") && l.contains("secrets")
    });
    if let Some(line) = forbidden_secrets {
        return d(
            format!("the operator may not list or watch Secrets: {}", clean(line, 300)),
            "its build watches Secrets in every namespace: leave operator_build unset (RBAC profile compatible, \
             cluster-wide Secrets read) and attach again",
        );
    }
    if let Some(line) = texts.iter().find(|t| t.to_ascii_lowercase().contains("forbidden")) {
        return d(
            format!("the operator is refused by RBAC: {}", clean(line, 300)),
            "attach again to restore its RBAC; if it still fails, its build needs rights the table does not know",
        );
    }
    for pod in &p.pods {
        if let Some(u) = &pod.unschedulable {
            return d(
                format!("pod {} is not scheduled: {u}", pod.name),
                "free capacity or fix the node selectors/taints the message names",
            );
        }
        for c in &pod.containers {
            let reason = c.reason.as_deref().unwrap_or("");
            match reason {
                "ErrImagePull" | "ImagePullBackOff" | "InvalidImageName" | "ErrImageNeverPull" => {
                    return d(
                        format!(
                            "cannot pull {}: {reason}{}",
                            c.image,
                            c.message.as_deref().map(|m| format!(": {m}")).unwrap_or_default()
                        ),
                        "set operator_image to an image the nodes can pull (a mirror for air-gapped registries) and \
                         attach again",
                    );
                }
                "CreateContainerConfigError" | "CreateContainerError" => {
                    return d(
                        format!("{reason}: {}", c.message.as_deref().unwrap_or("")),
                        "attach again to restore the Secret and ConfigMaps the pod mounts",
                    );
                }
                "CrashLoopBackOff" => {
                    let last = c.last_termination.as_ref();
                    let tail = p.log.as_ref().and_then(|l| l.lines.last()).cloned();
                    return d(
                        format!(
                            "the operator keeps crashing ({} restarts, last exit code {}){}",
                            c.restarts,
                            last.map(|t| t.exit_code.to_string()).unwrap_or_else(|| "unknown".into()),
                            last.and_then(|t| t.message.clone()).or(tail).map(|m| format!(": {m}")).unwrap_or_default()
                        ),
                        "read the log lines below; a cache-sync timeout names a CRD or a right it lacks",
                    );
                }
                _ => {}
            }
        }
    }
    if p.pods.is_empty() {
        let why = p.events.iter().find(|e| e.kind == "Warning").map(|e| format!(": {}", e.message));
        return d(
            format!("the Deployment has no pods{}", why.unwrap_or_default()),
            "check the ReplicaSet's events (quota, Pod Security admission) in gshare-system",
        );
    }
    if dep.ready >= 1 {
        return d(
            "the operator runs and is ready but does not call back".into(),
            "check it reaches SOT_ENDPOINT (firewall, DNS, TLS) and its token is accepted",
        );
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_escapes_control_characters_and_bounds() {
        assert_eq!(clean("a\u{1b}[31mred\u{0}\n", 100), "a\\u{1b}[31mred\\u{0}\\n");
        let long = "x".repeat(5000);
        assert_eq!(clean(&long, 10).chars().count(), 11);
        assert!(clean(&"\u{0}".repeat(100), 20).chars().count() <= 21);
    }

    #[test]
    fn undefined_flags_are_found_in_go_flag_output() {
        assert_eq!(
            undefined_flag("flag provided but not defined: -volume-sync-interval").as_deref(),
            Some("--volume-sync-interval")
        );
        assert_eq!(undefined_flag("all good"), None);
    }
}
