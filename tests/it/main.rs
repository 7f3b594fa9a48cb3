//! The one integration-test binary: every module below shares one link.

mod foundation;
mod support;
