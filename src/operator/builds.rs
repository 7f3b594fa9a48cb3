//! The upstream operator builds we know, what each accepts and what its caches need, and from
//! that the RBAC profile and pull policy attach and `gshare operator manifests` use.
//!
//! Facts (README, "Operator compatibility", cites file, line and commit for each):
//! - `docker.io/boanlab/gshare-operator` is pushed only from boanlab/gShare; which commit a tag
//!   holds cannot be known from the tag, so the defaults must run on every build below.
//! - Go's `flag` package exits 2 ("flag provided but not defined") on a flag a build lacks: the
//!   Deployment passes only flags every build defines ([`common_flags`]).
//! - boanlab's `main.go` sets no cache options, so the session controller's `Owns(&Secret{})`
//!   lists and watches Secrets in every namespace; without that right the cache never syncs and
//!   the manager exits (CrashLoopBackOff). Mkpong 018e2adb confines the Secret informer to
//!   `--session-namespace`: only there may the cluster-wide Secrets read be left out.

use serde::Serialize;
use utoipa::ToSchema;

/// One upstream operator build.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Build {
    /// The id `operator_build` names: `<owner>-<short commit>`.
    pub id: &'static str,
    pub repo: &'static str,
    pub commit: &'static str,
    /// Every flag `operator/cmd/main.go` defines at that commit (controller-runtime's `--zap-*`
    /// and `--kubeconfig` aside).
    pub flags: &'static [&'static str],
    /// The Secret informer is confined to the session namespace (cluster-wide Secrets read not needed).
    pub secret_cache_restricted: bool,
}

/// boanlab 7aa83a47: the base set plus `--internal-jwks-url` (unused).
const BOANLAB_7AA83A47: [&str; 26] = [
    "--metrics-bind-address",
    "--health-probe-bind-address",
    "--leader-elect",
    "--cluster-id",
    "--session-namespace",
    "--ingress-class",
    "--connect-verify-url",
    "--session-domain",
    "--sot-endpoint",
    "--sot-status-path",
    "--sot-audit-path",
    "--internal-jwt-token-file",
    "--lossless-agent-image",
    "--lossless-namespace",
    "--lossless-service-account",
    "--lossless-checkpoint-pvc",
    "--internal-jwks-url",
    "--prometheus-url",
    "--hami-monitor-url",
    "--hami-yield-extender",
    "--webhook-enabled",
    "--webhook-port",
    "--webhook-cert-dir",
    "--webhook-service",
    "--webhook-config-name",
    "--system-namespace",
];

/// boanlab 1b99a96f and Mkpong 018e2adb define the same flags: the base set without
/// `--internal-jwks-url`, plus the newer feature flags.
const NEWER: [&str; 32] = [
    "--metrics-bind-address",
    "--health-probe-bind-address",
    "--leader-elect",
    "--cluster-id",
    "--session-namespace",
    "--ingress-class",
    "--connect-verify-url",
    "--session-domain",
    "--sot-endpoint",
    "--sot-status-path",
    "--sot-audit-path",
    "--internal-jwt-token-file",
    "--lossless-agent-image",
    "--lossless-namespace",
    "--lossless-service-account",
    "--lossless-checkpoint-pvc",
    "--prometheus-url",
    "--hami-monitor-url",
    "--hami-yield-extender",
    "--session-image-pull-policy",
    "--per-card-mode",
    "--mig-agent-image",
    "--kaniko-image",
    "--build-insecure-registry",
    "--volume-sync-interval",
    "--volume-storage-class",
    "--webhook-enabled",
    "--webhook-port",
    "--webhook-cert-dir",
    "--webhook-service",
    "--webhook-config-name",
    "--system-namespace",
];

/// Every build we know, oldest first.
pub const BUILDS: [Build; 3] = [
    Build {
        id: "boanlab-7aa83a47",
        repo: "boanlab/gShare",
        commit: "7aa83a47818284ea04b817dd3746c953b7a532d0",
        flags: &BOANLAB_7AA83A47,
        secret_cache_restricted: false,
    },
    Build {
        id: "boanlab-1b99a96f",
        repo: "boanlab/gShare",
        commit: "1b99a96f304f8724b27cf511dfea0c179f294209",
        flags: &NEWER,
        secret_cache_restricted: false,
    },
    Build {
        id: "mkpong-018e2adb",
        repo: "Mkpong/gShare",
        commit: "018e2adbc8ab2cd1023aa2b13b690742221376f8",
        flags: &NEWER,
        secret_cache_restricted: true,
    },
];

pub fn find(id: &str) -> Option<&'static Build> {
    BUILDS.iter().find(|b| b.id.eq_ignore_ascii_case(id.trim()))
}

/// Flags every known build defines: the only ones the default Deployment may pass.
pub fn common_flags() -> Vec<&'static str> {
    BUILDS[0].flags.iter().copied().filter(|f| BUILDS.iter().all(|b| b.flags.contains(f))).collect()
}

/// The builds that do not define `flag` (for the console's "likely fix").
pub fn builds_lacking(flag: &str) -> Vec<&'static str> {
    BUILDS.iter().filter(|b| !b.flags.contains(&flag)).map(|b| b.id).collect()
}

