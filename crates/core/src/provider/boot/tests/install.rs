//! The head's install of `rayscale`: run with stand-ins for `ray`, its Python and pip.

use super::*;

/// How the head's stand-ins behave in [`run_head_without_rayscale`].
#[derive(Clone, Copy, Default)]
struct Stubs {
    /// pip prints its error and fails.
    pip_fails: bool,
    /// An earlier boot installed `~/.rayscale/bin/rayscale`.
    earlier_install: bool,
}

/// Runs the head script of `c` with a `ray` and the `python` beside it in a directory of
/// their own on `PATH` (no `rayscale` anywhere). The stand-in python writes its arguments
/// to the trace; `pip install --target T` makes `T/bin/rayscale` (a stub that writes its
/// own) unless `pip_fails`, when it prints pip's error and fails; `-c` with `urllib` (a
/// wheel's download) runs the system's python3.
fn run_head_without_rayscale(c: &ClusterConfig, name: &str, stubs: Stubs) -> HeadRun {
    let dir = std::env::temp_dir().join(format!("rayscale-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bin = dir.join("ray-env/bin");
    std::fs::create_dir_all(&bin).unwrap_or_else(|e| panic!("{e}"));
    let python = format!(
        "#!/bin/bash\necho \"python $*\" >> \"$RAYSCALE_TRACE\"\n\
         case \"$1 $2\" in '-c '*urllib*) exec python3 \"$@\";; esac\n\
         [ \"$1 $2 $3\" = '-m pip install' ] || exit 0\n\
         {}\
         while [ $# -gt 0 ]; do [ \"$1\" = --target ] && t=\"$2\"; shift; done\n\
         mkdir -p \"$t/bin\"\n\
         printf '#!/bin/sh\\necho \"rayscale $*\" >> \"$RAYSCALE_TRACE\"\\n' > \"$t/bin/rayscale\"\n\
         chmod 755 \"$t/bin/rayscale\"\n",
        if stubs.pip_fails {
            "echo 'ERROR: No matching distribution found for rayscale==9.9' >&2; exit 1\n"
        } else {
            ""
        }
    );
    for (f, text) in [("python", python.as_str()), ("ray", "#!/bin/sh\nexit 0\n")] {
        std::fs::write(bin.join(f), text).unwrap_or_else(|e| panic!("{e}"));
        let _ = std::process::Command::new("chmod")
            .arg("755")
            .arg(bin.join(f))
            .status();
    }
    if stubs.earlier_install {
        let earlier = dir.join(".rayscale/bin");
        std::fs::create_dir_all(&earlier).unwrap_or_else(|e| panic!("{e}"));
        std::fs::write(
            earlier.join("rayscale"),
            "#!/bin/sh\n[ \"$1\" = --version ] && { echo 'rayscale 0.0.9'; exit 0; }\n\
             echo \"earlier rayscale $*\" >> \"$RAYSCALE_TRACE\"\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let _ = std::process::Command::new("chmod")
            .arg("755")
            .arg(earlier.join("rayscale"))
            .status();
    }
    let s = render_head(
        c,
        &HeadBootTarget {
            node_type: "h",
            instance_id_command: "echo i-head",
            private_ip_command: "echo 10.9.8.7",
            per_boot: false,
        },
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let trace = dir.join("trace");
    let out = std::process::Command::new("bash")
        .env("RAYSCALE_USER_WAIT_S", "0")
        .arg("-c")
        .arg(&s)
        .env("RAYSCALE_BOOT_DIR", dir.join("boot"))
        .env("RAYSCALE_TRACE", &trace)
        .env_remove("RAYSCALE_BIN")
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("HOME", &dir)
        .output()
        .unwrap_or_else(|e| panic!("bash: {e}"));
    // `rayscale run` starts in the background: wait for it when the boot went through.
    let trace_text = if out.status.success() {
        wait_for(&trace, "rayscale run")
    } else {
        std::fs::read_to_string(&trace).unwrap_or_default()
    };
    let run = HeadRun {
        ok: out.status.success(),
        log: std::fs::read_to_string(dir.join("boot/boot.log")).unwrap_or_default(),
        trace: trace_text,
        home: dir.display().to_string(),
        python: bin.join("python").display().to_string(),
        bootstrap: std::fs::read_to_string(dir.join("ray_bootstrap_config.yaml"))
            .unwrap_or_default(),
        script: s,
    };
    let _ = std::fs::remove_dir_all(&dir);
    run
}

struct HeadRun {
    ok: bool,
    log: String,
    trace: String,
    home: String,
    python: String,
    bootstrap: String,
    script: String,
}

#[test]
fn a_head_without_rayscale_installs_it_from_find_links_without_the_index() {
    let c = cfg(
        "head_start_ray_commands: ['ray start --head --port=7000']\n\
         rayscale: {install: {pip: 'rayscale==9.9', find_links: /opt/wheels}}\n",
    );
    let r = run_head_without_rayscale(&c, "install-ok", Stubs::default());
    assert!(r.ok, "{}", r.log);
    let home = &r.home;
    assert_eq!(
        r.trace,
        format!(
            "python -m pip install --quiet --disable-pip-version-check --upgrade --target \
             {home}/.rayscale --no-index --find-links /opt/wheels rayscale==9.9\n\
             rayscale run --config {home}/ray_bootstrap_config.yaml --gcs 127.0.0.1:7000 \
             --head-ip 10.9.8.7 --autostop-head\n"
        ),
        "{}",
        r.log
    );
    assert!(
        r.log.contains(&format!(
            "rayscale: not on PATH: installing rayscale==9.9 from /opt/wheels (pip --no-index) \
             with {} -m pip into ~/.rayscale",
            r.python
        )),
        "{}",
        r.log
    );
    // `find_links` alone: this build's own version, still without the index.
    let s = head_script(&cfg("rayscale: {install: {find_links: /opt/w}}\n")).expect("renders");
    assert!(
        s.contains(&format!(
            "--target ~/.rayscale --no-index --find-links '/opt/w' 'rayscale=={}'",
            env!("CARGO_PKG_VERSION")
        )),
        "{s}"
    );
}

#[test]
fn the_package_index_only_with_index_true() {
    let s = head_script(&cfg("rayscale: {install: {index: true}}\n")).expect("renders");
    assert!(
        s.contains(&format!(
            "--upgrade --target ~/.rayscale 'rayscale=={}' >",
            env!("CARGO_PKG_VERSION")
        )) && !s.contains("--no-index"),
        "{s}"
    );
    assert!(s.contains("from the package index (rayscale.install.index: true)"));
    let e = ClusterConfig::from_yaml_str(
        "cluster_name: d\nprovider: {type: aws}\nhead_node_type: h\n\
         rayscale: {install: {pip: 'rayscale==0.1.0'}}\n\
         available_node_types:\n  h: {resources: {}, node_config: {}}\n",
        "t.yaml",
    )
    .expect_err("a bare requirement needs index: true")
    .to_string();
    assert!(
        e.contains("rayscale.install.pip: alone would install from the public package index")
            && e.contains("add rayscale.install.index: true"),
        "{e}"
    );
}

#[test]
fn with_no_install_given_the_head_reaches_no_index_and_says_how_to_give_it() {
    let c = cfg("head_start_ray_commands: ['ray start --head --port=7000']\n");
    let r = run_head_without_rayscale(&c, "install-none", Stubs::default());
    assert!(!r.ok, "the boot stops: {}", r.log);
    assert!(!r.script.contains("pip install") && !r.script.contains("-m pip"));
    assert!(!r.trace.contains("-m pip") && !r.trace.contains("rayscale run"));
    let why = "rayscale is not on the head's PATH and rayscale.install gives none to install: \
               give rayscale.install.wheel + sha256, or find_links (or index: true to allow \
               the package index), or RAYSCALE_BIN, or an image with rayscale";
    assert!(
        r.log
            .contains(&format!("rayscale: {why}: rayscale is not running")),
        "{}",
        r.log
    );
    // What `rayscale up --wait` reads.
    assert!(
        r.trace.contains(&format!("127.0.0.1:7000 boot/demo {why}")),
        "{}",
        r.trace
    );
    // What an earlier boot (or a setup command) installed is run.
    let r = run_head_without_rayscale(
        &c,
        "install-none-earlier",
        Stubs {
            earlier_install: true,
            ..Stubs::default()
        },
    );
    assert!(r.ok, "{}", r.log);
    assert!(
        r.trace.contains("earlier rayscale run --config"),
        "{}",
        r.trace
    );
    assert!(
        r.log
            .contains("running the one an earlier boot installed (rayscale 0.0.9)"),
        "{}",
        r.log
    );
}

/// A wheel file in a directory of its own (kept while the test runs), and its sha256.
fn a_wheel(name: &str) -> (std::path::PathBuf, std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("rayscale-wheel-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let wheel = dir.join("rayscale-9.9-py3-none-manylinux_2_34_x86_64.whl");
    std::fs::write(&wheel, format!("a wheel for {name}")).unwrap_or_else(|e| panic!("{e}"));
    let sha = crate::config::install::file_sha256(&wheel).unwrap_or_else(|e| panic!("{e}"));
    (dir, wheel, sha)
}

#[test]
fn a_wheel_by_path_is_pinned_when_rendered_checked_and_installed_offline() {
    let (dir, wheel, sha) = a_wheel("path");
    let c = cfg(&format!(
        "head_start_ray_commands: ['ray start --head --port=7000']\n\
         rayscale: {{install: {{wheel: '{}'}}}}\n",
        wheel.display()
    ));
    let r = run_head_without_rayscale(&c, "install-wheel", Stubs::default());
    assert!(r.ok, "{}", r.log);
    assert!(r.script.contains(&format!("if [ \"$got\" != {sha} ]")));
    let home = &r.home;
    assert_eq!(
        r.trace,
        format!(
            "python -m pip install --quiet --disable-pip-version-check --upgrade --target \
             {home}/.rayscale --no-index --no-deps \
             {home}/.rayscale-wheel/rayscale-9.9-py3-none-manylinux_2_34_x86_64.whl\n\
             rayscale run --config {home}/ray_bootstrap_config.yaml --gcs 127.0.0.1:7000 \
             --head-ip 10.9.8.7 --autostop-head\n"
        ),
        "{}",
        r.log
    );
    assert!(
        r.log.contains(&format!(
            "rayscale: not on PATH: installing the wheel {} (sha256 {sha})",
            wheel.display()
        )),
        "{}",
        r.log
    );
    // The head's own copy of the YAML carries the digest: its rayscale reads no file.
    let back = ClusterConfig::from_yaml_str(&r.bootstrap, "bootstrap").expect("bootstrap");
    assert_eq!(
        back.install,
        InstallSettings::Wheel {
            wheel: wheel.display().to_string(),
            sha256: Some(sha.clone())
        }
    );
    // Not readable where it is rendered, and no digest given: refused.
    let gone = cfg("rayscale: {install: {wheel: /nowhere/rayscale-9.9-py3-none-any.whl}}\n");
    let e = head_script(&gone).expect_err("refused");
    assert!(
        e.starts_with("rayscale.install.wheel: cannot read /nowhere/rayscale-9.9-py3-none-any.whl")
            && e.ends_with("give rayscale.install.sha256"),
        "{e}"
    );
    // A worker's script has no install.
    assert!(render_worker(&gone, &target()).is_ok());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_wheel_whose_digest_differs_is_refused_even_with_an_earlier_install() {
    let (dir, wheel, sha) = a_wheel("bad");
    let pinned = "0".repeat(64);
    let c = cfg(&format!(
        "head_start_ray_commands: ['ray start --head --port=7000']\n\
         rayscale: {{install: {{wheel: '{}', sha256: '{pinned}'}}}}\n",
        wheel.display()
    ));
    let r = run_head_without_rayscale(
        &c,
        "install-wheel-bad",
        Stubs {
            earlier_install: true,
            ..Stubs::default()
        },
    );
    assert!(!r.ok, "the boot stops: {}", r.log);
    let why = format!(
        "the wheel {} has sha256 {sha}, not the pinned {pinned} (rayscale.install.sha256): \
         not installed",
        wheel.display()
    );
    assert!(
        r.log
            .contains(&format!("rayscale: {why}: rayscale is not running")),
        "{}",
        r.log
    );
    assert!(
        r.trace.contains(&format!("127.0.0.1:7000 boot/demo {why}")),
        "{}",
        r.trace
    );
    assert!(
        !r.trace.contains("-m pip") && !r.trace.contains("rayscale run"),
        "{}",
        r.trace
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_wheel_by_url_is_downloaded_and_checked() {
    let (dir, wheel, sha) = a_wheel("url");
    let url = format!("file://{}", wheel.display());
    let c = cfg(&format!(
        "head_start_ray_commands: ['ray start --head --port=7000']\n\
         rayscale: {{install: {{wheel: '{url}', sha256: '{}'}}}}\n",
        sha.to_uppercase()
    ));
    let s = head_script(&c).expect("renders");
    assert!(s.contains("urllib.request") && s.contains(&format!("'{url}' \"$WHEEL\"")));
    if std::path::Path::new("/usr/bin/python3").exists() {
        let r = run_head_without_rayscale(&c, "install-url", Stubs::default());
        assert!(r.ok, "{}", r.log);
        assert!(
            r.trace.contains("--no-index --no-deps") && r.trace.contains("rayscale run --config"),
            "{}\n{}",
            r.trace,
            r.log
        );
    }
    // A download that fails keeps an earlier install; none: the boot stops.
    let missing = cfg(&format!(
        "head_start_ray_commands: ['ray start --head --port=7000']\n\
         rayscale: {{install: {{wheel: 'file:///nowhere/rayscale-9.9-py3-none-any.whl', sha256: '{sha}'}}}}\n"
    ));
    if std::path::Path::new("/usr/bin/python3").exists() {
        let r = run_head_without_rayscale(&missing, "install-url-missing", Stubs::default());
        assert!(!r.ok, "{}", r.log);
        assert!(
            r.log.contains(
                "rayscale: cannot fetch the wheel file:///nowhere/rayscale-9.9-py3-none-any.whl: "
            ) && r.log.contains("rayscale is not running"),
            "{}",
            r.log
        );
        let r = run_head_without_rayscale(
            &missing,
            "install-url-earlier",
            Stubs {
                earlier_install: true,
                ..Stubs::default()
            },
        );
        assert!(
            r.ok && r.trace.contains("earlier rayscale run"),
            "{}",
            r.log
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failed_install_stops_the_boot_and_says_so() {
    let c = cfg(
        "head_start_ray_commands: ['ray start --head --port=7000']\n\
         rayscale: {install: {pip: 'rayscale==9.9', index: true}}\n",
    );
    let r = run_head_without_rayscale(
        &c,
        "install-fails",
        Stubs {
            pip_fails: true,
            ..Stubs::default()
        },
    );
    assert!(!r.ok, "the boot fails: {}", r.log);
    assert!(
        r.log.contains(
            "rayscale: install of rayscale==9.9 failed: ERROR: No matching distribution \
             found for rayscale==9.9: rayscale is not running"
        ),
        "{}",
        r.log
    );
    assert!(!r.trace.contains("rayscale run"), "{}", r.trace);
    // What `rayscale up --wait` reads: put in the head's GCS KV with Ray's Python.
    assert!(
        r.trace.contains(
            "127.0.0.1:7000 boot/demo install of rayscale==9.9 failed: ERROR: No matching \
             distribution found for rayscale==9.9"
        ),
        "{}",
        r.trace
    );
}
