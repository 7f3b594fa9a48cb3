//! Clusters: their ids now; registry, probe, kubeconfig files and routes arrive with the clusters issue.

mod id;

pub use id::{ClusterId, ClusterIdError};
