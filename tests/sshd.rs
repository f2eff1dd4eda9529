//! A real OpenSSH server on loopback (127.0.0.2 and 127.0.0.3), for the tests where
//! something SSHes into a node as Ray's node updater does: the v1 local provider's
//! updater, and `rayscale up` copying file mounts to a head the boot simulator plays. It
//! has its own host key and user key (the test's user logs in with the user key); the
//! clients reach it with `auth.ssh_proxy_command: nc <addr> <port>`, Ray's own way
//! through a bastion, so the node's address in the cloud does not matter.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::ray_head::free_ports;
use crate::wait_until;

/// The server; stopped on drop.
pub struct Sshd {
    child: Child,
    /// The user key's private half (`auth.ssh_private_key`).
    pub key: PathBuf,
    /// Its port.
    pub port: u16,
}

/// Fails the test naming what is missing (`scripts/setup-system.sh` installs them).
pub fn need(path: &str, what: &str) {
    assert!(
        Path::new(path).exists() || which(path),
        "{path} is missing: the SSH tests need {what} (scripts/setup-system.sh installs them: \
         apt-get install openssh-server openssh-client netcat-openbsd rsync)"
    );
}

fn which(cmd: &str) -> bool {
    Command::new("sh")
        .args(["-c", &format!("command -v {cmd}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The test's user, who logs in.
pub fn login_user() -> String {
    let out = Command::new("id").arg("-un").output().expect("id -un");
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

impl Sshd {
    /// Starts a server with its files under `dir`. With `force_command`, every session
    /// runs that program instead of the client's command (sshd's `ForceCommand`; the
    /// client's command is in `$SSH_ORIGINAL_COMMAND`): how a test gives a session the
    /// environment of the node it plays.
    pub fn start(dir: &Path, force_command: Option<&Path>) -> Sshd {
        need("/usr/sbin/sshd", "an OpenSSH server");
        need("ssh", "an OpenSSH client");
        need("nc", "netcat");
        let port = free_ports(1)[0];
        let key = dir.join("id_ed25519");
        let host = dir.join("host_ed25519");
        for k in [&key, &host] {
            let ok = Command::new("ssh-keygen")
                .args(["-q", "-t", "ed25519", "-N", ""])
                .arg("-f")
                .arg(k)
                .status()
                .expect("ssh-keygen");
            assert!(ok.success());
        }
        std::fs::copy(dir.join("id_ed25519.pub"), dir.join("authorized_keys"))
            .expect("authorized_keys");
        let cfg = dir.join("sshd_config");
        let mut text = format!(
            "Port {port}\nListenAddress 127.0.0.2\nListenAddress 127.0.0.3\nHostKey {}\n\
             PidFile {}\nAuthorizedKeysFile {}\nStrictModes no\nUsePAM no\n\
             PermitRootLogin prohibit-password\nPasswordAuthentication no\n\
             KbdInteractiveAuthentication no\nPubkeyAuthentication yes\n",
            host.display(),
            dir.join("sshd.pid").display(),
            dir.join("authorized_keys").display()
        );
        if let Some(f) = force_command {
            text.push_str(&format!("ForceCommand {}\n", f.display()));
        }
        std::fs::write(&cfg, text).expect("sshd_config");
        // sshd run as root wants its privilege-separation directory.
        let _ = std::fs::create_dir_all("/run/sshd");
        let child = Command::new("/usr/sbin/sshd")
            .arg("-f")
            .arg(&cfg)
            .args(["-D", "-e"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.join("sshd.log")).expect("sshd.log"))
            .spawn()
            .expect("sshd");
        let up = wait_until(Duration::from_secs(10), || {
            std::net::TcpStream::connect(("127.0.0.2", port)).is_ok()
        });
        assert!(
            up,
            "sshd did not listen: {}",
            std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default()
        );
        Sshd { child, key, port }
    }
}

impl Drop for Sshd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
