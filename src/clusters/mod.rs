//! Clusters: the registry (probe, kubeconfig files, client cache), the directory watcher,
//! and the `/api/v1/clusters` routes.

pub mod in_use;
pub mod inventory_part;
pub mod kinds;
pub mod kubeconfig;
pub mod model;
pub mod prereq;
pub mod probe;
pub mod registry;
pub mod routes;
pub mod watcher;

pub use crate::cluster_id::{ClusterId, ClusterIdError, LOCAL};
pub use registry::{ClusterError, ClusterEvent, Clusters};
