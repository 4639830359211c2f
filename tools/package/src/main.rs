//! Build `Hearth_<version>_amd64.deb` from the release `hearth-desktop` and `hearth-node`
//! binaries with Tauri's bundler, and llama.cpp's libraries (`lib/`, with its backends in
//! `lib/backends/`) as `/usr/lib/hearth`, where the programs' run-time path finds them.
//! Product name, version, identifier and icons come from the root `tauri.conf.json`; the
//! bundler does not fill in `Depends`, so the libraries the app loads are listed here. The
//! node's systemd unit (`hearth-node.service`, beside this crate) is installed disabled.
//! Usage: hearth-package <repo root> <directory holding the release binaries and lib/>

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use tauri_bundler::{
    bundle_project, BundleBinary, BundleSettings, DebianSettings, PackageSettings, PackageType,
    SettingsBuilder,
};

/// What the desktop app needs at run time on Debian/Ubuntu.
const DEPENDS: [&str; 3] = ["libwebkit2gtk-4.1-0", "libgtk-3-0", "libayatana-appindicator3-1"];

fn main() -> Result<()> {
    let mut args = std::env::args().skip(1);
    let (Some(root), Some(bin_dir)) = (args.next(), args.next()) else {
        bail!("usage: hearth-package <repo root> <release dir with hearth-desktop>");
    };
    let root = PathBuf::from(root);
    let bin_dir = PathBuf::from(bin_dir);
    for program in ["hearth-desktop", "hearth-node"] {
        if !bin_dir.join(program).is_file() {
            bail!("{} has no {program} binary: build it in release mode first", bin_dir.display());
        }
    }
    let libs = bin_dir.join("lib");
    if !libs.join("backends").is_dir() {
        bail!("{} has no lib/backends: copy llama.cpp's libraries there first (make package)", bin_dir.display());
    }
    let conf: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(root.join("tauri.conf.json")).context("reading tauri.conf.json")?,
    )?;
    let text = |key: &str| -> Result<String> {
        conf[key]
            .as_str()
            .map(str::to_owned)
            .with_context(|| format!("tauri.conf.json has no {key}"))
    };
    let icons = conf["bundle"]["icon"]
        .as_array()
        .context("tauri.conf.json has no bundle.icon")?
        .iter()
        .filter_map(|i| i.as_str())
        .map(|i| root.join(i).display().to_string())
        .collect();
    let settings = SettingsBuilder::new()
        .project_out_directory(&bin_dir)
        .package_types(vec![PackageType::Deb])
        .package_settings(PackageSettings {
            product_name: text("productName")?,
            version: text("version")?,
            description: "Run local LLMs on the computers you already own".into(),
            homepage: None,
            authors: Some(vec!["The Hearth authors".into()]),
            default_run: Some("hearth-desktop".into()),
        })
        .bundle_settings(BundleSettings {
            identifier: Some(text("identifier")?),
            icon: Some(icons),
            short_description: Some("Local LLMs on your own computers".into()),
            long_description: Some(
                "Hearth runs GGUF models with llama.cpp on this computer and serves them to a chat \
                 window, the OpenAI API and WebSocket clients, optionally to the LAN."
                    .into(),
            ),
            category: None,
            deb: DebianSettings {
                depends: Some(DEPENDS.iter().map(|d| (*d).to_owned()).collect()),
                files: [
                    (PathBuf::from("/usr/lib/hearth"), libs.clone()),
                    (
                        PathBuf::from("/usr/lib/systemd/system/hearth-node.service"),
                        root.join("tools/package/hearth-node.service"),
                    ),
                ]
                .into(),
                ..Default::default()
            },
            ..Default::default()
        })
        .binaries(vec![
            BundleBinary::new("hearth-desktop".into(), true),
            BundleBinary::new("hearth-node".into(), false),
        ])
        .build()
        .context("bundler settings")?;
    for bundle in bundle_project(&settings).context("building the .deb")? {
        for path in bundle.bundle_paths {
            println!("{}", path.display());
        }
    }
    Ok(())
}
