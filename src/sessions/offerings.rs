//! Offerings: the catalogue of session shapes (image, GPU slice or CPU, compute, reaping policy).

use serde::Deserialize;
use utoipa::ToSchema;

use super::SessionError;
use super::model::*;

const MAX_NAME: usize = 80;
const MAX_IMAGE: usize = 512;
/// A week: longer idle timeouts or runtime caps are almost certainly typos.
const MAX_POLICY_SEC: i64 = 7 * 24 * 3600;

/// `POST /api/v1/offerings`. Unknown fields are refused.
#[derive(Debug, Clone, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OfferingCreate {
    /// 1–80 characters, unique; no control, bidi-override or zero-width characters.
    #[schema(min_length = 1, max_length = 80)]
    pub name: String,
    pub resource_class: ResourceClass,
    /// Container image reference, pulled verbatim by the cluster (no spaces).
    #[schema(min_length = 1, max_length = 512)]
    pub image: String,
    /// GPU only; default `fractional`.
    #[serde(default)]
    pub mode: Option<GpuMode>,
    #[serde(default)]
    pub gpu_model: Option<String>,
    /// GPU only, required: MiB of GPU memory (HAMi `gpumem`).
    #[serde(default)]
    pub gpu_mem_mb: Option<i64>,
    /// GPU only: 0–100 % of the card's cores (default 100 for exclusive, else required).
    #[serde(default)]
    pub gpu_cores: Option<i64>,
    /// CPU cores (default 1).
    #[serde(default)]
    pub cpu: Option<i64>,
    /// GiB of memory (default 4).
    #[serde(default)]
    pub mem_gb: Option<i64>,
    /// GiB of scratch disk (default 10).
    #[serde(default)]
    pub disk_gb: Option<i64>,
    /// Default 1800; 0 = never reap idle sessions.
    #[serde(default)]
    pub idle_timeout_sec: Option<i64>,
    /// Default 0 = no cap.
    #[serde(default)]
    pub max_runtime_sec: Option<i64>,
    /// The groups whose members may see and use it (1–100 group names); omitted or `null`:
    /// every member. Admins see every offering.
    #[serde(default)]
    pub visible_to: Option<Vec<String>>,
}

/// `PATCH /api/v1/offerings/{id}`: any subset; running sessions keep the shape they started with.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OfferingPatch {
    #[schema(min_length = 1, max_length = 80)]
    pub name: Option<String>,
    #[schema(min_length = 1, max_length = 512)]
    pub image: Option<String>,
    pub mode: Option<GpuMode>,
    pub gpu_model: Option<String>,
    pub gpu_mem_mb: Option<i64>,
    pub gpu_cores: Option<i64>,
    pub cpu: Option<i64>,
    pub mem_gb: Option<i64>,
    pub disk_gb: Option<i64>,
    pub idle_timeout_sec: Option<i64>,
    pub max_runtime_sec: Option<i64>,
    pub status: Option<OfferingStatus>,
    /// Groups whose members see it, or `null` for every member.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<Vec<String>>)]
    pub visible_to: Option<Option<Vec<String>>>,
}

fn double_option<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<Vec<String>>>, D::Error> {
    Option::<Vec<String>>::deserialize(d).map(Some)
}

/// Most groups one offering names.
pub const MAX_VISIBLE_GROUPS: usize = 100;

/// Checks `visible_to`: `None` (every member) or 1–100 group names (the username rule), kept
/// sorted without duplicates.
pub fn check_visible_to(groups: Option<Vec<String>>) -> Result<Option<Vec<String>>, SessionError> {
    let Some(groups) = groups else { return Ok(None) };
    if groups.is_empty() || groups.len() > MAX_VISIBLE_GROUPS {
        return Err(invalid(
            "visible_to",
            format!("must name 1–{MAX_VISIBLE_GROUPS} groups, or be null for every member"),
        ));
    }
    let mut out = Vec::with_capacity(groups.len());
    for g in groups {
        let g = g.trim().to_string();
        if crate::auth::accounts::check_group(&g).is_err() {
            return Err(invalid(
                "visible_to",
                format!("`{}` is not a group name: 1–64 characters, letters, digits and - _ . @", g.escape_debug()),
            ));
        }
        out.push(g);
    }
    out.sort();
    out.dedup();
    Ok(Some(out))
}

fn invalid(field: &'static str, message: impl Into<String>) -> SessionError {
    SessionError::Invalid { field, message: message.into(), kind: "value_error" }
}

pub fn check_name(name: &str) -> Result<String, SessionError> {
    let n = name.trim();
    if n.is_empty() || n.chars().count() > MAX_NAME || n.chars().any(char::is_control) {
        return Err(invalid("name", format!("must be 1–{MAX_NAME} printable characters")));
    }
    if n.chars().any(crate::http::text::is_deceptive) {
        return Err(invalid("name", crate::http::text::DECEPTIVE_MESSAGE));
    }
    Ok(n.to_string())
}

