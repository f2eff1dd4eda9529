//! A worker's file-mounts step, run by bash against a stand-in `curl` that answers as the
//! head's server does (`bin/src/mounts.rs`): a directory as a tar of its contents, a file
//! with its mode, an unknown mount as a 404 that fails the boot with the head's reason.

use super::*;
use crate::config::mounts::{MountsSource, hex_of};

const FAKE_CURL: &str = r#"#!/bin/bash
# Stand-in for curl: -D HEADERS -o BODY -w FMT ... URL; answers from $FAKE_CURL_ROOT/<hex>.
while [ $# -gt 0 ]; do
  case "$1" in
    -D) h="$2"; shift 2 ;;
    -o) b="$2"; shift 2 ;;
    -w|-H|--retry|--retry-delay) shift 2 ;;
    -*) shift ;;
    *) url="$1"; shift ;;
  esac
done
echo "$url" >>"$FAKE_CURL_LOG"
d="$FAKE_CURL_ROOT/${url##*/}"
if [ -d "$d" ]; then cp "$d/headers" "$h"; cp "$d/body" "$b"; printf 200
else printf 'HTTP/1.1 404 Not Found\r\n\r\n' >"$h"; echo 'the head has no such path' >"$b"; printf 404; fi
"#;

fn answer(root: &std::path::Path, path: &str, headers: &str, body: &[u8]) {
    let d = root.join(hex_of(path));
    std::fs::create_dir_all(&d).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(d.join("headers"), headers).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(d.join("body"), body).unwrap_or_else(|e| panic!("{e}"));
}

/// A fresh directory for one test: `bin/` with the stand-in curl, `home/`, `answers/`.
fn stage(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for d in ["bin", "home", "answers"] {
        std::fs::create_dir_all(dir.join(d)).unwrap_or_else(|e| panic!("{e}"));
    }
    executable(&dir.join("bin/curl"), FAKE_CURL);
    dir
}

fn executable(path: &std::path::Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap_or_else(|e| panic!("{e}"));
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
        .unwrap_or_else(|e| panic!("{e}"));
}

/// The head's answer for directory mount `path`: a gzipped tar of `files` (the server's
/// `tar -czf - -C <dir> .`).
fn dir_answer(dir: &std::path::Path, path: &str, files: &[(&str, &str)]) {
    let src = dir.join("src").join(hex_of(path));
    for (f, text) in files {
        let f = src.join(f);
        if let Some(parent) = f.parent() {
            std::fs::create_dir_all(parent).unwrap_or_else(|e| panic!("{e}"));
        }
        std::fs::write(f, text).unwrap_or_else(|e| panic!("{e}"));
    }
    let tgz = dir.join("code.tgz");
    let tar = std::process::Command::new("tar")
        .arg("-czf")
        .arg(&tgz)
        .arg("-C")
        .arg(&src)
        .arg(".")
        .status()
        .unwrap_or_else(|e| panic!("tar: {e}"));
    assert!(tar.success());
    let body = std::fs::read(&tgz).unwrap_or_else(|e| panic!("{e}"));
    answer(
        &dir.join("answers"),
        path,
        "HTTP/1.1 200 OK\r\nx-rayscale-mount-kind: dir\r\n\r\n",
        &body,
    );
}

/// The head's answer for file mount `path`: its bytes with `mode`.
fn file_answer(dir: &std::path::Path, path: &str, mode: &str, body: &[u8]) {
    answer(
        &dir.join("answers"),
        path,
        &format!(
            "HTTP/1.1 200 OK\r\nx-rayscale-mount-kind: file\r\nx-rayscale-mount-mode: {mode}\r\n\r\n"
        ),
        body,
    );
}

fn source() -> Option<MountsSource> {
    Some(MountsSource {
        port: 8079,
        token: "ab".repeat(16),
    })
}

