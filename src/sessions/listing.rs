//! The session list (`GET /api/v1/sessions`): which index answers a query, and one page of it,
//! newest first, by page number or after a cursor. With no filter or one, what is read grows with
//! the page's distance from the nearer end of the list (by `page`: the first and the last page
//! cost one page) or its size (by `after`); with two or more, with the matches of the most
//! selective one. Never with the whole history.

use redb::ReadTransaction;

use super::model::{LIVE_SESSIONS, ListIndex, Phase, SESSION_IDS, SESSIONS, SessionPage, SessionView};
use crate::store::{KeyOrder, StoreError};

/// Filters and position of `GET /api/v1/sessions`.
#[derive(Debug, Clone, Default)]
pub struct SessionQuery {
    pub cluster_id: Option<String>,
    pub phase: Option<Phase>,
    pub owner: Option<String>,
    pub live: Option<bool>,
    /// 1-based; ignored when `after` is given.
    pub page: u64,
    pub size: u64,
    /// A session id ([`parse_cursor`]): the rows after it in list order (older ids).
    pub after: Option<String>,
}

/// A cursor as the API takes it: a session id, `ses_` and a ULID (either case). Returns it as
/// stored (ULIDs upper-case), which is where the walk resumes; `None` when it is not one.
pub fn parse_cursor(text: &str) -> Option<String> {
    let rest = text.strip_prefix("ses_")?;
    let ulid = ulid::Ulid::from_string(rest).ok()?.to_string();
    // One that overflows 128 bits decodes to another id: refused, not read as that one.
    ulid.eq_ignore_ascii_case(rest).then(|| format!("ses_{ulid}"))
}

/// A set of session ids a query walks (the most selective) or checks each walked id against.
enum Source {
    /// Every session: no filter.
    All,
    /// `live=true`: the live index.
    Live,
    /// `live=false`: the sessions the live index lacks.
    Ended,
    /// One value of a list index (owner, cluster, phase).
    Index(ListIndex, String),
}

impl Source {
    /// How many ids it holds (from counters, nothing walked).
    fn count(&self, txn: &ReadTransaction) -> Result<u64, StoreError> {
        Ok(match self {
            Self::All => SESSIONS.len(txn)?,
            Self::Live => LIVE_SESSIONS.len(txn)?,
            Self::Ended => SESSIONS.len(txn)?.saturating_sub(LIVE_SESSIONS.len(txn)?),
            Self::Index(idx, value) => idx.count(txn, value)?,
        })
    }

    fn contains(&self, txn: &ReadTransaction, id: &str) -> Result<bool, StoreError> {
        match self {
            Self::All => Ok(true),
            Self::Live => LIVE_SESSIONS.contains(txn, id),
            Self::Ended => Ok(!LIVE_SESSIONS.contains(txn, id)?),
            Self::Index(idx, value) => idx.set().contains(txn, &format!("{}{id}", ListIndex::prefix(value))),
        }
    }

    /// Hands `f` its ids in `order` (newest first: `Descending`), below `below` when given,
    /// until `f` says stop.
    fn walk(
        &self,
        txn: &ReadTransaction,
        below: Option<&str>,
        order: KeyOrder,
        mut f: impl FnMut(&str) -> Result<bool, StoreError>,
    ) -> Result<(), StoreError> {
        // The walkers take infallible callbacks: the first error stops the walk and is returned.
        let ended = matches!(self, Self::Ended);
        let mut failed = None;
        let mut step = |id: &str| {
            let go_on = if ended {
                LIVE_SESSIONS.contains(txn, id).and_then(|live| if live { Ok(true) } else { f(id) })
            } else {
                f(id)
            };
            go_on.unwrap_or_else(|e| {
                failed = Some(e);
                false
            })
        };
        match self {
            Self::All | Self::Ended => SESSION_IDS.walk(txn, "", below, order, &mut step)?,
            Self::Live => LIVE_SESSIONS.walk_keys(txn, below, order, &mut step)?,
            Self::Index(idx, value) => idx.set().walk(txn, &ListIndex::prefix(value), below, order, &mut step)?,
        }
        failed.map_or(Ok(()), Err)
    }
}

