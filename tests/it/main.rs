//! The one integration-test binary: every module below shares one link.

mod fake_kube;
mod foundation;
mod support;
