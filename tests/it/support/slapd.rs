//! A real OpenLDAP server for the directory sign-in tests: Debian's `slapd` (installed by
//! `hack/deps.sh`) on loopback, plain LDAP (StartTLS offered) and LDAPS on ports the kernel
//! picked, with a temporary `slapd.conf`, an mdb database loaded by `slapadd`, and a certificate
//! from a CA made here. `slapd` forks only once its listeners are open, so the command's return
//! means it is ready; it is stopped by the pid it wrote.
//!
//! The directory, under `dc=lab,dc=test`:
//! - `cn=gshare,ou=services` — the service account (`SERVICE_PASSWORD`), which may read everything;
//! - `uid=alice|bob|carol|dave,ou=people` — password `<name>-pw-1234`;
//! - `cn=gpu-admins` (alice), `cn=ml-lab` (alice, bob), `cn=physics` (dave) under `ou=groups`.
//!   carol is in no group. Anonymous clients read nothing; signed-in users read entries.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose};

pub const BASE: &str = "dc=lab,dc=test";
pub const ROOT_DN: &str = "cn=root,dc=lab,dc=test";
pub const ROOT_PASSWORD: &str = "root-secret-1234";
pub const SERVICE_DN: &str = "cn=gshare,ou=services,dc=lab,dc=test";
pub const SERVICE_PASSWORD: &str = "service-secret-1234";

pub fn password(user: &str) -> String {
    format!("{user}-pw-1234")
}

