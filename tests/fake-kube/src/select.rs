//! Label and field selectors as the list and watch verbs read them.

use serde_json::Value;

use crate::util::json_path;

#[derive(Debug, Clone, PartialEq)]
enum Op {
    Exists,
    NotExists,
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Debug, Clone, Default)]
pub(crate) struct LabelSelector(Vec<(String, Op)>);

/// Splits at commas outside parentheses.
fn split_top(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter().map(str::trim).filter(|p| !p.is_empty()).collect()
}

fn set_values(s: &str) -> Option<Vec<String>> {
    let inner = s.trim().strip_prefix('(')?.strip_suffix(')')?;
    Some(inner.split(',').map(|v| v.trim().to_string()).filter(|v| !v.is_empty()).collect())
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let req = if let Some(k) = part.strip_prefix('!') {
                (k.trim().to_string(), Op::NotExists)
            } else if let Some((k, v)) = part.split_once("!=") {
                (k.trim().to_string(), Op::NotEq(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once("==") {
                (k.trim().to_string(), Op::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once('=') {
                (k.trim().to_string(), Op::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = part.split_once(" notin ") {
                let vals = set_values(v).ok_or_else(|| format!("invalid selector: {part}"))?;
                (k.trim().to_string(), Op::NotIn(vals))
            } else if let Some((k, v)) = part.split_once(" in ") {
                let vals = set_values(v).ok_or_else(|| format!("invalid selector: {part}"))?;
                (k.trim().to_string(), Op::In(vals))
            } else if part.contains(' ') || part.contains('(') {
                return Err(format!("unable to parse requirement: {part}"));
            } else {
                (part.to_string(), Op::Exists)
            };
            if req.0.is_empty() {
                return Err(format!("unable to parse requirement: {part}"));
            }
            reqs.push(req);
        }
        Ok(LabelSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        let labels = &obj["metadata"]["labels"];
        self.0.iter().all(|(k, op)| {
            let v = labels.get(k).and_then(Value::as_str);
            match op {
                Op::Exists => v.is_some(),
                Op::NotExists => v.is_none(),
                Op::Eq(want) => v == Some(want.as_str()),
                Op::NotEq(want) => v != Some(want.as_str()),
                Op::In(set) => v.is_some_and(|v| set.iter().any(|s| s == v)),
                Op::NotIn(set) => !v.is_some_and(|v| set.iter().any(|s| s == v)),
            }
        })
    }
}

/// A field selector: `metadata.name=x,metadata.namespace!=y`, any field by dotted path.
#[derive(Debug, Clone, Default)]
pub(crate) struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        for part in split_top(s) {
            let (k, eq, v) = if let Some((k, v)) = part.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = part.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = part.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!("invalid field selector: {part}"));
            };
            reqs.push((k.trim().to_string(), eq, v.trim().to_string()));
        }
        Ok(FieldSelector(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(k, eq, want)| {
            let got = match json_path(obj, k) {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (got == *want) == *eq
        })
    }
}

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn label_selectors() {
        let o = json!({"metadata": {"labels": {"a": "1", "b": "2"}}});
        let m = |s: &str| LabelSelector::parse(s).map(|sel| sel.matches(&o));
        assert_eq!(m("a=1"), Ok(true));
        assert_eq!(m("a==1,b=2"), Ok(true));
        assert_eq!(m("a!=1"), Ok(false));
        assert_eq!(m("a in (1,3)"), Ok(true));
        assert_eq!(m("b notin (1,2)"), Ok(false));
        assert_eq!(m("!c"), Ok(true));
        assert_eq!(m("c"), Ok(false));
        assert_eq!(m(""), Ok(true));
    }

    #[test]
    fn field_selectors() {
        let o = json!({"metadata": {"name": "x", "namespace": "ns"}, "spec": {"nodeName": "n"}});
        let f = FieldSelector::parse("metadata.name=x,spec.nodeName!=m").expect("parses");
        assert!(f.matches(&o));
    }
}
