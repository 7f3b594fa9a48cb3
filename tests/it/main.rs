//! The one integration-test binary: every module below shares one link.

mod audit;
mod fake_kube;
mod foundation;
mod signin;
mod support;
mod tls;
