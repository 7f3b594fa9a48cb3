//! The `gshare` commands' bodies (the clap definitions are in `main.rs`). A command that needs the
//! running server reaches it through [`client::LocalServer`] over the admin socket
//! `<data_dir>/gshare.sock`, whatever `listen` says; with the server stopped the same commands
//! work on the data directory itself, and none of them creates a key ring. This is the binary's
//! front end: its errors are `anyhow`'s, with messages that say what to do next.

pub mod admin;
pub mod audit;
pub mod client;
pub mod directory;
pub mod keys;
pub mod operator;
mod prompt;
pub mod snapshot;

use anyhow::{Context, Result};

pub use client::{ClientError, LocalServer};

/// The runtime the commands run on (one thread: they make one call at a time).
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread().enable_all().build().context("cannot start the async runtime")
}

/// The running server of this data directory, if any (see [`LocalServer::find`]).
pub fn local_server(rt: &tokio::runtime::Runtime, config: &crate::config::Config) -> Result<Option<LocalServer>> {
    Ok(rt.block_on(LocalServer::find(config))?)
}