/// `repo@sha256:<64 hex>`: the image cannot change under the same reference.
pub fn pinned_by_digest(image: &str) -> bool {
    image
        .rsplit_once("@sha256:")
        .is_some_and(|(name, hex)| !name.is_empty() && hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `Always` for a moving tag (every node pulls the same build), `IfNotPresent` for a digest.
pub fn pull_policy(image: &str) -> &'static str {
    if pinned_by_digest(image) { "IfNotPresent" } else { "Always" }
}

/// Which RBAC the operator gets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Profile {
    /// What the widest-reaching known build needs: cluster-wide Secrets get/list/watch
    /// (as boanlab's chart at 1b99a96f grants). Runs every build.
    Compatible,
    /// Mkpong 018e2adb's chart: Secrets only in the sessions namespace.
    LeastPrivilege,
}

/// The profile chosen and why, as attach and `gshare operator manifests` report it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct ProfileChoice {
    pub profile: Profile,
    /// The declared build (`operator_build`), if any.
    pub build: Option<String>,
    pub pull_policy: String,
    pub reason: String,
}

/// Decides the profile from the image reference and the declared build. An unknown build is an
/// error naming the known ones (a typo must not silently fall back).
pub fn choose(image: &str, declared: Option<&str>) -> Result<ProfileChoice, String> {
    let pull_policy = pull_policy(image).to_string();
    let Some(declared) = declared.map(str::trim).filter(|d| !d.is_empty()) else {
        return Ok(ProfileChoice {
            profile: Profile::Compatible,
            build: None,
            pull_policy,
            reason: "no operator_build declared: RBAC every known build runs with (cluster-wide Secrets read)".into(),
        });
    };
    let Some(build) = find(declared) else {
        return Err(format!(
            "operator_build `{declared}` is not a known operator build; known: {}",
            BUILDS.iter().map(|b| b.id).collect::<Vec<_>>().join(", ")
        ));
    };
    let build_id = Some(build.id.to_string());
    if !build.secret_cache_restricted {
        return Ok(ProfileChoice {
            profile: Profile::Compatible,
            build: build_id,
            pull_policy,
            reason: format!("{} watches Secrets cluster-wide, so it needs the cluster-wide Secrets read", build.id),
        });
    }
    if !pinned_by_digest(image) {
        return Ok(ProfileChoice {
            profile: Profile::Compatible,
            build: build_id,
            pull_policy,
            reason: format!(
                "operator_image `{image}` is a moving tag, so it may not hold {}: pin it by digest (…@sha256:…) \
                 for the least-privilege RBAC",
                build.id
            ),
        });
    }
    Ok(ProfileChoice {
        profile: Profile::LeastPrivilege,
        build: build_id,
        pull_policy,
        reason: format!(
            "{image} is declared as {}, which confines its Secret cache to the sessions namespace",
            build.id
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const DIGEST: &str =
        "registry.lan/gshare-operator@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn common_flags_leave_out_what_an_older_build_lacks() {
        let common = common_flags();
        for f in ["--volume-sync-interval", "--session-image-pull-policy", "--internal-jwks-url"] {
            assert!(!common.contains(&f), "{f}");
        }
        for f in ["--leader-elect", "--cluster-id", "--hami-monitor-url", "--lossless-namespace", "--sot-endpoint"] {
            assert!(common.contains(&f), "{f}");
        }
        assert_eq!(builds_lacking("--volume-sync-interval"), ["boanlab-7aa83a47"]);
        assert_eq!(builds_lacking("--internal-jwks-url"), ["boanlab-1b99a96f", "mkpong-018e2adb"]);
    }

    #[test]
    fn least_privilege_only_for_a_digest_declared_as_a_restricted_build() {
        let latest = "docker.io/boanlab/gshare-operator:latest";
        assert_eq!(choose(latest, None).unwrap().profile, Profile::Compatible);
        assert_eq!(choose(latest, Some("mkpong-018e2adb")).unwrap().profile, Profile::Compatible);
        assert!(choose(latest, Some("mkpong-018e2adb")).unwrap().reason.contains("moving tag"));
        assert_eq!(choose(DIGEST, Some("boanlab-1b99a96f")).unwrap().profile, Profile::Compatible);
        assert_eq!(choose(DIGEST, None).unwrap().profile, Profile::Compatible);
        let lp = choose(DIGEST, Some("MKPONG-018e2adb")).unwrap();
        assert_eq!(lp.profile, Profile::LeastPrivilege);
        assert_eq!(lp.pull_policy, "IfNotPresent");
        let e = choose(DIGEST, Some("mkpong-0000000")).unwrap_err();
        assert!(e.contains("boanlab-7aa83a47, boanlab-1b99a96f, mkpong-018e2adb"), "{e}");
    }

    #[test]
    fn pull_policy_follows_the_reference() {
        assert_eq!(pull_policy("docker.io/boanlab/gshare-operator:latest"), "Always");
        assert_eq!(pull_policy("gshare-operator"), "Always");
        assert_eq!(pull_policy(DIGEST), "IfNotPresent");
        assert_eq!(pull_policy("x@sha256:abc"), "Always");
        assert!(!pinned_by_digest("@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"));
    }
}
