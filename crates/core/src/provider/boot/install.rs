//! The head's `rayscale` install lines of the boot script: `RAYSCALE_BIN`, `PATH`, or
//! the wheel `rayscale.install` names, fetched, checked and installed offline.

use super::{boot_status_key, quote};
use crate::config::ClusterConfig;
use crate::config::install::{InstallSettings, is_url};

/// The head's `rayscale`: `RAYSCALE_BIN` when set, else `rayscale` on `PATH`, else the
/// wheel `rayscale.install` gives, installed with the Python beside `ray` into
/// `~/.rayscale` (pip's `--target`: nothing of the user's environment changes): the exact
/// file (`wheel`, `sha256`: fetched, checked, installed with `--no-index`), or a
/// requirement from `find_links` (`--no-index`), or from the package index (`index:
/// true`). With none, nothing is installed. A boot that has no `rayscale` stops, says why
/// in the boot log and, when Ray's Python can reach the head's GCS, under
/// [`boot_status_key`] for `rayscale up --wait`; one that cannot fetch or install keeps
/// what an earlier boot installed (a wheel whose digest differs is refused, always).
pub(super) fn install_lines(
    config: &ClusterConfig,
    gcs_port: u16,
    sha256: Option<&str>,
) -> Vec<String> {
    let key = quote(&boot_status_key(&config.cluster_name));
    let pip = "\"$RAY_PY\" -m pip install --quiet --disable-pip-version-check --upgrade --target ~/.rayscale";
    let mut l: Vec<String> = [
        "if [ -n \"${RAYSCALE_BIN:-}\" ]; then",
        "  command -v \"$RAYSCALE_BIN\" >/dev/null || { echo \"rayscale: RAYSCALE_BIN=$RAYSCALE_BIN is not a program\" >&2; exit 1; }",
        "elif command -v rayscale >/dev/null; then",
        "  RAYSCALE_BIN=rayscale",
        "else",
        "  RAY_PY=python3",
        "  if command -v ray >/dev/null && [ -x \"$(dirname \"$(command -v ray)\")/python\" ]; then RAY_PY=\"$(dirname \"$(command -v ray)\")/python\"; fi",
        // Stops the boot, saying why (the boot log; the head's GCS for `up --wait`).
        "  rayscale_refuse() {",
        "    echo \"rayscale: $1: rayscale is not running\" >&2",
    ]
    .iter()
    .map(|x| x.to_string())
    .collect();
    l.push(format!(
        "    \"$RAY_PY\" -c 'import sys, ray._raylet as r; r.GcsClient(address=sys.argv[1]).internal_kv_put(sys.argv[2].encode(), sys.argv[3].encode(), True, b\"__rayscale\")' 127.0.0.1:{gcs_port} {key} \"$1\" >/dev/null 2>&1 || true"
    ));
    l.extend(
        [
            "    exit 1",
            "  }",
            // A later boot that cannot install (no index, an expired URL) keeps what an
            // earlier one installed.
            "  rayscale_failed() {",
            "    if [ -x ~/.rayscale/bin/rayscale ]; then",
            "      echo \"rayscale: $1; running the one an earlier boot installed ($(~/.rayscale/bin/rayscale --version))\" >&2",
            "    else",
            "      rayscale_refuse \"$1\"",
            "    fi",
            "  }",
        ]
        .iter()
        .map(|x| x.to_string()),
    );
    let pip_failed = |what: &str| {
        [
            "    tail -n 20 ~/.rayscale-install.log >&2".to_string(),
            format!(
                "    rayscale_failed \"install of {} failed: $(tail -n 1 ~/.rayscale-install.log)\"",
                quote_inner(what)
            ),
        ]
    };
    match (&config.install, sha256) {
        (InstallSettings::Wheel { wheel, .. }, Some(sha)) => {
            let w = quote_inner(wheel);
            let no_query = if is_url(wheel) {
                wheel.split(['?', '#']).next().unwrap_or_default()
            } else {
                wheel
            };
            let name = no_query.rsplit('/').next().unwrap_or_default();
            l.push(format!(
                "  echo \"rayscale: not on PATH: installing the wheel {w} (sha256 {sha}) with $RAY_PY -m pip into ~/.rayscale\""
            ));
            l.push("  rm -rf ~/.rayscale-wheel && mkdir -p ~/.rayscale-wheel".into());
            l.push(format!("  WHEEL=~/.rayscale-wheel/{}", quote(name)));
            let fetch = if is_url(wheel) {
                format!(
                    "\"$RAY_PY\" -c 'import shutil, sys, urllib.request as u; r = u.urlopen(sys.argv[1], timeout=300); f = open(sys.argv[2], \"wb\"); shutil.copyfileobj(r, f); f.close()' {} \"$WHEEL\"",
                    quote(wheel)
                )
            } else {
                format!("cp -- {} \"$WHEEL\"", quote(wheel))
            };
            l.push(format!(
                "  if ! {fetch} >~/.rayscale-install.log 2>&1; then"
            ));
            l.push(format!(
                "    rayscale_failed \"cannot fetch the wheel {w}: $(tail -n 1 ~/.rayscale-install.log)\""
            ));
            l.push("  else".into());
            l.push(
                "    got=\"$(sha256sum \"$WHEEL\" 2>/dev/null | cut -d ' ' -f 1)\" || true".into(),
            );
            l.push(format!("    if [ \"$got\" != {sha} ]; then"));
            l.push(format!(
                "      rayscale_refuse \"the wheel {w} has sha256 ${{got:-unknown (no sha256sum)}}, not the pinned {sha} (rayscale.install.sha256): not installed\""
            ));
            l.push(format!(
                "    elif ! {pip} --no-index --no-deps \"$WHEEL\" >~/.rayscale-install.log 2>&1; then"
            ));
            l.extend(pip_failed(wheel).map(|x| format!("  {x}")));
            l.push("    fi".into());
            l.push("  fi".into());
        }
        (InstallSettings::FindLinks { find_links, pip: req }, _) => {
            l.push(format!(
                "  echo \"rayscale: not on PATH: installing {} from {} (pip --no-index) with $RAY_PY -m pip into ~/.rayscale\"",
                quote_inner(req),
                quote_inner(find_links)
            ));
            l.push(format!(
                "  if ! {pip} --no-index --find-links {} {} >~/.rayscale-install.log 2>&1; then",
                quote(find_links),
                quote(req)
            ));
            l.extend(pip_failed(req));
            l.push("  fi".into());
        }
        (InstallSettings::Index { pip: req }, _) => {
            l.push(format!(
                "  echo \"rayscale: not on PATH: installing {} from the package index (rayscale.install.index: true) with $RAY_PY -m pip into ~/.rayscale\"",
                quote_inner(req)
            ));
            l.push(format!(
                "  if ! {pip} {} >~/.rayscale-install.log 2>&1; then",
                quote(req)
            ));
            l.extend(pip_failed(req));
            l.push("  fi".into());
        }
        // Nothing to install from (a wheel is always pinned by now: see `render`).
        _ => l.push(
            "  rayscale_failed \"rayscale is not on the head's PATH and rayscale.install gives none to install: give rayscale.install.wheel + sha256, or find_links (or index: true to allow the package index), or RAYSCALE_BIN, or an image with rayscale\"".into(),
        ),
    }
    l.push("  RAYSCALE_BIN=~/.rayscale/bin/rayscale".into());
    l.push("fi".into());
    l
}

/// `v` for inside a double-quoted shell string (`\`, `"`, `$` and `` ` `` escaped).
fn quote_inner(v: &str) -> String {
    let mut o = String::with_capacity(v.len());
    for c in v.chars() {
        if matches!(c, '\\' | '"' | '$' | '`') {
            o.push('\\');
        }
        o.push(c);
    }
    o
}