pub fn check_image(image: &str) -> Result<String, SessionError> {
    let i = image.trim();
    if i.is_empty() || i.len() > MAX_IMAGE || i.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(
            "image",
            format!("must be an image reference such as ghcr.io/org/lab:1.0 (1–{MAX_IMAGE} characters, no spaces)"),
        ));
    }
    if i.chars().any(crate::http::text::is_deceptive) {
        return Err(invalid("image", crate::http::text::DECEPTIVE_MESSAGE));
    }
    Ok(i.to_string())
}

fn range(field: &'static str, v: i64, lo: i64, hi: i64) -> Result<i64, SessionError> {
    if (lo..=hi).contains(&v) { Ok(v) } else { Err(invalid(field, format!("must be between {lo} and {hi}"))) }
}

/// Checks a complete shape (after defaults or a patch are applied).
pub fn check_shape(mut s: Shape) -> Result<Shape, SessionError> {
    s.image = check_image(&s.image)?;
    range("cpu", s.cpu, 1, 1024)?;
    range("mem_gb", s.mem_gb, 1, 16_384)?;
    range("disk_gb", s.disk_gb, 1, 65_536)?;
    range("idle_timeout_sec", s.idle_timeout_sec, 0, MAX_POLICY_SEC)?;
    range("max_runtime_sec", s.max_runtime_sec, 0, MAX_POLICY_SEC)?;
    match s.resource_class {
        ResourceClass::Cpu => {
            if s.mode.is_some() || s.gpu_mem_mb.is_some_and(|v| v != 0) || s.gpu_cores.is_some_and(|v| v != 0) {
                return Err(invalid(
                    "resource_class",
                    "a cpu offering has no GPU: leave mode, gpu_mem_mb and gpu_cores out",
                ));
            }
            s.mode = None;
            s.gpu_mem_mb = None;
            s.gpu_cores = None;
            s.gpu_model = None;
        }
        ResourceClass::Gpu => {
            let mode = *s.mode.get_or_insert(GpuMode::Fractional);
            let mem = s.gpu_mem_mb.ok_or_else(|| invalid("gpu_mem_mb", "a gpu offering needs gpu_mem_mb (MiB)"))?;
            range("gpu_mem_mb", mem, 1, 1_048_576)?;
            let cores = match (s.gpu_cores, mode) {
                (Some(c), _) => c,
                (None, GpuMode::Exclusive) => 100,
                (None, GpuMode::Fractional) => {
                    return Err(invalid("gpu_cores", "a fractional gpu offering needs gpu_cores (0–100)"));
                }
            };
            s.gpu_cores = Some(range("gpu_cores", cores, 0, 100)?);
            if let Some(m) = &s.gpu_model {
                let m = m.trim();
                if m.len() > 128 {
                    return Err(invalid("gpu_model", "must be at most 128 characters"));
                }
                s.gpu_model = (!m.is_empty()).then(|| m.to_string());
            }
        }
    }
    Ok(s)
}

impl OfferingCreate {
    pub fn into_shape(self) -> Result<(String, Shape), SessionError> {
        let name = check_name(&self.name)?;
        let d = Shape::default();
        let shape = Shape {
            resource_class: self.resource_class,
            image: self.image,
            mode: self.mode,
            gpu_model: self.gpu_model,
            gpu_mem_mb: self.gpu_mem_mb,
            gpu_cores: self.gpu_cores,
            cpu: self.cpu.unwrap_or(d.cpu),
            mem_gb: self.mem_gb.unwrap_or(d.mem_gb),
            disk_gb: self.disk_gb.unwrap_or(d.disk_gb),
            idle_timeout_sec: self.idle_timeout_sec.unwrap_or(d.idle_timeout_sec),
            max_runtime_sec: self.max_runtime_sec.unwrap_or(d.max_runtime_sec),
            max_runtime_action: d.max_runtime_action,
        };
        Ok((name, check_shape(shape)?))
    }
}

