//! `gshare audit tail`: the newest audit entries, oldest first; from the running server's
//! `GET /api/v1/audit` over the admin socket, else from the state file.

use anyhow::Result;
use axum::http::Method;
use serde::Deserialize;

use super::client::NoBody;
use crate::audit::{AuditRecord, format_line};
use crate::config::Config;

/// The most entries one `tail` prints.
pub const MAX_LINES: usize = 10_000;

#[derive(Deserialize)]
struct AuditPage {
    data: Vec<AuditRecord>,
    pagination: Pagination,
}

#[derive(Deserialize)]
struct Pagination {
    #[serde(default)]
    next_cursor: Option<String>,
}

pub fn tail(config: &Config, lines: usize) -> Result<()> {
    let n = lines.clamp(1, MAX_LINES);
    let rt = super::runtime()?;
    let records = match super::local_server(&rt, config)? {
        Some(server) => rt.block_on(async {
            // Newest first, a page at a time (at most 500 an answer), by cursor.
            let mut newest_first: Vec<AuditRecord> = Vec::new();
            let mut cursor: Option<String> = None;
            while newest_first.len() < n {
                let size = (n - newest_first.len()).min(crate::audit::routes::MAX_PAGE_SIZE as usize);
                let path = match &cursor {
                    Some(c) => format!("/api/v1/audit?size={size}&cursor={c}"),
                    None => format!("/api/v1/audit?size={size}"),
                };
                let page: AuditPage = server.call(Method::GET, &path, None::<&NoBody>).await?;
                newest_first.extend(page.data);
                match page.pagination.next_cursor {
                    Some(c) => cursor = Some(c),
                    None => break,
                }
            }
            newest_first.truncate(n);
            newest_first.reverse();
            Ok::<_, anyhow::Error>(newest_first)
        })?,
        None => rt.block_on(async {
            let store = crate::auth::offline::open_store(config, crate::MIGRATIONS)?;
            Ok::<_, anyhow::Error>(crate::auth::offline::audit_tail(&store, n).await?)
        })?,
    };
    for rec in &records {
        println!("{}", format_line(rec));
    }
    Ok(())
}