pub fn slapd_bin() -> Option<PathBuf> {
    ["/usr/sbin/slapd", "/usr/local/sbin/slapd", "/usr/local/libexec/slapd"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// A CA made for one test, and a PEM file of it.
pub struct TestCa {
    pub issuer: CertifiedIssuer<'static, KeyPair>,
}

impl TestCa {
    pub fn new(name: &str) -> Self {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        Self { issuer: CertifiedIssuer::self_signed(p, KeyPair::generate().unwrap()).unwrap() }
    }

    pub fn pem(&self) -> String {
        self.issuer.pem()
    }

    /// A server certificate for 127.0.0.1 and localhost: (cert PEM, key PEM).
    pub fn leaf(&self) -> (String, String) {
        let mut p = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        p.distinguished_name.push(DnType::CommonName, "ldap.lab.test");
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    }
}

pub struct Slapd {
    pub dir: tempfile::TempDir,
    pub ldap_port: u16,
    pub ldaps_port: u16,
    pub ca: TestCa,
    /// The CA's certificate (PEM), for `ldap.ca_file`.
    pub ca_file: PathBuf,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

const DATA: &str = "\
dn: dc=lab,dc=test
objectClass: dcObject
objectClass: organization
o: lab
dc: lab

dn: ou=people,dc=lab,dc=test
objectClass: organizationalUnit
ou: people

dn: ou=groups,dc=lab,dc=test
objectClass: organizationalUnit
ou: groups

dn: ou=services,dc=lab,dc=test
objectClass: organizationalUnit
ou: services

dn: cn=gshare,ou=services,dc=lab,dc=test
objectClass: organizationalRole
objectClass: simpleSecurityObject
cn: gshare
userPassword: service-secret-1234
";

fn person(uid: &str) -> String {
    format!(
        "dn: uid={uid},ou=people,dc=lab,dc=test\nobjectClass: inetOrgPerson\nuid: {uid}\ncn: {uid}\nsn: {uid}\nuserPassword: {}\n",
        password(uid)
    )
}

fn group(cn: &str, members: &[&str]) -> String {
    let mut s = format!("dn: cn={cn},ou=groups,dc=lab,dc=test\nobjectClass: groupOfNames\ncn: {cn}\n");
    for m in members {
        s.push_str(&format!("member: uid={m},ou=people,dc=lab,dc=test\n"));
    }
    s
}

impl Slapd {
    /// Starts one; `None` (the test says so and passes) only where `slapd` is not installed
    /// outside CI — CI installs it (`hack/deps.sh`) and a missing one fails there.
    pub fn start() -> Option<Self> {
        let Some(bin) = slapd_bin() else {
            assert!(std::env::var_os("CI").is_none(), "slapd is not installed: run hack/deps.sh");
            eprintln!("slapd is not installed (hack/deps.sh installs it): skipping");
            return None;
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path();
        std::fs::create_dir(p.join("db")).unwrap();
        let ca = TestCa::new("gshare test LDAP CA");
        let (cert, key) = ca.leaf();
        std::fs::write(p.join("cert.pem"), cert).unwrap();
        std::fs::write(p.join("key.pem"), key).unwrap();
        let ca_file = p.join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let d = p.display();
        let conf = format!(
            "include /etc/ldap/schema/core.schema\n\
             include /etc/ldap/schema/cosine.schema\n\
             include /etc/ldap/schema/inetorgperson.schema\n\
             pidfile {d}/slapd.pid\n\
             modulepath /usr/lib/ldap\n\
             moduleload back_mdb\n\
             TLSCertificateFile {d}/cert.pem\n\
             TLSCertificateKeyFile {d}/key.pem\n\
             database mdb\n\
             suffix \"{BASE}\"\n\
             rootdn \"{ROOT_DN}\"\n\
             rootpw {ROOT_PASSWORD}\n\
             directory {d}/db\n\
             maxsize 10485760\n\
             access to attrs=userPassword by anonymous auth by * none\n\
             access to * by dn.exact=\"{SERVICE_DN}\" read by users read by * none\n"
        );
        std::fs::write(p.join("slapd.conf"), conf).unwrap();
        let mut ldif = DATA.to_string();
        for u in ["alice", "bob", "carol", "dave"] {
            ldif.push('\n');
            ldif.push_str(&person(u));
        }
        for (g, members) in
            [("gpu-admins", &["alice"][..]), ("ml-lab", &["alice", "bob"][..]), ("physics", &["dave"][..])]
        {
            ldif.push('\n');
            ldif.push_str(&group(g, members));
        }
        std::fs::write(p.join("data.ldif"), ldif).unwrap();
        let slapadd = bin.with_file_name("slapadd");
        let out = std::process::Command::new(&slapadd)
            .args(["-f", &format!("{d}/slapd.conf"), "-l", &format!("{d}/data.ldif")])
            .output()
            .unwrap();
        assert!(out.status.success(), "slapadd: {}", String::from_utf8_lossy(&out.stderr));
        // A port the kernel picked, then handed to slapd: another process may take it in
        // between, so a failed start is tried again with new ports.
        let mut last = String::new();
        for _ in 0..5 {
            let (ldap_port, ldaps_port) = (free_port(), free_port());
            let urls = format!("ldap://127.0.0.1:{ldap_port}/ ldaps://127.0.0.1:{ldaps_port}/");
            let out = std::process::Command::new(&bin)
                .args(["-f", &format!("{d}/slapd.conf"), "-h", &urls])
                .output()
                .unwrap();
            if out.status.success() {
                let s = Self { dir, ldap_port, ldaps_port, ca, ca_file };
                s.wait_ready();
                return Some(s);
            }
            last = String::from_utf8_lossy(&out.stderr).into_owned();
        }
        panic!("slapd did not start: {last}");
    }

    /// slapd forks once listening; this only makes sure (bounded: a few connects).
    fn wait_ready(&self) {
        let until = Instant::now() + Duration::from_secs(10);
        while std::net::TcpStream::connect(("127.0.0.1", self.ldap_port)).is_err() {
            assert!(Instant::now() < until, "slapd is not listening on {}", self.ldap_port);
            std::thread::yield_now();
        }
    }

    pub fn ldap_url(&self) -> String {
        format!("ldap://127.0.0.1:{}", self.ldap_port)
    }

    pub fn ldaps_url(&self) -> String {
        format!("ldaps://127.0.0.1:{}", self.ldaps_port)
    }

    /// Writes the service account's password file (0600) into `dir`.
    pub fn password_file(&self, dir: &Path) -> PathBuf {
        use std::os::unix::fs::PermissionsExt;
        let f = dir.join("ldap-bind-password");
        std::fs::write(&f, format!("{SERVICE_PASSWORD}\n")).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o600)).unwrap();
        f
    }

    /// Changes the directory as its root: `f` gets a bound connection.
    pub async fn as_root<F, Fut>(&self, f: F)
    where
        F: FnOnce(ldap3::Ldap) -> Fut,
        Fut: std::future::Future<Output = ()>,
    {
        let (conn, mut ldap) = ldap3::LdapConnAsync::new(&self.ldap_url()).await.unwrap();
        ldap3::drive!(conn);
        ldap.simple_bind(ROOT_DN, ROOT_PASSWORD).await.unwrap().success().unwrap();
        f(ldap).await;
    }
}

impl Drop for Slapd {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.path().join("slapd.pid")) {
            let _ = std::process::Command::new("kill").arg(pid.trim()).status();
        }
    }
}