impl OfferingPatch {
    /// The patched record, checked as a whole; `fields` names what changed (for the audit log).
    pub fn apply(self, r: &OfferingRecord) -> Result<(OfferingRecord, Vec<&'static str>), SessionError> {
        let mut out = r.clone();
        let mut fields = Vec::new();
        let s = &mut out.shape;
        macro_rules! set {
            ($field:ident, $name:literal, $value:expr) => {
                if let Some(v) = $value {
                    fields.push($name);
                    s.$field = v;
                }
            };
        }
        if let Some(n) = self.name {
            out.name = check_name(&n)?;
            fields.push("name");
        }
        set!(image, "image", self.image);
        set!(mode, "mode", self.mode.map(Some));
        set!(gpu_model, "gpu_model", self.gpu_model.map(Some));
        set!(gpu_mem_mb, "gpu_mem_mb", self.gpu_mem_mb.map(Some));
        set!(gpu_cores, "gpu_cores", self.gpu_cores.map(Some));
        set!(cpu, "cpu", self.cpu);
        set!(mem_gb, "mem_gb", self.mem_gb);
        set!(disk_gb, "disk_gb", self.disk_gb);
        set!(idle_timeout_sec, "idle_timeout_sec", self.idle_timeout_sec);
        set!(max_runtime_sec, "max_runtime_sec", self.max_runtime_sec);
        if let Some(st) = self.status {
            out.status = st;
            fields.push("status");
        }
        if let Some(v) = self.visible_to {
            out.visible_to = check_visible_to(v)?;
            fields.push("visible_to");
        }
        out.shape = check_shape(out.shape)?;
        Ok((out, fields))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpu() -> OfferingCreate {
        OfferingCreate {
            name: " A100 slice ".into(),
            resource_class: ResourceClass::Gpu,
            image: "ghcr.io/x/lab:1".into(),
            mode: None,
            gpu_model: Some("A100".into()),
            gpu_mem_mb: Some(20480),
            gpu_cores: Some(30),
            cpu: None,
            mem_gb: None,
            disk_gb: None,
            idle_timeout_sec: None,
            max_runtime_sec: None,
            visible_to: None,
        }
    }

    #[test]
    fn defaults_and_checks() {
        let (name, s) = gpu().into_shape().unwrap();
        assert_eq!(name, "A100 slice");
        assert_eq!(s.mode, Some(GpuMode::Fractional));
        assert_eq!((s.cpu, s.mem_gb, s.disk_gb, s.idle_timeout_sec, s.max_runtime_sec), (1, 4, 10, 1800, 0));
        let field = |r: Result<(String, Shape), SessionError>| match r {
            Err(SessionError::Invalid { field, .. }) => field,
            other => panic!("{other:?}"),
        };
        assert_eq!(field(OfferingCreate { gpu_mem_mb: None, ..gpu() }.into_shape()), "gpu_mem_mb");
        assert_eq!(field(OfferingCreate { gpu_cores: Some(101), ..gpu() }.into_shape()), "gpu_cores");
        assert_eq!(field(OfferingCreate { gpu_cores: None, ..gpu() }.into_shape()), "gpu_cores");
        let excl = OfferingCreate { gpu_cores: None, mode: Some(GpuMode::Exclusive), ..gpu() }.into_shape().unwrap();
        assert_eq!(excl.1.gpu_cores, Some(100));
        assert_eq!(field(OfferingCreate { image: "a b".into(), ..gpu() }.into_shape()), "image");
        assert_eq!(field(OfferingCreate { name: "".into(), ..gpu() }.into_shape()), "name");
        assert_eq!(field(OfferingCreate { cpu: Some(0), ..gpu() }.into_shape()), "cpu");
        assert_eq!(field(OfferingCreate { idle_timeout_sec: Some(-1), ..gpu() }.into_shape()), "idle_timeout_sec");
        let cpu_with_gpu = OfferingCreate { resource_class: ResourceClass::Cpu, ..gpu() };
        assert_eq!(field(cpu_with_gpu.into_shape()), "resource_class");
    }

    #[test]
    fn visible_to_is_every_member_or_some_groups() {
        assert_eq!(check_visible_to(None).unwrap(), None);
        let v = check_visible_to(Some(vec![" nlp".into(), "vision".into(), "nlp".into()])).unwrap();
        assert_eq!(v, Some(vec!["nlp".to_string(), "vision".to_string()]));
        for bad in [vec![], vec!["a b".to_string()], vec!["x\u{200b}".to_string()], vec!["g".to_string(); 101]] {
            assert!(check_visible_to(Some(bad.clone())).is_err(), "{bad:?}");
        }
        let record = |visible_to| OfferingRecord {
            id: "off_1".into(),
            name: "n".into(),
            shape: Shape::default(),
            status: OfferingStatus::Active,
            created_at: 0,
            visible_to,
        };
        let vision = Viewer::Member { group: Some("vision".into()) };
        let nobody = Viewer::Member { group: None };
        assert!(vision.sees(&record(None)) && nobody.sees(&record(None)));
        let some = record(Some(vec!["nlp".into(), "vision".into()]));
        assert!(vision.sees(&some) && Viewer::Admin.sees(&some));
        assert!(!nobody.sees(&some));
        assert!(!Viewer::Member { group: Some("nl".into()) }.sees(&some));
    }
}