fn run(script: &str, dir: &std::path::Path) -> (bool, String) {
    let out = std::process::Command::new("bash")
        .env("RAYSCALE_USER_WAIT_S", "0")
        .arg("-c")
        .arg(script)
        .env("RAYSCALE_BOOT_DIR", dir.join("boot"))
        .env("HOME", dir.join("home"))
        .env(
            "PATH",
            format!(
                "{}:{}",
                dir.join("bin").display(),
                std::env::var("PATH").unwrap_or_default()
            ),
        )
        .env("FAKE_CURL_ROOT", dir.join("answers"))
        .env("FAKE_CURL_LOG", dir.join("curl.log"))
        .env("RAYSCALE_TRACE", dir.join("trace"))
        .output()
        .unwrap_or_else(|e| panic!("bash: {e}"));
    let log = std::fs::read_to_string(dir.join("boot/boot.log")).unwrap_or_default();
    (out.status.success(), log)
}

#[test]
fn a_worker_fetches_the_heads_mounts_before_its_initialization_commands() {
    use std::os::unix::fs::PermissionsExt;
    let dir = stage("rayscale-boot-mounts");
    // The head's answers: ~/code as a tar of its contents, a credentials file with 0600.
    dir_answer(
        &dir,
        "~/code",
        &[("a.py", "print('a')\n"), ("sub/b.txt", "b\n")],
    );
    let cred = dir.join("etc/cred.json");
    let cred_path = cred.display().to_string();
    file_answer(&dir, &cred_path, "600", b"{\"k\": 1}\n");
    let yaml = format!(
        "file_mounts: {{'~/code': ./code, '{cred_path}': ./cred.json}}\n\
         initialization_commands: ['test -f ~/code/sub/b.txt && echo init-saw-the-mounts >> $RAYSCALE_TRACE']\n\
         worker_start_ray_commands: ['echo start >> $RAYSCALE_TRACE']\n"
    );
    let mut c = cfg(&yaml);
    // Without a source (no head serving) the step is not there.
    let without = render_worker(&c, &target()).unwrap_or_else(|e| panic!("{e}"));
    assert!(step_commands(&without, "file-mounts").is_empty());
    c.mounts_source = source();
    let s = render_worker(&c, &target()).unwrap_or_else(|e| panic!("{e}"));
    let steps: Vec<usize> = ["file-mounts", "initialization", "start"]
        .iter()
        .map(|n| s.find(&format!("/{n}.sh\" <<")).unwrap_or(usize::MAX))
        .collect();
    assert!(steps[0] < steps[1] && steps[1] < steps[2], "{steps:?}");
    let (ok, log) = run(&s, &dir);
    assert!(ok, "{log}");
    let home = dir.join("home");
    assert_eq!(
        std::fs::read_to_string(home.join("code/a.py")).unwrap_or_default(),
        "print('a')\n"
    );
    assert_eq!(
        std::fs::read_to_string(home.join("code/sub/b.txt")).unwrap_or_default(),
        "b\n"
    );
    assert_eq!(
        std::fs::read_to_string(&cred).unwrap_or_default(),
        "{\"k\": 1}\n"
    );
    let mode = std::fs::metadata(&cred)
        .map(|m| m.permissions().mode() & 0o777)
        .unwrap_or(0);
    assert_eq!(mode, 0o600);
    assert_eq!(
        std::fs::read_to_string(dir.join("trace")).unwrap_or_default(),
        "init-saw-the-mounts\nstart\n"
    );
    let asked = std::fs::read_to_string(dir.join("curl.log")).unwrap_or_default();
    assert!(
        asked.contains(&format!(
            "http://10.0.0.1:8079/file-mounts/{}",
            hex_of("~/code")
        )),
        "{asked}"
    );

    // A mount the head does not serve: the boot stops before Ray, with the head's reason.
    let _ = std::fs::remove_file(dir.join("trace"));
    let yaml = format!("{yaml}cluster_synced_files: ['~/missing']\n");
    let mut c = cfg(&yaml);
    c.mounts_source = source();
    let s = render_worker(&c, &target()).unwrap_or_else(|e| panic!("{e}"));
    let (ok, log) = run(&s, &dir);
    assert!(!ok, "{log}");
    assert!(
        log.contains(
            "file mount ~/missing: the head (10.0.0.1:8079) answered 404: the head has no such path"
        ),
        "{log}"
    );
    assert!(
        std::fs::read_to_string(dir.join("trace")).is_err(),
        "Ray did not start"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn with_a_container_the_mounts_go_to_rays_host_location_and_are_bind_mounted() {
    let pid = std::process::id();
    let dir = stage("rayscale-boot-mounts-docker");
    // A stand-in docker: the image's environment for `inspect`, every call traced.
    executable(
        &dir.join("bin/docker"),
        "#!/bin/bash\necho \"docker $*\" >>\"$RAYSCALE_TRACE\"\n\
         [ \"$1\" = inspect ] && echo '[\"PATH=/usr/bin:/bin\",\"HOME=/home/ray\"]'\nexit 0\n",
    );
    dir_answer(&dir, "~/code", &[("a.py", "a\n")]);
    file_answer(&dir, "/opt/data", "644", b"d\n");
    let mut c = cfg(
        "file_mounts: {'~/code': ./code, '/opt/data': ./data, '~/ray_bootstrap_key.pem': k.pem}\n\
         docker: {image: img, container_name: rc, disable_shm_size_detection: true, \
         disable_automatic_runtime_detection: true}\n\
         worker_start_ray_commands: ['echo start']\n",
    );
    c.cluster_name = format!("mounts-{pid}");
    c.mounts_source = source();
    file_answer(&dir, "~/ray_bootstrap_key.pem", "600", b"key\n");
    let s = render_worker(&c, &target()).unwrap_or_else(|e| panic!("{e}"));
    let (ok, log) = run(&s, &dir);
    assert!(ok, "{log}");
    let host = format!("/tmp/ray_tmp_mount/mounts-{pid}");
    assert_eq!(
        std::fs::read_to_string(format!("{host}/~/code/a.py")).unwrap_or_default(),
        "a\n",
        "{log}"
    );
    assert_eq!(
        std::fs::read_to_string(format!("{host}//opt/data")).unwrap_or_default(),
        "d\n"
    );
    assert!(
        !dir.join("home/code").exists(),
        "not in the host user's home"
    );
    let trace = std::fs::read_to_string(dir.join("trace")).unwrap_or_default();
    let started = trace
        .lines()
        .find(|l| l.contains(" run --rm"))
        .unwrap_or_else(|| panic!("no container: {trace}"));
    // Ray's order and paths: the mounts after -it, `~` as the image's HOME, no bootstrap key.
    assert_eq!(
        started,
        format!(
            "docker run --rm --name rc -d -it -v {host}//opt/data:/opt/data \
             -v {host}/~/code:/home/ray/code -e LC_ALL=C.UTF-8 -e LANG=C.UTF-8 --net=host img bash"
        )
    );
    let _ = std::fs::remove_dir_all(&host);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A head launched with `file_mounts` waits in its boot, before its initialization
/// commands, until `rayscale up` leaves its mark; a head without them does not wait, and
/// a container head mounts them from Ray's host location, where `up` puts them.
#[test]
fn the_head_waits_for_up_to_copy_its_file_mounts_before_its_setup() {
    let plain = head_script(&cfg("initialization_commands: [echo init]\n"))
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(step_commands(&plain, "file-mounts").is_empty(), "{plain}");
    let c = cfg(
        "initialization_commands: [echo init]\nfile_mounts: {'~/code': ./code}\n\
         cluster_synced_files: [~/synced]\n",
    );
    let s = head_script(&c).unwrap_or_else(|e| panic!("{e}"));
    let wait = step_commands(&s, "file-mounts");
    assert!(!wait.is_empty(), "{s}");
    let (at_wait, at_init) = (
        s.find("$BOOT_DIR/file-mounts.sh\" <<"),
        s.find("$BOOT_DIR/initialization.sh\" <<"),
    );
    assert!(at_wait.is_some() && at_wait < at_init, "{s}");
    // The step itself, in bash: it waits until the mark is there, then says so.
    let dir = stage("rayscale-head-wait");
    let home = dir.join("home");
    let step = dir.join("wait.sh");
    std::fs::write(&step, format!("set -e\n{}\n", wait.join("\n")))
        .unwrap_or_else(|e| panic!("{e}"));
    let mut child = std::process::Command::new("bash")
        .env("RAYSCALE_USER_WAIT_S", "0")
        .arg(&step)
        .env("HOME", &home)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("bash: {e}"));
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let waiting = matches!(child.try_wait(), Ok(None));
    if !waiting {
        let _ = child.kill();
    }
    assert!(waiting, "the head went on without its file mounts");
    let mark = home.join(crate::config::mounts::COPIED_MARK);
    std::fs::create_dir_all(mark.parent().unwrap_or(&home)).unwrap_or_else(|e| panic!("{e}"));
    std::fs::write(&mark, "").unwrap_or_else(|e| panic!("{e}"));
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("{e}"));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && text.starts_with("rayscale: waiting for rayscale up to copy the file mounts")
            && text
                .trim_end()
                .ends_with("rayscale: the file mounts are here"),
        "{text}"
    );
    let _ = std::fs::remove_dir_all(&dir);
    // In a container: each mount bind-mounted from Ray's host location.
    let d = cfg(
        "file_mounts: {'~/code': ./code}\ndocker: {image: rayproject/ray, container_name: rc}\n",
    );
    let s = head_script(&d).unwrap_or_else(|e| panic!("{e}"));
    assert!(s.contains("/tmp/ray_tmp_mount/demo/~/code"), "{s}");
    // Its mark beside the copies (a reboot that empties /tmp empties both).
    assert!(
        s.contains("while [ ! -e '/tmp/ray_tmp_mount/demo/.rayscale-file-mounts.copied' ]"),
        "{s}"
    );
    assert_eq!(
        head_mounts_prefix(&d)
            .unwrap_or_else(|e| panic!("{e}"))
            .as_deref(),
        Some("/tmp/ray_tmp_mount/demo")
    );
    assert_eq!(
        head_mounts_prefix(&c).unwrap_or_else(|e| panic!("{e}")),
        None
    );
}

