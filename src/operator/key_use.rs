//! Which signing keys the operator tokens gShare wrote into attached clusters still need, so that
//! `gshare keys prune` does not cut off a cluster whose current token was signed by a key it
//! would drop. The record is the token attach or renewal last put in the cluster's Secret
//! ([`super::model::ATTACHMENTS`]); tokens minted by hand (`gshare token operator`) are not
//! recorded anywhere and cannot be checked.

use serde_json::Value;

use super::model::ATTACHMENTS;
use crate::auth::tokens::LEEWAY_S;
use crate::clusters::model::CLUSTERS;
use crate::store::{Store, StoreError};

/// One cluster's recorded operator token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyUse {
    pub cluster_id: String,
    /// The cluster's name, when it is still registered.
    pub cluster_name: Option<String>,
    pub kid: String,
    /// Unix seconds.
    pub expires_at: i64,
}

impl KeyUse {
    fn describe(&self) -> String {
        let when = crate::clock::rfc3339_ms(self.expires_at * 1000);
        match &self.cluster_name {
            Some(n) => format!("cluster {n} ({}): token signed by {} verifies until {when}", self.cluster_id, self.kid),
            None => format!("cluster {}: token signed by {} verifies until {when}", self.cluster_id, self.kid),
        }
    }
}

/// The tokens among `uses` that still verify at `now` (the 60 s leeway included) and were signed
/// by one of `kids`, sorted by cluster id.
pub fn needing(uses: Vec<KeyUse>, kids: &[String], now: i64) -> Vec<KeyUse> {
    let mut out: Vec<KeyUse> =
        uses.into_iter().filter(|u| kids.contains(&u.kid) && u.expires_at + LEEWAY_S > now).collect();
    out.sort_by(|a, b| a.cluster_id.cmp(&b.cluster_id));
    out
}

/// Why `keys prune` refuses: every cluster named, and what to do.
pub fn refusal(needed: &[KeyUse]) -> String {
    let mut m = format!(
        "refusing to prune: {} attached cluster(s) hold an operator token that only a key being pruned verifies:\n",
        needed.len()
    );
    for u in needed {
        m.push_str("  ");
        m.push_str(&u.describe());
        m.push('\n');
    }
    m.push_str(
        "A running server moves each attached cluster to the current key within a minute of `gshare keys rotate` \
         (check the cluster's operator token in `GET /api/v1/clusters/<id>`); prune after that, or wait until \
         these tokens expire. `--force` prunes anyway: those clusters' operators are refused until their next \
         renewal.",
    );
    m
}

/// Every recorded token, read from the state file (the server stopped).
pub async fn recorded(store: &Store) -> Result<Vec<KeyUse>, StoreError> {
    store
        .read(|txn| {
            let mut out = Vec::new();
            for (_, a) in ATTACHMENTS.list(txn)? {
                let Some(t) = a.token else { continue };
                let cluster_name = CLUSTERS.get(txn, &a.cluster_id)?.map(|c| c.name);
                out.push(KeyUse { cluster_id: a.cluster_id, cluster_name, kid: t.kid, expires_at: t.expires_at });
            }
            Ok(out)
        })
        .await
}

/// The recorded tokens in one page of `GET /api/v1/clusters` (a running server's answer).
pub fn from_cluster_page(page: &Value) -> Result<Vec<KeyUse>, String> {
    let data = page["data"].as_array().ok_or_else(|| format!("unexpected cluster list: {page}"))?;
    let mut out = Vec::new();
    for c in data {
        let t = &c["operator"]["token"];
        let (Some(kid), Some(expires)) = (t["kid"].as_str(), t["expires_at"].as_str()) else { continue };
        let expires_at = humantime::parse_rfc3339(expires)
            .map_err(|e| format!("cluster {}: token expiry {expires:?}: {e}", c["id"]))?
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        out.push(KeyUse {
            cluster_id: c["id"].as_str().unwrap_or_default().to_string(),
            cluster_name: c["name"].as_str().map(str::to_string),
            kid: kid.to_string(),
            expires_at,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn u(id: &str, kid: &str, exp: i64) -> KeyUse {
        KeyUse { cluster_id: id.into(), cluster_name: Some(format!("n-{id}")), kid: kid.into(), expires_at: exp }
    }

    #[test]
    fn only_live_tokens_of_pruned_keys_count() {
        let kids = vec!["old".to_string()];
        let uses = vec![u("c3", "old", 1000), u("c1", "old", 2000), u("c2", "new", 5000), u("c4", "old", 1000 - 61)];
        // c4 expired more than the leeway ago; c2 uses a key that stays.
        let n = needing(uses.clone(), &kids, 1000);
        assert_eq!(n.iter().map(|u| u.cluster_id.as_str()).collect::<Vec<_>>(), ["c1", "c3"]);
        // Within the leeway a token still verifies, so it still counts.
        assert_eq!(needing(vec![u("c5", "old", 950)], &kids, 1000).len(), 1);
        assert!(needing(uses, &[], 1000).is_empty());
        let m = refusal(&n);
        assert!(m.contains("cluster n-c1 (c1)") && m.contains("cluster n-c3 (c3)") && m.contains("--force"), "{m}");
    }

    #[test]
    fn reads_a_cluster_page() {
        let page = serde_json::json!({"data": [
            {"id": "clu_a", "name": "a", "operator": {"token": {"kid": "k1", "expires_at": "2026-12-01T10:00:00.000Z"}}},
            {"id": "clu_b", "name": "b", "operator": {"attached": false, "token": null}},
            {"id": "clu_c", "name": "c", "operator": null},
        ]});
        let uses = from_cluster_page(&page).unwrap();
        let want = KeyUse { cluster_name: Some("a".into()), ..u("clu_a", "k1", 1_796_119_200) };
        assert_eq!(uses, vec![want]);
        assert!(from_cluster_page(&serde_json::json!({"error": {}})).is_err());
    }
}
