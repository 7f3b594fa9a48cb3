//! The packaging files agree with the binary and with each other: the systemd unit is hardened,
//! verifies with `systemd-analyze`, starts the binary the way the binary accepts, and runs it as
//! the account and in the directories the package creates; the packaged config is the documented
//! example with only `data_dir` changed, and it loads.

use std::path::Path;
use std::process::Command;

use crate::support::{gshare, stderr, stdout};

const UNIT: &str = include_str!("../../packaging/systemd/gshare.service");
const SYSUSERS: &str = include_str!("../../packaging/sysusers.d/gshare.conf");
const PACKAGED_CONFIG: &str = include_str!("../../packaging/config.toml");
const EXAMPLE_CONFIG: &str = include_str!("../../config.example.toml");
const CARGO_TOML: &str = include_str!("../../Cargo.toml");

/// `Key=value` lines of the unit (repeated keys kept in order).
fn unit_values(key: &str) -> Vec<&'static str> {
    UNIT.lines().filter_map(|l| l.strip_prefix(key)?.strip_prefix('=')).collect()
}

#[test]
fn the_unit_is_hardened_as_the_style_guide_asks() {
    for (key, want) in [
        ("Type", "notify"),
        ("User", "gshare"),
        ("StateDirectory", "gshare"),
        ("StateDirectoryMode", "0700"),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("NoNewPrivileges", "yes"),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
        ("UMask", "0077"),
        ("CapabilityBoundingSet", ""),
        ("MemoryDenyWriteExecute", "yes"),
    ] {
        assert_eq!(unit_values(key), [want], "{key}");
    }
    assert_eq!(unit_values("SystemCallFilter"), ["@system-service", "~@privileged @resources"]);
    // The account the unit runs as is the one the package creates.
    let user = SYSUSERS.lines().find(|l| l.starts_with("u ")).expect("a u line");
    let fields: Vec<&str> = user.split_whitespace().collect();
    assert_eq!((fields[1], fields.last().copied()), ("gshare", Some("/usr/sbin/nologin")));
    assert!(user.contains("/var/lib/gshare"));
}

#[test]
fn the_packaged_config_is_the_example_with_the_state_directory_set() {
    let body: String = PACKAGED_CONFIG
        .lines()
        .skip_while(|l| !l.starts_with("# gShare Edge configuration."))
        .map(|l| format!("{l}\n"))
        .collect();
    let expected = EXAMPLE_CONFIG.replace("# data_dir = \"gshare-data\"\n", "data_dir = \"/var/lib/gshare\"\n");
    assert_ne!(expected, EXAMPLE_CONFIG, "the example names data_dir");
    assert_eq!(body, expected, "packaging/config.toml drifted from config.example.toml");
    // The state directory the unit creates is the config's data_dir.
    assert_eq!(unit_values("StateDirectory"), ["gshare"]);
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(&config, PACKAGED_CONFIG).unwrap();
    // As the service runs it: no GSHARE_* variables, the file alone.
    let out = Command::new(env!("CARGO_BIN_EXE_gshare"))
        .args(["--config", config.to_str().unwrap(), "config", "check"])
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("data_dir = \"/var/lib/gshare\""), "{}", stdout(&out));
}

