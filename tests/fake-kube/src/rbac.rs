//! What the fake's user may do, when a test restricts it ([`crate::Knobs::set_rights`]): every
//! request is checked against the rights, access reviews (SelfSubjectAccessReview and
//! SelfSubjectRulesReview) answer from them, and Roles and bindings that would grant more than
//! the user holds are refused as the real RBAC storage refuses them (escalation check), unless
//! the user may `escalate` (roles) or `bind` (bindings).

use serde_json::{Value, json};

/// One allowed rule: API groups, resources (`pods`, `pods/log`, `*`), verbs, and the namespace
/// it holds in (`None`: every namespace and the cluster scope, as a ClusterRoleBinding).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Right {
    pub groups: Vec<String>,
    pub resources: Vec<String>,
    pub verbs: Vec<String>,
    pub namespace: Option<String>,
}

impl Right {
    /// From a PolicyRule-shaped JSON value plus an optional `namespace`.
    pub fn from_json(v: &Value) -> Right {
        let list = |k: &str| -> Vec<String> {
            v[k].as_array()
                .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
                .unwrap_or_default()
        };
        Right {
            groups: list("apiGroups"),
            resources: list("resources"),
            verbs: list("verbs"),
            namespace: v["namespace"].as_str().map(str::to_string),
        }
    }

    fn matches(&self, group: &str, resource: &str, verb: &str, ns: Option<&str>) -> bool {
        let any = |l: &[String], x: &str| l.iter().any(|i| i == "*" || i == x);
        let scoped = match (&self.namespace, ns) {
            (None, _) => true,
            (Some(a), Some(b)) => a == b,
            (Some(_), None) => false,
        };
        scoped && any(&self.groups, group) && any(&self.resources, resource) && any(&self.verbs, verb)
    }
}

/// Does any right allow this? `rights == None` is cluster-admin.
pub(crate) fn allows(rights: Option<&[Right]>, group: &str, resource: &str, verb: &str, ns: Option<&str>) -> bool {
    rights.is_none_or(|rs| rs.iter().any(|r| r.matches(group, resource, verb, ns)))
}

/// The `{APIGroups:[…], Resources:[…], Verbs:[…]}` lines of rights the user lacks to grant
/// `rules` in `ns` (`None`: a ClusterRole's cluster scope), compacted per group and resource and
/// sorted, as Kubernetes' `ConfirmNoEscalation` words them.
pub(crate) fn missing(rights: Option<&[Right]>, rules: &[Value], ns: Option<&str>) -> Vec<String> {
    let mut gaps: Vec<((String, String), Vec<String>)> = Vec::new();
    for rule in rules {
        let r = Right::from_json(rule);
        for g in &r.groups {
            for res in &r.resources {
                for v in &r.verbs {
                    if allows(rights, g, res, v, ns) {
                        continue;
                    }
                    let key = (g.clone(), res.clone());
                    match gaps.iter_mut().find(|(k, _)| *k == key) {
                        Some((_, verbs)) => {
                            if !verbs.contains(v) {
                                verbs.push(v.clone())
                            }
                        }
                        None => gaps.push((key, vec![v.clone()])),
                    }
                }
            }
        }
    }
    let q = |l: &[String]| format!("[{}]", l.iter().map(|s| format!("{s:?}")).collect::<Vec<_>>().join(" "));
    let mut lines: Vec<String> = gaps
        .into_iter()
        .map(|((g, r), verbs)| format!("{{APIGroups:{}, Resources:{}, Verbs:{}}}", q(&[g]), q(&[r]), q(&verbs)))
        .collect();
    lines.sort();
    lines.dedup();
    lines
}

/// The groups the real server reports for the fake's users.
pub(crate) fn groups_of(user: &str) -> Vec<&'static str> {
    if user.starts_with("system:serviceaccount:kube-system:") {
        vec!["system:serviceaccounts", "system:serviceaccounts:kube-system", "system:authenticated"]
    } else {
        vec!["system:masters", "system:authenticated"]
    }
}

/// The escalation refusal's text after `<resource> "<name>" is forbidden: `.
pub(crate) fn escalation_message(user: &str, missing: &[String]) -> String {
    let groups = groups_of(user).iter().map(|g| format!("{g:?}")).collect::<Vec<_>>().join(" ");
    format!(
        "user {user:?} (groups=[{groups}]) is attempting to grant RBAC permissions not currently held:\n{}",
        missing.join("\n")
    )
}

/// `status` of a SelfSubjectRulesReview for `ns`: the rights that hold there, plus what every
/// authenticated user may do (system:basic-user, system:discovery).
pub(crate) fn rules_review(rights: Option<&[Right]>, ns: &str) -> Value {
    let mut resource_rules: Vec<Value> = match rights {
        None => vec![json!({"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]})],
        Some(rs) => rs
            .iter()
            .filter(|r| r.namespace.as_deref().is_none_or(|n| n == ns))
            .map(|r| json!({"verbs": r.verbs, "apiGroups": r.groups, "resources": r.resources}))
            .collect(),
    };
    resource_rules.push(json!({
        "verbs": ["create"],
        "apiGroups": ["authorization.k8s.io"],
        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
    }));
    let non_resource_rules = match rights {
        None => vec![json!({"verbs": ["*"], "nonResourceURLs": ["*"]})],
        Some(_) => vec![json!({
            "verbs": ["get"],
            "nonResourceURLs": ["/api", "/api/*", "/apis", "/apis/*", "/healthz", "/livez", "/openapi", "/openapi/*",
                                "/readyz", "/version", "/version/"],
        })],
    };
    json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": false})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_rights_are_compacted_and_sorted_like_kubernetes() {
        let rights = vec![Right::from_json(&json!({"apiGroups": ["*"], "resources": ["*"], "verbs": ["get"]}))];
        let rules =
            vec![json!({"apiGroups": [""], "resources": ["pods", "secrets"], "verbs": ["get", "list", "watch"]})];
        assert_eq!(
            missing(Some(&rights), &rules, None),
            [
                "{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"list\" \"watch\"]}",
                "{APIGroups:[\"\"], Resources:[\"secrets\"], Verbs:[\"list\" \"watch\"]}",
            ]
        );
        assert!(missing(None, &rules, None).is_empty());
    }
}
