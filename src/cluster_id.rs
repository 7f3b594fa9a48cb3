//! `ClusterId`: `clu_<26-char ULID>` minted at registration, or `clu_local` for the bootstrap cluster.
//! A plain value type at the bottom layer: the operator caller (`auth::guard`) carries one, and the
//! clusters domain (which re-exports it) mints them.

use std::fmt;

/// A validated cluster id. Parsing is the only way to make one, so it is safe in paths and URLs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterId(String);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a cluster id (expected clu_ followed by a 26-character ULID, or clu_local)")]
pub struct ClusterIdError(pub String);

pub const LOCAL: &str = "clu_local";

impl ClusterId {
    pub fn parse(text: &str) -> Result<Self, ClusterIdError> {
        let bad = || ClusterIdError(text.chars().take(80).collect());
        if text == LOCAL {
            return Ok(Self(text.to_string()));
        }
        let rest = text.strip_prefix("clu_").ok_or_else(bad)?;
        if rest.len() != 26 {
            return Err(bad());
        }
        let ulid = ulid::Ulid::from_string(rest).map_err(|_| bad())?;
        // Only the canonical (upper-case Crockford) spelling, so one cluster has one id.
        if ulid.to_string() != rest {
            return Err(bad());
        }
        Ok(Self(text.to_string()))
    }

    /// A fresh id for a newly registered cluster.
    pub fn mint() -> Self {
        Self(format!("clu_{}", ulid::Ulid::new()))
    }

    pub fn local() -> Self {
        Self(LOCAL.to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn is_local(&self) -> bool {
        self.0 == LOCAL
    }

    /// The operator's token subject for this cluster.
    pub fn operator_subject(&self) -> String {
        format!("operator:{}", self.0)
    }
}

impl fmt::Display for ClusterId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for ClusterId {
    type Err = ClusterIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_minted_and_local() {
        let id = ClusterId::mint();
        assert_eq!(ClusterId::parse(id.as_str()).unwrap(), id);
        assert!(ClusterId::parse("clu_local").unwrap().is_local());
        // Crockford decoding reads I as 1; only the canonical spelling is accepted.
        assert_eq!(ClusterId::parse("clu_01J7Z3K5N8Q2W4E6R8T0Y2U4I6").ok(), None);
        assert!(ClusterId::parse("clu_01J7Z3K5N8Q2W4E6R8T0Y2V4M6").is_ok());
    }

    #[test]
    fn refuses_bad_ids() {
        for bad in [
            "",
            "clu_",
            "clu_bad",
            "../x",
            "clu_../../etc",
            "clu_01j7z3k5n8q2w4e6r8t0y2u4m6",
            "CLU_LOCAL",
            "clu_local ",
            "clu_01J7Z3K5N8Q2W4E6R8T0Y2V4M6/x",
            "clu_81J7Z3K5N8Q2W4E6R8T0Y2U4M6",
        ] {
            assert!(ClusterId::parse(bad).is_err(), "{bad:?} accepted");
        }
    }
}
