//! What the `file_mounts` tests share: the user's files `up` ships, the check that a node
//! has them, a head's SSH session in the boot simulator, and the scenario every cloud
//! whose `up` finds or makes the cluster's SSH key runs ([`up_copies_file_mounts_with_the_clusters_key`]).

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::e2e::{Cloud, Stage, rayscale_with};
use crate::sshd::{Sshd, login_user};
use crate::wait_until;

/// What the user's machine ships with `file_mounts` in these tests, under `local`: a code
/// directory with what their `rsync_exclude` leaves out (`.git`, `*.pyc`), and a
/// credentials file of mode 0600.
pub fn user_files(local: &Path) {
    for d in ["code/sub", "code/.git"] {
        std::fs::create_dir_all(local.join(d)).expect("scratch");
    }
    for (f, text) in [
        ("code/a.py", "print('a')\n"),
        ("code/sub/c.txt", "c\n"),
        ("code/.git/HEAD", "ref\n"),
        ("code/b.pyc", "pyc\n"),
        ("cred.json", "{\"k\": 1}\n"),
    ] {
        std::fs::write(local.join(f), text).expect("scratch");
    }
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(
        local.join("cred.json"),
        std::fs::Permissions::from_mode(0o600),
    )
    .expect("chmod");
}

/// The YAML lines that ship [`user_files`] under `local` (`file_mounts`, `rsync_exclude`).
pub fn mounts_yaml(local: &Path) -> String {
    format!(
        "file_mounts: {{'~/code': '{}', '~/cred.json': '{}'}}\n\
         rsync_exclude: ['**/.git', '**/.git/**', '*.pyc']\n",
        local.join("code").display(),
        local.join("cred.json").display(),
    )
}

/// The node `id` (its home `home`) has [`user_files`] at `~/code` and `~/cred.json`: the
/// directory without what `rsync_exclude` leaves out (`a.py` holding `a_py`), the file
/// with its mode.
pub fn assert_mounts(home: &Path, id: &str, a_py: &str) {
    let read = |f: &str| std::fs::read_to_string(home.join(f)).unwrap_or_default();
    assert_eq!(read("code/a.py"), a_py, "{id}");
    assert_eq!(read("code/sub/c.txt"), "c\n", "{id}");
    assert!(!home.join("code/.git").exists(), "{id}: rsync_exclude");
    assert!(!home.join("code/b.pyc").exists(), "{id}: rsync_exclude");
    assert_eq!(read("cred.json"), "{\"k\": 1}\n", "{id}");
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(home.join(std::path::Path::new("cred.json")))
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(0);
    assert_eq!(mode, 0o600, "{id}");
}

/// The program an sshd runs for each session (its `ForceCommand`), written under
/// `scratch`: the session runs in the simulated head's home once the test writes that
/// home's path to the returned file. Returns (the program, that file).
pub fn head_session(scratch: &Path) -> (PathBuf, PathBuf) {
    let head_home_file = scratch.join("head-home");
    let session = scratch.join("session.sh");
    std::fs::write(
        &session,
        format!(
            "#!/bin/bash\n# A session on the simulated head: its home, once the test knows it.\n\
             for _ in $(seq 1 300); do [ -s {f} ] && break; sleep 0.1; done\n\
             [ -s {f} ] || {{ echo 'no head yet' >&2; exit 255; }}\n\
             export HOME=\"$(cat {f})\"; cd \"$HOME\" || exit 255\n\
             exec /bin/bash -c \"$SSH_ORIGINAL_COMMAND\"\n",
            f = head_home_file.display()
        ),
    )
    .expect("session.sh");
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&session, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    (session, head_home_file)
}

/// A cloud whose `rayscale up` finds or makes the cluster's SSH key when the YAML gives
/// no `auth.ssh_private_key`, and whose nodes let that key in.
pub trait KeyCloud: Cloud {
    /// Plays what lets the cluster's key into the head for `user` (GCE's guest agent
    /// writing the project's `ssh-keys` into `authorized_keys`), until the key shows or
    /// `timeout` passes. Runs on its own thread.
    fn let_in(
        &self,
        authorized_keys: PathBuf,
        user: String,
        timeout: Duration,
    ) -> std::thread::JoinHandle<()>;
}

