//! The default size of redb's page cache: it follows the state file and the machine instead of
//! redb's constant 1 GiB. redb fills its cache lazily, so an oversized cache costs nothing on a
//! small state — but on a large one it keeps every page ever read resident, next to the copy the
//! kernel's page cache already holds. A fifth of the file keeps the hot pages (the B-tree's upper
//! levels and the tables the callbacks touch) in memory; the rest is one `pread` away.
//!
//! Sized once, at start (redb cannot resize an open cache): a state that grew a lot since is
//! sized again at the next start; `store_cache_mb` overrides all of this.

use std::path::Path;

const MIB: u64 = 1 << 20;
/// Never less: the B-tree's upper levels of a small lab's state.
pub const MIN_BYTES: u64 = 16 * MIB;
/// Never more by default: redb's own default.
pub const MAX_BYTES: u64 = 1024 * MIB;
/// The share of the state file kept in the cache.
const FILE_DIVISOR: u64 = 5;
/// The share of the machine's (or the cgroup's) memory the cache may take at most.
const MACHINE_DIVISOR: u64 = 16;

/// Where the default came from, for the start-up log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSize {
    pub bytes: u64,
    pub state_file_bytes: u64,
    /// The machine's memory, or the cgroup's limit when lower; `None` when neither can be read.
    pub memory_bytes: Option<u64>,
}

/// The default cache for a state file of `state_file_bytes` on a machine with `memory_bytes`:
/// a fifth of the file, at least 16 MiB, at most 1 GiB and at most 1/16 of the memory (but never
/// below 16 MiB: a machine that small is better served by a working cache than by 4 MiB less).
pub fn default_bytes(state_file_bytes: u64, memory_bytes: Option<u64>) -> u64 {
    let by_file = (state_file_bytes / FILE_DIVISOR).clamp(MIN_BYTES, MAX_BYTES);
    let by_machine = memory_bytes.map_or(MAX_BYTES, |m| (m / MACHINE_DIVISOR).max(MIN_BYTES));
    // Whole MiB: the figure the log line and `store_cache_mb` speak in.
    (by_file.min(by_machine) / MIB).max(1) * MIB
}

/// The default for the state file at `path` (absent: an empty state) on this machine.
pub fn default_for(path: &Path) -> CacheSize {
    let state_file_bytes = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
    let memory_bytes = memory_limit();
    CacheSize { bytes: default_bytes(state_file_bytes, memory_bytes), state_file_bytes, memory_bytes }
}

/// The memory this process may use: `MemTotal`, or its cgroup's `memory.max` (a systemd
/// `MemoryMax=`, a container limit) when that is lower.
pub fn memory_limit() -> Option<u64> {
    let total = std::fs::read_to_string("/proc/meminfo").ok().and_then(|s| mem_total(&s));
    let cgroup = std::fs::read_to_string("/proc/self/cgroup")
        .ok()
        .and_then(|s| cgroup_v2_path(&s))
        .and_then(|p| std::fs::read_to_string(Path::new("/sys/fs/cgroup").join(p).join("memory.max")).ok())
        .and_then(|s| cgroup_limit(&s));
    match (total, cgroup) {
        (Some(t), Some(c)) => Some(t.min(c)),
        (t, c) => t.or(c),
    }
}

/// `MemTotal:       24576000 kB` → bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let mut words = line.split_whitespace().skip(1);
    let n: u64 = words.next()?.parse().ok()?;
    match words.next() {
        Some("kB") => n.checked_mul(1024),
        None => Some(n),
        Some(_) => None,
    }
}

/// The cgroup v2 line of `/proc/self/cgroup` (`0::/system.slice/gshare.service`) as a relative
/// path; `None` on cgroup v1 or a path that climbs out.
fn cgroup_v2_path(proc_cgroup: &str) -> Option<String> {
    let path = proc_cgroup.lines().find_map(|l| l.strip_prefix("0::"))?;
    let rel = path.trim().trim_start_matches('/');
    if rel.split('/').any(|c| c == "..") {
        return None;
    }
    Some(rel.to_owned())
}

/// `memory.max`: a byte count, or `max` for no limit.
fn cgroup_limit(memory_max: &str) -> Option<u64> {
    memory_max.trim().parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1024 * MIB;

    #[test]
    fn the_default_follows_the_state_file_within_bounds() {
        let machine = Some(24 * GIB);
        assert_eq!(default_bytes(0, machine), 16 * MIB, "an empty state gets the floor");
        assert_eq!(default_bytes(40 * MIB, machine), 16 * MIB, "1x fleet: still the floor");
        assert_eq!(default_bytes(150 * MIB, machine), 30 * MIB, "4x fleet: a fifth of the file");
        assert_eq!(default_bytes(3 * GIB, machine), 614 * MIB);
        assert_eq!(default_bytes(100 * GIB, machine), 1024 * MIB, "never above redb's own default");
        assert_eq!(default_bytes(150 * MIB, None), 30 * MIB, "unknown memory: the file decides");
    }

    #[test]
    fn a_small_machine_caps_the_cache_but_not_below_the_floor() {
        assert_eq!(default_bytes(3 * GIB, Some(1024 * MIB)), 64 * MIB, "1/16 of a 1 GiB machine");
        assert_eq!(default_bytes(3 * GIB, Some(256 * MIB)), 16 * MIB, "MemoryMax=256M: the floor");
        assert_eq!(default_bytes(3 * GIB, Some(0)), 16 * MIB);
    }

    #[test]
    fn meminfo_and_cgroup_files_parse_and_refuse_what_they_are_not() {
        assert_eq!(mem_total("MemTotal:       24576000 kB\nMemFree: 1 kB\n"), Some(24_576_000 * 1024));
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
        assert_eq!(mem_total("MemTotal: lots kB\n"), None);
        assert_eq!(mem_total("MemTotal: 1 MB\n"), None);
        assert_eq!(cgroup_v2_path("0::/system.slice/gshare.service\n").as_deref(), Some("system.slice/gshare.service"));
        assert_eq!(cgroup_v2_path("0::/\n").as_deref(), Some(""));
        assert_eq!(cgroup_v2_path("12:memory:/user.slice\n"), None, "cgroup v1");
        assert_eq!(cgroup_v2_path("0::/../../etc\n"), None);
        assert_eq!(cgroup_limit("268435456\n"), Some(268_435_456));
        assert_eq!(cgroup_limit("max\n"), None);
    }

    #[test]
    fn this_machine_reports_some_memory() {
        // Linux is the only target; a machine without /proc/meminfo would size by the file alone.
        let m = memory_limit();
        assert!(m.is_some_and(|m| m > 16 * MIB), "{m:?}");
        let d = default_for(Path::new("/nonexistent/gshare.redb"));
        assert_eq!((d.state_file_bytes, d.bytes), (0, MIN_BYTES));
    }
}