#[test]
fn only_sync_continuously_leaves_a_loop_that_fetches_the_mounts_again() {
    use crate::provider::boot::worker_mount_commands;
    let src = source().unwrap_or_else(|| unreachable!());
    let once = cfg("file_mounts: {'~/code': ./code}\n");
    let plain = worker_mount_commands(&once.raw, &src, None).join("\n");
    assert!(plain.contains("fetch_mount "), "{plain}");
    assert!(
        !plain.contains("file-mounts-state") && !plain.contains("while sleep"),
        "{plain}"
    );
    let kept = cfg("file_mounts: {'~/code': ./code}\nfile_mounts_sync_continuously: true\n");
    let synced = worker_mount_commands(&kept.raw, &src, None);
    let text = synced.join("\n");
    // The state is read before the first fetch, the loop started after it, detached;
    // it fetches only the mount whose state changed.
    let state = text
        .find("mounts_state >\"$MOUNTS_STATE_DIR/first\"")
        .unwrap_or(usize::MAX);
    let first = text.find("\nfetch_mount ").unwrap_or(0);
    let looping = text
        .find("while sleep $((pause + RANDOM % 3))")
        .unwrap_or(0);
    assert!(text.contains("if fetch_one \"$n\""), "{text}");
    assert!(state < first && first < looping, "{text}");
    assert!(
        text.contains("</dev/null >>~/.rayscale/file-mounts-sync.log 2>&1 &"),
        "{text}"
    );
    // No file mounts, no loop.
    let none = cfg("file_mounts_sync_continuously: true\n");
    assert!(worker_mount_commands(&none.raw, &src, None).is_empty());
}
