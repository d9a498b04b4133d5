//! `sonde grab -M ssh` against a real OpenSSH: the test starts `sshd` inside the lab's network
//! namespace only (port 2222, a host key made for the test), and checks every host's
//! identification, KEXINIT lists and host key (against the key file's blob, hashed by
//! `sha256sum`). Needs root and /usr/sbin/sshd; the lab and the sshd are
//! removed by their guards, also on failure.

use std::process::{Child, Command, Stdio};

mod common;
use common::{can_run_labs, sonde, stderr, Lab};

/// The sshd the test started, ended when dropped.
struct Sshd(Child);

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn ssh_reads_the_identification_and_kexinit_of_openssh() {
    const SSHD: &str = "/usr/sbin/sshd";
    if !can_run_labs() || !std::path::Path::new(SSHD).exists() {
        return;
    }
    let lab = Lab::up(&["--population", "198.18.0.0/29", "--responsive", "1"]);
    let key = lab.file("host_key");
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f", &key])
        .status()
        .unwrap();
    assert!(made.success());
    // sshd refuses to start without its privilege separation directory.
    std::fs::create_dir_all("/run/sshd").unwrap();
    let namespace = format!("sonde-{}-net", lab.name);
    let pid_file = lab.file("sshd.pid");
    let _sshd = Sshd(
        Command::new("ip")
            .args([
                "netns",
                "exec",
                &namespace,
                SSHD,
                "-D",
                "-e",
                "-f",
                "/dev/null",
            ])
            .args(["-h", &key, "-o", "ListenAddress=0.0.0.0:2222"])
            .args(["-o", &format!("PidFile={pid_file}")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    std::thread::sleep(std::time::Duration::from_millis(1000));
    // The key blob is the public key line's second word, base64.
    let digest = Command::new("sh")
        .args([
            "-c",
            &format!("cut -d' ' -f2 {key}.pub | openssl base64 -d -A | sha256sum"),
        ])
        .output()
        .unwrap();
    let host_key_sha256 = String::from_utf8(digest.stdout).unwrap()[..64].to_string();
    let out_file = lab.file("ssh.ndjson");
    let args = [
        "grab",
        "--lab",
        &lab.name,
        "-q",
        "-r",
        "0",
        "198.18.0.0/29",
        "-p",
        "2222",
        "-M",
        "ssh",
        "-o",
        &out_file,
    ];
    let out = sonde(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    let rows: Vec<serde_json::Value> = std::fs::read_to_string(&out_file)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 8);
    for r in &rows {
        assert_eq!(r["status"], "success", "{r}");
        let banner = r["ssh_banner"].as_str().unwrap_or_default();
        assert!(banner.starts_with("SSH-2.0-OpenSSH_"), "{r}");
        assert_eq!(r["ssh_host_key_algorithms"], "ssh-ed25519", "{r}");
        let kex = r["ssh_kex_algorithms"].as_str().unwrap_or_default();
        assert!(kex.split(',').any(|k| k == "curve25519-sha256"), "{r}");
        assert!(r["ssh_ciphers_s2c"]
            .as_str()
            .is_some_and(|c| c.contains("aes128-ctr")));
        assert_eq!(r["ssh_host_key_type"], "ssh-ed25519", "{r}");
        assert_eq!(r["ssh_host_key_sha256"], host_key_sha256.as_str(), "{r}");
    }
}
