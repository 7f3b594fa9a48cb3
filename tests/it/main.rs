//! The one integration-test binary: every module below shares one link.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod accounts;
mod admin_socket;
mod audit;
mod clusters;
mod crash;
mod directory;
mod events;
mod exhaustion;
mod fake_kube;
mod forward_auth;
mod foundation;
mod hostile;
mod ingress_nginx;
mod inventory;
mod monitoring;
mod oidc;
mod operator;
mod overview;
mod packaging;
mod policy;
mod pools;
mod real_clusters;
mod replay;
mod schema;
mod sessions;
mod signin;
mod snapshot;
mod storage_full;
mod support;
mod tls;
mod usage;
mod users;
mod users_admin;
mod volumes;