/// What a cloud's agent does for [`KeyCloud::let_in`], on its own thread: once `keys`
/// (the public keys the cloud holds for the login user) shows any, within `timeout`,
/// they are appended to `authorized_keys`.
pub fn let_in_when_shown(
    authorized_keys: PathBuf,
    timeout: Duration,
    keys: impl Fn() -> Vec<String> + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        if wait_until(timeout, || !keys().is_empty()) {
            let mut text = std::fs::read_to_string(&authorized_keys).unwrap_or_default();
            for k in keys() {
                text.push_str(&format!("{k}\n"));
            }
            std::fs::write(&authorized_keys, text).expect("authorized_keys");
        }
    })
}

/// `rayscale up` with `file_mounts` and `auth` without `ssh_private_key`: `up` finds or
/// makes the cluster's key, the node lets it in, and `up` copies the mounts to the head
/// over a real sshd (reached through `auth.ssh_proxy_command`) with it, before the head's
/// setup; `down` removes the head. The workers' fetch from the head is the same on every
/// cloud (`aws_live`).
pub fn up_copies_file_mounts_with_the_clusters_key(name: &str, cloud: &dyn KeyCloud) {
    let dir = std::env::temp_dir().join(format!("rayscale-{name}-ssh-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch");
    let local = dir.join("local");
    user_files(&local);
    let (session, head_home_file) = head_session(&dir);
    let sshd = Sshd::start(&dir, Some(&session));
    let user = login_user();
    let extra = format!(
        "auth: {{ssh_user: {user}, ssh_proxy_command: 'nc 127.0.0.2 {}'}}\n{}",
        sshd.port,
        mounts_yaml(&local)
    );
    let stage = Stage::new(name, "key", cloud, &extra, "");
    let agent = cloud.let_in(
        dir.join("authorized_keys"),
        user.clone(),
        Duration::from_secs(120),
    );
    // The sshd's sessions go to the head's home in the simulator once it boots (the
    // head is the only instance: the YAML has no worker type).
    let sim_dir = stage.scratch.join("sim");
    let found = |sim: &crate::boot_sim::BootSimulator| match sim.ever_booted().first() {
        Some(id) => {
            let home = sim_dir.join(id).join("home");
            std::fs::write(&head_home_file, home.display().to_string()).expect("head-home");
            true
        }
        None => false,
    };
    let env = cloud.cli_env();
    let config_arg = stage.config_arg.clone();
    let (ok, out) = std::thread::scope(|s| {
        let run = s.spawn(move || rayscale_with(&env, &["up", &config_arg]));
        wait_until(Duration::from_secs(120), || {
            found(&stage.sim) || run.is_finished()
        });
        run.join().expect("up")
    });
    assert!(
        ok && out.contains("launched and running")
            && out.contains("copied 2 file mounts to the head"),
        "{out}\n{}",
        stage.diag()
    );
    agent.join().expect("the key agent");
    let head_id = cloud.running().first().cloned().expect("a head instance");
    assert!(out.contains(&head_id), "{out}");
    // The head boots after the mounts came, with them in its home.
    assert!(
        wait_until(Duration::from_secs(90), || crate::e2e::gcs_answers(
            &stage.gcs
        )),
        "the head's GCS does not answer\n{}",
        stage.diag()
    );
    assert_mounts(
        &sim_dir.join(&head_id).join("home"),
        &head_id,
        "print('a')\n",
    );
    let mut log = String::new();
    wait_until(Duration::from_secs(30), || {
        log = stage.sim.log(&head_id);
        log.contains("Ray runtime started")
    });
    let here = log.find("rayscale: the file mounts are here");
    let started = log.find("Ray runtime started");
    assert!(
        here.is_some() && started.is_some() && here < started,
        "the head's boot waits for its file mounts before its setup:\n{log}"
    );
    // `down`: the head goes.
    let (ok, out) = rayscale_with(&cloud.cli_env(), &["down", &stage.config_arg]);
    assert!(ok && out.contains(&head_id), "{out}");
    assert!(
        wait_until(Duration::from_secs(30), || cloud.running().is_empty()),
        "{:?}",
        cloud.running()
    );
    drop(sshd);
    stage.clean(&[head_id]);
    let _ = std::fs::remove_dir_all(&dir);
}
