//! The container: the role's image, `/dev/shm` and the GPU runtime, with stand-ins for
//! `docker`, `nvidia-smi` and `/proc/meminfo`.

use super::*;

/// Writes an executable stub `name` into `dir` that appends its arguments to
/// `$RAYSCALE_TRACE` and runs `extra`.
fn stub(dir: &std::path::Path, name: &str, extra: &str) {
    let path = dir.join(name);
    std::fs::write(
        &path,
        format!("#!/bin/sh\necho \"{name} $*\" >> \"$RAYSCALE_TRACE\"\n{extra}"),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let _ = std::process::Command::new("chmod")
        .arg("755")
        .arg(&path)
        .status();
}

#[test]
fn the_container_gets_the_roles_image_shm_and_the_nvidia_runtime_as_ray_detects_them() {
    let dir = std::env::temp_dir().join(format!("rayscale-docker-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap_or_else(|e| panic!("{e}"));
    let meminfo = dir.join("meminfo");
    std::fs::write(
        &meminfo,
        "MemTotal: 4000000 kB\nMemAvailable:    1000000 kB\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let run = |docker_block: &str, nvidia: bool| -> String {
        let trace = dir.join("trace");
        let _ = std::fs::remove_file(&trace);
        let runtimes = if nvidia {
            "map[io.containerd.runc.v2:{} nvidia:{nvidia-container-runtime []} runc:{}]"
        } else {
            "map[io.containerd.runc.v2:{} runc:{}]"
        };
        for cmd in ["docker", "podman"] {
            stub(
                &bin,
                cmd,
                &format!("[ \"$1\" = info ] && echo '{runtimes}'\nexit 0\n"),
            );
        }
        stub(&bin, "nvidia-smi", "exit 0\n");
        let c = cfg(&format!(
            "worker_start_ray_commands: ['echo start']\n{docker_block}\n"
        ));
        let s = render_worker(&c, &target()).unwrap_or_else(|e| panic!("{e}"));
        let out = std::process::Command::new("bash")
            .env("RAYSCALE_USER_WAIT_S", "0")
            .arg("-c")
            .arg(&s)
            .env("RAYSCALE_BOOT_DIR", dir.join("boot"))
            .env("RAYSCALE_TRACE", &trace)
            .env("RAYSCALE_MEMINFO", &meminfo)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .output()
            .unwrap_or_else(|e| panic!("bash: {e}"));
        let log = std::fs::read_to_string(dir.join("boot/boot.log")).unwrap_or_default();
        assert!(out.status.success(), "{log}");
        let trace = std::fs::read_to_string(&trace).unwrap_or_default();
        trace
            .lines()
            .find(|l| l.contains(" run --rm"))
            .map(str::to_string)
            .unwrap_or_else(|| panic!("no container started: {trace}"))
    };
    // 1,000,000 kB available: 1,024,000,000 bytes x 0.3 x 1.1 for /dev/shm.
    let shm = "--shm-size=337920000b";
    let started = run(
        "docker: {image: all, worker_image: w-img, head_image: h-img, container_name: rc, \
         run_options: [--ulimit nofile=65536:65536], worker_run_options: [-e ROLE=worker], \
         head_run_options: [-e ROLE=head]}",
        true,
    );
    assert_eq!(
        started,
        format!(
            "docker run --rm --name rc -d -it -e LC_ALL=C.UTF-8 -e LANG=C.UTF-8 \
             --ulimit nofile=65536:65536 -e ROLE=worker {shm} --runtime=nvidia --net=host w-img bash"
        )
    );
    // No NVIDIA runtime: no --runtime; a --shm-size of the user's: no detection; podman.
    let started = run(
        "docker: {image: all, container_name: rc, use_podman: true, run_options: ['--shm-size=1g']}",
        false,
    );
    assert_eq!(
        started,
        "podman run --rm --name rc -d -it -e LC_ALL=C.UTF-8 -e LANG=C.UTF-8 --shm-size=1g \
         --net=host all bash"
    );
    // Both detections turned off.
    let started = run(
        "docker: {image: all, container_name: rc, disable_shm_size_detection: true, \
         disable_automatic_runtime_detection: true}",
        true,
    );
    assert_eq!(
        started,
        "docker run --rm --name rc -d -it -e LC_ALL=C.UTF-8 -e LANG=C.UTF-8 --net=host all bash"
    );
    // The head runs the head's image with the head's options.
    let c = cfg(
        "docker: {image: all, worker_image: w-img, head_image: h-img, container_name: rc, \
         worker_run_options: [-e ROLE=worker], head_run_options: [-e ROLE=head]}\n",
    );
    let head = head_script(&c).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        head.contains("-e ROLE=head $DOCKER_DETECTED --net=host 'h-img' bash")
            && !head.contains("'w-img' bash"),
        "{head}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