#[test]
fn the_unit_starts_the_binary_the_way_it_accepts() {
    let exec = unit_values("ExecStart");
    assert_eq!(exec.len(), 1);
    let args: Vec<&str> = exec[0].split_whitespace().collect();
    assert_eq!(args[0], "/usr/bin/gshare");
    assert_eq!(&args[1..], ["serve", "--config", "/etc/gshare/config.toml"]);
    // `serve --config FILE` parses (checked with --help, which stops after parsing).
    let dir = tempfile::tempdir().unwrap();
    let out = gshare(dir.path(), &["serve", "--config", "/etc/gshare/config.toml", "--help"], &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    // Every file the package metadata names exists.
    for source in [
        "packaging/config.toml",
        "packaging/systemd/",
        "packaging/sysusers.d/gshare.conf",
        "packaging/crds/gshare.io_gsharesessions.yaml",
        "packaging/crds/gshare.io_gpumodechanges.yaml",
        "packaging/crds/gshare.io_gshareimagebuilds.yaml",
        "packaging/deb/",
        "packaging/rpm/pre-install.sh",
        "packaging/rpm/post-install.sh",
        "packaging/rpm/pre-uninstall.sh",
        "packaging/rpm/post-uninstall.sh",
        "packaging/changelog.Debian",
        "packaging/man/*.1",
        "SECURITY.md",
    ] {
        assert!(CARGO_TOML.contains(&format!("\"{source}\"")), "{source} is not in the package metadata");
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join(source.trim_end_matches("*.1"));
        assert!(path.exists(), "{source} missing");
    }
    for script in ["packaging/deb/postinst", "packaging/deb/postrm"] {
        let out =
            Command::new("sh").arg("-n").arg(Path::new(env!("CARGO_MANIFEST_DIR")).join(script)).output().unwrap();
        assert!(out.status.success(), "{script}: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn systemd_analyze_verifies_the_unit() {
    // The unit names /usr/bin/gshare; verify a copy pointing at the binary under test.
    let dir = tempfile::tempdir().unwrap();
    let unit = dir.path().join("gshare.service");
    std::fs::write(&unit, UNIT.replace("/usr/bin/gshare", env!("CARGO_BIN_EXE_gshare"))).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .expect("systemd-analyze (apt-get install systemd)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && !text.contains("gshare.service:"), "systemd-analyze verify: {text}");
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--threshold=20"])
        .arg(&unit)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let score: f64 = text
        .lines()
        .find_map(|l| l.split("Overall exposure level for gshare.service: ").nth(1))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no exposure level in: {text}"));
    assert!(score <= 2.0, "exposure {score} (systemd-analyze security): {text}");
}

/// lintian's `no-changelog` and `description-starts-with-package-name`: the deb carries a Debian
/// changelog whose newest entry is this version, and its synopsis does not start with `gshare`.
#[test]
fn the_debian_changelog_is_for_this_version_and_the_synopsis_is_lintian_clean() {
    const CHANGELOG: &str = include_str!("../../packaging/changelog.Debian");
    let first = CHANGELOG.lines().next().unwrap();
    assert_eq!(first, format!("gshare ({}-1) unstable; urgency=medium", env!("CARGO_PKG_VERSION")));
    let trailer = CHANGELOG.lines().find(|l| l.starts_with(" -- ")).expect("a trailer line");
    // ` -- Name <email>  Day, DD Mon YYYY HH:MM:SS +ZZZZ` (two spaces before the date).
    let (who, date) = trailer[4..].split_once(">  ").expect("name <email>  date");
    assert!(who.contains('<'), "{trailer}");
    time::OffsetDateTime::parse(date, &time::format_description::well_known::Rfc2822).expect("an RFC 2822 date");
    let synopsis = env!("CARGO_PKG_DESCRIPTION");
    assert!(!synopsis.to_lowercase().starts_with("gshare"), "{synopsis}");
    assert!(synopsis.len() <= 80, "{synopsis}");
}

/// The completion scripts the packages install are what `gshare completions <shell>` prints
/// (`GSHARE_UPDATE_COMPLETIONS=1 cargo test --test it completions` rewrites them), and both
/// packages install them, the Prometheus rules and the Grafana dashboard where their tools look.
#[test]
fn completions_and_monitoring_files_are_current_and_packaged() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = tempfile::tempdir().unwrap();
    for (shell, file, marker) in [
        ("bash", "gshare.bash", "complete -F _gshare"),
        ("zsh", "_gshare", "#compdef gshare"),
        ("fish", "gshare.fish", "complete -c gshare"),
    ] {
        // No configuration is read: a broken config file does not stop it.
        let out = gshare(dir.path(), &["completions", shell], &[("GSHARE_CONFIG", "/nonexistent/config.toml")]);
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        let script = stdout(&out);
        assert!(script.contains(marker) && script.contains("completions") && script.contains("snapshot"), "{shell}");
        let committed = root.join("packaging/completions").join(file);
        if std::env::var_os("GSHARE_UPDATE_COMPLETIONS").is_some() {
            std::fs::create_dir_all(committed.parent().unwrap()).unwrap();
            std::fs::write(&committed, &script).unwrap();
        }
        assert!(
            std::fs::read_to_string(&committed).is_ok_and(|c| c == script),
            "packaging/completions/{file} is out of date; run GSHARE_UPDATE_COMPLETIONS=1 cargo test --test it completions"
        );
    }
    let out = gshare(dir.path(), &["completions", "powershell"], &[]);
    assert!(!out.status.success());
    // deb (cargo-deb: source, destination) and rpm (generate-rpm: source, dest).
    for (source, deb, rpm) in [
        (
            "packaging/completions/gshare.bash",
            "usr/share/bash-completion/completions/gshare",
            "/usr/share/bash-completion/completions/gshare",
        ),
        (
            "packaging/completions/_gshare",
            "usr/share/zsh/vendor-completions/_gshare",
            "/usr/share/zsh/site-functions/_gshare",
        ),
        (
            "packaging/completions/gshare.fish",
            "usr/share/fish/vendor_completions.d/gshare.fish",
            "/usr/share/fish/vendor_completions.d/gshare.fish",
        ),
        (
            "packaging/prometheus/gshare.rules.yml",
            "usr/share/gshare/prometheus/",
            "/usr/share/gshare/prometheus/gshare.rules.yml",
        ),
        ("packaging/grafana/gshare.json", "usr/share/gshare/grafana/", "/usr/share/gshare/grafana/gshare.json"),
    ] {
        assert!(root.join(source).is_file(), "{source} missing");
        assert!(
            CARGO_TOML.contains(&format!("[\"{source}\", \"{deb}\", \"644\"]")),
            "the deb does not install {source} as {deb}"
        );
        assert!(
            CARGO_TOML.contains(&format!("{{ source = \"{source}\", dest = \"{rpm}\", mode = \"644\" }}")),
            "the rpm does not install {source} as {rpm}"
        );
    }
}