/// One page of the list: the walked set is the query's most selective filter, the others are
/// checked per id (index lookups, nothing decoded); only the page's rows are decoded.
pub fn page(txn: &ReadTransaction, q: &SessionQuery) -> Result<SessionPage, StoreError> {
    let mut sources = Vec::new();
    if let Some(c) = &q.cluster_id {
        sources.push(Source::Index(ListIndex::Cluster, c.clone()));
    }
    if let Some(o) = &q.owner {
        sources.push(Source::Index(ListIndex::Owner, o.clone()));
    }
    let contradiction = match (q.phase, q.live) {
        (Some(p), Some(live)) => p.is_final() == live,
        _ => false,
    };
    match (q.phase, q.live) {
        (Some(p), _) => sources.push(Source::Index(ListIndex::Phase, p.as_str().to_string())),
        (None, Some(true)) => sources.push(Source::Live),
        (None, Some(false)) => sources.push(Source::Ended),
        (None, None) => {}
    }
    if sources.is_empty() {
        sources.push(Source::All);
    }
    let mut counts = Vec::with_capacity(sources.len());
    for s in &sources {
        counts.push(s.count(txn)?);
    }
    let driver = counts.iter().enumerate().min_by_key(|(_, n)| **n).map_or(0, |(i, _)| i);
    let walked = sources.swap_remove(driver);
    let checks = sources;

    let take = usize::try_from(q.size).unwrap_or(usize::MAX);
    let skip = match q.after {
        Some(_) => 0,
        None => usize::try_from((q.page.max(1) - 1).saturating_mul(q.size)).unwrap_or(usize::MAX),
    };
    let mut ids: Vec<String> = Vec::with_capacity(take.min(128) + 1);
    let total = if contradiction {
        0
    } else if checks.is_empty() {
        // One set: its counter is the total. A page in the older half is read from the oldest end
        // (the last page costs what the first does); otherwise the walk stops one past the page.
        let total = counts[driver];
        let total_ids = usize::try_from(total).unwrap_or(usize::MAX);
        if q.after.is_none() && skip > total_ids / 2 {
            // Rows skip..skip+take, newest first, are rows total-skip-take..total-skip oldest first;
            // a row older than the page (if any) says there is a next page.
            let end = total_ids.saturating_sub(skip);
            let start = end.saturating_sub(take);
            let from = start.saturating_sub(1);
            let mut seen = 0usize;
            let mut older = Vec::with_capacity(end - from);
            if end > 0 {
                walked.walk(txn, None, KeyOrder::Ascending, |id| {
                    if seen >= from {
                        older.push(id.to_string());
                    }
                    seen += 1;
                    Ok(seen < end)
                })?;
            }
            older.reverse();
            ids = older;
        } else {
            let mut seen = 0usize;
            walked.walk(txn, q.after.as_deref(), KeyOrder::Descending, |id| {
                seen += 1;
                if seen > skip {
                    ids.push(id.to_string());
                }
                Ok(ids.len() <= take)
            })?;
        }
        total
    } else {
        // Several: the total is counted over the walked set, the page kept on the way.
        let (mut total, mut seen) = (0u64, 0usize);
        walked.walk(txn, None, KeyOrder::Descending, |id| {
            for c in &checks {
                if !c.contains(txn, id)? {
                    return Ok(true);
                }
            }
            total += 1;
            let in_range = match &q.after {
                Some(after) => id < after.as_str(),
                None => {
                    seen += 1;
                    seen > skip
                }
            };
            if in_range && ids.len() <= take {
                ids.push(id.to_string());
            }
            Ok(true)
        })?;
        total
    };
    // One id past the page says there is a next page; it is not shown.
    let more = ids.len() > take;
    ids.truncate(take);
    let mut data = Vec::with_capacity(ids.len());
    for id in &ids {
        if let Some(s) = SESSIONS.get(txn, id)? {
            data.push(SessionView::from(&s));
        }
    }
    Ok(SessionPage {
        data,
        pagination: crate::clusters::model::Pagination {
            page: if q.after.is_some() { 0 } else { q.page },
            size: q.size,
            total,
            total_pages: total.div_ceil(q.size.max(1)),
        },
        next: if more { ids.last().cloned() } else { None },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_are_session_ids_in_their_stored_case() {
        let id = "ses_01JABCDEFGHJKMNPQRSTVWXYZ0";
        assert_eq!(parse_cursor(id).as_deref(), Some(id));
        assert_eq!(parse_cursor(&id.to_lowercase()).as_deref(), Some(id), "read in either case");
        for bad in [
            "",
            "ses_",
            "01JABCDEFGHJKMNPQRSTVWXYZ0",
            "ses_01JABCDEFGHJKMNPQRSTVWXYZ",
            "ses_81JABCDEFGHJKMNPQRSTVWXYZ0",
        ] {
            assert_eq!(parse_cursor(bad), None, "{bad}");
        }
        assert_eq!(parse_cursor("ses_01JABCDEFGHJKMNPQRSTVWXYZU"), None, "U is not Crockford base32");
    }
}
