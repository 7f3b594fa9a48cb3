//! The gShare operator on a registered cluster: its manifests (upstream's chart, rendered here),
//! one-step attach and detach through the cluster's kubeconfig, the operator token's rotation,
//! and whether the operator is connected.

pub mod crds;
